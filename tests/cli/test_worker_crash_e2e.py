"""A worker dies (SIGKILL) or stops (SIGTERM) in the middle of a built-in CI run: real processes.

`keepgreen serve --no-worker` answers the API, two `keepgreen worker` processes share the
database and the data dir. The repository's CI command blocks until the test lets it go, so
the run is in progress when the worker running it goes away. The other worker takes the queue
over, starts the run again (`ci_lost`), kills the orphaned command and removes its checkout,
and the good PR merges.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from keepgreen.adapters.db.engine import make_engine
from keepgreen.adapters.db.tables import WorkerRow
from keepgreen.bootstrap import bootstrap
from keepgreen.core.enums import StateReason
from keepgreen.settings import Settings
from tests.cli.test_serve_e2e import Served, keepgreen
from tests.conftest import PG_URL
from tests.support.gitrepo import GitRepo
from tests.support.pgschema import fresh_schema
from tests.support.processes import process_group_members, processes_running
from tests.support.wire import REPO, queue_body

pytestmark = pytest.mark.slow

LEASE_SECONDS = 5.0  # the default lease (KEEPGREEN_WORKER_LEASE_SECONDS)
STOP_TIMEOUT_SECONDS = 15.0


@pytest.fixture(params=["sqlite", *(["postgresql"] if PG_URL else [])])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A data dir, and the backend's database (a throwaway schema on PostgreSQL)."""
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("KEEPGREEN_")
    }
    environment["KEEPGREEN_DATA_DIR"] = str(tmp_path / "data")
    if request.param == "sqlite":
        yield environment
        return
    assert PG_URL is not None
    with fresh_schema(PG_URL, prefix="kg_e2e") as url:
        yield {**environment, "KEEPGREEN_DATABASE_URL": url}


