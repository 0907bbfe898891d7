"""The worker can stop at any point: another one takes over and nothing is lost or repeated."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keepgreen.bootstrap import Container, bootstrap
from keepgreen.core.enums import StateReason
from keepgreen.core.scheduler import Landed
from tests.scenarios.test_builtin_runner import GADGETS
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.wire import Api, repo_json


@pytest.fixture
def second_container(scenario: Scenario) -> Iterator[Container]:
    """Another process on the same database and data dir: a new worker with its own name."""
    settings = scenario.container.settings
    built = bootstrap(settings, clock=scenario.clock, run_migrations=False)
    yield built
    built.close()


def test_a_new_worker_takes_over_once_the_old_lease_expires(
    scenario: Scenario, second_container: Container
) -> None:
    """PRs 1 and 2 are queued and PR 1 is testing when the worker stops for good (its process
    died, holding the queue's lease). A new worker does nothing while the lease lasts, takes
    the queue over once it expires, and both PRs merge; PR 1's run is not started again.
    """
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    assert scenario.answer_ci() == 1

    scenario.container = second_container
    scenario.work()
    assert scenario.states() == {1: "testing", 2: "pending"}  # the old worker's lease holds

    scenario.clock.advance(seconds=31)
    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]
    # PR 2 started on top of PR 1 while PR 1 was landing (before the old worker died).
    assert scenario.started == [((), (1,)), ((1,), (2,))]
    assert scenario.test_branches() == []


def test_a_crash_between_landing_and_recording_it_is_not_a_foreign_push(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrency 2: PR 1 and PR 2 (on top of PR 1) pass. The worker lands PR 1 and crashes
    before recording the landing. The next pass finds main moved and the landing still in the
    outbox: repeating it recognises the landing already made. PR 1 lands exactly once, as
    merged_by_queue, and PR 2's passed run still counts (it was built on PR 1's tested tree).

    (Regression: the next pass saw main moved before replaying the outbox and took the
    queue's own landing for a foreign push, re-testing everything.)
    """
    scenario.create_queue(concurrency=2)
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    assert scenario.answer_ci() == 2

    worker = scenario.container.worker
    feed = worker._feed
    crashed: list[Any] = []

    def crash_once(queue_id: Any, event: Any, **kwargs: Any) -> bool:
        if isinstance(event, Landed) and not crashed:
            crashed.append(event)
            raise KeyboardInterrupt  # the process dies here
        return feed(queue_id, event, **kwargs)

    monkeypatch.setattr(worker, "_feed", crash_once)
    with pytest.raises(KeyboardInterrupt):
        scenario.work()
    assert crashed
    assert scenario.main_log() == ["Add 1 (#1)", "initial commit"]

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f2.txt"}
    assert scenario.started == [((), (1,)), ((1,), (2,))]
    assert "target_branch_moved" not in scenario.reasons(2)


def test_two_workers_running_at_once_never_advance_the_queue_together(
    scenario: Scenario, second_container: Container
) -> None:
    """Two worker processes run their loops at the same time against one database. The
    queue's lease lets only one of them reconcile it at any moment, and the PRs merge once
    each, in order.
    """
    scenario.create_queue(concurrency=3)
    for number in (1, 2, 3, 4):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    intervals: list[tuple[str, float, float]] = []
    guard = threading.Lock()
    workers = [scenario.container.worker, second_container.worker]

    def recording(worker: Any, name: str) -> None:
        original = worker.reconcile

        def reconcile(queue_id: Any) -> None:
            started = time.monotonic()
            try:
                original(queue_id)
            finally:
                with guard:
                    intervals.append((name, started, time.monotonic()))

        worker.reconcile = reconcile

    for index, worker in enumerate(workers):
        recording(worker, f"worker-{index}")
    stop = threading.Event()
    threads = [threading.Thread(target=w.serve, args=(stop,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and scenario.live_entries():
            scenario.answer_ci()
            for worker in workers:
                worker.wake()
            time.sleep(0.05)
    finally:
        stop.set()
        for worker in workers:
            worker.wake()
        for thread in threads:
            thread.join(timeout=10)
    assert scenario.final() == dict.fromkeys((1, 2, 3, 4), ("merged", "merged_by_queue"))
    assert scenario.main_log() == ["Add 4 (#4)", "Add 3 (#3)", "Add 2 (#2)", "Add 1 (#1)",
                                   "initial commit"]  # fmt: skip
    # While a lease is held its holder alone reconciles: no two passes overlapped. (The test's
    # clock moves 1 ms per reading, so under load a lease may expire between passes in virtual
    # time and the other worker take over: that is allowed, overlapping is not.)
    assert intervals
    spans = sorted((start, end) for _, start, end in intervals)
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))


def test_a_worker_whose_lease_was_taken_over_writes_nothing_more(
    scenario: Scenario, second_container: Container
) -> None:
    """Worker A holds the queue with PR 1 testing, then stalls past its lease (no heartbeat
    either: the whole process stood still). Worker B takes the queue over. When A wakes and
    goes on with its pass (PR 1's ref has gone meanwhile), its writes are refused: the lease
    row is checked in the transaction that writes. B, the holder, cancels PR 1.
    """
    scenario.create_queue()
    scenario.pr(1, {"f1.txt": "1\n"}, title="Add 1")
    scenario.submit(1)
    old_worker = scenario.container.worker
    scenario.work()
    assert scenario.states() == {1: "testing"}

    scenario.clock.advance(seconds=6)  # past the 5 s lease
    second_container.worker.run_once()  # B takes over
    scenario.close_pr(1)
    before = scenario.history(1)
    old_worker.reconcile(scenario.queue_row().id)  # A's stalled pass goes on
    assert scenario.history(1) == before
    assert scenario.states() == {1: "testing"}

    scenario.container = second_container
    scenario.work()
    assert scenario.final() == {1: ("cancelled", "pr_closed")}


def test_a_built_in_run_whose_worker_died_starts_again_with_ci_lost(
    scenario: Scenario, second_container: Container, tmp_path: Path, ci_control: Path
) -> None:
    """PR 1's built-in CI command is running under worker A when A dies (its command goes
    with it, nothing reported). Worker B leaves the queue alone while A's lease and heartbeat
    could still be current (4 s), takes it over after 6 s, finds the run lost and starts it
    again: PR 1 stays testing (`ci_lost` in its history, no timeout) and merges.
    """
    # The box shows the test's control directory read-only: the command waits for `release`
    # there. Each start of the run writes a line to the run's log.
    release = ci_control / "release"
    command = f"echo run started; while [ ! -e {release} ]; do sleep 0.05; done"
    logs = scenario.container.settings.data_dir / "ci" / "logs"

    def starts() -> int:
        return sum(log.read_text().count("run started\n") for log in logs.glob("*.log"))

    container = scenario.container
    gadgets = GitRepo(tmp_path / "gadgets")
    container.admin.add_repository(
        org_slug="acme", ref=GADGETS, git_url=str(gadgets.path), ci_command=command
    )
    ci = Scenario(
        container=container,
        api=Api(scenario.api.client, scenario.api.token, repo_json(GADGETS)),
        repo=gadgets,
        clock=scenario.clock,
        ci_answers=False,
    )
    ci.create_queue(statuses=[])
    ci.pr(1, {"a.txt": "a\n"}, title="Add a")
    ci.submit(1)
    ci.wait_for(lambda: starts() == 1)
    container.runner.close(wait=False)  # worker A dies: its command is killed, unreported

    ci.container = second_container
    ci.clock.advance(seconds=4)
    ci.work()
    # A's lease and heartbeat are still current: B does not touch the queue.
    assert StateReason.CI_LOST not in ci.reasons(1)
    assert starts() == 1
    ci.clock.advance(seconds=2)
    ci.wait_for(lambda: starts() == 2)
    release.touch()
    ci.wait_for(lambda: ci.states() == {1: "merged"})
    reasons = ci.reasons(1)
    assert reasons.count(StateReason.CI_LOST) == 1
    assert StateReason.TEST_RUN_TIMEOUT not in reasons
    assert ci.main_log() == ["Add a (#1)", "initial commit"]
