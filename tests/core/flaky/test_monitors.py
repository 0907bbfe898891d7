"""Detection: when the monitors call a test flaky, broken or healthy, and why (field notes §1.6).

Each test states one rule of `evaluate` over plain evidence. The builders below default every
argument, so a test names only what its rule is about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from keepgreen.core.flaky.monitors import (
    NO_MONITOR_ACTIVE,
    CommitRuns,
    Evidence,
    FailingStreak,
    FailureCount,
    FailureRate,
    HourBucket,
    ManualFlag,
    MonitorSettings,
    MonitorState,
    PassOnRetry,
    TestStatus,
    Verdict,
    branch_matches,
    enabled_keys,
    evaluate,
    pass_may_change,
    reading_branch,
)

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

FLAKY, BROKEN, HEALTHY = TestStatus.FLAKY, TestStatus.BROKEN, TestStatus.HEALTHY
RETRY, STREAK = PassOnRetry.key, FailingStreak.key
STREAK_REASON = "Failed in each of its last 3 runs on main, master"

# --- Builders ---------------------------------------------------------------------------------


def commit(
    sha: str = "c1",
    *,
    branch: str = "main",
    pr: int | None = None,
    passes: int = 0,
    failures: int = 1,
    at: datetime = NOW - HOUR,
    passed_at: datetime | None = None,
    failed_at: datetime | None = None,
    last_at: datetime | None = None,
    runs: int = 1,
) -> CommitRuns:
    """One test's runs on one commit: all at `at`, unless the first pass or failure (or the
    last run) is given its own time.
    """
    first_pass = (passed_at or at) if passes else None
    first_failure = (failed_at or at) if failures else None
    last = last_at or max(t for t in (first_pass, first_failure) if t is not None)
    return CommitRuns(sha, branch, pr, passes, failures, first_pass, first_failure, last, runs)


def mixed(
    sha: str = "c1",
    *,
    branch: str = "main",
    pr: int | None = None,
    passed_at: datetime = NOW - HOUR,
    failed_at: datetime | None = None,
) -> CommitRuns:
    """A commit the test failed on (by default an hour before) and then passed on when retried."""
    failed_at = failed_at or passed_at - HOUR
    return commit(
        sha, branch=branch, pr=pr, passes=1, failures=1, passed_at=passed_at, failed_at=failed_at
    )


def passing(sha: str = "c1", *, branch: str = "main", at: datetime = NOW - HOUR) -> CommitRuns:
    return commit(sha, branch=branch, passes=1, failures=0, at=at)


def failing(
    count: int = 3, *, branch: str = "main", first_at: datetime = NOW - 10 * HOUR
) -> list[CommitRuns]:
    """`count` commits of `branch`, an hour apart, on which the test only failed."""
    return [commit(f"{branch}-{i}", branch=branch, at=first_at + i * HOUR) for i in range(count)]


def hour(
    at: datetime = NOW - HOUR, *, branch: str = "main", runs: int = 1, failures: int = 0
) -> HourBucket:
    """The runs of the hour holding `at`, the last of them (and the last failure) at `at`."""
    return HourBucket(
        hour=at.replace(minute=0, second=0, microsecond=0),
        branch=branch,
        runs=runs,
        failures=failures,
        last_run_at=at,
        last_failure_at=at if failures else None,
    )


RETRY_ONLY = MonitorSettings(failing_streak=None)
STREAK_ONLY = MonitorSettings(pass_on_retry=PassOnRetry(enabled=False))
NONE_ENABLED = MonitorSettings(pass_on_retry=PassOnRetry(enabled=False), failing_streak=None)


def rate_monitor(
    *,
    activation: float = 0.3,
    resolution: float | None = None,
    window_hours: int = 24,
    min_sample: int = 1,
    stale_hours: int | None = None,
    branches: tuple[str, ...] = ("main",),
) -> MonitorSettings:
    """Settings with one flaky failure-rate monitor and nothing else."""
    monitor = FailureRate(
        "flaky on main",
        FLAKY,
        activation,
        window_hours,
        min_sample,
        resolution=resolution,
        stale_hours=stale_hours,
        branches=branches,
    )
    return replace(NONE_ENABLED, failure_rates=(monitor,))


def count_monitor(
    *, failures: int = 2, window_hours: int = 6, resolution_hours: int = 24
) -> MonitorSettings:
    """Settings with one broken failure-count monitor on all branches and nothing else."""
    monitor = FailureCount("failing", BROKEN, failures, window_hours, resolution_hours)
    return replace(NONE_ENABLED, failure_counts=(monitor,))


RATE, COUNT = "failure_rate:flaky on main", "failure_count:failing"


def verdict(
    *,
    commits: Sequence[CommitRuns] = (),
    buckets: Sequence[HourBucket] = (),
    flag: ManualFlag | None = None,
    monitors: MonitorSettings = RETRY_ONLY,
    previous: Mapping[str, MonitorState] | None = None,
    now: datetime = NOW,
) -> Verdict:
    evidence = Evidence(buckets=buckets, commits=commits, manual_flag=flag)
    return evaluate(monitors, evidence, previous or {}, now=now)


# --- Pass-on-retry ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("branch", "pr", "where"),
    [
        ("main", None, "main"),
        ("feature/login", 12, "pull request #12"),
        ("keepgreen-merge/main/3", None, "merge queue (keepgreen-merge/main/3)"),
        (
            "gh-readonly-queue/main/pr-12-ab12",
            None,
            "merge queue (gh-readonly-queue/main/pr-12-ab12)",
        ),
    ],
)
def test_a_failure_and_a_pass_on_one_commit_is_flaky_and_says_where(
    branch: str, pr: int | None, where: str
) -> None:
    result = verdict(commits=[mixed(branch=branch, pr=pr)])
    assert result.status is FLAKY
    assert result.reason == f"Inconsistent results on the same commit ({where})"


def test_a_failure_and_a_pass_on_different_commits_is_not_pass_on_retry() -> None:
    result = verdict(commits=[commit("c1"), passing("c2")])
    assert result.status is HEALTHY
    assert not result.monitors[RETRY].active


def test_a_late_retry_counts_at_the_time_of_the_pass() -> None:
    # Failed 9 days ago, passed on retry 3 days ago: within the 7 recovery days of the pass.
    late = mixed(failed_at=NOW - 9 * DAY, passed_at=NOW - 3 * DAY)
    result = verdict(commits=[late])
    assert result.status is FLAKY
    assert result.monitors[RETRY].since == NOW - 3 * DAY


def test_several_retries_on_one_commit_are_one_detection() -> None:
    once = mixed(failed_at=NOW - 5 * HOUR, passed_at=NOW - 4 * HOUR)
    many = commit(
        passes=3,
        failures=4,
        failed_at=NOW - 5 * HOUR,
        passed_at=NOW - 4 * HOUR,
        last_at=NOW - HOUR,
    )
    assert verdict(commits=[many]) == verdict(commits=[once])
    assert verdict(commits=[many]).monitors == {
        RETRY: MonitorState(
            active=True,
            since=NOW - 4 * HOUR,
            reason="Inconsistent results on the same commit (main)",
            classification=FLAKY,
        )
    }


def test_pass_on_retry_keeps_its_since_while_active_and_recovers_after_recovery_days() -> None:
    start, second_at = NOW - 30 * DAY, NOW - 25 * DAY
    commits = [mixed("c1", passed_at=start), mixed("c2", passed_at=second_at)]

    first_seen = verdict(commits=commits[:1], now=start + HOUR)
    assert first_seen.monitors[RETRY].since == start

    # The second mix came before the first aged out: still the same detection, 11 days on.
    day_11 = verdict(commits=commits, previous=first_seen.monitors, now=start + 11 * DAY)
    assert day_11.status is FLAKY
    assert day_11.monitors[RETRY].since == start

    almost = verdict(commits=commits, previous=day_11.monitors, now=second_at + 7 * DAY - HOUR)
    assert almost.status is FLAKY

    recovered = verdict(commits=commits, previous=almost.monitors, now=second_at + 7 * DAY + HOUR)
    assert recovered.status is HEALTHY
    assert recovered.reason == "Resolved: no inconsistent results on the same commit for 7 days"
    assert recovered.monitors[RETRY].since is None


def test_pass_on_retry_recovery_days_is_configurable() -> None:
    monitors = MonitorSettings(pass_on_retry=PassOnRetry(recovery_days=2), failing_streak=None)
    assert verdict(commits=[mixed(passed_at=NOW - 47 * HOUR)], monitors=monitors).status is FLAKY
    assert verdict(commits=[mixed(passed_at=NOW - 49 * HOUR)], monitors=monitors).status is HEALTHY


@pytest.mark.parametrize(
    ("branch", "counted"),
    [
        ("release/1.2", True),
        ("release/1.2/hotfix", True),  # `*` also matches `/`
        ("main", False),
        ("prerelease/1", False),  # a glob matches the whole name
    ],
)
def test_pass_on_retry_reads_only_branches_matching_its_globs(branch: str, counted: bool) -> None:
    monitors = MonitorSettings(
        pass_on_retry=PassOnRetry(branches=("release/*",)), failing_streak=None
    )
    result = verdict(commits=[mixed(branch=branch)], monitors=monitors)
    assert result.monitors[RETRY].active is counted


@pytest.mark.parametrize(
    ("branch", "globs", "matches"),
    [
        ("feature/a/b", ("*",), True),
        ("feature/a/b", ("feature/*",), True),
        ("feature/a/b", ("feature/?",), False),
        ("release/1", ("release/?",), True),
        ("release/10", ("release/?",), False),
        ("master", ("main", "master"), True),
        ("mainline", ("main",), False),
        ("Main", ("main",), False),
        ("main", (), False),
    ],
)
def test_branch_globs_star_crosses_slashes_and_question_mark_is_one_character(
    branch: str, globs: tuple[str, ...], matches: bool
) -> None:
    assert branch_matches(branch, globs) is matches


def test_a_disabled_pass_on_retry_keeps_no_state_and_flags_nothing() -> None:
    result = verdict(commits=[mixed()], monitors=NONE_ENABLED)
    assert result.monitors == {}
    assert (result.status, result.reason) == (HEALTHY, NO_MONITOR_ACTIVE)


def test_disabling_an_active_pass_on_retry_resolves_it_at_once() -> None:
    active = verdict(commits=[mixed()])
    result = verdict(commits=[mixed()], monitors=NONE_ENABLED, previous=active.monitors)
    assert result.status is HEALTHY
    assert RETRY not in result.monitors


# --- Failing streak ---------------------------------------------------------------------------


def test_three_failing_commits_on_main_are_broken() -> None:
    result = verdict(commits=failing(3), monitors=STREAK_ONLY)
    assert (result.status, result.reason) == (BROKEN, STREAK_REASON)
    assert result.monitors[STREAK].since == NOW


def test_re_runs_of_a_failing_commit_count_towards_the_streak() -> None:
    # One commit failed in three runs (the job re-run twice): three failing runs.
    result = verdict(commits=[commit("c1", failures=6, runs=3)], monitors=STREAK_ONLY)
    assert (result.status, result.reason) == (BROKEN, STREAK_REASON)


def test_failing_runs_are_counted_back_to_the_last_pass() -> None:
    runs = [
        commit("c1", failures=2, runs=2, at=NOW - 4 * HOUR),
        commit("c2", passes=1, failures=0, at=NOW - 3 * HOUR),
        commit("c3", failures=2, runs=2, at=NOW - HOUR),
    ]
    assert verdict(commits=runs, monitors=STREAK_ONLY).status is HEALTHY


def test_two_failing_commits_are_not_a_streak() -> None:
    assert verdict(commits=failing(2), monitors=STREAK_ONLY).status is HEALTHY


def test_failing_commits_of_main_and_master_make_one_streak() -> None:
    commits = [*failing(2, branch="main"), *failing(1, branch="master", first_at=NOW - HOUR)]
    assert verdict(commits=commits, monitors=STREAK_ONLY).status is BROKEN


def _three_with_a_pass(position: int) -> list[CommitRuns]:
    """Three commits newer than `failing(3)`, the test passing on the one at `position`."""
    return [
        passing(f"new-{i}", at=NOW - (3 - i) * HOUR)
        if i == position
        else commit(f"new-{i}", at=NOW - (3 - i) * HOUR)
        for i in range(3)
    ]


@pytest.mark.parametrize("position", [0, 1, 2], ids=["oldest", "middle", "newest"])
def test_a_passing_commit_among_the_last_three_means_no_streak(position: int) -> None:
    result = verdict(commits=_three_with_a_pass(position), monitors=STREAK_ONLY)
    assert result.status is HEALTHY


@pytest.mark.parametrize(
    "position",
    [
        pytest.param(0, id="oldest"),
        pytest.param(1, id="middle"),
        pytest.param(2, id="newest"),
    ],
)
def test_a_passing_commit_among_the_last_three_resolves_an_active_streak(position: int) -> None:
    active = verdict(commits=failing(3), monitors=STREAK_ONLY, now=NOW - 5 * HOUR)
    assert active.status is BROKEN
    commits = [*failing(3), *_three_with_a_pass(position)]
    result = verdict(commits=commits, monitors=STREAK_ONLY, previous=active.monitors)
    assert result.status is HEALTHY
    assert not result.monitors[STREAK].active


def test_a_streak_resolved_by_a_pass_says_so() -> None:
    active = verdict(commits=failing(3), monitors=STREAK_ONLY, now=NOW - 5 * HOUR)
    result = verdict(
        commits=[*failing(3), passing("fix")], monitors=STREAK_ONLY, previous=active.monitors
    )
    assert result.reason == "Resolved: passed on main, master"


@pytest.mark.parametrize(
    "commits",
    [
        pytest.param([passing("c1"), passing("c2")], id="never-failed"),
        pytest.param([*failing(1), passing("fix")], id="failed-once-then-passed"),
        pytest.param([passing("c0", at=NOW - 20 * HOUR), *failing(2)], id="two-failures"),
    ],
)
def test_passed_is_said_only_of_the_pass_that_ended_an_active_streak(
    commits: list[CommitRuns],
) -> None:
    # Detection reads a test's passing commits only while a streak may be open, so the words
    # of an inactive streak must not depend on the passes of any other test.
    result = verdict(commits=commits, monitors=STREAK_ONLY)
    assert result.monitors[STREAK].reason == "no failing streak on main, master"


@pytest.mark.parametrize(
    ("monitors", "active", "branch", "may_change"),
    [
        pytest.param(STREAK_ONLY, STREAK, "main", True, id="streak-on-its-branch"),
        pytest.param(STREAK_ONLY, STREAK, "feature/x", False, id="streak-elsewhere"),
        pytest.param(RETRY_ONLY, RETRY, "main", False, id="pass-on-retry-ends-with-time"),
        pytest.param(rate_monitor(), RATE, "main", True, id="rate-on-its-branch"),
        pytest.param(rate_monitor(), RATE, "feature/x", False, id="rate-elsewhere"),
        pytest.param(count_monitor(), COUNT, "main", False, id="count-ends-with-time"),
        pytest.param(STREAK_ONLY, None, "main", False, id="nothing-active"),
    ],
)
def test_only_an_active_streak_or_rate_on_the_branch_may_end_on_a_pass(
    monitors: MonitorSettings, active: str | None, branch: str, may_change: bool
) -> None:
    states = {
        key: MonitorState(active=key == active, since=NOW, reason="r", classification=BROKEN)
        for key in (RETRY, STREAK, RATE, COUNT)
    }
    assert pass_may_change(monitors, states, branch) is may_change


def test_a_kept_monitor_keeps_its_state_whatever_the_evidence_says() -> None:
    active = verdict(commits=failing(3), monitors=STREAK_ONLY, now=NOW - 5 * HOUR)
    assert active.status is BROKEN
    # The evidence read without the streak's commits: kept, the streak stays as it was.
    kept = evaluate(STREAK_ONLY, Evidence(), active.monitors, now=NOW, keep=[STREAK])
    assert kept.status is BROKEN
    assert kept.monitors[STREAK] == active.monitors[STREAK]
    assert evaluate(STREAK_ONLY, Evidence(), active.monitors, now=NOW).status is HEALTHY


@pytest.mark.parametrize(
    ("branch", "keys"),
    [
        pytest.param("main", {STREAK, RATE, COUNT}, id="main"),
        pytest.param("feature/x", {COUNT}, id="feature"),
    ],
)
def test_the_monitors_reading_a_branch(branch: str, keys: set[str]) -> None:
    monitors = replace(
        MonitorSettings(),
        failure_rates=rate_monitor().failure_rates,
        failure_counts=count_monitor().failure_counts,
    )
    assert enabled_keys(monitors) == {RETRY, STREAK, RATE, COUNT}
    assert reading_branch(monitors, branch) == keys


def test_failing_commits_on_other_branches_do_not_make_a_streak() -> None:
    result = verdict(commits=failing(5, branch="feature/x"), monitors=STREAK_ONLY)
    assert result.status is HEALTHY


def test_passing_commits_on_other_branches_do_not_interrupt_a_streak() -> None:
    commits = [*failing(3), passing("pr", branch="feature/x", at=NOW - HOUR / 2)]
    assert verdict(commits=commits, monitors=STREAK_ONLY).status is BROKEN


def test_a_commit_that_failed_then_passed_on_retry_is_not_a_failing_commit() -> None:
    commits = [*failing(2), mixed("retried", failed_at=NOW - 2 * HOUR, passed_at=NOW - HOUR)]
    result = verdict(commits=commits, monitors=STREAK_ONLY)
    assert result.status is HEALTHY


def test_the_last_commits_are_the_last_run_not_the_last_listed() -> None:
    newest_first = [
        commit("c4", at=NOW - 1 * HOUR),
        commit("c3", at=NOW - 2 * HOUR),
        commit("c2", at=NOW - 3 * HOUR),
        passing("c1", at=NOW - 4 * HOUR),
    ]
    assert verdict(commits=newest_first, monitors=STREAK_ONLY).status is BROKEN
    # Listed first but run last: the newest three are c5 (passed), c4 and c3.
    fixed_last_listed_first = [passing("c5", at=NOW), *newest_first[:3]]
    assert verdict(commits=fixed_last_listed_first, monitors=STREAK_ONLY).status is HEALTHY


def test_an_active_streak_is_kept_when_older_failures_leave_the_history() -> None:
    active = verdict(commits=failing(3), monitors=STREAK_ONLY)
    newest_only = failing(3)[-1:]
    later = verdict(
        commits=newest_only, monitors=STREAK_ONLY, previous=active.monitors, now=NOW + 6 * DAY
    )
    assert later.status is BROKEN
    assert later.monitors[STREAK] == active.monitors[STREAK]


# --- Failure rate -----------------------------------------------------------------------------


def test_failure_rate_activates_at_the_threshold_and_says_by_how_much() -> None:
    result = verdict(buckets=[hour(runs=20, failures=7)], monitors=rate_monitor(min_sample=20))
    assert result.status is FLAKY
    assert result.reason == "Failure rate 35% ≥ 30% over 24h on main (7 of 20 runs)"
    assert result.monitors[RATE].since == NOW


@pytest.mark.parametrize(("failures", "status"), [(5, HEALTHY), (6, FLAKY)])
def test_failure_rate_activates_at_exactly_the_threshold(failures: int, status: TestStatus) -> None:
    result = verdict(buckets=[hour(runs=20, failures=failures)], monitors=rate_monitor())
    assert result.status is status


def test_failure_rate_needs_the_minimum_sample_to_activate() -> None:
    monitors = rate_monitor(min_sample=20)
    assert verdict(buckets=[hour(runs=19, failures=19)], monitors=monitors).status is HEALTHY
    assert verdict(buckets=[hour(runs=20, failures=6)], monitors=monitors).status is FLAKY


def test_failure_rate_with_a_lower_resolution_stays_active_until_the_rate_drops_below_it() -> None:
    monitors = rate_monitor(activation=0.3, resolution=0.1, min_sample=10)
    failing_hour = hour(NOW - 4 * HOUR, runs=10, failures=4)
    active = verdict(buckets=[failing_hour], monitors=monitors)
    assert active.status is FLAKY

    at_20_percent = [failing_hour, hour(NOW - 3 * HOUR, runs=10)]
    held = verdict(buckets=at_20_percent, monitors=monitors, previous=active.monitors)
    assert held.status is FLAKY
    assert held.monitors[RATE].since == NOW
    assert verdict(buckets=at_20_percent, monitors=monitors).status is HEALTHY  # not when new

    at_10_percent = [*at_20_percent, hour(NOW - 2 * HOUR, runs=20)]
    held = verdict(buckets=at_10_percent, monitors=monitors, previous=held.monitors)
    assert held.status is FLAKY  # not below the resolution yet

    at_7_percent = [*at_10_percent, hour(NOW - HOUR, runs=20)]
    resolved = verdict(buckets=at_7_percent, monitors=monitors, previous=held.monitors)
    assert resolved.status is HEALTHY
    assert resolved.reason == "Resolved: failure rate 7% < 10% over 24h on main"


def test_a_failure_rate_held_by_hysteresis_does_not_claim_it_is_above_activation() -> None:
    monitors = rate_monitor(activation=0.3, resolution=0.1)
    active = verdict(buckets=[hour(runs=10, failures=4)], monitors=monitors)
    held = verdict(buckets=[hour(runs=20, failures=4)], monitors=monitors, previous=active.monitors)
    assert held.status is FLAKY
    assert "20% ≥ 30%" not in held.reason
    assert held.reason == "Failure rate 20% not yet below 10% over 24h on main (4 of 20 runs)"


def test_failure_rate_resolution_defaults_to_the_activation_threshold() -> None:
    monitors = rate_monitor(activation=0.3)
    assert monitors.failure_rates[0].resolves_below == 0.3
    active = verdict(buckets=[hour(runs=10, failures=3)], monitors=monitors)
    assert active.status is FLAKY
    one_more_pass = [hour(runs=11, failures=3)]
    result = verdict(buckets=one_more_pass, monitors=monitors, previous=active.monitors)
    assert result.status is HEALTHY


def test_failure_rate_resolves_when_no_run_came_for_stale_hours() -> None:
    monitors = rate_monitor(stale_hours=6)
    buckets = [hour(NOW - 10 * HOUR, runs=4, failures=4)]
    active = verdict(buckets=buckets, monitors=monitors, now=NOW - 9 * HOUR)
    assert active.status is FLAKY
    # 100% over the 24h window still, but no run in the last 6 hours.
    result = verdict(buckets=buckets, monitors=monitors, previous=active.monitors)
    assert result.status is HEALTHY
    assert result.reason == "Resolved: failure rate monitor: no runs on main for 6h"


def test_failure_rate_without_stale_hours_stays_active_without_runs() -> None:
    monitors = rate_monitor()
    buckets = [hour(NOW - 10 * HOUR, runs=4, failures=4)]
    active = verdict(buckets=buckets, monitors=monitors, now=NOW - 9 * HOUR)
    result = verdict(buckets=(), monitors=monitors, previous=active.monitors, now=NOW + 3 * DAY)
    assert result.status is FLAKY
    assert result.monitors[RATE] == active.monitors[RATE]


@pytest.mark.parametrize(
    ("last_run", "counted"),
    [
        # NOW is 09:30: a 2h window starts at 07:30, so it takes the whole 07:00 hour.
        (NOW.replace(hour=7, minute=10), True),
        (NOW.replace(hour=6, minute=50), False),
    ],
)
def test_failure_rate_window_is_whole_hours(last_run: datetime, counted: bool) -> None:
    monitors = rate_monitor(window_hours=2)
    result = verdict(buckets=[hour(last_run, failures=1)], monitors=monitors)
    assert result.monitors[RATE].active is counted


def test_failure_rate_pools_the_runs_of_every_matching_branch() -> None:
    monitors = rate_monitor(activation=0.2, min_sample=20, branches=("main", "release/*"))
    buckets = [
        hour(branch="main", runs=10, failures=2),
        hour(branch="release/1.2", runs=10, failures=2),
        hour(branch="feature/x", runs=50),
    ]
    result = verdict(buckets=buckets, monitors=monitors)
    assert result.status is FLAKY
    assert result.reason == "Failure rate 20% ≥ 20% over 24h on main, release/* (4 of 20 runs)"


# --- Failure count ----------------------------------------------------------------------------


def test_failure_count_activates_on_n_failures_in_the_window() -> None:
    two = [hour(NOW - 2 * HOUR, failures=1), hour(NOW - HOUR, branch="pr/1", failures=1)]
    result = verdict(buckets=two, monitors=count_monitor())
    assert (result.status, result.reason) == (BROKEN, "2 failures in 6h on all branches")


def test_failure_count_ignores_failures_outside_the_window() -> None:
    two = [hour(NOW - 8 * HOUR, failures=1), hour(NOW - HOUR, failures=1)]
    assert verdict(buckets=two, monitors=count_monitor()).status is HEALTHY


def test_failure_count_stays_active_while_the_last_failure_is_within_resolution_hours() -> None:
    monitors = count_monitor(window_hours=6, resolution_hours=24)
    two = [hour(NOW - 2 * HOUR, failures=1), hour(NOW - HOUR, failures=1)]
    active = verdict(buckets=two, monitors=monitors)

    # The failures left the 6h window; the last is 23h old.
    held = verdict(buckets=two, monitors=monitors, previous=active.monitors, now=NOW + 22 * HOUR)
    assert held.status is BROKEN
    assert held.monitors[COUNT] == active.monitors[COUNT]

    resolved = verdict(buckets=two, monitors=monitors, previous=held.monitors, now=NOW + 25 * HOUR)
    assert resolved.status is HEALTHY
    assert resolved.reason == "Resolved: no failure on all branches for 24h"


def test_failure_count_resolves_resolution_hours_after_the_last_failure_to_the_minute() -> None:
    monitors = count_monitor(window_hours=6, resolution_hours=24)
    last = NOW.replace(minute=5)
    two = [hour(last - HOUR, failures=1), hour(last, failures=1)]
    active = verdict(buckets=two, monitors=monitors, now=last + 10 * MINUTE)
    # The hour of the last failure is still inside the whole-hour window either way.
    held = verdict(
        buckets=two, monitors=monitors, previous=active.monitors, now=last + DAY - MINUTE
    )
    assert held.status is BROKEN
    resolved = verdict(
        buckets=two, monitors=monitors, previous=held.monitors, now=last + DAY + MINUTE
    )
    assert resolved.status is HEALTHY


# --- Status, severity and reasons -------------------------------------------------------------


def test_severity_orders_broken_over_flaky_over_healthy() -> None:
    assert BROKEN.severity > FLAKY.severity > HEALTHY.severity
    assert [status.value for status in TestStatus] == ["healthy", "flaky", "broken"]


def test_broken_beats_flaky_even_when_the_flaky_monitor_is_older() -> None:
    old_mix = mixed("pr", branch="feature/x", failed_at=NOW - 5 * DAY, passed_at=NOW - 4 * DAY)
    flag = ManualFlag("noisy", at=NOW - 6 * DAY)
    result = verdict(commits=[old_mix, *failing(3)], flag=flag, monitors=MonitorSettings())
    assert result.monitors[RETRY].active
    assert (result.status, result.reason) == (BROKEN, STREAK_REASON)


@pytest.mark.parametrize(
    ("flagged_at", "reason"),
    [
        (NOW - 2 * DAY, "Manually flagged as flaky: noisy"),
        (NOW - HOUR / 2, "Inconsistent results on the same commit (main)"),
    ],
)
def test_among_equally_severe_monitors_the_one_active_longest_explains_the_status(
    flagged_at: datetime, reason: str
) -> None:
    result = verdict(commits=[mixed(passed_at=NOW - DAY)], flag=ManualFlag("noisy", at=flagged_at))
    assert (result.status, result.reason) == (FLAKY, reason)


@pytest.mark.parametrize(
    ("given_reason", "reason"),
    [
        ("quarantine until #88 lands", "Manually flagged as flaky: quarantine until #88 lands"),
        ("", "Manually flagged as flaky"),
    ],
)
def test_a_manual_flag_makes_a_test_flaky_with_its_reason(given_reason: str, reason: str) -> None:
    result = verdict(flag=ManualFlag(given_reason, at=NOW - DAY), monitors=NONE_ENABLED)
    assert (result.status, result.reason) == (FLAKY, reason)
    assert result.monitors["manual"].since == NOW - DAY


def test_a_test_no_monitor_flagged_is_healthy() -> None:
    result = verdict(commits=[passing()], monitors=MonitorSettings())
    assert (result.status, result.reason) == (HEALTHY, "No monitor has flagged this test")
    assert not any(state.active for state in result.monitors.values())


def test_a_recovered_test_says_why_once_then_reads_as_never_flagged() -> None:
    active = verdict(commits=[mixed(passed_at=NOW - 2 * DAY)], now=NOW - DAY)
    resolved = verdict(commits=[], previous=active.monitors)
    assert resolved.reason == "Resolved: no inconsistent results on the same commit for 7 days"
    later = verdict(commits=[], previous=resolved.monitors, now=NOW + HOUR)
    assert later.reason == NO_MONITOR_ACTIVE


# --- How far back the evidence must reach -----------------------------------------------------


@pytest.mark.parametrize(
    ("monitors", "hours"),
    [
        pytest.param(MonitorSettings(), 7 * 24, id="defaults"),
        pytest.param(
            MonitorSettings(pass_on_retry=PassOnRetry(recovery_days=15)), 15 * 24, id="retry-15d"
        ),
        pytest.param(
            MonitorSettings(pass_on_retry=PassOnRetry(recovery_days=2)), 7 * 24, id="streak-week"
        ),
        pytest.param(
            MonitorSettings(pass_on_retry=PassOnRetry(recovery_days=2), failing_streak=None),
            48,
            id="retry-2d-only",
        ),
        pytest.param(
            MonitorSettings(
                pass_on_retry=PassOnRetry(enabled=False),
                failing_streak=FailingStreak(enabled=False),
            ),
            0,
            id="none",
        ),
    ],
)
def test_commit_hours_is_the_furthest_an_enabled_commit_monitor_looks(
    monitors: MonitorSettings, hours: int
) -> None:
    assert monitors.commit_hours == hours


def _rate(
    window_hours: int, *, stale_hours: int | None = None, enabled: bool = True
) -> FailureRate:
    return FailureRate("r", FLAKY, 0.3, window_hours, 1, stale_hours=stale_hours, enabled=enabled)


@pytest.mark.parametrize(
    ("monitors", "hours"),
    [
        pytest.param(MonitorSettings(), 0, id="defaults"),
        pytest.param(MonitorSettings(failure_rates=(_rate(24),)), 24, id="rate-window"),
        pytest.param(
            MonitorSettings(failure_rates=(_rate(24, stale_hours=48),)), 48, id="rate-stale"
        ),
        pytest.param(
            MonitorSettings(failure_counts=(FailureCount("c", BROKEN, 1, 6, 72),)),
            72,
            id="count-resolution",
        ),
        pytest.param(
            MonitorSettings(
                failure_rates=(_rate(500, enabled=False), _rate(12)),
                failure_counts=(FailureCount("c", BROKEN, 1, 6, 8, enabled=False),),
            ),
            12,
            id="disabled-ignored",
        ),
    ],
)
def test_bucket_hours_is_the_furthest_an_enabled_window_monitor_looks(
    monitors: MonitorSettings, hours: int
) -> None:
    assert monitors.bucket_hours == hours


# --- Properties -------------------------------------------------------------------------------

PROPERTY_MONITORS = MonitorSettings(
    failure_rates=(
        FailureRate(
            "flaky on main", FLAKY, 0.3, 24, 5, resolution=0.1, stale_hours=12, branches=("main",)
        ),
        FailureRate("broken anywhere", BROKEN, 0.9, 6, 3),
    ),
    failure_counts=(FailureCount("failing", FLAKY, 2, 6, 48, branches=("main", "master")),),
)
PROPERTY_KEYS = (
    RETRY,
    STREAK,
    "failure_rate:flaky on main",
    "failure_rate:broken anywhere",
    "failure_count:failing",
    "manual",
)
BRANCHES = ("main", "master", "feature/x", "keepgreen-merge/main/1")


def _evidence(
    commit_cells: list[tuple[str, int | None, tuple[int, int], int, int]],
    bucket_cells: list[tuple[int, str, tuple[int, int]]],
    flag: ManualFlag | None,
) -> Evidence:
    commits = [
        commit(
            f"c{i}",
            branch=branch,
            pr=pr,
            passes=passes,
            failures=failures,
            # Even minutes for passes and odd ones for failures, each unique: rollups are
            # stamped when an upload is ingested, so no two commits of a test share an instant.
            passed_at=NOW - timedelta(minutes=2 * pass_minute),
            failed_at=NOW - timedelta(minutes=2 * fail_minute + 1),
        )
        for i, (branch, pr, (passes, failures), pass_minute, fail_minute) in enumerate(commit_cells)
    ]
    buckets = [
        hour(NOW - hours_back * HOUR, branch=branch, runs=runs, failures=failures)
        for hours_back, branch, (runs, failures) in bucket_cells
    ]
    return Evidence(buckets=buckets, commits=commits, manual_flag=flag)


HALF_MINUTES_BACK = 5 * 24 * 60  # commits of the last ten days
EVIDENCE = st.builds(
    _evidence,
    st.lists(
        st.tuples(
            st.sampled_from(BRANCHES),
            st.sampled_from([None, 12]),
            st.sampled_from([(p, f) for p in range(3) for f in range(3) if p or f]),
            st.integers(0, HALF_MINUTES_BACK),
            st.integers(0, HALF_MINUTES_BACK),
        ),
        unique_by=(lambda cell: cell[3], lambda cell: cell[4]),
        max_size=8,
    ),
    st.lists(
        st.tuples(
            st.integers(0, 72),
            st.sampled_from(BRANCHES),
            st.sampled_from([(r, f) for r in range(1, 6) for f in range(r + 1)]),
        ),
        unique_by=lambda cell: (cell[0], cell[1]),
        max_size=12,
    ),
    st.none()
    | st.builds(
        ManualFlag,
        st.sampled_from(["", "noisy"]),
        st.integers(0, 500).map(lambda hours: NOW - hours * HOUR),
    ),
)


def _stored(active: bool, hours_ago: int, classification: TestStatus) -> MonitorState:
    since = NOW - hours_ago * HOUR if active else None
    return MonitorState(active, since, "earlier", classification)


# What an earlier evaluation may have stored, for any subset of the monitors.
PREVIOUS = st.fixed_dictionaries(
    {},
    optional={
        key: st.builds(
            _stored, st.booleans(), st.integers(0, 500), st.sampled_from([FLAKY, BROKEN])
        )
        for key in PROPERTY_KEYS
    },
)


@settings(max_examples=200, deadline=None)
@given(evidence=EVIDENCE, previous=PREVIOUS, data=st.data())
def test_evaluate_is_deterministic_and_ignores_the_order_of_its_evidence(
    evidence: Evidence, previous: dict[str, MonitorState], data: st.DataObject
) -> None:
    shuffled = replace(
        evidence,
        buckets=data.draw(st.permutations(evidence.buckets)),
        commits=data.draw(st.permutations(evidence.commits)),
    )
    first = evaluate(PROPERTY_MONITORS, evidence, previous, now=NOW)
    assert evaluate(PROPERTY_MONITORS, evidence, previous, now=NOW) == first
    assert evaluate(PROPERTY_MONITORS, shuffled, previous, now=NOW) == first


@settings(max_examples=200, deadline=None)
@given(evidence=EVIDENCE, previous=PREVIOUS)
def test_the_status_is_the_most_severe_active_monitor_and_healthy_iff_none_is_active(
    evidence: Evidence, previous: dict[str, MonitorState]
) -> None:
    result = evaluate(PROPERTY_MONITORS, evidence, previous, now=NOW)
    active = [state for state in result.monitors.values() if state.active]
    assert (result.status is HEALTHY) == (not active)
    if active:
        assert result.status is max((s.classification for s in active), key=lambda c: c.severity)
        assert result.reason in {state.reason for state in active}


@settings(max_examples=200, deadline=None)
@given(
    evidence=EVIDENCE,
    previous=PREVIOUS,
    minutes_back=st.integers(0, 2 * HALF_MINUTES_BACK),
)
def test_a_passing_commit_on_main_never_makes_a_test_broken(
    evidence: Evidence, previous: dict[str, MonitorState], minutes_back: int
) -> None:
    # Commits only: a passing run added to the buckets may complete a rate monitor's minimum
    # sample and so rightly activate it.
    before = evaluate(PROPERTY_MONITORS, evidence, previous, now=NOW)
    fixed_at = NOW - timedelta(minutes=minutes_back)
    taken = {c.first_pass_at for c in evidence.commits} | {
        c.first_failure_at for c in evidence.commits
    }
    assume(before.status is not BROKEN and fixed_at not in taken)
    with_pass = replace(evidence, commits=[*evidence.commits, passing("fix", at=fixed_at)])
    assert evaluate(PROPERTY_MONITORS, with_pass, previous, now=NOW).status is not BROKEN


@settings(max_examples=200, deadline=None)
@given(evidence=EVIDENCE, previous=PREVIOUS)
def test_buckets_older_than_bucket_hours_never_change_the_verdict(
    evidence: Evidence, previous: dict[str, MonitorState]
) -> None:
    # The detector loads buckets from an hour before `bucket_hours` (app/flaky/detection.py).
    since = NOW - (PROPERTY_MONITORS.bucket_hours + 1) * HOUR
    loaded = replace(evidence, buckets=[b for b in evidence.buckets if b.hour >= since])
    assert evaluate(PROPERTY_MONITORS, loaded, previous, now=NOW) == evaluate(
        PROPERTY_MONITORS, evidence, previous, now=NOW
    )
