"""What a PR is waiting on, or why it left, in plain words (pure rendering), and the check run
that shows it on GitHub."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from keepgreen.app.explain import REASONS, Bisection, Check, Facts, reason_text, render
from keepgreen.app.github.feedback import check_view, comment_body, digest
from keepgreen.core.enums import (
    CommitState,
    Mergeability,
    PrState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import RepositoryId, TestRunId
from keepgreen.core.model import ChainLink, CommitStatus
from tests.support.builders import T0, entry_id, make_entry, make_run


def facts(**overrides: object) -> Facts:
    fields: dict[str, object] = {
        "entry": make_entry(),
        "position": 2,
        "queued": 3,
        "run": None,
        "statuses": {},
        "required": (),
        "merged_sha": None,
        "now": T0,
    }
    return Facts(**{**fields, **overrides})  # type: ignore[arg-type]


def status(
    context: str, state: CommitState, url: str | None = None, description: str | None = None
) -> CommitStatus:
    return CommitStatus(
        RepositoryId("r"), "ab" * 20, context, state, url, description, T0 + timedelta(minutes=3)
    )


def link(number: int) -> ChainLink:
    return ChainLink(number, f"{number:x}" * 40, "c" * 40, "d" * 40)


def test_queued_says_where() -> None:
    view = render(facts())
    assert (view.progress, view.title) == ("queued", "Queued: position 2 of 3")
    assert view.verdict is None


def test_testing_says_which_required_check_it_waits_on_since_when_and_links_the_ci() -> None:
    run = make_run(required_statuses=("ci/test", "ci/lint"), started_at=T0)
    view = render(
        facts(
            entry=make_entry(state=PrState.TESTING),
            run=run,
            required=run.required_statuses,
            statuses={"ci/test": status("ci/test", CommitState.PENDING, "https://ci/1")},
        )
    )
    assert view.progress == "in_progress"
    assert view.title == f"Testing in run {run.id}"
    assert "waiting on `ci/test`: running since" in view.summary
    assert "waiting on `ci/lint`: not reported since" in view.summary
    assert view.details_url == "https://ci/1"


def test_the_end_is_a_conclusion_with_the_reason_in_words() -> None:
    merged = render(facts(entry=make_entry(state=PrState.MERGED), merged_sha="9f" * 20))
    assert (merged.verdict, merged.title) == ("success", "Merged as 9f9f9f9f9f9f")
    bisected = make_run(kind=TestRunKind.BISECTION)
    failed = render(
        facts(
            entry=make_entry(state=PrState.FAILED, state_reason=StateReason.TESTS_FAILED),
            run=bisected,
        )
    )
    assert (failed.verdict, failed.title) == ("failure", "Failed: its tests failed")
    assert "Bisection of the batch found this PR" in failed.summary
    pushed = render(
        facts(entry=make_entry(state=PrState.CANCELLED, state_reason=StateReason.PUSHED_TO))
    )
    assert pushed.verdict == "cancelled"
    assert "pushed to" in pushed.title


def test_every_state_renders_and_the_digest_changes_with_what_is_shown() -> None:
    views = {state: render(facts(entry=make_entry(state=state))) for state in PrState}
    assert len({view.title for view in views.values()}) == len(PrState)
    first, second = check_view(render(facts(position=1))), check_view(render(facts(position=2)))
    assert digest(first, "a" * 40) != digest(second, "a" * 40)
    assert digest(first, "a" * 40) != digest(first, "b" * 40)  # a new head: a new check run
    assert comment_body(first, 7).startswith("**keepgreen** · #7: **Queued: position 1 of 3**")


def test_a_testing_pr_says_its_place_run_since_when_and_what_it_waits_on_in_one_line() -> None:
    run = make_run(required_statuses=("ci/build", "ci/lint"), started_at=T0 + timedelta(hours=3))
    view = render(
        facts(
            entry=make_entry(state=PrState.TESTING, state_reason=StateReason.TESTS_STARTED),
            position=3,
            queued=7,
            run=run,
            required=run.required_statuses,
            statuses={"ci/lint": status("ci/lint", CommitState.SUCCESS)},
            now=T0 + timedelta(hours=4),
        )
    )
    started = run.started_at
    assert started is not None
    assert view.summary.splitlines()[0] == (
        f"Position 3 of 7; testing in run {run.id} since {started:%H:%M} UTC, "
        "waiting on `ci/build`."
    )
    assert "- `ci/lint`: success" in view.summary
    assert view.reason_code == "tests_started"
    assert [(c.context, c.state) for c in view.evidence.checks] == [
        ("ci/build", None),
        ("ci/lint", CommitState.SUCCESS),
    ]
    assert view.evidence.failed_statuses == ()


def test_a_moment_of_another_day_is_shown_with_its_date() -> None:
    run = make_run(started_at=T0)
    view = render(
        facts(
            entry=make_entry(state=PrState.TESTING),
            run=run,
            required=run.required_statuses,
            now=T0 + timedelta(days=1),
        )
    )
    assert f"since {T0:%Y-%m-%d %H:%M} UTC" in view.summary.splitlines()[0]


def test_a_failed_run_gives_its_failed_statuses_with_their_links_as_evidence() -> None:
    run = make_run(status=TestRunStatus.FAILED, required_statuses=("ci", "lint", "docs"))
    statuses = {
        "ci": status("ci", CommitState.FAILURE, "https://ci/9", "2 tests failed"),
        "lint": status("lint", CommitState.SUCCESS),
    }
    view = render(
        facts(
            entry=make_entry(state=PrState.FAILED, state_reason=StateReason.TESTS_FAILED),
            run=run,
            required=run.required_statuses,
            statuses=statuses,
        )
    )
    assert view.reason_code == "tests_failed"
    assert view.evidence.test_run == run
    assert view.evidence.failed_statuses == (
        Check("ci", CommitState.FAILURE, "2 tests failed", "https://ci/9"),
    )
    assert "- `ci`: failure (2 tests failed) https://ci/9" in view.summary
    assert "- `docs`: never reported" in view.summary


def test_a_timed_out_run_gives_the_checks_that_never_passed_and_a_conflict_gives_none() -> None:
    timed_out = make_run(
        status=TestRunStatus.FAILED,
        failure_reason=StateReason.TEST_RUN_TIMEOUT,
        required_statuses=("ci", "lint"),
    )
    view = render(
        facts(
            entry=make_entry(state=PrState.FAILED, state_reason=StateReason.TEST_RUN_TIMEOUT),
            run=timed_out,
            required=timed_out.required_statuses,
            statuses={
                "ci": status("ci", CommitState.PENDING),
                "lint": status("lint", CommitState.SUCCESS),
            },
        )
    )
    assert [(c.context, c.state) for c in view.evidence.failed_statuses] == [
        ("ci", CommitState.PENDING)
    ]
    never_built = make_run(
        status=TestRunStatus.FAILED, failure_reason=StateReason.MERGE_CONFLICT, sha=None
    )
    conflict = render(
        facts(
            entry=make_entry(state=PrState.FAILED, state_reason=StateReason.MERGE_CONFLICT),
            run=never_built,
            required=never_built.required_statuses,
        )
    )
    assert conflict.evidence.failed_statuses == ()


def test_a_merged_pr_names_its_own_run_or_the_successor_that_cleared_it() -> None:
    own = make_run(
        status=TestRunStatus.SUCCEEDED, finished_at=T0 + timedelta(minutes=9), chain=(link(1),)
    )
    merged = make_entry(
        state=PrState.MERGED, state_reason=StateReason.MERGED_BY_QUEUE, verified_by_test_run=own.id
    )
    view = render(facts(entry=merged, run=own, passed_run=own))
    assert view.evidence.passed_run == own
    finished = own.finished_at
    assert finished is not None
    assert (
        f"Verified by run {own.id} (commit abababababab), which passed at {finished:%H:%M} UTC"
        in (view.summary)
    )
    successor = make_run(
        status=TestRunStatus.SUCCEEDED,
        tested_prs=(entry_id(2),),
        dependent_prs=(entry_id(1),),
        chain=(link(1), link(2)),
    )
    cleared = render(
        facts(
            entry=replace(merged, verified_by_test_run=successor.id),
            run=successor,
            passed_run=successor,
        )
    )
    assert f"Cleared by run {successor.id}" in cleared.summary
    assert "which tested it with #2 on top of it and passed" in cleared.summary
    direct = render(
        facts(entry=make_entry(state=PrState.MERGED, state_reason=StateReason.MERGED_DIRECTLY))
    )
    assert (direct.evidence.passed_run, direct.reason_code) == (None, "merged_directly")
    assert "Merged directly" in direct.summary


def test_a_bisected_batch_names_the_culprit_to_the_innocent_and_the_run_to_the_culprit() -> None:
    batch, alone = TestRunId("batch"), TestRunId("alone")
    innocent = render(
        facts(
            entry=make_entry(number=1, state=PrState.MERGED),
            bisection=Bisection(batch, None, (3,)),
        )
    )
    assert "Its batch (run batch) failed; bisection found #3 to break it." in innocent.summary
    assert innocent.evidence.bisection == Bisection(batch, None, (3,))
    culprit = render(
        facts(
            entry=make_entry(number=3, state=PrState.FAILED, state_reason=StateReason.TESTS_FAILED),
            run=make_run(id=alone, kind=TestRunKind.BISECTION, status=TestRunStatus.FAILED),
            bisection=Bisection(batch, alone, (3,)),
        )
    )
    assert "Its batch (run batch) failed; run alone tested it alone and failed." in (
        culprit.summary
    )
    waiting = render(
        facts(
            entry=make_entry(state=PrState.PENDING, state_reason=StateReason.BISECTING),
            bisection=Bisection(batch, None, ()),
        )
    )
    assert "bisection has not found the culprit yet" in waiting.summary


@pytest.mark.parametrize("reason", list(StateReason))
def test_every_reason_code_renders_in_every_state_with_its_stable_code(
    reason: StateReason,
) -> None:
    for state in PrState:
        view = render(facts(entry=make_entry(state=state, state_reason=reason)))
        assert view.reason_code == reason.value
        assert view.title


def test_a_reason_code_without_a_sentence_reads_as_its_words() -> None:
    assert reason_text("a_code_added_later") == "a code added later"
    assert reason_text(StateReason.TESTS_FAILED) == REASONS[StateReason.TESTS_FAILED]
    assert reason_text("tests_failed") == "its tests failed"


def test_the_readme_lists_every_reason_code_as_stable() -> None:
    """A new reason code is part of the API: the README's list of stable codes names it."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("**Reason codes are stable**") :]
    listed = set(re.findall(r"`([a-z_]+)`", section[: section.index("\n\n")]))
    assert listed == {reason.value for reason in StateReason}


