"""The worker decides a queue without holding it, and holds it only to write the decision:
PRs entering meanwhile (the merge button) leave the decision as it is; any other change to
what it was decided on has it decided again, holding the queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.scenario import Scenario
from tests.support.telemetry import sample

DECIDED_AGAIN = "keepgreen_decisions_made_again_total"


def meanwhile(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]
) -> None:
    """Run `action` once, after the worker's next decision is made and before it is written."""
    engine = scenario.container.worker._engine
    plan = engine.plan
    done: list[bool] = []

    def plan_then_act(*args: Any) -> Any:
        planned = plan(*args)
        if not done:
            done.append(True)
            action()
        return planned

    monkeypatch.setattr(engine, "plan", plan_then_act)


def test_prs_entering_while_the_worker_decides_leave_its_decision_as_made(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
    scenario.submit(1)
    meanwhile(scenario, monkeypatch, lambda: scenario.submit(2))
    scenario.work()
    assert sample(scenario.container, DECIDED_AGAIN) == 0
    assert scenario.states() == {1: "testing", 2: "not_ready"}
    scenario.settle()
    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }


def test_a_change_while_the_worker_decides_has_it_decide_again(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PR 1 is cancelled between the decision that would start testing it and its write: the
    decision is made again on the queue as it now is, and nothing of PR 1 is tested.
    """
    scenario.create_queue()
    scenario.pr(1, {"f1.txt": "1\n"}, title="Add 1")
    scenario.submit(1)
    meanwhile(scenario, monkeypatch, lambda: scenario.cancel(1))
    scenario.work()
    assert sample(scenario.container, DECIDED_AGAIN) == 1
    scenario.settle()
    assert scenario.final() == {1: ("cancelled", "canceled_by_user")}
    assert scenario.all_runs() == []


def test_a_pass_reads_its_queue_while_another_writer_holds_the_database(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass's first read (the queue and its PRs, all of them) takes no writer's turn: on
    SQLite a writer waits for the one before it, and under a flood of merge buttons a turn
    held for that read was the merge button's longest wait. The pass reaches the git server
    while another transaction holds the write, and writes once it is over.
    """
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
    scenario.submit(1)
    scenario.work()  # the worker holds the queue's lease, and PR 1 is testing
    scenario.submit(2)
    worker = scenario.container.worker
    reached = threading.Event()
    branch_tip = worker._host.branch_tip

    def noting_the_tip(*args: Any) -> Any:
        reached.set()
        return branch_tip(*args)

    monkeypatch.setattr(worker._host, "branch_tip", noting_the_tip)
    queue_id = scenario.queue_row().id
    with scenario.container.unit_of_work() as holding:
        holding.queues.get(queue_id, lock=True)  # a writer's transaction, left open
        passing = threading.Thread(target=worker.reconcile, args=(queue_id,), daemon=True)
        passing.start()
        assert reached.wait(10), "the pass waited for the writer before reading git"
        holding.commit()
    passing.join(30)
    assert not passing.is_alive()
    assert scenario.states() == {1: "testing", 2: "pending"}
