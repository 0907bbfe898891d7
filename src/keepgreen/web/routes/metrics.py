"""GET /getMergeQueueMetrics: Prometheus text format 0.0.4, built by prometheus_client."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from keepgreen.app.errors import InvalidInput
from keepgreen.core.enums import TestRunKind
from keepgreen.core.metrics import CONCLUSIONS, Histogram, QueueMetrics
from keepgreen.core.model import RepoRef
from keepgreen.core.names import plain_name_problem
from keepgreen.web.auth import OrgOrBearer, Services
from keepgreen.web.schemas import error_responses

router = APIRouter(tags=["merge queue"])

LABELS = ["repo", "branch", "queue_type"]
_QUERY_TEXT = {"type": "string", "maxLength": 600}


class QueueMetricsCollector(Collector):
    """Exposes precomputed queue metrics as the eight `mq_*` families of the interface, and
    keepgreen's `mq_stalled_seconds`.
    """

    def __init__(self, metrics: Sequence[QueueMetrics]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("mq_depth_current", "PRs currently in the queue", labels=LABELS)
        awaiting = GaugeMetricFamily(
            "mq_awaiting_mergeability",
            "Number of PRs currently awaiting mergeability",
            labels=LABELS,
        )
        slots = GaugeMetricFamily(
            "mq_testing_slots_active", "PRs currently in TESTING state", labels=LABELS
        )
        conclusions = GaugeMetricFamily(
            "mq_pr_conclusions_1h_total",
            "PRs that left the queue in the last hour, by conclusion",
            labels=[*LABELS, "conclusion"],
        )
        restarts = GaugeMetricFamily(
            "mq_pr_restarts_1h_total",
            "TESTING to PENDING transitions in the last hour",
            labels=LABELS,
        )
        wait = HistogramMetricFamily(
            "mq_pr_wait_duration_1h_seconds",
            "Time PRs waited before testing started, last hour",
            labels=LABELS,
        )
        test = HistogramMetricFamily(
            "mq_pr_test_duration_1h_seconds", "Time PRs spent testing, last hour", labels=LABELS
        )
        in_queue = HistogramMetricFamily(
            "mq_pr_time_in_queue_1h_seconds",
            "Time from entering the queue to leaving it, last hour",
            labels=LABELS,
        )
        stalled = GaugeMetricFamily(
            "mq_stalled_seconds",
            "How long the queue has held PRs without starting a test run or merging a PR, once"
            " that passed its stallMinutes; 0 when it is not stalled",
            labels=LABELS,
        )
        batch_size = GaugeMetricFamily(
            "mq_batch_size_chosen",
            "PRs per test run the queue runs by now: batchingMinSize, or with adaptiveBatchSize"
            " round(1/sqrt(its failure rate)) capped at it; 1 without batching",
            labels=LABELS,
        )
        speculation = GaugeMetricFamily(
            "mq_speculation_depth_chosen",
            "Main test runs in flight at most now: concurrency, or with adaptiveDepth the window"
            " its record allows (+1 per pass, halved per failure)",
            labels=LABELS,
        )
        for metrics in self._metrics:
            labels = [metrics.repo, metrics.branch, metrics.queue_type.value]
            if metrics.queue_type is TestRunKind.MAIN:
                depth.add_metric(labels, metrics.depth)
                stalled.add_metric(labels, metrics.stalled_seconds)
                batch_size.add_metric(labels, metrics.batch_size)
                speculation.add_metric(labels, metrics.speculation_depth)
                awaiting.add_metric(labels, metrics.awaiting_mergeability)
                for conclusion in CONCLUSIONS:
                    conclusions.add_metric(
                        [*labels, conclusion.value], metrics.conclusions[conclusion]
                    )
                _observe(wait, labels, metrics.wait_duration)
                _observe(in_queue, labels, metrics.time_in_queue)
            slots.add_metric(labels, metrics.testing_slots_active)
            restarts.add_metric(labels, metrics.restarts)
            _observe(test, labels, metrics.test_duration)
        yield from (depth, awaiting, slots, conclusions, restarts, wait, test, in_queue, stalled)
        yield from (batch_size, speculation)


def _observe(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    family.add_metric(labels, histogram.cumulative(), histogram.total)


@router.get(
    "/getMergeQueueMetrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4",
            "content": {CONTENT_TYPE_PLAIN_0_0_4: {"schema": {"type": "string"}}},
        },
        **error_responses(400, 401, 404),
    },
)
def get_metrics(
    org: OrgOrBearer,
    services: Services,
    repo: Annotated[
        str | None,
        Query(
            description="owner/name; needs repoHost",
            json_schema_extra={**_QUERY_TEXT, "pattern": "^[^/]+/[^/]+$"},
        ),
    ] = None,
    repoHost: Annotated[  # noqa: N803 (the interface's parameter name)
        str | None, Query(description="the repository's host", json_schema_extra=_QUERY_TEXT)
    ] = None,
) -> Response:
    """Metrics of the org's queues, or of one repository's (`repo` + `repoHost`).

    The org's token comes in `x-api-token` or, for a stock Prometheus, as
    `Authorization: Bearer <token>`.
    """
    ref: RepoRef | None = None
    if repo is not None or repoHost is not None:
        if not repo or not repoHost:
            raise InvalidInput(
                "invalid_field", "repo and repoHost must be given together (repo as owner/name)"
            )
        owner, slash, name = repo.partition("/")
        if not slash or not owner or not name or "/" in name:
            raise InvalidInput("invalid_field", "repo must be in owner/name form")
        for field, value in (("repoHost", repoHost), ("repo", repo)):
            problem = plain_name_problem(value)
            if problem is not None:
                raise InvalidInput("invalid_field", f"{field} {problem}")
        ref = RepoRef(repoHost, owner, name)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueMetricsCollector(services.metrics.collect(org, ref)))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)
