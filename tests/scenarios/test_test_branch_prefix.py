"""A repository's test branch prefix: runs are pushed as `<prefix>/pr-<N>/<test run id>`, and a
prefix changed while a run is open leaves that run its own branch name, deleted when it ends.
"""

from __future__ import annotations

from keepgreen.app.admin import RepositoryChanges
from keepgreen.core.enums import TestRunStatus
from tests.support.scenario import Scenario
from tests.support.wire import REPO


def branches_under(scenario: Scenario, prefix: str) -> list[str]:
    out = scenario.repo.git("for-each-ref", "--format=%(refname:short)", f"refs/heads/{prefix}/")
    return out.split()


def test_a_prefix_changed_while_a_run_tests_orphans_no_branch(scenario: Scenario) -> None:
    """PR 1's run is built on `keepgreen-merge/pr-1/<run>`; the operator switches the prefix
    to `trunk-merge`; PR 2, submitted afterwards, tests on `trunk-merge/pr-2/<run>`. Both land,
    and both branches are deleted: PR 1's under the name it was built with.
    """
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.submit(1)
    scenario.wait_for(lambda: any(r.sha is not None for r in scenario.open_runs()))
    (first,) = scenario.open_runs()
    assert first.branch == f"keepgreen-merge/pr-1/{first.id}"
    assert branches_under(scenario, "keepgreen-merge") == [first.branch]

    scenario.container.admin.update_repository(
        REPO, RepositoryChanges(test_branch_prefix="trunk-merge")
    )
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(2)
    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue"), 2: ("merged", "merged_by_queue")}
    runs = scenario.all_runs()
    assert [run.status for run in runs] == [TestRunStatus.SUCCEEDED, TestRunStatus.SUCCEEDED]
    assert runs[0].branch == first.branch  # kept its name across the change
    assert runs[1].branch == f"trunk-merge/pr-2/{runs[1].id}"
    assert scenario.main_log() == ["Add b (#2)", "Add a (#1)", "initial commit"]
    scenario.wait_for(
        lambda: (
            not branches_under(scenario, "keepgreen-merge")
            and not branches_under(scenario, "trunk-merge")
        )
    )
