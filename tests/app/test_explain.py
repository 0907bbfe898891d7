"""What a PR is waiting on, or why it left, in plain words (pure rendering), and the check run
that shows it on GitHub."""

from __future__ import annotations

from datetime import timedelta

from keepgreen.app.explain import Facts, render
from keepgreen.app.github.feedback import check_view, comment_body, digest
from keepgreen.core.enums import CommitState, PrState, StateReason, TestRunKind
from keepgreen.core.ids import RepositoryId
from keepgreen.core.model import CommitStatus
from tests.support.builders import T0, make_entry, make_run


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


def status(context: str, state: CommitState, url: str | None = None) -> CommitStatus:
    return CommitStatus(
        RepositoryId("r"), "ab" * 20, context, state, url, None, T0 + timedelta(minutes=3)
    )


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
