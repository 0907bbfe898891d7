"""Detection: monitors decide whether a test is flaky or broken, from its rolled-up history.

A monitor is active or not for each test; a test's status is the most severe classification
among its active monitors: broken > flaky > healthy (field notes §1.6). `evaluate` is a plain
function of the settings, the evidence, the monitors' previous states and `now`; the caller
stores what it returns and records a status change when the value moves.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class TestStatus(StrEnum):
    """A test's health; wire values are lowercase."""

    __test__ = False

    HEALTHY = "healthy"  # no classifying monitor is active
    FLAKY = "flaky"  # some flaky monitor (or a manual flag) is active, no broken one
    BROKEN = "broken"  # some broken monitor is active

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {TestStatus.HEALTHY: 0, TestStatus.FLAKY: 1, TestStatus.BROKEN: 2}


class MonitorType(StrEnum):
    """The kinds of monitor."""

    PASS_ON_RETRY = "pass_on_retry"  # noqa: S105 (a monitor name, not a password); a pass and a failure on the same commit
    FAILURE_RATE = "failure_rate"  # failure share over a rolling window, with hysteresis
    FAILURE_COUNT = "failure_count"  # at least N failures in a rolling window
    MANUAL = "manual"  # flagged flaky by a person


def branch_matches(branch: str, globs: Sequence[str]) -> bool:
    """Branch globs as Trunk has them: `*` also matches `/`, `?` is one character."""
    return any(fnmatch.fnmatchcase(branch, pattern) for pattern in globs)


@dataclass(frozen=True, slots=True)
class PassOnRetry:
    """Flaky when a test both failed and passed on one commit within the last `recovery_days`."""

    enabled: bool = True
    recovery_days: int = 7
    branches: tuple[str, ...] = ("*",)

    key = "pass_on_retry"


@dataclass(frozen=True, slots=True)
class FailureRate:
    """Active when failures / runs >= activation over the last `window_hours` (given at least
    `min_sample` runs); once active, stays until the rate drops below `resolution`, or no run
    came for `stale_hours`.
    """

    name: str
    classification: TestStatus
    activation: float
    window_hours: int
    min_sample: int
    resolution: float | None = None  # None: the activation threshold
    stale_hours: int | None = None
    branches: tuple[str, ...] = ("*",)
    enabled: bool = True

    @property
    def key(self) -> str:
        return f"failure_rate:{self.name}"

    @property
    def resolves_below(self) -> float:
        return self.activation if self.resolution is None else self.resolution


@dataclass(frozen=True, slots=True)
class FailureCount:
    """Active on `failures` failures within `window_hours`; resolves when no failure came for
    `resolution_hours` (at least the window).
    """

    name: str
    classification: TestStatus
    failures: int
    window_hours: int
    resolution_hours: int
    branches: tuple[str, ...] = ("*",)
    enabled: bool = True

    @property
    def key(self) -> str:
        return f"failure_count:{self.name}"


@dataclass(frozen=True, slots=True)
class FailingStreak:
    """Broken when the test failed (every attempt) in each of its last `runs` runs on the
    matching branches (a re-run job on the same commit is a run too); resolves as soon as a
    run passes it.
    """

    runs: int = 3
    branches: tuple[str, ...] = ("main", "master")
    enabled: bool = True

    key = "failing_streak"


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    """A repository's monitors. The defaults: pass-on-retry on every branch (flaky), and a
    failing streak of 3 commits on main/master (broken).
    """

    pass_on_retry: PassOnRetry = field(default_factory=PassOnRetry)
    failing_streak: FailingStreak | None = field(default_factory=FailingStreak)
    failure_rates: tuple[FailureRate, ...] = ()
    failure_counts: tuple[FailureCount, ...] = ()
    # An upload with at least this share of its tests failing is kept but left out of detection.
    infrastructure_failure_share: float = 0.8

    @property
    def commit_hours(self) -> int:
        """How far back the monitors reading per-commit evidence look (0: none does)."""
        hours = [0]
        if self.pass_on_retry.enabled:
            hours.append(24 * self.pass_on_retry.recovery_days)
        if self.failing_streak is not None and self.failing_streak.enabled:
            hours.append(24 * 7)  # a streak is looked for among a week's commits
        return max(hours)

    @property
    def bucket_hours(self) -> int:
        """How far back the rolling-window monitors look (0: none is enabled)."""
        hours = [0]
        hours += [rate.window_hours for rate in self.failure_rates if rate.enabled]
        hours += [rate.stale_hours or 0 for rate in self.failure_rates if rate.enabled]
        hours += [
            max(count.window_hours, count.resolution_hours)
            for count in self.failure_counts
            if count.enabled
        ]
        return max(hours)


