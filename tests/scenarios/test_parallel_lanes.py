"""Parallel mode: PRs form lanes by impacted targets; "ALL" is a barrier that serialises."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.scenario import Scenario


def parallel_queue(scenario: Scenario, **config: Any) -> None:
    scenario.create_queue(concurrency=4, **config)
    assert scenario.update_queue(mode="parallel")["mode"] == "parallel"


def test_prs_wait_for_impacted_targets_then_disjoint_lanes_test_apart(scenario: Scenario) -> None:
    """In parallel mode a submitted PR stays not_ready until impacted targets are uploaded for
    its head. PR 1 touches target "a" and PR 2 target "b": once both have targets they are
    tested at the same time, each on main alone (neither run includes the other), and both
    merge; main holds both changes.
    """
    parallel_queue(scenario)
    scenario.pr(1, {"a/one.txt": "1\n"}, title="Change a")
    scenario.pr(2, {"b/two.txt": "2\n"}, title="Change b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.work()

    assert scenario.states() == {1: "not_ready", 2: "not_ready"}
    readiness = scenario.get_pr(1)["readiness"]
    assert readiness["requiresImpactedTargets"] is True
    assert readiness["hasImpactedTargets"] is False
    assert scenario.get_queue()["enqueuedPullRequests"] == []
    assert scenario.open_runs() == []

    scenario.targets(1, ["a"])
    scenario.targets(2, ["b"])
    scenario.work()

    assert scenario.states() == {1: "testing", 2: "testing"}
    assert scenario.get_pr(2)["readiness"]["hasImpactedTargets"] is True
    assert scenario.open_numbers() == [((), (1,)), ((), (2,))]
    details = scenario.testing_details(scenario.open_run_testing(2).id)
    assert details["dependentPrs"] == []
    assert details["impactedTargets"] == ["b"]

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Change b (#2)", "Change a (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "a/one.txt", "b/two.txt"}
    assert scenario.started == [((), (1,)), ((), (2,))]
    assert scenario.test_branches() == []


def test_an_all_pr_serialises_the_lanes(scenario: Scenario) -> None:
    """PRs 1 ("a") and 2 ("b") form two lanes; PR 3 impacts ALL, so it is tested on top of
    both; PR 4 ("b") comes after PR 3 and is tested on top of it (and of what PR 3 holds),
    although it shares no target with lane "a". All four merge.
    """
    parallel_queue(scenario)
    files = {1: "a/one.txt", 2: "b/two.txt", 3: "everything.txt", 4: "b/four.txt"}
    targets: dict[int, list[str] | str] = {1: ["a"], 2: ["b"], 3: "ALL", 4: ["b"]}
    for number in (1, 2, 3, 4):
        scenario.pr(number, {files[number]: f"{number}\n"}, title=f"Change {number}")
        response = scenario.post(
            "setImpactedTargets",
            pr={"number": number, "sha": scenario.repo.tip(f"refs/pull/{number}/head")},
            impactedTargets=targets[number],
        )
        assert response.status_code == 200, response.text
        scenario.submit(number)

    scenario.work()

    assert scenario.open_numbers() == [
        ((), (1,)),
        ((), (2,)),
        ((1, 2), (3,)),
        ((1, 2, 3), (4,)),
    ]
    details = scenario.testing_details(scenario.open_run_testing(4).id)
    assert 3 in details["dependentPrs"]

    scenario.settle()

    assert scenario.final() == dict.fromkeys((1, 2, 3, 4), ("merged", "merged_by_queue"))
    assert scenario.main_log() == [
        "Change 4 (#4)",
        "Change 3 (#3)",
        "Change 2 (#2)",
        "Change 1 (#1)",
        "initial commit",
    ]
    assert scenario.main_files() == {"README.md", *files.values()}


@pytest.mark.parametrize("method", ["squash", "merge_commit", "rebase"])
def test_a_later_lane_lands_first_and_the_earlier_one_lands_on_top(
    scenario: Scenario, method: str
) -> None:
    """Lanes "a" (PR 1) and "b" (PR 2) are tested apart on main. CI answers PR 2's run first,
    so PR 2 lands first; PR 1's run was built on the old main, and its tested change is merged
    onto main as it is now, keeping PR 2's. Main ends with both changes, PR 2 before PR 1.
    """
    parallel_queue(scenario, mergeMethod=method)
    scenario.pr(1, {"a/one.txt": "1\n"}, title="Change a")
    scenario.pr(2, {"b/two.txt": "2\n"}, title="Change b")
    for number, target in ((1, "a"), (2, "b")):
        scenario.targets(number, [target])
        scenario.submit(number)
    scenario.work()
    assert scenario.open_numbers() == [((), (1,)), ((), (2,))]

    second = scenario.open_run_testing(2)
    scenario.set_status(second.sha or "", "success")
    scenario.work()
    assert scenario.final()[2] == ("merged", "merged_by_queue")
    assert scenario.states()[1] == "testing"

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_files() == {"README.md", "a/one.txt", "b/two.txt"}
    first_landed = scenario.main_commits()[1]
    assert scenario.repo.tree(first_landed) == second.chain[-1].tree  # PR 2's tested tree
    expected = {
        "squash": ["Change a (#1)", "Change b (#2)", "initial commit"],
        "rebase": ["Change a", "Change b", "initial commit"],
        # PR 2's tested merge commit sat on main's tip and landed as it was.
        "merge_commit": [
            "Merge pull request #1: Change a",
            f"Merging {second.chain[-1].head_sha} into {second.branch}",
            "initial commit",
        ],
    }
    assert scenario.main_log() == expected[method]
    # PR 1 is not tested again after PR 2 landed: its lane did not change.
    assert scenario.started == [((), (1,))]
    assert scenario.test_branches() == []
