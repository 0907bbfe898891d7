"""The service's own Prometheus metrics (`keepgreen_*`): every definition, on one registry.

One `Telemetry` per container (per process, or per test): its registry is never the
process-wide default, so many containers live side by side. The parts that record take it as a
constructor argument and call the verbs below; none of them names a metric itself.

Rules every family here keeps, so that `promtool check metrics` passes and a scrape stays small:
counters only grow and end in `_total`, histograms are cumulative, durations are in seconds and
sizes in bytes, and no label carries an org, a repository, a branch, a path or an id. Label
values come from closed sets (enums, effect kinds, route templates, git subcommands).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from keepgreen import __version__
from keepgreen.core.enums import IncidentKind, PrState, StateReason, TestRunKind, TestRunStatus
from keepgreen.core.model import StateChange, TestRun

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# The label of every request that matched no route (scanners, typos): one series, not one per
# path tried.
UNMATCHED_ROUTE = "unmatched"
# Methods are a client's choice; anything unusual shares one label value.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A git subcommand as keepgreen spells them (`rev-parse`, `merge-tree`); anything else is `other`.
_GIT_OPERATION = re.compile(r"[a-z][a-z-]{0,30}")

_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_GIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_PASS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_CI_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
_UPLOAD_BYTES_BUCKETS = tuple(float(1024 * 4**power) for power in range(9))  # 1 KiB .. 64 MiB
_UPLOAD_RESULTS_BUCKETS = (1.0, 10.0, 100.0, 1000.0, 5000.0, 10000.0, 50000.0, 100000.0)

# The scheduler's effects by class name (`keepgreen.core.scheduler.effects`).
EFFECT_KINDS = (
    "BuildTestCommit",
    "DeleteTestBranch",
    "StartCi",
    "CancelCi",
    "Land",
)
LeaseChange = Literal["acquired", "lost", "released"]
GitResult = Literal["ok", "exit_nonzero", "timeout", "error"]
GithubOutcome = Literal["ok", "not_found", "refused", "rate_limited", "unavailable"]
GITHUB_OUTCOMES: tuple[GithubOutcome, ...] = (
    "ok",
    "not_found",
    "refused",
    "rate_limited",
    "unavailable",
)
CiResult = Literal["success", "failure", "error", "cancelled"]


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A database connection pool right now: its configured size and what is in use."""

    size: int
    checked_out: int
    idle: int
    overflow: int  # connections open beyond `size`


@dataclass(frozen=True, slots=True)
class RunTransition:
    """A test run before and after one decision (`before` None: the decision made it)."""

    before: TestRun | None
    after: TestRun


