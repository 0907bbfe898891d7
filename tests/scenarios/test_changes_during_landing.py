"""A PR that changes while its landing is under way: the landing's result decides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.scenario import Scenario


def once_before(
    scenario: Scenario,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    action: Callable[[], object],
    *,
    when: Callable[..., bool] = lambda *_args, **_kwargs: True,
) -> None:
    """Run `action` (an API call, a push) once, just before the worker's first call of its
    code host's `method` that `when` accepts.
    """
    host = scenario.container.worker._host
    called = getattr(host, method)
    done: list[bool] = []

    def after_action(*args: Any, **kwargs: Any) -> Any:
        if not done and when(*args, **kwargs):
            done.append(True)
            action()
        return called(*args, **kwargs)

    monkeypatch.setattr(host, method, after_action)


def during_landing(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]
) -> None:
    """Run `action` just before the worker carries out a landing."""
    once_before(scenario, monkeypatch, "land", action)


def test_cancel_while_landing_leaves_the_pr_merged(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PR 1 passed and the worker is landing it when a user cancels it: the cancel comes too
    late, PR 1 lands and stays merged (a PR on main is never reported cancelled). PR 2 then
    merges on top of it.
    """
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    scenario.answer_ci()
    during_landing(scenario, monkeypatch, lambda: scenario.cancel(1))

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]


def test_push_while_landing_lands_the_tested_head(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PR 1 passed and is landing when a new commit is pushed to it: what lands is the head
    that was tested, PR 1 is merged, and the late commit is not on main.
    """
    scenario.create_queue()
    scenario.pr(1, {"f1.txt": "1\n"}, title="Add 1")
    scenario.submit(1)
    scenario.work()
    scenario.answer_ci()
    during_landing(
        scenario, monkeypatch, lambda: scenario.push_to_pr(1, {"late.txt": "x\n"}, "Late")
    )

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert scenario.main_log() == ["Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt"}


def before_landing(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]
) -> None:
    """Run `action` after the pass read the PRs and just before the worker, about to land
    one, reads it again from the server.
    """
    once_before(
        scenario,
        monkeypatch,
        "pull_request_heads",
        action,
        when=lambda *_args, fresh=False: fresh,
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda scenario: scenario.close_pr(1), "pr_closed"),
        (lambda scenario: scenario.push_to_pr(1, {"late.txt": "x\n"}, "Late"), "pushed_to"),
    ],
    ids=["closed", "pushed_to"],
)
def test_a_pr_changed_after_it_passed_is_not_landed(
    scenario: Scenario,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Scenario], object],
    reason: str,
) -> None:
    """PR 1 passed, and is closed (or pushed to) after the pass read it, before it lands: it
    leaves the queue as the next read would have had it leave, nothing of it is on main, and
    PR 2, tested on top of it, is tested again without it and merges.
    """
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    scenario.answer_ci()
    before_landing(scenario, monkeypatch, lambda: change(scenario))

    scenario.settle()

    assert scenario.final() == {1: ("cancelled", reason), 2: ("merged", "merged_by_queue")}
    assert scenario.main_log() == ["Add 2 (#2)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f2.txt"}