class Workers:
    """`keepgreen worker` processes, each logging to a file; all stopped at the end."""

    def __init__(self, *, env: dict[str, str], cwd: Path, logs: Path) -> None:
        self._env, self._cwd, self._logs = env, cwd, logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        log = (self._logs / f"worker-{len(self.started)}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "keepgreen", "worker"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._cwd,
        )
        self.started.append(process)
        return process

    def output(self) -> str:
        return "\n".join(
            f"--- worker {index}\n{(self._logs / f'worker-{index}.log').read_text()}"
            for index in range(len(self.started))
        )

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=STOP_TIMEOUT_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def wait_until(check: Callable[[], bool], *, seconds: float, what: str) -> float:
    """Poll `check` until true; the seconds it took. Fails the test after `seconds`."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    pytest.fail(f"{what}: not after {seconds} s")


def live_workers(env: dict[str, str], tmp_path: Path) -> list[str]:
    """The holders in the `workers` table (each worker registers at its first pass)."""
    engine = make_engine(
        Settings(
            data_dir=tmp_path / "data", database_url=env.get("KEEPGREEN_DATABASE_URL")
        ).resolved_database_url()
    )
    try:
        with Session(engine) as session:
            return list(session.scalars(select(WorkerRow.holder)))
    finally:
        engine.dispose()


def pgid_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[2])


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_run_whose_worker_dies_starts_again_elsewhere_and_the_good_pr_merges(
    env: dict[str, str], tmp_path: Path, how: signal.Signals
) -> None:
    """PR 1's CI command is running under worker A when A is killed (or told to stop). Worker
    B takes the queue over (after the lease when A was killed, at once when A stopped), kills
    A's orphaned command, and starts the run again: PR 1's history says `ci_lost`. Let go, the
    command passes and PR 1 merges; no process of A's run is left, nor any checkout.
    """
    workdir = tmp_path / "work"
    workdir.mkdir()
    # The box (the default sandbox) shows this directory read-only: the test lets runs go by
    # putting `release` there.
    control = tmp_path / "ci-control"
    control.mkdir()
    env = {**env, "KEEPGREEN_CI_READONLY_PATHS": str(control)}
    token = keepgreen("token", "create", "--org", "acme", env=env, cwd=workdir).stdout.split()[-1]
    release = control / "release"
    git_repo = GitRepo(tmp_path / "widgets")
    # Each run says so in its log, starts a child (an orphan's orphan, found on the host by
    # its argv), and waits for the test to let it go.
    sleeper = f"sleep 600.{os.getpid()}"
    check = f"echo run started\n{sleeper} &\nwhile [ ! -e {release} ]; do sleep 0.05; done\n"
    git_repo.commit({"check.sh": check}, "add the check")
    git_repo.open_pr(1, {"a.txt": "fine\n"}, title="Add a")
    keepgreen(
        "repo", "add", "--org", "acme", "--host", "github.com", "--owner", "acme",
        "--name", "widgets", "--git-url", str(git_repo.path), "--ci-command", "sh check.sh",
        env=env, cwd=workdir,
    )  # fmt: skip
    served = Served(env=env, cwd=workdir, log=tmp_path / "serve.log")
    workers = Workers(env=env, cwd=workdir, logs=tmp_path)
    try:
        served.wait_until_answering()
        headers = {"x-api-token": token}

        def post(verb: str, **fields: object) -> httpx.Response:
            return httpx.post(
                f"{served.url}/{verb}", json=queue_body(**fields), headers=headers, timeout=30
            )

        logs = tmp_path / "data" / "ci" / "logs"

        def starts() -> int:
            return sum(log.read_text().count("run started\n") for log in logs.glob("*.log"))

        worker_a = workers.start()
        assert post("createQueue").status_code == 200
        assert post("submitPullRequest", pr={"number": 1}).status_code == 200
        wait_until(lambda: len(processes_running(sleeper)) == 1, seconds=60, what=workers.output())
        assert starts() == 1
        [first] = processes_running(sleeper)
        first_group = pgid_of(first)
        assert len(process_group_members(first_group)) >= 2  # the box's shell and its sleep
        workers.start()  # worker B: idle while A holds the queue
        wait_until(lambda: len(live_workers(env, tmp_path)) == 2, seconds=60, what="B's start")

        os.kill(worker_a.pid, how)
        stopped_at = time.monotonic()
        if how is signal.SIGTERM:
            assert worker_a.wait(timeout=STOP_TIMEOUT_SECONDS) == 0, workers.output()
            exited = time.monotonic() - stopped_at
            print(f"\nSIGTERM: worker A exited {exited:.1f} s after the signal")  # noqa: T201
        wait_until(lambda: starts() == 2, seconds=60, what=workers.output())
        takeover = time.monotonic() - stopped_at
        print(f"\n{how.name}: the run started again {takeover:.1f} s after the signal")  # noqa: T201
        # Killed, A's lease had to expire first; stopped, A handed it back at once.
        limit = LEASE_SECONDS + 5.0 if how is signal.SIGKILL else LEASE_SECONDS
        assert takeover < limit, workers.output()
        wait_until(
            lambda: not process_group_members(first_group),
            seconds=10,
            what=f"A's command still runs: {process_group_members(first_group)}",
        )
        orphans_gone = time.monotonic() - stopped_at
        print(f"{how.name}: A's command and its child gone {orphans_gone:.1f} s after")  # noqa: T201

        release.touch()
        wait_until(
            lambda: post("getSubmittedPullRequest", pr={"number": 1}).json()["state"] == "merged",
            seconds=60,
            what=workers.output(),
        )
    finally:
        release.touch()
        workers.stop_all()
        served.stop()
    assert git_repo.git("log", "--format=%s", "main").splitlines()[0] == "Add a (#1)"
    settings = Settings(data_dir=tmp_path / "data", database_url=env.get("KEEPGREEN_DATABASE_URL"))
    container = bootstrap(settings, run_migrations=False)
    try:
        org_id = container.admin.authenticate(token)
        assert org_id is not None
        with container.unit_of_work() as uow:
            org_repository = uow.repositories.find(org_id, REPO)
            assert org_repository is not None
            queue = uow.queues.find(org_repository.id, "main")
            assert queue is not None
            entry = uow.entries.find(queue.id, 1)
            assert entry is not None
            reasons = [change.reason for change in uow.history.list_for_entry(entry.id)]
    finally:
        container.close()
    assert reasons.count(StateReason.CI_LOST) == 1, reasons
    assert reasons[-1] is StateReason.MERGED_BY_QUEUE
    assert StateReason.TEST_RUN_TIMEOUT not in reasons
    work = tmp_path / "data" / "ci" / "work"
    assert not work.exists() or list(work.iterdir()) == []
    procs = tmp_path / "data" / "ci" / "procs"
    assert not procs.exists() or list(procs.glob("*.json")) == []
