"""A run CI never reports on times out after testingTimeoutMinutes and fails its PR."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_run_without_a_ci_answer_times_out(scenario: Scenario) -> None:
    """testingTimeoutMinutes 1 and a CI that never answers: two minutes after PR 1's run
    started, the run fails and PR 1 fails with test_run_timeout. PR 2, queued behind it, is
    tested again without it once CI answers again, and merges.
    """
    scenario.create_queue(testingTimeoutMinutes=1)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.settle()
    assert scenario.states() == {1: "testing", 2: "pending"}

    scenario.clock.advance(minutes=2)
    scenario.work()

    assert scenario.final()[1] == ("failed", "test_run_timeout")
    scenario.ci_answers = True
    scenario.settle()

    assert scenario.final() == {
        1: ("failed", "test_run_timeout"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add b (#2)", "initial commit"]
    assert scenario.main_files() == {"README.md", "b.txt"}
    assert scenario.test_branches() == []


def test_two_concurrent_runs_time_out_together(scenario: Scenario) -> None:
    """Concurrency 2, testingTimeoutMinutes 1, no CI answer: PR 1's run and PR 2's run (on top
    of PR 1) time out in the same pass. PR 1 fails with test_run_timeout; PR 2's run held PR 1,
    so PR 2 is tested again without it and merges once CI answers.
    """
    scenario.create_queue(concurrency=2, testingTimeoutMinutes=1)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.settle()
    assert scenario.states() == {1: "testing", 2: "testing"}

    scenario.clock.advance(minutes=2)
    scenario.work()
    scenario.ci_answers = True
    scenario.settle()

    assert scenario.final() == {
        1: ("failed", "test_run_timeout"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add b (#2)", "initial commit"]
    assert "predecessor_changed" in scenario.reasons(2)
