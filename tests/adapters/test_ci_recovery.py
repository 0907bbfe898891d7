"""The built-in runner cleans up after dead workers on its host: orphans and checkouts."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from keepgreen.adapters.ci.records import ProcessId
from keepgreen.adapters.ci.runner import BuiltInRunner
from keepgreen.adapters.ci.sandbox import Unboxed
from tests.support.processes import process_group_members


def dead_pid() -> ProcessId:
    """A process that ran and is gone (reaped)."""
    process = subprocess.Popen(["true"])
    recorded = ProcessId.of(process.pid)
    process.wait()
    return recorded


@pytest.fixture
def orphan() -> Iterator[subprocess.Popen[bytes]]:
    """A command in a session of its own, as the runner starts them, with a child in its group."""
    process = subprocess.Popen(["sh", "-c", "sleep 600 & wait"], start_new_session=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def write_record(
    data_dir: Path, run_id: str, *, owner: ProcessId, process: ProcessId | None
) -> Path:
    """A run record as a worker process writes it; its checkout, made."""
    checkout = data_dir.absolute() / "ci" / "work" / f"{run_id}-abcd1234"
    checkout.mkdir(parents=True)
    (checkout / "file").write_text("x")
    procs = data_dir / "ci" / "procs"
    procs.mkdir(parents=True, exist_ok=True)
    (procs / f"{run_id}.json").write_text(
        json.dumps(
            {
                "owner": [owner.pid, owner.start],
                "checkout": str(checkout),
                "process": None if process is None else [process.pid, process.start],
            }
        )
    )
    return checkout


def group_alive(pgid: int) -> bool:
    return bool(process_group_members(pgid))


def group_gone(pgid: int, *, timeout: float = 10.0) -> bool:
    """Whether every process of the group has exited within `timeout` seconds: a SIGKILL is
    delivered at once, but a busy machine may let a killed process run its exit a little later.
    """
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def make_runner(data_dir: Path) -> BuiltInRunner:
    def report(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("recovery reports nothing")

    return BuiltInRunner(data_dir=data_dir, report=report, sandbox=Unboxed())


def test_a_dead_workers_orphaned_command_is_killed_and_its_checkout_removed(
    tmp_path: Path, orphan: subprocess.Popen[bytes]
) -> None:
    data_dir = tmp_path / "data"
    checkout = write_record(data_dir, "run-1", owner=dead_pid(), process=ProcessId.of(orphan.pid))
    runner = make_runner(data_dir)
    try:
        assert runner.recover() == ["run-1"]
    finally:
        runner.close()
    assert orphan.wait(timeout=10) != 0  # killed
    assert group_gone(orphan.pid)  # its child too
    assert not checkout.exists()
    assert list((data_dir / "ci" / "procs").iterdir()) == []


def test_a_live_workers_run_is_left_alone(tmp_path: Path, orphan: subprocess.Popen[bytes]) -> None:
    """The owner (here: the orphan fixture itself, alive) still runs its command."""
    data_dir = tmp_path / "data"
    checkout = write_record(
        data_dir, "run-1", owner=ProcessId.of(orphan.pid), process=ProcessId.of(orphan.pid)
    )
    runner = make_runner(data_dir)
    try:
        assert runner.recover() == []
    finally:
        runner.close()
    assert orphan.poll() is None
    assert checkout.exists()


def test_a_pid_reused_by_another_process_is_not_killed(
    tmp_path: Path, orphan: subprocess.Popen[bytes]
) -> None:
    """The record names the pid with another start time: the process there now is a
    stranger that got the number later. The checkout is still removed.
    """
    data_dir = tmp_path / "data"
    now = ProcessId.of(orphan.pid)
    assert now.start is not None
    stranger = ProcessId(orphan.pid, now.start - 1)
    checkout = write_record(data_dir, "run-1", owner=dead_pid(), process=stranger)
    runner = make_runner(data_dir)
    try:
        assert runner.recover() == ["run-1"]
    finally:
        runner.close()
    assert orphan.poll() is None
    assert not checkout.exists()
