"""Switching modes with PRs in the queue: the queue drains, then runs in the new mode."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_switch_to_parallel_waits_for_the_queued_prs(scenario: Scenario) -> None:
    """PRs 1 and 2 are in a single-mode queue when it is switched to parallel mode: the queue
    enters switching_modes, refuses configuration changes, and admits no PR (PR 3, submitted
    meanwhile, stays not_ready). PRs 1 and 2 are tested and merge; then the queue is running
    in parallel mode, and PR 3 enters it once its impacted targets are uploaded, and merges.
    """
    scenario.create_queue()
    for number in (1, 2, 3):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
    scenario.submit(1)
    scenario.submit(2)
    scenario.work()

    config = scenario.update_queue(mode="parallel")
    assert (config["state"], config["mode"]) == ("switching_modes", "single")
    response = scenario.post("updateQueue", concurrency=3)
    assert response.status_code == 409, response.text
    scenario.submit(3)
    scenario.settle()

    queue = scenario.get_queue()
    assert (queue["state"], queue["mode"]) == ("running", "parallel")
    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
        3: ("not_ready", "submitted"),
    }

    scenario.targets(3, ["x"])
    scenario.settle()

    assert scenario.final()[3] == ("merged", "merged_by_queue")
    assert scenario.main_log() == ["Add 3 (#3)", "Add 2 (#2)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f2.txt", "f3.txt"}
