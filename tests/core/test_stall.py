"""A queue's stall: whether, since when, and what it waits on (plain data, no database)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from keepgreen.core.enums import (
    CommitState,
    IncidentKind,
    Mergeability,
    PrState,
    QueueState,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import (
    CommitStatus,
    Incident,
    Queue,
    QueueConfig,
    QueueEntry,
    QueueStats,
    TestRun,
)
from keepgreen.core.stall import (
    NO_REQUIRED_CHECK,
    PAUSED,
    Stall,
    StallFacts,
    assess,
    stalled_since,
)
from tests.support.builders import (
    QUEUE_ID,
    REPOSITORY_ID,
    T0,
    make_entry,
    make_queue,
    make_readiness,
    make_run,
)

HOUR = timedelta(hours=1)
TIP = "f" * 40
RUN = TestRunId("00000000-0000-0000-0000-0000000000r1")


def queue(**overrides: object) -> Queue:
    """A running queue with a 60-minute stall report, its branch read, that last progressed
    at T0.
    """
    fields: dict[str, object] = {
        "target_sha": TIP,
        "config": QueueConfig(stall_minutes=60),
        "stats": QueueStats(last_progress_at=T0),
    }
    return make_queue(**{**fields, **overrides})


def status(context: str, state: CommitState, *, at: datetime = T0) -> CommitStatus:
    return CommitStatus(REPOSITORY_ID, "ab" * 20, context, state, None, None, at)


def incident(message: str, *, pr_number: int | None = None) -> Incident:
    return Incident(
        id=1,
        queue_id=QUEUE_ID,
        kind=IncidentKind.UNREACHABLE,
        message=message,
        started_at=T0,
        last_failure_at=T0,
        failures=3,
        pr_number=pr_number,
    )


def pr_testing(number: int) -> tuple[QueueEntry, TestRun]:
    """PR `number` testing in run RUN (started 09:03), which requires ci/build."""
    entry = make_entry(number=number, state=PrState.TESTING)
    run = make_run(
        id=RUN,
        tested_prs=(entry.id,),
        required_statuses=("ci/build",),
        started_at=T0 + timedelta(minutes=3),
    )
    return entry, run


# -- whether and since when -----------------------------------------------------------------------


def test_a_queue_that_moved_on_within_stall_minutes_is_not_stalled() -> None:
    entries = (make_entry(number=1),)

    assert stalled_since(queue(), entries, now=T0 + timedelta(minutes=59)) is None
    assert stalled_since(queue(), entries, now=T0 + HOUR) == T0


def test_the_clock_starts_at_the_last_progress() -> None:
    progressed = queue(stats=QueueStats(last_progress_at=T0 + HOUR))
    entries = (make_entry(number=1),)

    assert stalled_since(progressed, entries, now=T0 + HOUR * 1.5) is None
    assert stalled_since(progressed, entries, now=T0 + HOUR * 2) == T0 + HOUR


def test_an_empty_queue_that_just_got_a_pr_is_not_stalled() -> None:
    """The queue last progressed yesterday; PR 1 came a minute ago: its clock starts then."""
    arrived = T0 + timedelta(days=1)
    entries = (make_entry(number=1, submitted_at=arrived),)

    assert stalled_since(queue(), entries, now=arrived + timedelta(minutes=1)) is None
    assert stalled_since(queue(), entries, now=arrived + HOUR) == arrived


def test_a_queue_that_never_progressed_starts_its_clock_with_its_oldest_pr() -> None:
    fresh = queue(stats=QueueStats())
    entries = (
        make_entry(number=1, submitted_at=T0 + timedelta(minutes=5)),
        make_entry(number=2, submitted_at=T0 + timedelta(minutes=20)),
    )

    assert stalled_since(fresh, entries, now=T0 + HOUR * 2) == T0 + timedelta(minutes=5)


def test_an_empty_queue_is_not_stalled() -> None:
    assert stalled_since(queue(), (), now=T0 + HOUR * 5) is None
    done = make_entry(number=1, state=PrState.MERGED, is_submitted=False)
    assert stalled_since(queue(), (done,), now=T0 + HOUR * 5) is None


def test_stall_minutes_zero_turns_the_report_off() -> None:
    off = queue(config=QueueConfig(stall_minutes=0))
    assert stalled_since(off, (make_entry(number=1),), now=T0 + HOUR * 24) is None


def test_a_change_by_update_queue_starts_the_clock_again() -> None:
    """Resumed an hour after it last progressed: not stalled at once."""
    resumed = queue(updated_at=T0 + HOUR)
    entries = (make_entry(number=1),)

    assert stalled_since(resumed, entries, now=T0 + HOUR + timedelta(minutes=30)) is None
    assert stalled_since(resumed, entries, now=T0 + HOUR * 2) == T0 + HOUR


def test_a_paused_queue_is_not_stalled_and_says_it_is_paused() -> None:
    paused = queue(state=QueueState.PAUSED)
    facts = StallFacts(paused, (make_entry(number=1),), required=("ci",))

    assert assess(facts, now=T0 + HOUR * 5) == Stall(None, PAUSED)


def test_a_paused_queue_holding_only_not_ready_prs_says_it_is_paused() -> None:
    paused = queue(state=QueueState.PAUSED)
    waiting = make_entry(number=1, state=PrState.NOT_READY)

    assert assess(StallFacts(paused, (waiting,)), now=T0 + HOUR * 5) == Stall(None, PAUSED)


def test_an_empty_paused_queue_waits_on_nothing() -> None:
    paused = queue(state=QueueState.PAUSED)
    assert assess(StallFacts(paused, ()), now=T0 + HOUR * 5) == Stall()


def test_a_draining_queue_stalls_on_admitted_prs_but_not_on_not_ready_ones() -> None:
    draining = queue(state=QueueState.DRAINING)
    not_ready = make_entry(number=1, state=PrState.NOT_READY)
    later = T0 + HOUR * 2

    assert stalled_since(draining, (not_ready,), now=later) is None
    assert stalled_since(draining, (not_ready, make_entry(number=2)), now=later) == T0
    assert stalled_since(queue(), (not_ready,), now=later) == T0  # a running queue counts it


def test_seconds_of_a_stall() -> None:
    assert Stall(T0, "x").seconds(T0 + HOUR) == 3600.0
    assert Stall().seconds(T0 + HOUR) == 0.0


# -- what it waits on -----------------------------------------------------------------------------


def test_a_run_whose_required_check_never_reported() -> None:
    entry, run = pr_testing(3)
    facts = StallFacts(queue(), (entry,), runs=(run,), required=("ci/build",))

    stall = assess(facts, now=T0 + HOUR * 2)

    assert stall.since == T0
    assert stall.waiting_on == (
        f"PR #3 is testing in run {RUN} since 09:03 UTC, waiting on ci/build, "
        "which has not reported"
    )


def test_a_run_whose_checks_are_pending_or_silent() -> None:
    entry, run = pr_testing(3)
    run = replace(run, required_statuses=("ci/build", "lint", "docs"))
    pending = status("lint", CommitState.PENDING, at=T0 + timedelta(minutes=10))
    passed = status("docs", CommitState.SUCCESS)
    facts = StallFacts(
        queue(),
        (entry,),
        runs=(run,),
        statuses={run.sha or "": {"lint": pending, "docs": passed}},
        required=("ci/build",),
    )

    assert assess(facts, now=T0 + HOUR * 2).waiting_on == (
        f"PR #3 is testing in run {RUN} since 09:03 UTC, waiting on ci/build, which has not "
        "reported; and on lint, pending since 09:10 UTC"
    )


def test_a_stall_over_midnight_names_the_date() -> None:
    entry, run = pr_testing(3)
    facts = StallFacts(queue(), (entry,), runs=(run,), required=("ci/build",))

    waiting = assess(facts, now=T0 + timedelta(days=1)).waiting_on

    assert waiting is not None
    assert f"run {RUN} since 2026-11-02 09:03 UTC" in waiting


def test_a_batch_under_test_and_a_run_whose_commit_is_not_built() -> None:
    one, two = (
        make_entry(number=1, state=PrState.TESTING),
        make_entry(number=2, state=PrState.TESTING),
    )
    run = make_run(id=RUN, tested_prs=(one.id, two.id), sha=None, started_at=T0)
    facts = StallFacts(queue(), (one, two), runs=(run,), required=("ci",))

    assert assess(facts, now=T0 + HOUR).waiting_on == (
        f"PRs #1, #2 are testing in run {RUN} since 09:00 UTC, waiting for its test commit to "
        "be built"
    )


def test_a_failed_pr_waits_on_the_run_behind_it() -> None:
    failed = make_entry(number=1, state=PrState.PENDING_FAILURE)
    behind = make_entry(number=2, state=PrState.TESTING)
    own = make_run(tested_prs=(failed.id,), status=TestRunStatus.FAILED)
    successor = make_run(id=RUN, tested_prs=(behind.id,), dependent_prs=(failed.id,), started_at=T0)
    facts = StallFacts(queue(), (failed, behind), runs=(own, successor), required=("ci",))

    assert assess(facts, now=T0 + HOUR).waiting_on == (
        f"PR #1 failed its tests and waits on the run behind it: PR #2 is testing in run {RUN} "
        "since 09:00 UTC, waiting on ci, which has not reported"
    )


def test_a_bisection_run_waiting_for_a_slot() -> None:
    entry = make_entry(number=4, state=PrState.TESTING)
    queued = make_run(
        tested_prs=(entry.id,), kind=TestRunKind.BISECTION, status=TestRunStatus.QUEUED
    )
    facts = StallFacts(queue(), (entry,), runs=(queued,), required=("ci",))

    assert assess(facts, now=T0 + HOUR).waiting_on == (
        "PR #4 waits for a bisection slot (bisectionConcurrency 1)"
    )


def test_a_pr_not_ready_because_github_does_not_call_it_mergeable() -> None:
    entry = make_entry(
        number=1,
        state=PrState.NOT_READY,
        readiness=make_readiness(mergeability=Mergeability.NOT_MERGEABLE),
    )
    facts = StallFacts(queue(), (entry,), required=("ci",), host="GitHub")

    assert assess(facts, now=T0 + HOUR).waiting_on == (
        "PR #1 is not ready: GitHub does not call it mergeable"
    )


def test_a_pr_not_ready_on_a_plain_git_server() -> None:
    conflicting = make_entry(
        number=1,
        state=PrState.NOT_READY,
        readiness=make_readiness(mergeability=Mergeability.NOT_MERGEABLE),
    )
    unknown = replace(conflicting, readiness=make_readiness(mergeability=Mergeability.UNSPECIFIED))
    no_targets = replace(
        conflicting,
        readiness=make_readiness(requires_impacted_targets=True, has_impacted_targets=False),
    )
    now = T0 + HOUR

    def said(entry: QueueEntry) -> str | None:
        return assess(StallFacts(queue(), (entry,), required=("ci",)), now=now).waiting_on

    assert said(conflicting) == "PR #1 is not ready: it does not merge cleanly onto main"
    assert said(unknown) == (
        "PR #1 is not ready: whether it merges cleanly onto main is not known yet"
    )
    assert said(no_targets) == (
        "PR #1 is not ready: its impacted targets were not uploaded (the queue runs in "
        "parallel mode)"
    )


def test_an_open_git_server_incident_comes_first() -> None:
    entry, run = pr_testing(3)
    facts = StallFacts(
        queue(),
        (entry,),
        runs=(run,),
        required=("ci/build",),
        incidents=(incident("the git server is unreachable"),),
    )

    assert assess(facts, now=T0 + HOUR) == Stall(T0, "the git server is unreachable")
    # Before the stall, the incident is what it waits on all the same (as getQueue said).
    assert assess(facts, now=T0 + timedelta(minutes=5)) == Stall(
        None, "the git server is unreachable"
    )


def test_an_ended_incident_or_one_of_a_pr_is_not_the_queues() -> None:
    entry, run = pr_testing(3)
    ended = replace(incident("gone"), ended_at=T0)
    of_a_pr = incident("refused", pr_number=9)
    facts = StallFacts(
        queue(), (entry,), runs=(run,), required=("ci/build",), incidents=(ended, of_a_pr)
    )

    waiting = assess(facts, now=T0 + HOUR).waiting_on
    assert waiting is not None
    assert waiting.startswith("PR #3 is testing")


def test_no_required_status_check_is_configured() -> None:
    facts = StallFacts(queue(), (make_entry(number=1),), required=())

    assert assess(facts, now=T0 + HOUR).waiting_on == NO_REQUIRED_CHECK


def test_a_batch_is_forming() -> None:
    batching = queue(
        config=QueueConfig(
            stall_minutes=60, batch=True, batching_min_size=4, batching_max_wait_time_minutes=90
        )
    )
    entries = (
        make_entry(number=1, state_changed_at=T0),
        make_entry(number=2, state_changed_at=T0 + timedelta(minutes=5)),
    )
    facts = StallFacts(batching, entries, required=("ci",))

    assert assess(facts, now=T0 + HOUR).waiting_on == (
        "a batch is forming: 2 of 4 PRs, tested by 10:30 UTC at the latest"
    )


def test_landing_a_pr() -> None:
    passed = make_entry(number=2, state=PrState.TESTS_PASSED)
    facts = StallFacts(queue(), (passed,), required=("ci",), landing=(2,))
    refused = replace(facts, incidents=(incident("pre-receive hook declined", pr_number=2),))

    assert assess(facts, now=T0 + HOUR).waiting_on == "landing PR #2"
    assert assess(refused, now=T0 + HOUR).waiting_on == (
        "landing PR #2, which the git server refused: pre-receive hook declined"
    )


def test_the_front_pr_is_the_one_named() -> None:
    """PR 2 went ahead by priority and is testing; PR 1 waits behind it."""
    ahead = make_entry(number=2, state=PrState.TESTING, priority=0)
    behind = make_entry(number=1)
    run = make_run(id=RUN, tested_prs=(ahead.id,), started_at=T0)
    facts = StallFacts(queue(), (behind, ahead), runs=(run,), required=("ci",))

    waiting = assess(facts, now=T0 + HOUR).waiting_on
    assert waiting is not None
    assert waiting.startswith(f"PR #2 is testing in run {RUN}")


def test_a_pending_pr_with_nothing_started() -> None:
    facts = StallFacts(queue(), (make_entry(number=5),), required=("ci",))
    unread = replace(facts, queue=queue(target_sha=None))

    assert assess(facts, now=T0 + HOUR).waiting_on == (
        "PR #5 is pending and no test run has started for it"
    )
    assert assess(unread, now=T0 + HOUR).waiting_on == (
        "the queue has not read its branch main yet"
    )