class Telemetry:
    """The `keepgreen_*` metrics of one container, and the verbs that record them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._answered = 0
        registry = self.registry
        # The process's own CPU, memory, file descriptors, Python version and garbage collector.
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        info = Gauge(
            "keepgreen_build_info",
            "Always 1; the running keepgreen's version as a label",
            ["version"],
            registry=registry,
        )
        info.labels(__version__).set(1)

        # -- pull requests and test runs (counted once the decision's transaction commits) --
        self._submitted = Counter(
            "keepgreen_prs_submitted",
            "Pull requests submitted to a queue (each new episode of a PR counts)",
            registry=registry,
        )
        self._merged = Counter(
            "keepgreen_prs_merged",
            "Pull requests that landed, by how (merged_by_queue, merged_directly)",
            ["reason"],
            registry=registry,
        )
        self._failed = Counter(
            "keepgreen_prs_failed", "Pull requests failed, by reason", ["reason"], registry=registry
        )
        self._cancelled = Counter(
            "keepgreen_prs_cancelled",
            "Pull requests cancelled, by reason",
            ["reason"],
            registry=registry,
        )
        self._restarts = Counter(
            "keepgreen_pr_restarts",
            "Pull requests sent from testing back to pending, by reason",
            ["reason"],
            registry=registry,
        )
        self._runs_started = Counter(
            "keepgreen_test_runs_started",
            "Test runs that started testing (their test commit built), by kind",
            ["kind"],
            registry=registry,
        )
        self._runs_finished = Counter(
            "keepgreen_test_runs_finished",
            "Test runs that stopped testing, by kind and result",
            ["kind", "result"],
            registry=registry,
        )
        self._ci_duration = Histogram(
            "keepgreen_ci_run_duration_seconds",
            "Built-in CI runs from start to their final status (checkout included), by result",
            ["result"],
            buckets=_CI_BUCKETS,
            registry=registry,
        )

        # -- the worker ---------------------------------------------------------------------
        self._effects = Counter(
            "keepgreen_effects",
            "Effects carried out through the code host and CI ports, by kind and outcome "
            "(a failed one stays in the outbox and is tried again)",
            ["effect", "outcome"],
            registry=registry,
        )
        self._effect_retries = Counter(
            "keepgreen_effect_retries",
            "Attempts at an effect that failed before in this process, by kind",
            ["effect"],
            registry=registry,
        )
        self._passes = Counter(
            "keepgreen_worker_passes",
            "Worker passes over every queue it can lease, by outcome",
            ["outcome"],
            registry=registry,
        )
        self._pass_duration = Histogram(
            "keepgreen_worker_pass_duration_seconds",
            "How long one worker pass took",
            buckets=_PASS_BUCKETS,
            registry=registry,
        )
        self._decided_again = Counter(
            "keepgreen_decisions_made_again",
            "Decisions the worker made again holding the queue, because what it had decided on"
            " changed while it decided",
            registry=registry,
        )
        self._rested = Counter(
            "keepgreen_worker_api_rest_seconds",
            "Seconds the worker rested after passes during which the API in its process answered"
            " requests (keepgreen serve)",
            registry=registry,
        )
        self._leases = Counter(
            "keepgreen_lease_changes",
            "Queue leases this process acquired, lost to another worker, or released",
            ["change"],
            registry=registry,
        )
        self._git_calls = Counter(
            "keepgreen_git_calls",
            "git processes run, by subcommand and result",
            ["operation", "result"],
            registry=registry,
        )
        self._git_duration = Histogram(
            "keepgreen_git_call_duration_seconds",
            "How long each git process took, by subcommand",
            ["operation"],
            buckets=_GIT_BUCKETS,
            registry=registry,
        )

        self._host_failures = Counter(
            "keepgreen_git_host_failures",
            "Failures of a queue's git server met by the worker (a pass that could not read it,"
            " an effect it refused), by kind of incident",
            ["kind"],
            registry=registry,
        )
        self._github_requests = Counter(
            "keepgreen_github_requests",
            "Requests to GitHub's REST API, by outcome (ok, not_found, refused, rate_limited,"
            " unavailable)",
            ["outcome"],
            registry=registry,
        )
        self._github_remaining = Gauge(
            "keepgreen_github_rate_limit_remaining",
            "Requests left in the GitHub App installation's hourly budget, as GitHub last said",
            ["installation"],
            registry=registry,
        )
        self._github_limit = Gauge(
            "keepgreen_github_rate_limit",
            "The GitHub App installation's hourly request budget, as GitHub last said",
            ["installation"],
            registry=registry,
        )
        self._queues_waiting = Gauge(
            "keepgreen_queues_waiting_on_git_host",
            "Queues held by this worker that wait on their git server (unreachable, refusing"
            " keepgreen's credentials, or without the queue's branch)",
            registry=registry,
        )
        self._queues_stalled = Gauge(
            "keepgreen_queues_stalled",
            "Queues held by this worker that hold PRs but neither started a test run nor"
            " merged a PR for their stallMinutes (each queue's seconds: mq_stalled_seconds)",
            registry=registry,
        )

        # -- the HTTP API ---------------------------------------------------------------------
        self._requests = Counter(
            "keepgreen_http_requests",
            "HTTP requests answered, by route template, method and status code",
            ["route", "method", "status"],
            registry=registry,
        )
        self._request_duration = Histogram(
            "keepgreen_http_request_duration_seconds",
            "HTTP request latency, by route template and method",
            ["route", "method"],
            buckets=_HTTP_BUCKETS,
            registry=registry,
        )

        # -- flaky-test uploads -----------------------------------------------------------------
        self._uploads = Counter(
            "keepgreen_uploads",
            "JUnit uploads, by outcome (refused: a report or its metadata was not accepted)",
            ["outcome"],
            registry=registry,
        )
        self._upload_bytes = Histogram(
            "keepgreen_upload_size_bytes",
            "Size of each stored upload's report files as sent (gzip counted compressed)",
            buckets=_UPLOAD_BYTES_BUCKETS,
            registry=registry,
        )
        self._upload_results = Histogram(
            "keepgreen_upload_results",
            "Test results in each stored upload (runs of tests, reruns included)",
            buckets=_UPLOAD_RESULTS_BUCKETS,
            registry=registry,
        )
        self._ingested_results = Counter(
            "keepgreen_ingested_results",
            "Test results stored from uploads (runs of tests, reruns included)",
            registry=registry,
        )
        self._ingested_tests = Counter(
            "keepgreen_ingested_tests",
            "Tests reported by stored uploads, by their final outcome in the upload",
            ["outcome"],
            registry=registry,
        )
        self._uploader_reports = Counter(
            "keepgreen_uploader_reports",
            "Telemetry reports of Trunk's uploader, by the outcome of its run as it reports it"
            " (uploaded, failed; unreadable: not its protobuf message)",
            ["outcome"],
            registry=registry,
        )
        self._preset_closed_label_sets()

    def _preset_closed_label_sets(self) -> None:
        """Series whose label values form a small closed set exist from the start at 0, so
        `rate()` and `increase()` see their first increment (Prometheus best practice).
        """
        for reason in (StateReason.MERGED_BY_QUEUE, StateReason.MERGED_DIRECTLY):
            self._merged.labels(reason.value)
        for kind in TestRunKind:
            self._runs_started.labels(kind.value)
            for status in _FINISHED:
                self._runs_finished.labels(kind.value, status.value)
        for effect in EFFECT_KINDS:
            self._effect_retries.labels(effect)
            for outcome in ("done", "failed"):
                self._effects.labels(effect, outcome)
        for outcome in ("ok", "error"):
            self._passes.labels(outcome)
        for incident in IncidentKind:
            self._host_failures.labels(incident.value)
        for outcome in GITHUB_OUTCOMES:
            self._github_requests.labels(outcome)
        for change in ("acquired", "lost", "released"):
            self._leases.labels(change)
        for stored in ("stored", "refused"):
            self._uploads.labels(stored)
        for result in ("passed", "failed", "skipped"):
            self._ingested_tests.labels(result)
        for reported in ("uploaded", "failed", "unreadable"):
            self._uploader_reports.labels(reported)

    # -- recording --------------------------------------------------------------------------

    def decided(self, changes: Sequence[StateChange], runs: Iterable[RunTransition]) -> None:
        """Count a committed decision: its PR state changes and its test runs' transitions."""
        for change in changes:
            reason = change.reason.value
            if change.reason is StateReason.SUBMITTED:
                self._submitted.inc()
            elif change.to_state is PrState.MERGED:
                self._merged.labels(reason).inc()
            elif change.to_state is PrState.FAILED:
                self._failed.labels(reason).inc()
            elif change.to_state is PrState.CANCELLED:
                self._cancelled.labels(reason).inc()
            elif change.from_state is PrState.TESTING and change.to_state is PrState.PENDING:
                self._restarts.labels(reason).inc()
        for transition in runs:
            before = transition.before.status if transition.before is not None else None
            after = transition.after
            kind = after.kind.value
            # A run tests from IN_PROGRESS on (a queued bisection run is not testing yet);
            # a run made and ended in one decision never tested and counts in neither.
            if after.status is TestRunStatus.IN_PROGRESS and before is not after.status:
                self._runs_started.labels(kind).inc()
            elif before is TestRunStatus.IN_PROGRESS and after.status in _FINISHED:
                self._runs_finished.labels(kind, after.status.value).inc()

    def ci_run(self, result: CiResult, seconds: float) -> None:
        self._ci_duration.labels(result).observe(seconds)

    def effect(self, kind: str, *, ok: bool) -> None:
        self._effects.labels(kind, "done" if ok else "failed").inc()

    def effect_retried(self, kind: str) -> None:
        self._effect_retries.labels(kind).inc()

    def git_host_failed(self, kind: IncidentKind) -> None:
        self._host_failures.labels(kind.value).inc()

    def github_request(self, outcome: GithubOutcome) -> None:
        self._github_requests.labels(outcome).inc()

    def github_budget(self, installation_id: int, *, limit: int, remaining: int) -> None:
        self._github_limit.labels(str(installation_id)).set(limit)
        self._github_remaining.labels(str(installation_id)).set(remaining)

    def queues_waiting_on_git_host(self, count: int) -> None:
        self._queues_waiting.set(count)

    def queues_stalled(self, count: int) -> None:
        self._queues_stalled.set(count)

    def worker_pass(self, seconds: float, *, ok: bool) -> None:
        self._passes.labels("ok" if ok else "error").inc()
        self._pass_duration.observe(seconds)

    def worker_rested(self, seconds: float) -> None:
        self._rested.inc(seconds)

    def decided_again(self) -> None:
        self._decided_again.inc()

    def lease(self, change: LeaseChange, count: int = 1) -> None:
        if count:
            self._leases.labels(change).inc(count)

    def git_call(self, operation: str, seconds: float, result: GitResult) -> None:
        if not _GIT_OPERATION.fullmatch(operation):
            operation = "other"
        self._git_calls.labels(operation, result).inc()
        self._git_duration.labels(operation).observe(seconds)

    @property
    def requests_answered(self) -> int:
        """HTTP requests this process answered so far: what tells the worker beside the API
        that the API is busy (`Worker._rest_for_the_api`).
        """
        return self._answered

    def http_request(self, *, route: str, method: str, status: int, seconds: float) -> None:
        self._answered += 1
        method = method if method in _METHODS else "other"
        self._requests.labels(route, method, str(status)).inc()
        self._request_duration.labels(route, method).observe(seconds)

    def upload_refused(self) -> None:
        self._uploads.labels("refused").inc()

    def upload_stored(
        self, *, size_bytes: int, results: int, passed: int, failed: int, skipped: int
    ) -> None:
        """A committed upload: its size in bytes and in results, and its tests' outcomes."""
        self._uploads.labels("stored").inc()
        self._upload_bytes.observe(size_bytes)
        self._upload_results.observe(results)
        self._ingested_results.inc(results)
        for outcome, count in (("passed", passed), ("failed", failed), ("skipped", skipped)):
            self._ingested_tests.labels(outcome).inc(count)

    def uploader_report(self, outcome: Literal["uploaded", "failed", "unreadable"]) -> None:
        self._uploader_reports.labels(outcome).inc()

    def watch_pool(self, read: Callable[[], PoolStats | None]) -> None:
        """Expose a connection pool's gauges, read at each scrape."""
        self.registry.register(_PoolCollector(read))

    # -- exposition ---------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """Everything on the registry in Prometheus text format 0.0.4."""
        return generate_latest(_WithoutCreated(self.registry))


