"""Two PRs that edit the same line: the first merges, the second cannot be built on it."""

from __future__ import annotations

import pytest

from tests.support.scenario import Scenario


@pytest.mark.parametrize("concurrency", [1, 2])
def test_second_of_two_conflicting_prs_fails_with_merge_conflict(
    scenario: Scenario, concurrency: int
) -> None:
    """PRs 1 and 2 both rewrite README.md's only line; each merges cleanly onto main alone, so
    both are admitted. PR 1 merges; PR 2's test commit (on top of PR 1, or on main once PR 1
    landed) cannot be built, and PR 2 fails with merge_conflict. Main holds PR 1's line.
    """
    scenario.create_queue(concurrency=concurrency)
    scenario.pr(1, {"README.md": "hello from one\n"}, title="One")
    scenario.pr(2, {"README.md": "hello from two\n"}, title="Two")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("failed", "merge_conflict"),
    }
    assert scenario.main_log() == ["One (#1)", "initial commit"]
    assert scenario.repo.files("main") == {"README.md": "hello from one"}
    assert scenario.test_branches() == []