def default_settings() -> MonitorSettings:
    return MonitorSettings()


@dataclass(frozen=True, slots=True)
class HourBucket:
    """One test's non-skipped results of one hour on one branch (infrastructure-excluded
    uploads left out).
    """

    hour: datetime
    branch: str
    runs: int
    failures: int
    last_run_at: datetime
    last_failure_at: datetime | None


@dataclass(frozen=True, slots=True)
class CommitRuns:
    """One test's non-skipped results on one commit (infrastructure-excluded uploads left out)."""

    commit_sha: str
    branch: str
    pr_number: int | None
    passes: int
    failures: int
    first_pass_at: datetime | None
    first_failure_at: datetime | None
    last_run_at: datetime
    runs: int = 1  # uploads that ran the test on this commit (attempts are passes + failures)

    @property
    def is_mixed(self) -> bool:
        """Both passed and failed: the same code gave both answers."""
        return self.passes > 0 and self.failures > 0

    @property
    def first_run_at(self) -> datetime:
        """When the commit was first seen: on a branch, commits come in this order."""
        seen = [at for at in (self.first_pass_at, self.first_failure_at) if at is not None]
        return min(seen, default=self.last_run_at)

    @property
    def mixed_at(self) -> datetime | None:
        """When the second of the two outcomes arrived (a late retry still counts)."""
        if self.first_pass_at is None or self.first_failure_at is None:
            return None
        return max(self.first_pass_at, self.first_failure_at)


@dataclass(frozen=True, slots=True)
class ManualFlag:
    reason: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the monitors read about one test; buckets and commits cover `history_hours`."""

    buckets: Sequence[HourBucket] = ()
    commits: Sequence[CommitRuns] = ()
    manual_flag: ManualFlag | None = None


@dataclass(frozen=True, slots=True)
class MonitorState:
    """One monitor's verdict on one test: active since when, and why."""

    active: bool
    since: datetime | None
    reason: str
    classification: TestStatus


@dataclass(frozen=True, slots=True)
class Verdict:
    """The test's status after an evaluation, and every monitor's state to store."""

    status: TestStatus
    reason: str
    monitors: Mapping[str, MonitorState]


NO_MONITOR_ACTIVE = "No monitor has flagged this test"


def enabled_keys(settings: MonitorSettings) -> frozenset[str]:
    """The keys of the monitors `settings` enables (the manual flag aside)."""
    keys: set[str] = set()
    if settings.pass_on_retry.enabled:
        keys.add(PassOnRetry.key)
    if settings.failing_streak is not None and settings.failing_streak.enabled:
        keys.add(FailingStreak.key)
    keys |= {monitor.key for monitor in settings.failure_rates if monitor.enabled}
    keys |= {monitor.key for monitor in settings.failure_counts if monitor.enabled}
    return frozenset(keys)


def reading_branch(settings: MonitorSettings, branch: str) -> frozenset[str]:
    """The keys of the enabled monitors that read runs on `branch` by run or by hour: the
    failing streak, failure rates and failure counts whose branches match. (Pass-on-retry
    reads commits made mixed, whatever the branch a run came from.)
    """
    keys: set[str] = set()
    streak = settings.failing_streak
    if streak is not None and streak.enabled and branch_matches(branch, streak.branches):
        keys.add(FailingStreak.key)
    by_hour: list[FailureRate | FailureCount] = [*settings.failure_rates, *settings.failure_counts]
    keys |= {
        monitor.key
        for monitor in by_hour
        if monitor.enabled and branch_matches(branch, monitor.branches)
    }
    return frozenset(keys)


def hourly_keys(settings: MonitorSettings) -> frozenset[str]:
    """The keys of the monitors that read hourly buckets (failure rates and counts)."""
    return frozenset(
        {monitor.key for monitor in settings.failure_rates}
        | {monitor.key for monitor in settings.failure_counts}
    )


def pass_may_change(
    settings: MonitorSettings, states: Mapping[str, MonitorState], branch: str
) -> bool:
    """Whether a run on `branch` that passed can change the verdict of a test whose monitors
    are in `states`: only an active failing streak or failure rate ends on a pass (on its
    branches). Pass-on-retry and failure counts end with time alone, which the periodic
    re-evaluation serves; and a pass activates no monitor that was not active.
    """
    ending_on_a_pass = {FailingStreak.key} | {rate.key for rate in settings.failure_rates}
    return any(
        (state := states.get(key)) is not None and state.active
        for key in reading_branch(settings, branch) & ending_on_a_pass
    )