_FINISHED = (TestRunStatus.SUCCEEDED, TestRunStatus.FAILED, TestRunStatus.CANCELLED)


class _PoolCollector(Collector):
    """Gauges over a connection pool, read when scraped (nothing to keep up to date)."""

    def __init__(self, read: Callable[[], PoolStats | None]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        stats = self._read()
        if stats is None:  # a pool without these numbers (none in keepgreen's engines)
            return
        for name, documentation, value in (
            ("keepgreen_db_pool_size", "Connections the database pool keeps", stats.size),
            (
                "keepgreen_db_pool_checked_out_connections",
                "Database connections in use right now",
                stats.checked_out,
            ),
            (
                "keepgreen_db_pool_idle_connections",
                "Database connections open and idle in the pool",
                stats.idle,
            ),
            (
                "keepgreen_db_pool_overflow_connections",
                "Database connections open beyond the pool size",
                stats.overflow,
            ),
        ):
            yield GaugeMetricFamily(name, documentation, value=value)


class _WithoutCreated(Collector):
    """The registry without prometheus_client's `*_created` gauges: a second series per
    counter and histogram that only OpenMetrics readers use, and that this text format would
    show as gauges. (Its switch, `disable_created_metrics`, is process-wide state.)
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            created = f"{metric.name}_created"
            if any(sample.name == created for sample in metric.samples):
                trimmed = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                trimmed.samples = [s for s in metric.samples if s.name != created]
                yield trimmed
            else:
                yield metric
