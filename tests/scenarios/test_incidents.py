"""A queue's git server faults: stored as incidents (one per fault, counted, ended), and the
worker's backoff before it tries a failing server again. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from keepgreen.app.incidents import HostIncidents
from keepgreen.app.ports import CodeHostError
from keepgreen.app.telemetry import Telemetry
from keepgreen.bootstrap import Container
from keepgreen.core.enums import IncidentKind
from keepgreen.core.ids import QueueId
from tests.conftest import FakeClock
from tests.support.scenario import Scenario


class Seconds:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def queue_id(scenario: Scenario) -> QueueId:
    scenario.create_queue()
    return QueueId(scenario.queue_row().id)


def test_a_repeated_fault_is_one_incident_counted_then_ended(
    container: Container, queue_id: QueueId, clock: FakeClock
) -> None:
    start = clock.now
    with container.unit_of_work() as uow:
        first = uow.incidents.record(queue_id, IncidentKind.UNREACHABLE, "down", now=start)
        again = uow.incidents.record(
            queue_id, IncidentKind.UNREACHABLE, "still down", now=start + timedelta(seconds=5)
        )
        other = uow.incidents.record(
            queue_id, IncidentKind.PUSH_REJECTED, "hook", now=start, pr_number=7
        )
        uow.commit()
    assert again.id == first.id
    assert (again.failures, again.message, again.started_at) == (2, "still down", start)
    assert again.last_failure_at == start + timedelta(seconds=5)
    assert other.id != first.id  # another kind, and one PR's: an incident of its own

    end = start + timedelta(seconds=9)
    with container.unit_of_work() as uow:
        # Only the queue's own (pr_number None) incidents of the kinds named end.
        ended = uow.incidents.close(queue_id, now=end, kinds=[IncidentKind.UNREACHABLE])
        still = uow.incidents.list_open([queue_id])
        uow.commit()
    assert [(i.id, i.ended_at) for i in ended] == [(first.id, end)]
    assert [i.id for i in still] == [other.id]

    with container.unit_of_work() as uow:
        # A new failure after the end opens a new incident.
        new = uow.incidents.record(queue_id, IncidentKind.UNREACHABLE, "down again", now=end)
        recent = uow.incidents.recent(queue_id, limit=10)
        since = uow.incidents.recent(queue_id, limit=10, since=end + timedelta(seconds=1))
        uow.commit()
    assert new.id not in (first.id, other.id)
    assert [i.id for i in recent] == [new.id, other.id, first.id]  # newest first
    assert [i.id for i in since] == [new.id, other.id]  # open ones, and none ended since


def test_a_failing_server_is_tried_again_after_a_doubling_backoff_then_at_once(
    container: Container, queue_id: QueueId, clock: FakeClock
) -> None:
    seconds = Seconds()
    telemetry = Telemetry()
    incidents = HostIncidents(
        container.unit_of_work,
        clock=clock,
        telemetry=telemetry,
        monotonic=seconds,
        max_backoff=8.0,
    )
    error = CodeHostError("git-url x cannot be read", kind=IncidentKind.TIMEOUT)
    waits = []
    for _ in range(6):
        incidents.read_failed(queue_id, "q", error)
        start = seconds.now
        while not incidents.may_try(queue_id):
            seconds.now += 0.5
        waits.append(seconds.now - start)
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    waiting = telemetry.registry.get_sample_value("keepgreen_queues_waiting_on_git_host")
    assert waiting == 1
    with container.unit_of_work() as uow:
        (incident,) = uow.incidents.list_open([queue_id])
    assert (incident.kind, incident.failures) == (IncidentKind.TIMEOUT, 6)

    incidents.read_succeeded(queue_id, "q")
    assert incidents.may_try(queue_id)
    assert telemetry.registry.get_sample_value("keepgreen_queues_waiting_on_git_host") == 0
    with container.unit_of_work() as uow:
        assert uow.incidents.list_open([queue_id]) == []
    failures = telemetry.registry.get_sample_value(
        "keepgreen_git_host_failures_total", {"kind": "timeout"}
    )
    assert failures == 6