def _on(since: datetime | None, reason: str, classification: TestStatus) -> MonitorState:
    return MonitorState(active=True, since=since, reason=reason, classification=classification)


def _off(reason: str, classification: TestStatus) -> MonitorState:
    return MonitorState(active=False, since=None, reason=reason, classification=classification)


def evaluate(
    settings: MonitorSettings,
    evidence: Evidence,
    previous: Mapping[str, MonitorState],
    *,
    now: datetime,
    keep: Collection[str] = (),
) -> Verdict:
    """Every enabled monitor's state, and the most severe classification among active ones.

    A monitor that was active and is no longer gives the healthy reason "Resolved: ...", so a
    recovered test says why it recovered. The monitors named in `keep` keep their previous
    state where they have one (nothing they read changed; `evidence` may leave it out).
    """
    states: dict[str, MonitorState] = {}
    if settings.pass_on_retry.enabled:
        states[PassOnRetry.key] = _pass_on_retry(
            settings.pass_on_retry, evidence.commits, previous.get(PassOnRetry.key), now=now
        )
    streak = settings.failing_streak
    if streak is not None and streak.enabled:
        states[FailingStreak.key] = _failing_streak(streak, evidence.commits, previous, now)
    for rate in settings.failure_rates:
        if rate.enabled:
            states[rate.key] = _failure_rate(rate, evidence.buckets, previous.get(rate.key), now)
    for count in settings.failure_counts:
        if count.enabled:
            states[count.key] = _failure_count(
                count, evidence.buckets, previous.get(count.key), now
            )
    if evidence.manual_flag is not None:
        flag = evidence.manual_flag
        reason = "Manually flagged as flaky" + (f": {flag.reason}" if flag.reason else "")
        states[MonitorType.MANUAL.value] = _on(flag.at, reason, TestStatus.FLAKY)
    for key in keep:
        if key in states and key in previous:
            states[key] = previous[key]
    return _verdict(states, previous)


def _verdict(states: Mapping[str, MonitorState], previous: Mapping[str, MonitorState]) -> Verdict:
    active = [state for state in states.values() if state.active]
    if active:
        # Most severe first; among equals the one active longest explains the status.
        top = min(
            active,
            key=lambda state: (
                -state.classification.severity,
                state.since.timestamp() if state.since else float("inf"),
            ),
        )
        return Verdict(top.classification, top.reason, states)
    resolved = [
        state.reason
        for key, state in states.items()
        if previous.get(key) is not None and previous[key].active
    ]
    reason = f"Resolved: {resolved[0]}" if resolved else NO_MONITOR_ACTIVE
    return Verdict(TestStatus.HEALTHY, reason, states)


def _where(branch: str, pr_number: int | None) -> str:
    if pr_number is not None:
        return f"pull request #{pr_number}"
    if branch_is_merge_queue(branch):
        return f"merge queue ({branch})"
    return branch


def branch_is_merge_queue(branch: str) -> bool:
    return any(marker in branch for marker in _MERGE_QUEUE_MARKERS)


_MERGE_QUEUE_MARKERS = ("keepgreen-merge/", "trunk-merge/", "gh-readonly-queue/", "gtmq_")


def _pass_on_retry(
    monitor: PassOnRetry,
    commits: Sequence[CommitRuns],
    before: MonitorState | None,
    *,
    now: datetime,
) -> MonitorState:
    horizon = now - timedelta(days=monitor.recovery_days)
    mixes = [
        (commit.mixed_at, commit)
        for commit in commits
        if commit.mixed_at is not None and branch_matches(commit.branch, monitor.branches)
    ]
    recent = sorted(
        ((at, commit) for at, commit in mixes if horizon <= at <= now),
        key=lambda pair: pair[0],
    )
    if not recent:
        reason = (
            f"no inconsistent results on the same commit for {monitor.recovery_days} days"
            if before is not None and before.active
            else "no inconsistent results on the same commit"
        )
        return _off(reason, TestStatus.FLAKY)
    latest_at, latest = recent[-1]
    since = before.since if before is not None and before.active else latest_at
    reason = f"Inconsistent results on the same commit ({_where(latest.branch, latest.pr_number)})"
    return _on(since, reason, TestStatus.FLAKY)


