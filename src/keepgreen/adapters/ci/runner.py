"""The built-in CI runner: a repository's command on a commit, in a throwaway checkout."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import structlog

from keepgreen.adapters.ci.records import RunRecords
from keepgreen.adapters.ci.sandbox import (
    RunDirectory,
    Sandbox,
    SandboxUnavailable,
    command_environment,
)
from keepgreen.adapters.git.local_host import local_path
from keepgreen.adapters.git.remote_host import mirror_path
from keepgreen.app.ports import StatusReporter
from keepgreen.app.telemetry import CiResult, Telemetry
from keepgreen.core.enums import CommitState
from keepgreen.core.git_urls import redact_url
from keepgreen.core.limits import MAX_TEXT_LENGTH
from keepgreen.core.model import Repository

CONTEXT = "keepgreen/ci"

log = structlog.get_logger(__name__)

# Cloning a big repository can be slow, but a hung git must not hold a worker forever.
_GIT_TIMEOUT_SECONDS = 600

# These point git at another repository than the checkout. A keepgreen started from a git hook
# inherits them, and they would send the clone, the checkout and the command's own git calls to
# the wrong place.
_GIT_LOCATION_VARIABLES = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
    }
)

# What a finished job reports: (state, description), or None when the run was cancelled.
_Outcome = tuple[CommitState, str] | None
_RESULT_OF: dict[CommitState, CiResult] = {
    CommitState.SUCCESS: "success",
    CommitState.FAILURE: "failure",
    CommitState.ERROR: "error",
    CommitState.PENDING: "error",  # never a final state; would be a runner bug
}


class BuiltInRunner:
    """The CiRunner port: runs `repo.ci_command` on background threads and reports
    `keepgreen/ci` through `report`, with the run's log file as the status's target URL.

    Each run clones the repository with `--shared` into a fresh run directory under
    `<data_dir>/ci/work/`: the clone borrows the repository's object store instead of copying it,
    so any commit it holds (one reachable only from a merge-queue branch or a PR ref too) checks
    out cheaply, and the source repository's work tree is left alone. The command runs in
    `sandbox` (see `keepgreen.adapters.ci.sandbox`) with an environment built from nothing:
    never keepgreen's own. The log of run R is `<data_dir>/ci/logs/R.log` and outlives the
    checkout.
    """

    def __init__(
        self,
        *,
        data_dir: Path,
        report: StatusReporter,
        sandbox: Sandbox,
        max_parallel: int = 4,
        telemetry: Telemetry | None = None,
    ) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        # Absolute, because target URLs are file:// URIs and commands run in another cwd.
        self._data_dir = data_dir.absolute()
        root = data_dir.absolute() / "ci"
        self._work_root = root / "work"
        self._log_root = root / "logs"
        self._report = report
        self._sandbox = sandbox
        self._telemetry = telemetry or Telemetry()
        self._executor = ThreadPoolExecutor(
            max_workers=max_parallel, thread_name_prefix="keepgreen-ci"
        )
        self._lock = threading.Lock()
        self._started: set[str] = set()  # every run id ever started: starting again is a no-op
        self._live: set[str] = set()  # queued or running
        self._cancelled: set[str] = set()  # live runs that must not start, or stop, silently
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        # What runs in which process, on disk: a worker killed outright leaves it behind, and
        # `recover` (in any worker on this host) kills the orphans and removes the checkouts.
        self._processes_on_disk = RunRecords(root / "procs")
        self._closed = False

    def start(self, repo: Repository, *, run_id: str, sha: str, timeout_seconds: float) -> None:
        """Report `pending` now and run the command on `sha` in the background.

        Does nothing when the repository has no CI command or `run_id` was started before
        (unless `forget` was called for it since).
        `timeout_seconds` bounds the command itself, not the checkout before it.
        """
        command = repo.ci_command
        if command is None:
            return
        log_path = self._log_path(run_id)
        with self._lock:
            if self._closed:
                raise RuntimeError("the CI runner is closed")
            if run_id in self._started:
                return
            self._started.add(run_id)
            self._live.add(run_id)
        # Before queueing, so that a status exists at once and the final one cannot precede it.
        self._send(repo, sha, CommitState.PENDING, f"running {command}", log_path)
        log.info("ci queued", run=run_id, repo=str(repo.ref), sha=sha, log_file=str(log_path))
        self._executor.submit(self._job, repo, command, run_id, sha, timeout_seconds, log_path)

    def is_running(self, run_id: str) -> bool:
        """True while the run is queued or its command runs in this process."""
        with self._lock:
            return run_id in self._live

    def forget(self, run_id: str) -> None:
        """Let a run id that is no longer running start again: its run was lost (its command
        ended without a report reaching the database) and the queue starts it anew.
        """
        with self._lock:
            if run_id not in self._live:
                self._started.discard(run_id)

    def sandbox_problem(self) -> str | None:
        """Why boxed commands cannot run on this machine, or None when they can."""
        try:
            self._sandbox.check(self._work_root)
        except SandboxUnavailable as error:
            return str(error)
        return None

    def cancel(self, run_id: str) -> None:
        """Kill the run's command, or keep it from starting; the run reports nothing more."""
        with self._lock:
            if run_id not in self._live:
                return
            self._cancelled.add(run_id)
            process = self._processes.get(run_id)
            if process is not None:
                _kill_group(process)

    def recover(self) -> list[str]:
        """Clean up after workers on this host that died mid-run: kill the process groups of
        their commands (orphans now) and remove their checkouts. The run ids cleaned up.

        Safe to call at any time from any worker sharing the data dir: runs of live workers
        (this one included) are left alone, and a pid is only killed when the process still
        is the one recorded (same start time), not a later one that reused the number.
        """
        cleaned = []
        for record in self._processes_on_disk.stale():
            # Killed as a group even when its leader is gone: the kernel gives no new process
            # a pid still in use as a group id, so the group is the orphans' own. A leader pid
            # now naming another process means the group ended long ago.
            if record.process is not None and not record.process.is_reused():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(record.process.pid, signal.SIGKILL)
            if record.checkout.parent == self._work_root:
                shutil.rmtree(record.checkout, ignore_errors=True)
            self._processes_on_disk.forget(record.run_id)
            cleaned.append(record.run_id)
        if cleaned:
            log.warning("cleaned up dead workers' ci runs", runs=cleaned)
        return cleaned

    def close(self, wait: bool = True) -> None:
        """Stop taking runs. `wait` lets queued and running runs finish; otherwise running
        commands are killed, queued runs dropped, and neither reports a final status.
        """
        with self._lock:
            self._closed = True
            if not wait:
                self._cancelled.update(self._live)
                for process in self._processes.values():
                    _kill_group(process)
        self._executor.shutdown(wait=wait, cancel_futures=not wait)

    def read_log(self, run_id: str, *, limit_bytes: int) -> bytes | None:
        """The last `limit_bytes` of a run's log on this host; None when it has none here."""
        try:
            path = self._log_path(run_id)
            with path.open("rb") as log_file:
                size = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(0, size - limit_bytes))
                return log_file.read(limit_bytes)
        except (ValueError, OSError):
            return None

    def _log_path(self, run_id: str) -> Path:
        # The run id names a file: it must not climb out of the log directory.
        if run_id in {"", ".", ".."} or "/" in run_id or "\0" in run_id:
            raise ValueError(f"run id {run_id!r} cannot name a log file")
        return self._log_root / f"{run_id}.log"

    def _job(
        self,
        repo: Repository,
        command: str,
        run_id: str,
        sha: str,
        timeout_seconds: float,
        log_path: Path,
    ) -> None:
        run: RunDirectory | None = None
        started = time.monotonic()
        result: CiResult = "cancelled"
        try:
            if self._is_cancelled(run_id):
                return
            self._log_root.mkdir(parents=True, exist_ok=True)
            self._work_root.mkdir(parents=True, exist_ok=True)
            run = RunDirectory(Path(tempfile.mkdtemp(prefix=f"{run_id}-", dir=self._work_root)))
            self._processes_on_disk.write(run_id, checkout=run.root)
            with log_path.open("ab") as log_file:
                outcome = self._checkout_and_run(
                    repo, command, run_id, sha, timeout_seconds, run, log_file
                )
            if outcome is not None:
                state, description = outcome
                log.info(
                    "ci finished",
                    run=run_id,
                    repo=str(repo.ref),
                    sha=sha,
                    result=state.value,
                    description=description,
                    seconds=round(time.monotonic() - started, 1),
                )
                result = _RESULT_OF[state]
                self._send(repo, sha, state, description, log_path)
        except Exception as error:
            # A worker thread's exception would otherwise sit unread in its future.
            log.exception("ci runner failed", run=run_id, repo=str(repo.ref), sha=sha)
            if not self._is_cancelled(run_id):
                result = "error"
                self._send(repo, sha, CommitState.ERROR, f"the runner failed: {error}", log_path)
        finally:
            self._telemetry.ci_run(result, time.monotonic() - started)
            with self._lock:
                self._live.discard(run_id)
                self._cancelled.discard(run_id)
                self._processes.pop(run_id, None)
            if run is not None:
                shutil.rmtree(run.root, ignore_errors=True)
                self._processes_on_disk.forget(run_id)

    def _checkout_and_run(
        self,
        repo: Repository,
        command: str,
        run_id: str,
        sha: str,
        timeout_seconds: float,
        run: RunDirectory,
        log_file: BinaryIO,
    ) -> _Outcome:
        try:
            self._sandbox.check(self._work_root)
        except SandboxUnavailable as error:
            _note(log_file, str(error))
            return CommitState.ERROR, str(error)
        problem = self._checkout(repo, sha, run.checkout, log_file)
        if problem is not None:
            _note(log_file, problem)
            return CommitState.ERROR, problem
        self._sandbox.prepare(run)
        launch = self._sandbox.launch(
            command,
            run=run,
            env=command_environment(
                extra={"KEEPGREEN_SHA": sha, "KEEPGREEN_RUN_ID": run_id},
                passed=repo.ci_env,
                source=os.environ,
            ),
            git_objects=_borrowed_object_stores(run.checkout),
        )
        _note(log_file, f"running {command} ({_box_words(self._sandbox)})")
        with self._lock:
            # Checked under the lock that cancel() takes, so a cancel either stops the start
            # here or finds the process registered and kills it.
            if run_id in self._cancelled:
                _note(log_file, "cancelled")
                return None
            process = subprocess.Popen(
                launch.argv,
                cwd=launch.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=launch.env,
                # Its own process group, so that killing it also kills what it started.
                start_new_session=True,
            )
            self._processes[run_id] = process
            self._processes_on_disk.write(run_id, checkout=run.root, process=process.pid)
        try:
            code = process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.wait()
            if self._is_cancelled(run_id):
                _note(log_file, "cancelled")
                return None
            description = f"timed out after {timeout_seconds:g} s"
            _note(log_file, f"{description}; killed the command")
            return CommitState.FAILURE, description
        # Whatever the command left running in the background would outlive the checkout.
        _kill_group(process)
        if self._is_cancelled(run_id):
            _note(log_file, "cancelled")
            return None
        _note(log_file, f"exit code {code}")
        return (CommitState.SUCCESS if code == 0 else CommitState.FAILURE), f"exit code {code}"

    def _checkout(
        self, repo: Repository, sha: str, checkout: Path, log_file: BinaryIO
    ) -> str | None:
        """Check `sha` out into the empty directory `checkout`; None when done, else why not.

        A repository on a git server is cloned from keepgreen's mirror of it, where the test
        commit was built. git's own output goes to the log.
        """
        source = local_path(repo.git_url)
        if source is None:
            source = mirror_path(self._data_dir, str(repo.id))
            if not (source / "HEAD").is_file():
                shown = redact_url(repo.git_url)
                return f"keepgreen has no mirror of {shown} yet, so the built-in CI cannot clone it"
        if sha.startswith("-"):
            return f"{sha!r} is not a commit sha"  # it would be read as an option
        _note(log_file, f"checking out {sha} of {repo.ref}")
        steps = (
            (
                f"git clone of {source}",
                ["clone", "--quiet", "--shared", "--no-checkout", "--", str(source), str(checkout)],
            ),
            (
                f"git checkout of {sha}",
                ["-C", str(checkout), "checkout", "--quiet", "--detach", sha],
            ),
        )
        env = _clean_environment()
        for step, args in steps:
            try:
                result = subprocess.run(
                    ["git", *args],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    env=env,
                    timeout=_GIT_TIMEOUT_SECONDS,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return f"{step} timed out after {_GIT_TIMEOUT_SECONDS} s"
            if result.returncode != 0:
                return f"{step} failed (exit code {result.returncode}); see the log"
        return None

    def _is_cancelled(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._cancelled

    def _send(
        self, repo: Repository, sha: str, state: CommitState, description: str, log_path: Path
    ) -> None:
        try:
            self._report(
                repo,
                sha=sha,
                context=CONTEXT,
                state=state,
                target_url=log_path.as_uri(),
                description=description[:MAX_TEXT_LENGTH],
            )
        except Exception:
            # The status store may be briefly unavailable; the run itself is still worth doing.
            log.exception(
                "ci status not stored", run_state=state.value, repo=str(repo.ref), sha=sha
            )


def _note(log_file: BinaryIO, text: str) -> None:
    """A line of the runner's own in the log, between the lines of git and the command."""
    log_file.write(f"keepgreen: {text}\n".encode())
    # Flushed now: the children write to the same file through their own descriptors.
    log_file.flush()


def _borrowed_object_stores(checkout: Path) -> list[Path]:
    """The object stores a `--shared` clone reads through its alternates file."""
    alternates = checkout / ".git" / "objects" / "info" / "alternates"
    if not alternates.is_file():
        return []
    lines = alternates.read_text().splitlines()
    return [Path(line) for line in lines if line.strip() and not line.startswith("#")]


def _box_words(sandbox: Sandbox) -> str:
    if sandbox.kind == "none":
        return "unboxed: KEEPGREEN_CI_SANDBOX=none"
    return "in a bubblewrap box: no network, no keepgreen environment, /workspace and /tmp only"


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARIABLES}


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # The group outlives its leader while any child is left; gone already is fine.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
