"""A PR that changes under the queue leaves it: a push cancels it, so does closing it."""

from __future__ import annotations

from keepgreen.core.enums import StateReason
from tests.support.scenario import Scenario


def test_push_and_close_cancel_queued_prs(scenario: Scenario) -> None:
    """Concurrency 4: PRs 1-4 are testing, each on top of the ones ahead. A commit is pushed
    to PR 2: it is cancelled (pushed_to) and the runs that held it restart without it. Then
    PR 3 is closed (its ref disappears): it is cancelled (pr_closed) and PR 4 restarts again.
    PRs 1 and 4 merge; neither the pushed commit nor PR 3's change reaches main.
    """
    scenario.create_queue(concurrency=4)
    for number in (1, 2, 3, 4):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    assert scenario.open_numbers() == [
        ((), (1,)),
        ((1,), (2,)),
        ((1, 2), (3,)),
        ((1, 2, 3), (4,)),
    ]

    scenario.push_to_pr(2, {"f2.txt": "2 again\n"}, "Rework 2")
    scenario.work()

    assert scenario.final()[2] == ("cancelled", "pushed_to")
    assert scenario.open_numbers() == [((), (1,)), ((1,), (3,)), ((1, 3), (4,))]

    scenario.close_pr(3)
    scenario.work()

    assert scenario.final()[3] == ("cancelled", "pr_closed")
    assert scenario.open_numbers() == [((), (1,)), ((1,), (4,))]

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("cancelled", "pushed_to"),
        3: ("cancelled", "pr_closed"),
        4: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 4 (#4)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f4.txt"}
    assert scenario.reasons(4).count(StateReason.PREDECESSOR_CHANGED) == 2
    assert scenario.test_branches() == []
    # The PR can come back with its new head: a new episode on the same entry.
    scenario.submit(2)
    scenario.settle()
    assert scenario.final()[2] == ("merged", "merged_by_queue")
    assert scenario.repo.files("main")["f2.txt"] == "2 again"