def _failing_streak(
    monitor: FailingStreak,
    commits: Sequence[CommitRuns],
    previous: Mapping[str, MonitorState],
    now: datetime,
) -> MonitorState:
    # Newest commit first by when it was first run, so a late re-run of an old commit (which
    # passes, being from before the break) does not hide the failures of the newer ones.
    newest_first = sorted(
        (commit for commit in commits if branch_matches(commit.branch, monitor.branches)),
        key=lambda commit: commit.first_run_at,
        reverse=True,
    )
    # Runs since the last commit on which the test passed (every run there failed).
    failing_runs = 0
    passed = False
    for commit in newest_first:
        if commit.passes:
            passed = True
            break
        failing_runs += commit.runs
    scope = _scope(monitor.branches)
    before = previous.get(FailingStreak.key)
    was_active = before is not None and before.active
    if failing_runs >= monitor.runs or (was_active and failing_runs and not passed):
        # (Still failing with fewer runs left in the history window is no recovery.)
        since = before.since if before is not None and was_active else now
        reason = f"Failed in each of its last {monitor.runs} runs on {scope}"
        return _on(since, before.reason if was_active and before else reason, TestStatus.BROKEN)
    # "Passed" is said of the pass that ended an active streak; any other test simply has
    # no streak (and detection need not read its passes to say so).
    reason = f"passed on {scope}" if passed and was_active else f"no failing streak on {scope}"
    return _off(reason, TestStatus.BROKEN)


def _window(
    buckets: Sequence[HourBucket], branches: Sequence[str], hours: int, now: datetime
) -> list[HourBucket]:
    # Buckets are whole hours: the window takes every hour that overlaps it.
    start = (now - timedelta(hours=hours)).replace(minute=0, second=0, microsecond=0)
    return [
        bucket
        for bucket in buckets
        if start <= bucket.hour <= now and branch_matches(bucket.branch, branches)
    ]


def _scope(branches: Sequence[str]) -> str:
    return ", ".join(branches) if tuple(branches) != ("*",) else "all branches"


def _failure_rate(
    monitor: FailureRate,
    buckets: Sequence[HourBucket],
    before: MonitorState | None,
    now: datetime,
) -> MonitorState:
    window = _window(buckets, monitor.branches, monitor.window_hours, now)
    runs = sum(bucket.runs for bucket in window)
    failures = sum(bucket.failures for bucket in window)
    rate = failures / runs if runs else 0.0
    was_active = before is not None and before.active
    scope = _scope(monitor.branches)
    described = (
        f"Failure rate {rate:.0%} ≥ {monitor.activation:.0%} over {monitor.window_hours}h "
        f"on {scope} ({failures} of {runs} runs)"
    )
    if before is not None and was_active:
        stale = monitor.stale_hours is not None and not _window(
            buckets, monitor.branches, monitor.stale_hours, now
        )
        if stale:
            return _off(
                f"failure rate monitor: no runs on {scope} for {monitor.stale_hours}h",
                monitor.classification,
            )
        if runs == 0 or rate >= monitor.resolves_below:
            if runs == 0:
                reason = before.reason
            elif rate >= monitor.activation:
                reason = described
            else:  # held by hysteresis: say so rather than claim the activation threshold
                reason = (
                    f"Failure rate {rate:.0%} not yet below {monitor.resolves_below:.0%} over "
                    f"{monitor.window_hours}h on {scope} ({failures} of {runs} runs)"
                )
            return _on(before.since, reason, monitor.classification)
        return _off(
            f"failure rate {rate:.0%} < {monitor.resolves_below:.0%} over "
            f"{monitor.window_hours}h on {scope}",
            monitor.classification,
        )
    if runs >= monitor.min_sample and rate >= monitor.activation:
        return _on(now, described, monitor.classification)
    return _off(f"failure rate {rate:.0%}", monitor.classification)


def _failure_count(
    monitor: FailureCount,
    buckets: Sequence[HourBucket],
    before: MonitorState | None,
    now: datetime,
) -> MonitorState:
    window = _window(buckets, monitor.branches, monitor.window_hours, now)
    failures = sum(bucket.failures for bucket in window)
    scope = _scope(monitor.branches)
    described = f"{failures} failures in {monitor.window_hours}h on {scope}"
    if failures >= monitor.failures:
        since = before.since if before is not None and before.active else now
        return _on(since, described, monitor.classification)
    if before is not None and before.active:
        recent = _window(buckets, monitor.branches, monitor.resolution_hours, now)
        last = max(
            (bucket.last_failure_at for bucket in recent if bucket.last_failure_at is not None),
            default=None,
        )
        if last is not None and now - last < timedelta(hours=monitor.resolution_hours):
            return _on(before.since, before.reason, monitor.classification)
        return _off(
            f"no failure on {scope} for {monitor.resolution_hours}h",
            monitor.classification,
        )
    return _off(described, monitor.classification)
