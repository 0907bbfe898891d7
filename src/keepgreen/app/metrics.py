"""Collecting the merge-queue metrics of an org's queues."""

from __future__ import annotations

from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.core.enums import PrState, TestRunKind
from keepgreen.core.ids import OrgId
from keepgreen.core.metrics import WINDOW, QueueMetrics, queue_metrics
from keepgreen.core.model import RepoRef
from keepgreen.core.scheduler import adaptive
from keepgreen.core.stall import stalled_since

_CURRENT = frozenset({PrState.NOT_READY, *(s for s in PrState if s.is_admitted)})


class MetricsService:
    def __init__(self, uow: UnitOfWorkFactory, *, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    def collect(self, org_id: OrgId, repo: RepoRef | None = None) -> list[QueueMetrics]:
        """Metrics of every queue of the org, or of one repository's queues."""
        now = self._clock()
        collected: list[QueueMetrics] = []
        with self._uow(read_only=True) as uow:
            if repo is None:
                repositories = list(uow.repositories.list_for_org(org_id))
            else:
                repositories = [find_repository(uow, org_id, repo)]
            by_id = {repository.id: repository for repository in repositories}
            for queue in uow.queues.list_for_repositories(list(by_id)):
                entries = uow.entries.list_for_queues([queue.id], states=_CURRENT)
                history = uow.history.list_since([queue.id], now - WINDOW)
                active = uow.test_runs.list_active([queue.id])
                bisecting = frozenset(
                    entry_id
                    for run in active
                    if run.kind is TestRunKind.BISECTION
                    for entry_id in run.tested_prs
                )
                run_ids = {c.test_run_id for c in history if c.test_run_id is not None}
                main, bisection = queue_metrics(
                    repo=by_id[queue.repository_id].ref.slug,
                    branch=queue.branch,
                    entries=entries,
                    history=history,
                    bisection_entries=bisecting,
                    run_kinds=uow.test_runs.kinds(run_ids),
                    now=now,
                )
                chosen = adaptive.chosen(queue)
                main.batch_size = chosen.batch_size
                main.speculation_depth = chosen.depth
                since = stalled_since(queue, entries, now=now)
                if since is not None:
                    main.stalled_seconds = (now - since).total_seconds()
                collected.extend((main, bisection))
        return collected
