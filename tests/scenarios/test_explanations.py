"""`getSubmittedPullRequest` says in plain words what a PR waits on, or why it left, with the
evidence (the failed check and its link, the culprit found by bisection, the run that passed):
the same words a GitHub check run shows, and the same evidence as data with a stable reason code.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from keepgreen.app.explain import Bisection, render
from keepgreen.app.explain_facts import queue_facts
from tests.support.scenario import Scenario


def explanation(scenario: Scenario, number: int) -> dict[str, Any]:
    explained: dict[str, Any] = scenario.get_pr(number)["explanation"]
    return explained


def test_a_waiting_pr_a_testing_pr_and_a_failed_pr_each_say_where_they_are(
    scenario: Scenario,
) -> None:
    scenario.create_queue(statuses=["ci", "lint"])
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.work()

    testing = scenario.get_pr(1)["explanation"]
    run = scenario.open_run_testing(1)
    assert testing["progress"] == "in_progress"
    assert testing["title"] == f"Testing in run {run.id}"
    # One line first, in the words of the issue: place, run, since when (UTC), what it waits on.
    assert testing["summary"].splitlines()[0] == (
        f"Position 1 of 2; testing in run {run.id} since 09:00 UTC, waiting on `ci`, `lint`."
    )
    assert testing["reasonCode"] == "tests_started"
    assert testing["evidence"]["testRun"]["id"] == run.id
    assert [(c["context"], c["state"]) for c in testing["evidence"]["checks"]] == [
        ("ci", None),
        ("lint", None),
    ]
    assert "waiting on `ci`: not reported since" in testing["summary"]
    assert "waiting on `lint`: not reported since" in testing["summary"]
    assert testing["verdict"] is None
    waiting = scenario.get_pr(2)["explanation"]
    assert (waiting["progress"], waiting["title"]) == ("queued", "Queued: position 2 of 2")

    assert run.sha is not None
    response = scenario.api.post(
        "setCommitStatus",
        sha=run.sha,
        context="ci",
        state="pending",
        targetUrl="https://ci.example.com/build/7",
    )
    assert response.status_code == 200
    scenario.set_status(run.sha, "success", context="lint")
    running = scenario.get_pr(1)["explanation"]
    assert "waiting on `ci`: running since" in running["summary"]
    assert "- `lint`: success" in running["summary"]
    assert running["summary"].splitlines()[0].endswith("waiting on `ci`.")
    assert running["detailsUrl"] == "https://ci.example.com/build/7"

    response = scenario.api.post(
        "setCommitStatus",
        sha=run.sha,
        context="ci",
        state="failure",
        targetUrl="https://ci.example.com/build/7",
        description="3 tests failed",
    )
    assert response.status_code == 200
    scenario.work()
    failed = scenario.get_pr(1)["explanation"]
    assert (failed["progress"], failed["verdict"]) == ("completed", "failure")
    assert failed["title"] == "Failed: its tests failed"
    # The evidence: what each required check of the run that decided said.
    assert f"Run {run.id} on `{run.branch}`:" in failed["summary"]
    assert "- `ci`: failure (3 tests failed) https://ci.example.com/build/7" in failed["summary"]
    assert "- `lint`: success" in failed["summary"]
    assert failed["detailsUrl"] == "https://ci.example.com/build/7"
    # The same as data: the stable code, the run that failed it and the failed status.
    assert failed["reasonCode"] == "tests_failed"
    evidence = failed["evidence"]
    assert (evidence["testRun"]["id"], evidence["testRun"]["status"]) == (run.id, "failed")
    assert evidence["testRun"]["sha"] == run.sha
    assert evidence["testRun"]["testedPrs"] == [1]
    assert evidence["failedStatuses"] == [
        {
            "context": "ci",
            "state": "failure",
            "description": "3 tests failed",
            "targetUrl": "https://ci.example.com/build/7",
        }
    ]
    assert (evidence["passedRun"], evidence["bisection"]) == (None, None)
    assert scenario.get_pr(2)["explanation"]["title"].startswith("Testing in run")


def test_a_merged_pr_names_the_run_that_passed(scenario: Scenario) -> None:
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.submit(1)

    scenario.settle()

    pr = scenario.get_pr(1)
    merged = pr["explanation"]
    assert (merged["verdict"], merged["reasonCode"]) == ("success", "merged_by_queue")
    passed = merged["evidence"]["passedRun"]
    run = scenario.run(pr["verifiedByTestRun"])
    assert (passed["id"], passed["sha"], passed["status"]) == (run.id, run.sha, "succeeded")
    assert run.sha is not None
    assert (
        f"Verified by run {run.id} (commit {run.sha[:12]}), which passed at" in (merged["summary"])
    )
    assert merged["evidence"]["failedStatuses"] == []


def test_a_pr_cleared_by_a_successor_names_the_run_that_passed_instead(
    scenario: Scenario,
) -> None:
    """PR 1's own run flakes; PR 2's run, which holds PR 1, passes and vouches for it."""
    scenario.create_queue(concurrency=2, pendingFailureDepth=1, canOptimisticallyMerge=True)
    scenario.flaky_once = {1}
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    merged = explanation(scenario, 1)
    assert merged["reasonCode"] == "merged_by_queue"
    passed = merged["evidence"]["passedRun"]
    successor = scenario.run(scenario.get_pr(2)["verifiedByTestRun"])
    assert (passed["id"], passed["testedPrs"]) == (successor.id, [2])
    assert f"Cleared by run {successor.id}" in merged["summary"]
    assert "which tested it with #2 on top of it and passed" in merged["summary"]


def test_a_failed_batch_names_the_culprit_to_the_innocent_and_the_isolating_run_to_the_culprit(
    scenario: Scenario,
) -> None:
    """A batch of 4 fails because PR 3 is bad; bisection isolates PR 3. PRs 1, 2 and 4 merge,
    each naming PR 3 as what broke the batch; PR 3 names the run that failed it alone.
    """
    scenario.create_queue(batch=True, batchingMinSize=4, bisectBesideQueue=False)
    for number in (1, 2, 3, 4):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, bad=number == 3)
        scenario.submit(number)
    scenario.work()
    batch = scenario.open_runs()[0]

    scenario.settle()

    culprit = explanation(scenario, 3)
    assert (culprit["verdict"], culprit["reasonCode"]) == ("failure", "tests_failed")
    isolating = culprit["evidence"]["testRun"]
    assert (isolating["kind"], isolating["status"], isolating["testedPrs"]) == (
        "bisection",
        "failed",
        [3],
    )
    assert culprit["evidence"]["bisection"] == {
        "batchRun": batch.id,
        "isolatingRun": isolating["id"],
        "culprits": [3],
    }
    assert [s["context"] for s in culprit["evidence"]["failedStatuses"]] == ["ci"]
    assert (
        f"Its batch (run {batch.id}) failed; run {isolating['id']} tested it alone"
        in (culprit["summary"])
    )
    for innocent in (1, 2, 4):
        merged = explanation(scenario, innocent)
        assert merged["verdict"] == "success"
        assert merged["evidence"]["bisection"] == {
            "batchRun": batch.id,
            "isolatingRun": None,
            "culprits": [3],
        }
        assert (
            f"Its batch (run {batch.id}) failed; bisection found #3 to break it."
            in (merged["summary"])
        )
        assert merged["evidence"]["passedRun"]["status"] == "succeeded"

    # The GitHub check runs of the PRs that left say the same (the publisher's read of the queue).
    queue = scenario.queue_row()
    with scenario.container.unit_of_work() as uow:
        repository = uow.repositories.get(queue.repository_id)
        facts = queue_facts(
            uow, queue, repository, scenario.clock(), left_within=timedelta(minutes=30)
        )
    shown = {fact.entry.number: render(fact) for fact in facts}
    assert shown[4].evidence.bisection == Bisection(batch.id, None, (3,))
    assert shown[3].evidence.bisection == Bisection(batch.id, isolating["id"], (3,))
    assert "bisection found #3 to break it" in shown[1].summary


def test_a_pr_of_two_failed_batches_names_the_culprits_of_both_and_the_last_batch(
    scenario: Scenario,
) -> None:
    """PRs 2 and 3 are bad: the batch 1-4 is bisected to PR 2, then 3 and 4 form a new batch
    that is bisected to PR 3. PR 4, in both, names both culprits and the second batch.
    """
    scenario.create_queue(
        batch=True,
        batchingMinSize=4,
        bisectionConcurrency=2,
        optimizationMode="bisection_skip_redundant_tests",
        bisectBesideQueue=False,
    )
    for number in (1, 2, 3, 4):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, bad=number in (2, 3))
        scenario.submit(number)
    scenario.settle()
    for _ in range(4):  # leftovers wait for a batch to form again
        scenario.clock.advance(minutes=6)
        scenario.settle()

    batches = [run for run in scenario.all_runs() if run.bisection_root == run.id]
    assert [scenario.numbers(run.tested_prs) for run in batches] == [(1, 2, 3, 4), (3, 4)]
    last = explanation(scenario, 4)
    assert last["verdict"] == "success"
    assert last["evidence"]["bisection"] == {
        "batchRun": batches[-1].id,
        "isolatingRun": None,
        "culprits": [2, 3],
    }
    culprit = explanation(scenario, 3)
    assert culprit["evidence"]["bisection"]["batchRun"] == batches[-1].id
    assert culprit["evidence"]["bisection"]["isolatingRun"] == culprit["evidence"]["testRun"]["id"]


def test_a_check_that_never_started_is_named_with_the_stable_code(scenario: Scenario) -> None:
    scenario.create_queue(checkStartTimeoutMinutes=5, testingTimeoutMinutes=300)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.submit(1)
    scenario.settle()
    scenario.clock.advance(minutes=6)
    scenario.work()

    failed = explanation(scenario, 1)
    assert (failed["verdict"], failed["reasonCode"]) == ("failure", "check_never_started")
    assert failed["title"] == "Failed: a required check never started"
    assert "because a required check never started (ci)." in failed["summary"]
    run = failed["evidence"]["testRun"]
    assert (run["failureReason"], run["failureDetail"]) == ("check_never_started", "ci")
    assert failed["evidence"]["failedStatuses"] == [
        {"context": "ci", "state": None, "description": None, "targetUrl": None}
    ]


def test_a_retried_pr_says_which_attempt_and_why(scenario: Scenario) -> None:
    scenario.create_queue(maxRetries=1)
    scenario.flaky_once = {1}
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.submit(1)
    scenario.work()
    scenario.answer_ci()  # the first run fails by chance
    scenario.work()

    retrying = explanation(scenario, 1)
    assert retrying["reasonCode"] == "retrying"
    assert retrying["evidence"]["testRun"]["attempt"] == 1
    assert (
        "Because its run failed and is tested again alone, in case the failure was spurious "
        "(attempt 2 of 2, beside the queue: tests failed)."
    ) in retrying["summary"].splitlines()
