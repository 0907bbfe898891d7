"""A failing batch is bisected down to the PR that broke it; the rest of the batch merges."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_batch_of_four_with_one_bad_pr_is_bisected_to_it(scenario: Scenario) -> None:
    """Batching with a target size of 4: PRs 1-4 are tested as one batch, which fails because
    PR 3 is bad. The batch is split in halves, 1+2 and 3+4 (tested on top of 1+2); 1+2 passes
    and merges, 3+4 fails and is split again; 3 fails alone and is removed, 4 is tested without
    it and merges. Main gets 1, 2 and 4, each as its own commit, and never PR 3's file.
    """
    scenario.create_queue(batch=True, batchingMinSize=4, bisectBesideQueue=False)
    for number in (1, 2, 3, 4):
        scenario.pr(
            number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}", bad=number == 3
        )
        scenario.submit(number)

    scenario.work()
    assert scenario.open_numbers() == [((), (1, 2, 3, 4))]
    run = scenario.open_runs()[0]
    assert run.branch == f"keepgreen-merge/pr-1/{run.id}"
    details = scenario.testing_details(run.id)
    assert [pr["prNumber"] for pr in details["testedPullRequests"]] == [1, 2, 3, 4]

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
        3: ("failed", "tests_failed"),
        4: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 4 (#4)", "Add 2 (#2)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f2.txt", "f4.txt"}
    assert "bisecting" in scenario.reasons(3)
    assert "bisecting" in scenario.reasons(1)
    assert scenario.started[0] == ((), (1, 2, 3, 4))
    assert ((), (1, 2)) in scenario.started
    assert any(tested == (3,) for _, tested in scenario.started)
    kinds = [run.kind.value for run in scenario.all_runs()]
    assert kinds[0] == "main"
    assert "bisection" in kinds
    assert scenario.test_branches() == []


def test_batch_with_two_bad_prs_loses_both_and_merges_the_rest(scenario: Scenario) -> None:
    """Batches of 4 with PRs 2 and 3 bad, bisection concurrency 2, and the redundant-test
    optimisation on: the batch fails; its first half 1+2 fails and the second half 3+4 on top
    of it is the very batch that failed, so it is not run again. Bisection finds PR 2; PRs 3
    and 4 go back to the queue as a new (smaller) batch once the batching wait is over, which
    fails and is bisected to PR 3. Only 1 and 4 merge.
    """
    scenario.create_queue(
        batch=True,
        batchingMinSize=4,
        bisectionConcurrency=2,
        optimizationMode="bisection_skip_redundant_tests",
        bisectBesideQueue=False,
    )
    for number in (1, 2, 3, 4):
        bad = number in (2, 3)
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}", bad=bad)
        scenario.submit(number)

    scenario.settle()
    for _ in range(4):  # leftovers wait for a batch to form again
        scenario.clock.advance(minutes=6)
        scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("failed", "tests_failed"),
        3: ("failed", "tests_failed"),
        4: ("merged", "merged_by_queue"),
    }
    assert "test_run_failed_by_optimization" in scenario.reasons(3)
    assert scenario.started[:4] == [((), (1, 2, 3, 4)), ((), (1, 2)), ((), (1,)), ((1,), (2,))]
    assert ((1, 2), (3, 4)) not in scenario.started  # the redundant run was skipped
    assert scenario.main_log() == ["Add 4 (#4)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f4.txt"}
    assert scenario.test_branches() == []


def test_batch_that_is_still_forming_starts_after_the_wait(scenario: Scenario) -> None:
    """Batches of 4 with a 5-minute wait: with only two PRs queued nothing starts; once five
    minutes pass the two are tested as one batch and both merge.
    """
    scenario.create_queue(batch=True, batchingMinSize=4, batchingMaxWaitTimeMinutes=5)
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.settle()
    assert scenario.states() == {1: "pending", 2: "pending"}
    assert scenario.all_runs() == []

    scenario.clock.advance(minutes=6)
    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.started == [((), (1, 2))]
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]


def test_a_failed_batch_is_isolated_beside_the_queue_while_the_prs_behind_it_merge(
    scenario: Scenario,
) -> None:
    """Batches of 2, two batches in flight, failed batches isolated beside the queue (the
    default). Batch 1+2 fails because PR 2 is bad; 3+4, tested on top of it, is tested again at
    once on main without it and merges, while 1 and 2 are each tested alone beside the queue.
    2 fails and leaves; 1 passes, rejoins the line behind 3+4 and, alone in the queue after
    the batching wait, is tested and merges after them.
    """
    scenario.create_queue(batch=True, batchingMinSize=2, concurrency=2, bisectionConcurrency=2)
    for number in (1, 2, 3, 4):
        scenario.pr(
            number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}", bad=number == 2
        )
        scenario.submit(number)

    scenario.settle()
    assert scenario.states()[1] == "pending"  # cleared, waiting for a batch to form
    scenario.clock.advance(minutes=5)
    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("failed", "tests_failed"),
        3: ("merged", "merged_by_queue"),
        4: ("merged", "merged_by_queue"),
    }
    assert scenario.started[:2] == [((), (1, 2)), ((1, 2), (3, 4))]
    # The line went on without the failed batch: 3+4 on main, and 1 and 2 alone beside it.
    assert {((), (3, 4)), ((), (1,)), ((), (2,))} <= set(scenario.started[2:5])
    assert scenario.main_log() == ["Add 1 (#1)", "Add 4 (#4)", "Add 3 (#3)", "initial commit"]
    assert "f2.txt" not in scenario.main_files()
    assert "cleared_by_isolation" in scenario.reasons(1)
    assert scenario.test_branches() == []