@pytest.mark.parametrize(
    ("head_sha", "readiness", "summary"),
    [
        ("", {}, "Submitted: keepgreen is reading the pull request and whether it merges cleanly."),
        (
            "ab" * 20,
            {"mergeability": Mergeability.NOT_MERGEABLE},
            "Not yet: it does not merge cleanly onto `main`; merge or rebase it.",
        ),
        (
            "ab" * 20,
            {"mergeability": Mergeability.IN_PROGRESS},
            "Not yet: the code host has not said yet whether it merges cleanly.",
        ),
        (
            "ab" * 20,
            {"requires_impacted_targets": True, "has_impacted_targets": False},
            "Not yet: the impacted targets of its head abababababab are not uploaded yet.",
        ),
        ("ab" * 20, {}, "Not yet: submitted."),  # ready: the queue holds it (paused)
    ],
)
def test_a_pr_waiting_to_enter_says_what_it_waits_on(
    head_sha: str, readiness: dict[str, object], summary: str
) -> None:
    entry = make_entry(
        state=PrState.NOT_READY,
        state_reason=StateReason.SUBMITTED,
        head_sha=head_sha,
        readiness=replace(make_entry().readiness, **readiness),  # type: ignore[arg-type]
    )
    view = render(facts(entry=entry, position=None))
    assert (view.progress, view.title, view.summary) == (
        "queued",
        "Waiting to enter the queue",
        summary,
    )
    assert view.reason_code == "submitted"
