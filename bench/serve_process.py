"""A real `keepgreen serve` for a benchmark: set up with the operator CLI, started as its own
process on a free loopback port, its memory read from /proc, stopped with SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
COMMAND_TIMEOUT_SECONDS = 300.0
ORG = "bench"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.test",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.test",
}


def keepgreen_env(database_url: str, data_dir: Path) -> dict[str, str]:
    """This environment without keepgreen settings, plus the database and data dir given."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KEEPGREEN_")}
    env["KEEPGREEN_DATABASE_URL"] = database_url
    env["KEEPGREEN_DATA_DIR"] = str(data_dir)
    return env


def keepgreen(*args: str, env: dict[str, str], cwd: Path) -> str:
    """`python -m keepgreen ARGS` to completion; its stdout. Fails loudly on a non-zero exit."""
    result = subprocess.run(
        [sys.executable, "-m", "keepgreen", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"keepgreen {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout


def git_repository(path: Path) -> Path:
    """A git repository with one commit on `main`: what registering a repository and
    creating its queue need (the benchmark reads no git beyond that).
    """
    env = {**os.environ, **IDENTITY}
    path.mkdir(parents=True)
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "init")):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env, capture_output=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of process `pid`, in KiB, from /proc/<pid>/status."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def reset_peak_rss(pid: int) -> bool:
    """Sets VmHWM back to the current RSS (`5` to /proc/<pid>/clear_refs, Linux 4.0+), so the
    next peak read is the peak of what follows; False when the kernel or the rights refuse.
    """
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Served:
    """`keepgreen serve` (API and queue worker, as an operator runs it) on a free port."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        cwd: Path,
        log: Path,
        workers: int = 1,
        queue_worker: bool = True,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        command = [sys.executable, "-m", "keepgreen", "serve", "--port", str(self.port)]
        if workers > 1:
            command += ["--workers", str(workers)]
        if not queue_worker:
            command.append("--no-worker")
        with log.open("w") as log_file:
            self.process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_until_answering(self, token: str) -> None:
        """Until an authenticated call answers 200 (migrations done, the port open)."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"keepgreen serve exited: {self.log.read_text()[-2000:]}")
            try:
                answer = httpx.post(
                    f"{self.url}/getQueue", json={}, headers={"x-api-token": token}, timeout=5
                )
                if answer.status_code in (400, 404, 422, 200):  # it answers: the API is up
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"keepgreen serve did not answer on port {self.port}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
