"""A PR that changes while its landing is under way: the landing's result decides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.scenario import Scenario


def during_landing(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]
) -> None:
    """Run `action` (an API call, a push) just before the worker carries out a landing."""
    worker = scenario.container.worker
    host = worker._host
    land = host.land
    done: list[bool] = []

    def land_after_action(repo: Any, landing: Any) -> Any:
        if not done:
            done.append(True)
            action()
        return land(repo, landing)

    monkeypatch.setattr(host, "land", land_after_action)


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
    host = scenario.container.worker._host
    heads = host.pull_request_heads
    done: list[bool] = []

    def heads_after_action(repo: Any, numbers: Any, *, fresh: bool = False) -> Any:
        if fresh and not done:
            done.append(True)
            action()
        return heads(repo, numbers, fresh=fresh)

    monkeypatch.setattr(host, "pull_request_heads", heads_after_action)


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
