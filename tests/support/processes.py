"""Processes on this machine, read from /proc: what tests of killed runs look for."""

from __future__ import annotations

from pathlib import Path


def processes_running(argv: str) -> list[int]:
    """The live processes (zombies excluded) whose whole command line is `argv`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        line = b" ".join(word for word in words if word).decode(errors="replace")
        if line == argv and state != "Z":
            found.append(int(entry.name))
    return found


def _live_processes() -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/<pid>/stat after the command name) of every live process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if fields[0] != "Z":
            found.append((int(entry.name), fields))
    return found


def process_group_members(pgid: int) -> list[int]:
    """The pids of the live processes (zombies excluded) in process group `pgid`."""
    return [pid for pid, fields in _live_processes() if int(fields[2]) == pgid]


def child_processes(pid: int) -> list[int]:
    """The pids of the live processes (zombies excluded) whose parent is `pid`."""
    return [child for child, fields in _live_processes() if int(fields[1]) == pid]


def all_command_lines() -> list[str]:
    """The command line of every process on this machine (what `ps -ef` would list)."""
    lines = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        lines.append(b" ".join(word for word in words if word).decode(errors="replace"))
    return lines


def all_environments() -> list[str]:
    """The environment of every process this user may read, each as one text."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found.append((entry / "environ").read_bytes().decode(errors="replace"))
        except OSError:
            continue
    return found
