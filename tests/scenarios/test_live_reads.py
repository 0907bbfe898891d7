"""The read side of the API follows the queue while it works: queue, PRs, lists and metrics."""

from __future__ import annotations

import re

from tests.support.scenario import Scenario
from tests.support.wire import parse_iso

LABELS = 'branch="main",queue_type="main",repo="acme/widgets"'


def metric(text: str, name: str, labels: str = LABELS) -> float:
    """The value of one series of the metrics text."""
    found = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name}{{{labels}}} not in\n{text}"
    return float(found.group(1))


def test_reads_reflect_live_states_during_a_run(scenario: Scenario) -> None:
    """PRs 1, 2 and 3 are submitted to a queue testing one at a time. Right away each is
    `not_ready`, not yet read (the submit does not wait on git), and getQueue lists none;
    the worker's first pass reads them and PR 1 is testing: getSubmittedPullRequest and
    getQueue say so, its stateChangedAt moved on, listPullRequests by state finds it, and the
    metrics count three PRs in the queue and one testing slot in use. A minute later PR 3 is
    cancelled; then everything settles: 1 and 2 merged, verified by their runs, getQueue lists
    nothing, and the metrics count two merges and one cancellation in the last hour.
    """
    scenario.create_queue()
    for number in (1, 2, 3):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)

    assert scenario.get_queue()["enqueuedPullRequests"] == []
    for number in (1, 2, 3):
        pr = scenario.get_pr(number)
        assert (pr["state"], pr["prSha"], pr["explanation"]["reasonCode"]) == (
            "not_ready",
            "",
            "submitted",
        )
    submitted_at = parse_iso(scenario.get_pr(1)["stateChangedAt"])

    scenario.clock.advance(minutes=1)
    scenario.work()

    pr = scenario.get_pr(1)
    assert pr["state"] == "testing"
    assert pr["isCurrentlySubmittedToQueue"] is True
    assert pr["verifiedByTestRun"] is None
    assert parse_iso(pr["stateChangedAt"]) > submitted_at
    queue = scenario.get_queue()
    assert [(pr["prNumber"], pr["state"]) for pr in queue["enqueuedPullRequests"]] == [
        (1, "testing"),
        (2, "pending"),
        (3, "pending"),
    ]
    assert [pr["prNumber"] for pr in scenario.list_prs(state="testing")] == [1]
    assert [pr["prNumber"] for pr in scenario.list_prs(state="pending")] == [2, 3]
    text = scenario.metrics()
    assert metric(text, "mq_depth_current") == 3
    assert metric(text, "mq_testing_slots_active") == 1
    # PR 1 entered the line and started testing in the same pass: it waited no time in line.
    assert metric(text, "mq_pr_wait_duration_1h_seconds_count") == 1
    assert metric(text, "mq_pr_wait_duration_1h_seconds_sum") == 0

    scenario.clock.advance(minutes=1)
    scenario.cancel(3)
    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
        3: ("cancelled", "canceled_by_user"),
    }
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]
    pr = scenario.get_pr(1)
    assert pr["state"] == "merged"
    assert pr["isCurrentlySubmittedToQueue"] is False
    assert pr["verifiedByTestRun"] == scenario.entry(1).verified_by_test_run
    assert scenario.run(pr["verifiedByTestRun"]).status.value == "succeeded"
    assert scenario.get_queue()["enqueuedPullRequests"] == []
    assert [pr["prNumber"] for pr in scenario.list_prs(state="merged")] == [1, 2]
    assert [pr["prNumber"] for pr in scenario.list_prs()] == [1, 2, 3]
    text = scenario.metrics()
    merged = LABELS.replace('queue_type="main"', 'conclusion="merged",queue_type="main"')
    cancelled = LABELS.replace('queue_type="main"', 'conclusion="cancelled",queue_type="main"')
    assert metric(text, "mq_pr_conclusions_1h_total", merged) == 2
    assert metric(text, "mq_pr_conclusions_1h_total", cancelled) == 1
    assert metric(text, "mq_depth_current") == 0
    assert metric(text, "mq_testing_slots_active") == 0
    # Every PR that left the queue, cancelled or merged, spent time in it.
    assert metric(text, "mq_pr_time_in_queue_1h_seconds_count") == 3
    assert metric(text, "mq_pr_test_duration_1h_seconds_count") == 2
