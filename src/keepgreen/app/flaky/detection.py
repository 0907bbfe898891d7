"""Re-evaluating tests: load their evidence, run the monitors, store status and history."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from keepgreen.app.flaky.store import FlakyStore, SavedStatus
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.core.flaky.model import StatusChange, TestCase
from keepgreen.core.flaky.monitors import (
    CommitRuns,
    Evidence,
    FailingStreak,
    MonitorSettings,
    MonitorState,
    branch_matches,
    enabled_keys,
    evaluate,
    hourly_keys,
)
from keepgreen.core.ids import RepositoryId

# Commits of a failing streak's branches read at once, newest first, while streaks are open.
STREAK_COMMITS_PER_READ = 8


class Detector:
    """Runs the monitors over stored rollups; the caller owns the transaction."""

    def reevaluate(
        self,
        store: FlakyStore,
        repository_id: RepositoryId,
        settings: MonitorSettings,
        test_ids: Collection[str],
        *,
        now: datetime,
        refresh: Collection[str] | None = None,
    ) -> int:
        """Evaluate the repository's tests `test_ids` at `now`; the number whose status value
        changed. Only the monitors `refresh` names are run (None: all), the others keep their
        state: an upload changes what some monitors read, not all.
        """
        if not test_ids:
            return 0
        enabled = enabled_keys(settings)
        keep = enabled - set(refresh) if refresh is not None else frozenset()
        if not enabled - keep:
            return 0
        tests = store.tests(repository_id, test_ids)
        # Each kind of evidence only as far back as some monitor run reads it.
        by_hour = hourly_keys(settings)
        bucket_hours, commit_hours = settings.bucket_hours, settings.commit_hours
        buckets = (
            store.buckets(repository_id, test_ids, now - timedelta(hours=bucket_hours + 1))
            if bucket_hours and (enabled - keep) & by_hour
            else {}
        )
        commits = (
            commit_evidence(
                store,
                repository_id,
                settings,
                tests,
                now - timedelta(hours=commit_hours + 1),
                streak=FailingStreak.key not in keep,
            )
            if commit_hours and (enabled - keep) - by_hour
            else {}
        )
        changed = 0
        saved: list[SavedStatus] = []
        for test_id, test in tests.items():
            evidence = Evidence(
                buckets=buckets.get(test_id, ()),
                commits=commits.get(test_id, ()),
                manual_flag=test.manual_flag,
            )
            verdict = evaluate(settings, evidence, test.monitors, now=now, keep=keep)
            moved = verdict.status is not test.status
            if (
                not moved
                and verdict.reason == test.status_reason
                and (verdict.monitors == test.monitors)
            ):
                continue
            saved.append(
                SavedStatus(
                    test_id,
                    verdict.status,
                    verdict.reason,
                    now if moved else test.status_at,
                    verdict.monitors,
                )
            )
            if moved:
                changed += 1
                store.add_status_change(
                    repository_id, StatusChange(test_id, now, verdict.status, verdict.reason)
                )
        store.save_statuses(repository_id, saved)
        return changed


def commit_evidence(
    store: FlakyStore,
    repository_id: RepositoryId,
    settings: MonitorSettings,
    tests: Mapping[str, TestCase],
    since: datetime,
    *,
    streak: bool = True,
) -> dict[str, list[CommitRuns]]:
    """Per test, the commit rollups its monitors can tell apart from the rest: the commits it
    both failed and passed on (all that pass-on-retry reads), and for a failing streak its
    failures on the streak's branches and their commits after its last pass, down to it.

    A passing commit older than a test's newest pass on those branches changes no verdict, and
    most of a test's history is such passes: reading only these keeps the cost of an
    evaluation with the test's failures, not with every commit it ever ran on. (The streak's
    part only when `streak`.)
    """
    # Pass-on-retry reads mixed commits; a streak, failures on its branches (on every branch
    # when they are patterns: the store matches names, not patterns).
    monitor = settings.failing_streak if streak else None
    branches: Collection[str] | None = ()
    if monitor is not None and monitor.enabled:
        patterns = any(set(branch) & set("*?[") for branch in monitor.branches)
        branches = None if patterns else monitor.branches
    found = {
        test_id: list(runs)
        for test_id, runs in store.failing_commits(
            repository_id, tests.keys(), since, branches=branches
        ).items()
    }
    if monitor is None or not monitor.enabled:
        return found
    # Only a test that failed on the streak's branches, or whose streak was active, can have
    # a streak for a pass to end.
    open_streaks = {
        test_id
        for test_id, runs in found.items()
        if any(branch_matches(run.branch, monitor.branches) for run in runs)
    } | {test_id for test_id, test in tests.items() if _streak_active(test.monitors)}
    streak_commits = [
        seen.commit_sha
        for seen in store.commits_since(repository_id, since)
        if branch_matches(seen.branch, monitor.branches)
    ]
    # Newest first, a few commits at a time: most streaks end at the newest commit.
    for start in range(0, len(streak_commits), STREAK_COMMITS_PER_READ):
        if not open_streaks:
            break
        batch = streak_commits[start : start + STREAK_COMMITS_PER_READ]
        ended = set()
        for test_id, runs in store.commit_runs(repository_id, batch, open_streaks):
            if runs.failures == 0:  # a failing row is there already
                found.setdefault(test_id, []).append(runs)
            if runs.passes:
                ended.add(test_id)
        open_streaks -= ended
    return found


def _streak_active(monitors: Mapping[str, MonitorState]) -> bool:
    state = monitors.get(FailingStreak.key)
    return state is not None and state.active


class Housekeeping:
    """What time alone changes: monitors recovering, and old results leaving (retention)."""

    def __init__(
        self,
        unit_of_work: UnitOfWorkFactory,
        *,
        detector: Detector,
        clock: Clock,
        result_retention_days: int,
        rollup_retention_days: int,
    ) -> None:
        self._unit_of_work = unit_of_work
        self._detector = detector
        self._clock = clock
        self._result_retention = timedelta(days=result_retention_days)
        self._rollup_retention = timedelta(days=rollup_retention_days)

    def sweep(self) -> int:
        """Re-evaluate every unhealthy test of every repository; the number that changed."""
        now = self._clock()
        changed = 0
        with self._unit_of_work() as uow:
            for repository_id, ids in uow.flaky.unhealthy_by_repository().items():
                settings = uow.flaky.settings(repository_id)
                changed += self._detector.reevaluate(
                    uow.flaky, repository_id, settings.monitors, ids, now=now
                )
            uow.commit()
        return changed

    def purge(self) -> int:
        """Delete raw results and rollups past their retention, and the CI runs reported
        (create-ci-run) as long ago as the results; the number of rows deleted.
        """
        now = self._clock()
        with self._unit_of_work() as uow:
            deleted = uow.flaky.purge(
                results_before=now - self._result_retention,
                rollups_before=now - self._rollup_retention,
            )
            deleted += uow.ci_runs.purge(before=now - self._result_retention)
            uow.commit()
        return deleted
