"""Merge methods: whatever the method, the tree that lands is the tree that was tested."""

from __future__ import annotations

import pytest

from keepgreen.core.model import TestRun
from tests.support.scenario import Scenario


def open_two_prs(scenario: Scenario) -> dict[int, list[str]]:
    """PR 1 has two commits by two authors, PR 2 one; the commits of each PR, oldest first."""
    first = scenario.pr(1, {"one.txt": "1\n"}, title="One, part 1", author="Ann Author")
    second = scenario.repo.add_to_pr(1, {"one.txt": "1\n1b\n"}, "One, part 2", author="Bob Author")
    only = scenario.pr(2, {"two.txt": "2\n"}, title="Two", author="Cid Author")
    return {1: [first, second], 2: [only]}


def verified_tree(scenario: Scenario, number: int) -> str:
    """The tree PR `number`'s step of the run that verified it holds: what must land."""
    entry = scenario.entry(number)
    assert entry.verified_by_test_run is not None
    run: TestRun = scenario.run(entry.verified_by_test_run)
    return next(link.tree for link in run.chain if link.number == number)


def run_queue(scenario: Scenario, method: str) -> dict[int, list[str]]:
    scenario.create_queue(concurrency=2, mergeMethod=method)
    commits = open_two_prs(scenario)
    scenario.submit(1)
    scenario.submit(2)
    scenario.settle()
    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_files() == {"README.md", "one.txt", "two.txt"}
    assert scenario.repo.files("main")["one.txt"] == "1\n1b"
    return commits


def test_squash_lands_one_commit_per_pr_with_the_verified_tree(scenario: Scenario) -> None:
    """mergeMethod squash: each PR lands as one commit titled "<PR title> (#N)", authored by
    the author of the PR's head, whose tree is the tree its test run built for it.
    """
    commits = run_queue(scenario, "squash")

    landed = scenario.main_commits()
    assert scenario.main_log() == ["Two (#2)", "One, part 2 (#1)", "initial commit"]
    assert scenario.repo.tree(landed[1]) == verified_tree(scenario, 1)
    assert scenario.repo.tree(landed[0]) == verified_tree(scenario, 2)
    assert scenario.repo.parents(landed[0]) == [landed[1]]
    assert scenario.repo.parents(landed[1]) == [landed[2]]
    assert scenario.repo.log("-2", "main", fmt="%an") == ["Cid Author", "Bob Author"]
    assert scenario.repo.log("-2", "main", fmt="%cn") == ["keepgreen", "keepgreen"]
    assert commits[1][0] not in scenario.repo.log("main", fmt="%H")


def test_merge_commit_lands_merges_with_the_pr_head_as_second_parent(scenario: Scenario) -> None:
    """mergeMethod merge_commit: each PR lands as a merge commit whose first parent is main's
    previous tip and whose second parent is the PR's head, so the PR's own commits are in
    main's history; each merge's tree is the tree tested for that PR.
    """
    commits = run_queue(scenario, "merge_commit")

    landed = scenario.main_commits()
    assert len(landed) == 3
    assert scenario.repo.parents(landed[1]) == [landed[2], commits[1][1]]
    assert scenario.repo.parents(landed[0]) == [landed[1], commits[2][0]]
    assert scenario.repo.tree(landed[1]) == verified_tree(scenario, 1)
    assert scenario.repo.tree(landed[0]) == verified_tree(scenario, 2)
    everything = scenario.repo.log("main", fmt="%H")
    assert set(commits[1]) | set(commits[2]) <= set(everything)
    assert scenario.main_log()[-1] == "initial commit"


def test_rebase_replays_the_pr_commits_with_their_authors(scenario: Scenario) -> None:
    """mergeMethod rebase: PR 1's two commits and PR 2's commit are replayed on main one by
    one, keeping their messages and authors (keepgreen commits them); main stays linear, and
    the last replayed commit of each PR holds the tree tested for it.
    """
    commits = run_queue(scenario, "rebase")

    landed = scenario.main_commits()
    assert scenario.main_log() == ["Two", "One, part 2", "One, part 1", "initial commit"]
    assert scenario.repo.log("-3", "main", fmt="%an") == ["Cid Author", "Bob Author", "Ann Author"]
    assert scenario.repo.log("-3", "main", fmt="%cn") == ["keepgreen"] * 3
    for sha in landed[:3]:
        assert len(scenario.repo.parents(sha)) == 1
    assert scenario.repo.tree(landed[1]) == verified_tree(scenario, 1)
    assert scenario.repo.tree(landed[0]) == verified_tree(scenario, 2)
    # Replayed, not the PR's own commits: those were based on the old main.
    assert set(landed).isdisjoint({*commits[1], *commits[2]})
    assert scenario.repo.files(landed[2]) == {"README.md": "hello", "one.txt": "1"}
    assert "Keepgreen-Land:" in scenario.repo.message(landed[1])


@pytest.mark.parametrize("method", ["squash", "merge_commit", "rebase"])
def test_main_after_each_landing_is_the_verified_tree(scenario: Scenario, method: str) -> None:
    """For every method, with concurrency 2 (PR 2 tested on top of PR 1 before PR 1 landed),
    each landing leaves main at exactly the tree CI tested for that PR.
    """
    run_queue(scenario, method)

    trees = [scenario.repo.tree(sha) for sha in scenario.main_commits()]
    assert trees[0] == verified_tree(scenario, 2)
    assert verified_tree(scenario, 1) in trees[1:]
    tested = {link.tree for run in scenario.answered_runs for link in run.chain}
    assert trees[0] in tested
