"""A queue whose required check never reports says it is stalled, since when and on what;
the metric counts the seconds, the log tells it once, reminds, and tells its end.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.ports import CodeHostError
from keepgreen.core.enums import IncidentKind
from keepgreen.core.model import Repository, TestRun
from tests.conftest import LogLines
from tests.support.scenario import CI, Scenario
from tests.support.wire import parse_iso

QUEUE = "github.com/acme/widgets:main"
MAIN = {"repo": "acme/widgets", "branch": "main", "queue_type": "main"}


def stalled_seconds(scenario: Scenario) -> float:
    for family in text_string_to_metric_families(scenario.metrics()):
        if family.name == "mq_stalled_seconds":
            (value,) = [s.value for s in family.samples if s.labels == MAIN]
            return value
    msg = "no mq_stalled_seconds family"
    raise AssertionError(msg)


def started_at(run: TestRun) -> datetime:
    assert run.started_at is not None
    return run.started_at


def test_a_check_that_never_reports_stalls_the_queue_until_it_does(
    scenario: Scenario, log_lines: LogLines
) -> None:
    """stallMinutes 30, ci required, CI silent: PR 1's run starts and nothing reports. At 29
    minutes the queue is not stalled; at 31 getQueue says stalled since the run started,
    waiting on ci in that run; the metric shows the seconds and the log the line, once, then
    a reminder 30 minutes later. CI reports success: PR 1 merges, PR 2's run starts, and the
    stall is over everywhere.
    """
    scenario.create_queue(stallMinutes=30, checkStartTimeoutMinutes=0)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.settle()
    assert scenario.states() == {1: "testing", 2: "pending"}
    run = scenario.open_run_testing(1)
    started = started_at(run)

    scenario.clock.advance(minutes=29)
    scenario.work()
    queue = scenario.get_queue()
    assert (queue["stateReason"], queue["stalledSince"], queue["waitingOn"]) == (None, None, None)
    assert stalled_seconds(scenario) == 0
    assert log_lines.events("queue stalled") == []

    scenario.clock.advance(minutes=2)
    scenario.work()
    scenario.work()  # a second pass within the stall says nothing more

    queue = scenario.get_queue()
    assert queue["stateReason"] == "stalled"
    assert abs(parse_iso(queue["stalledSince"]) - started) < timedelta(seconds=1)
    waiting = (
        f"PR #1 is testing in run {run.id} since {started:%H:%M} UTC, waiting on {CI}, "
        "which has not reported"
    )
    assert queue["waitingOn"] == waiting
    assert 31 * 60 - 1 <= stalled_seconds(scenario) <= 31 * 60 + 1
    (told,) = log_lines.events("queue stalled")
    assert told["queue"] == QUEUE
    assert told["minutes"] == 31
    assert told["stall_minutes"] == 30
    assert told["waiting_on"] == waiting
    assert told["level"] == "warning"

    scenario.clock.advance(minutes=29)
    scenario.work()
    assert log_lines.events("queue still stalled") == []
    scenario.clock.advance(minutes=2)
    scenario.work()
    (reminded,) = log_lines.events("queue still stalled")
    assert reminded["minutes"] == 62
    assert reminded["waiting_on"] == waiting

    scenario.set_status(run.sha or "", "success")
    scenario.work()  # PR 1 merges and PR 2's run starts: the queue moved on
    scenario.work()  # the next pass sees it

    assert scenario.states()[1] == "merged"
    queue = scenario.get_queue()
    assert (queue["stateReason"], queue["stalledSince"], queue["waitingOn"]) == (None, None, None)
    assert stalled_seconds(scenario) == 0
    (ended,) = log_lines.events("queue no longer stalled")
    assert ended["queue"] == QUEUE
    assert ended["because"] == "it moved on"
    assert ended["minutes"] == 62
    assert len(log_lines.events("queue stalled")) == 1


def test_a_paused_queue_says_so_and_is_not_stalled(scenario: Scenario, log_lines: LogLines) -> None:
    scenario.create_queue(stallMinutes=5, checkStartTimeoutMinutes=0)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.submit(1)
    scenario.settle()
    scenario.set_state("paused")

    scenario.clock.advance(hours=3)
    scenario.work()

    queue = scenario.get_queue()
    assert queue["stateReason"] is None
    assert queue["waitingOn"] == (
        "the queue is paused: it starts no test run and merges nothing until it is resumed"
    )
    assert stalled_seconds(scenario) == 0
    assert log_lines.events("queue stalled") == []


def test_a_not_ready_pr_stalls_a_running_queue(scenario: Scenario) -> None:
    """PR 1 conflicts with main, so it never enters the queue: after stallMinutes the queue
    says it waits on PR 1, which does not merge cleanly.
    """
    scenario.create_queue(stallMinutes=10)
    scenario.pr(1, {"README.md": "from the PR\n"})
    scenario.push_to_main({"README.md": "from main\n"}, "main moves on")
    scenario.submit(1)
    scenario.settle()
    assert scenario.states() == {1: "not_ready"}

    scenario.clock.advance(minutes=11)
    queue = scenario.get_queue()

    assert queue["stateReason"] == "stalled"
    assert queue["waitingOn"] == "PR #1 is not ready: it does not merge cleanly onto main"


class GoesDown(LocalGitHost):
    """The local host, which stops answering when told to, as an unreachable server does."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        if self.down:
            msg = "git-url https://git.example.com/acme/widgets.git cannot be read: no answer"
            raise CodeHostError(msg, kind=IncidentKind.UNREACHABLE)
        return super().branch_tip(repo, branch)


@pytest.fixture
def code_host() -> GoesDown:
    return GoesDown()


def test_a_queue_whose_git_server_is_down_waits_on_it(
    scenario: Scenario, code_host: GoesDown, log_lines: LogLines
) -> None:
    """The server stops answering while PR 1 is pending: the worker cannot tick, so nothing
    starts; after stallMinutes the queue is stalled, waiting on the server's incident.
    """
    scenario.create_queue(stallMinutes=15)
    scenario.pr(1, {"a.txt": "a\n"})
    code_host.down = True
    scenario.submit(1)
    scenario.work()

    scenario.clock.advance(minutes=16)
    scenario.work()

    queue = scenario.get_queue()
    unreachable = "git-url https://git.example.com/acme/widgets.git cannot be read: no answer"
    assert (queue["stateReason"], queue["waitingOn"]) == ("stalled", unreachable)
    (told,) = log_lines.events("queue stalled")
    assert told["waiting_on"] == unreachable

    code_host.down = False
    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert scenario.get_queue()["stateReason"] is None
    (ended,) = log_lines.events("queue no longer stalled")
    assert ended["because"] == "it moved on"
