"""Never a silent stall, no vacuous green, a failure retried before it counts: on real git
through the API, with CI reporting through `setCommitStatus`.
"""

from __future__ import annotations

from keepgreen.simulation.flaky_history import SyntheticUpload
from tests.support.flaky import post_upload
from tests.support.scenario import Scenario


def pr_1_under_test(scenario: Scenario) -> str:
    """PR 1 submitted and testing, with CI silent: the head of its run."""
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.submit(1)
    scenario.settle()
    [run] = scenario.open_runs()
    assert run.sha is not None
    return run.sha


def reasons(scenario: Scenario, number: int) -> list[tuple[str, str, str | None]]:
    return [(c.to_state.value, c.reason.value, c.detail) for c in scenario.history(number)]


def test_a_required_check_that_never_starts_fails_the_run_and_names_the_check(
    scenario: Scenario,
) -> None:
    """checkStartTimeoutMinutes 5, testing timeout 5 hours, and CI never hears of PR 1's test
    commit: six minutes later PR 1 fails with check_never_started naming the check, instead of
    waiting five hours. PR 2, tested on top of it, is tested again without it and merges.
    """
    scenario.create_queue(checkStartTimeoutMinutes=5, testingTimeoutMinutes=300)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.settle()
    assert scenario.states() == {1: "testing", 2: "pending"}

    scenario.clock.advance(minutes=6)
    scenario.work()

    assert scenario.final()[1] == ("failed", "check_never_started")
    assert reasons(scenario, 1)[-1] == ("failed", "check_never_started", "ci")
    scenario.ci_answers = True
    scenario.settle()
    assert scenario.final()[2] == ("merged", "merged_by_queue")
    assert scenario.main_files() == {"README.md", "b.txt"}


def test_a_check_that_started_is_not_timed_out_as_never_started(scenario: Scenario) -> None:
    """The check reported `pending` (it started): after the start timeout it is still testing."""
    scenario.create_queue(checkStartTimeoutMinutes=5, testingTimeoutMinutes=300)
    sha = pr_1_under_test(scenario)
    scenario.set_status(sha, "pending")

    scenario.clock.advance(minutes=6)
    scenario.work()

    assert scenario.states() == {1: "testing"}


def test_a_required_check_that_concluded_skipped_does_not_pass(scenario: Scenario) -> None:
    """CI ran nothing for PR 1 (its required check says "skipped"): no vacuous green. PR 1
    fails with check_skipped naming the check, and main does not move.
    """
    scenario.create_queue()
    sha = pr_1_under_test(scenario)

    scenario.set_status(sha, "skipped")
    scenario.work()

    assert scenario.final() == {1: ("failed", "check_skipped")}
    assert reasons(scenario, 1)[-1] == ("failed", "check_skipped", "ci")
    assert scenario.main_log() == ["initial commit"]


def test_a_queue_that_accepts_skipped_checks_merges_on_them(scenario: Scenario) -> None:
    scenario.create_queue(acceptSkippedChecks=True)
    sha = pr_1_under_test(scenario)

    scenario.set_status(sha, "neutral")
    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}


def test_a_failed_run_is_retried_alone_and_the_pr_merges(scenario: Scenario) -> None:
    """maxRetries 1 and PR 1's first run fails by chance: PR 1 is tested again alone beside the
    queue (the history says which attempt and why), passes, and merges. The queue learned that
    one failure was spurious.
    """
    scenario.create_queue(maxRetries=1)
    scenario.flaky_once = {1}
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.submit(1)

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert scenario.started == [((), (1,)), ((), (1,))]
    assert (
        "testing",
        "retrying",
        "attempt 2 of 2, beside the queue: tests failed",
    ) in reasons(scenario, 1)
    assert scenario.main_files() == {"README.md", "a.txt"}
    assert scenario.queue_row().stats.refuted == 1


def test_a_bad_pr_fails_after_its_retry(scenario: Scenario) -> None:
    scenario.create_queue(maxRetries=1)
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a", bad=True)
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {
        1: ("failed", "tests_failed"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.started.count(((), (1,))) == 2
    assert scenario.main_files() == {"README.md", "b.txt"}


# -- what the flaky-test data knows --------------------------------------------------------------


def upload(scenario: Scenario, sha: str, branch: str, *cases: str, run_id: str) -> None:
    """CI uploads the JUnit results of one job for `sha` through the flaky-test API."""
    report = f'<testsuite name="s">{"".join(cases)}</testsuite>'.encode()
    job = SyntheticUpload(
        at=scenario.clock.now,
        commit_sha=sha,
        branch=branch,
        pr_number=None,
        run_id=run_id,
        files=(("report.xml", report),),
    )
    response = post_upload(scenario.api.client, scenario.api.token, job)
    assert response.status_code == 200, response.text


def failed(name: str) -> str:
    return f'<testcase classname="api" name="{name}"><failure message="boom"/></testcase>'


def passed(name: str) -> str:
    return f'<testcase classname="api" name="{name}"/>'


def known_flaky(scenario: Scenario, name: str) -> None:
    """`name` failed and passed on one commit of main (a re-run job): keepgreen calls it flaky."""
    sha = "f" * 40
    upload(scenario, sha, "main", failed(name), passed("test_ok"), run_id="1-1")
    upload(scenario, sha, "main", passed(name), passed("test_ok"), run_id="1-2")


def fail_with_results(scenario: Scenario, *cases: str) -> None:
    """PR 1's run: CI uploads its results for the test commit, then reports failure."""
    [run] = scenario.open_runs()
    assert run.sha is not None
    upload(scenario, run.sha, run.branch, *cases, run_id="2-1")
    scenario.set_status(run.sha, "failure")


def test_a_failure_of_known_flaky_tests_only_passes_with_the_tests_named(
    scenario: Scenario,
) -> None:
    """flakyFailures `pass`: PR 1's run fails, and the results uploaded for its test commit show
    only `api.test_timeout` failing, a test keepgreen knows is flaky. The run counts as passed;
    PR 1's history says why and names the test, and PR 1 merges.
    """
    scenario.create_queue(flakyFailures="pass")
    known_flaky(scenario, "test_timeout")
    pr_1_under_test(scenario)

    fail_with_results(scenario, failed("test_timeout"), passed("test_ok"))
    scenario.ci_answers = True
    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert (
        "tests_passed",
        "flaky_failures_forgiven",
        "only known flaky tests failed: api.test_timeout",
    ) in reasons(scenario, 1)
    assert scenario.main_files() == {"README.md", "a.txt"}


def test_a_failure_of_known_flaky_tests_only_is_retried_by_default(scenario: Scenario) -> None:
    scenario.create_queue()  # flakyFailures "retry", maxRetries 0
    known_flaky(scenario, "test_timeout")
    pr_1_under_test(scenario)

    fail_with_results(scenario, failed("test_timeout"))
    scenario.ci_answers = True
    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert (
        "testing",
        "retrying",
        "attempt 2 of 2: only known flaky tests failed: api.test_timeout",
    ) in reasons(scenario, 1)


def test_a_failure_of_a_test_not_known_flaky_counts(scenario: Scenario) -> None:
    """A known flaky test and a healthy one failed: that is a real failure, PR 1 fails."""
    scenario.create_queue(flakyFailures="pass")
    known_flaky(scenario, "test_timeout")
    pr_1_under_test(scenario)

    fail_with_results(scenario, failed("test_timeout"), failed("test_ok"))
    scenario.settle()

    assert scenario.final() == {1: ("failed", "tests_failed")}
    assert scenario.main_log() == ["initial commit"]
