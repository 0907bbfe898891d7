"""`getSubmittedPullRequest` says in plain words what a PR waits on, or why it left, with the
evidence (the failed check and its link): the same words a GitHub check run shows.
"""

from __future__ import annotations

from tests.support.scenario import Scenario


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
    running = scenario.get_pr(1)["explanation"]
    assert "waiting on `ci`: running since" in running["summary"]
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
    assert "- `ci`: failure (3 tests failed)" in failed["summary"]
    assert "- `lint`: never reported" in failed["summary"]
    assert failed["detailsUrl"] == "https://ci.example.com/build/7"
    assert scenario.get_pr(2)["explanation"]["title"].startswith("Testing in run")
