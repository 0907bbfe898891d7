"""Direct merge: an up-to-date PR with green checks merges without a test run."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_up_to_date_green_pr_merges_directly_and_a_stale_one_is_queued(scenario: Scenario) -> None:
    """directMergeMode "always": PR 1 is based on main's tip and its own `ci` status is success,
    so it merges at once without any test run or test branch (merged_directly). PR 2 is based
    on the initial commit, which is no longer main's tip: though its own checks are green it
    goes through the queue, is tested on main and merges (merged_by_queue).
    """
    scenario.create_queue(directMergeMode="always")
    scenario.work()  # the queue has seen main's tip
    initial = scenario.repo.tip("main")
    head1 = scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.set_status(head1, "success")
    scenario.submit(1)
    scenario.work()

    assert scenario.final() == {1: ("merged", "merged_directly")}
    assert scenario.all_runs() == []
    assert scenario.test_branches() == []
    assert scenario.main_log() == ["Add a (#1)", "initial commit"]
    assert scenario.repo.tree("main") == scenario.repo.tree(head1)

    head2 = scenario.pr(2, {"b.txt": "b\n"}, title="Add b", base=initial)
    scenario.set_status(head2, "success")
    scenario.submit(2)
    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_directly"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add b (#2)", "Add a (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "a.txt", "b.txt"}
    assert scenario.started == [((), (2,))]


def test_direct_merge_works_before_the_worker_first_reads_main(
    scenario: Scenario,
) -> None:
    """The same up-to-date, green PR 1 submitted right after the queue is created, before any
    worker pass has read main's tip: it should still merge directly (it is up to date with
    main, the queue is empty and its checks are green), without a test run. (Regression: the
    first sight of the tip used to clear what the code host had said about PR heads.)
    """
    scenario.create_queue(directMergeMode="always")
    head1 = scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.set_status(head1, "success")
    scenario.submit(1)
    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_directly")}
    assert scenario.main_log() == ["Add a (#1)", "initial commit"]
    assert scenario.all_runs() == []
