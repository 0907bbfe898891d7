"""Which process runs which built-in CI run, on disk, so a dead worker's runs can be cleaned up.

One small JSON file per run under `<data_dir>/ci/procs/`: the worker process that owns the run,
the command's process (its group leader: the runner starts each command in a session of its
own) and the checkout. A process is named by its pid *and* its start time, read from
`/proc/<pid>/stat`, so a pid the kernel has since given to another process is not mistaken for
the one recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcessId:
    """A process as it was when recorded: pid and start time (clock ticks after boot)."""

    pid: int
    start: int | None

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        return cls(pid, _start_time(pid))

    def is_reused(self) -> bool:
        """True when the pid now names another process than the one recorded."""
        start = _start_time(self.pid)
        return start is not None and self.start is not None and start != self.start

    def is_alive(self) -> bool:
        """True while this very process runs (a reused pid has another start time; a zombie,
        killed and not yet reaped by its parent, is dead).
        """
        start = _start_time(self.pid)
        if start is None or _is_zombie(self.pid):
            return False
        return self.start is None or start == self.start


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    owner: ProcessId
    checkout: Path
    process: ProcessId | None


class RunRecords:
    """The run records of one data dir, shared by every worker process on this host."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._me = ProcessId.of(os.getpid())

    def write(self, run_id: str, *, checkout: Path, process: int | None = None) -> None:
        """Record (or update) that this process runs `run_id` in `checkout`."""
        self._directory.mkdir(parents=True, exist_ok=True)
        record = {
            "owner": [self._me.pid, self._me.start],
            "checkout": str(checkout),
            "process": None if process is None else [process, _start_time(process)],
        }
        path = self._path(run_id)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        # Renamed into place: a reader sees the old record or the new one, never half of one.
        temporary.replace(path)

    def forget(self, run_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(run_id).unlink()

    def stale(self) -> list[RunRecord]:
        """The records whose owning worker process is gone."""
        found: list[RunRecord] = []
        if not self._directory.is_dir():
            return found
        for path in sorted(self._directory.glob("*.json")):
            record = self._read(path)
            if record is None or record.owner == self._me or record.owner.is_alive():
                continue
            found.append(record)
        return found

    def _read(self, path: Path) -> RunRecord | None:
        try:
            data = json.loads(path.read_text())
            owner_pid, owner_start = data["owner"]
            process = data["process"]
            return RunRecord(
                run_id=path.stem,
                owner=ProcessId(int(owner_pid), owner_start),
                checkout=Path(data["checkout"]),
                process=None if process is None else ProcessId(int(process[0]), process[1]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # removed meanwhile, or not ours: left alone

    def _path(self, run_id: str) -> Path:
        return self._directory / f"{run_id}.json"


def _start_time(pid: int) -> int | None:
    """The process's start time from /proc, None when it does not exist (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    # Field 22 (starttime) is the 20th after the name; a zombie keeps its start time.
    return int(fields[19])


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] == "Z"
