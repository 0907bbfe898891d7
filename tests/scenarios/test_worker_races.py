"""One writer per queue, with several workers racing for many queues and passes that stall.

The workers run their real loops on threads against one database with short leases (1 s,
renewed every 0.2 s by each worker's heartbeat), and every test-commit build and landing is
slowed down past the lease. Each effect a worker carries out is recorded with its queue, its
worker and its interval: on no queue do two workers' effects ever overlap.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.ports import BuildConflict, Landing, LandResult, TestCommit
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.core.model import Repository
from keepgreen.settings import Settings
from keepgreen.web.app import create_app
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.wire import REPO, REPO_JSON, Api

LEASE_SECONDS = 1.0
STALL_SECONDS = 1.5  # longer than the lease
QUEUES = 4
PRS_PER_QUEUE = 2


class Recorder:
    """Every effect carried out on the code host: (queue branch, worker, start, end)."""

    def __init__(self, queue_of_pr: dict[int, str]) -> None:
        self.queue_of_pr = queue_of_pr
        self.effects: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()

    def add(self, queue: str, worker: str, start: float) -> None:
        with self._lock:
            self.effects.append((queue, worker, start, time.monotonic()))


class StallingHost(LocalGitHost):
    """The local git host, slowed past the lease on builds and landings, and recording them."""

    def __init__(self, name: str, recorder: Recorder) -> None:
        super().__init__()
        self.name = name
        self._recorder = recorder

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        start = time.monotonic()
        time.sleep(STALL_SECONDS)
        built = super().build_test_commit(repo, base_sha=base_sha, prs=prs, branch=branch)
        number = int(branch.split("/")[1].removeprefix("pr-"))  # keepgreen-merge/pr-N/<run id>
        self._recorder.add(self._recorder.queue_of_pr[number], self.name, start)
        return built

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        start = time.monotonic()
        time.sleep(STALL_SECONDS)
        result = super().land(repo, landing)
        self._recorder.add(landing.target_branch, self.name, start)
        return result


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        worker_lease_seconds=LEASE_SECONDS,
        worker_heartbeat_seconds=0.2,
        worker_poll_seconds=0.05,
    )


@pytest.fixture
def recorder() -> Recorder:
    return Recorder({})


@pytest.fixture
def workers(settings: Settings, recorder: Recorder) -> Iterator[list[Container]]:
    """Three worker processes' worth of containers, on the system clock."""
    built = [
        bootstrap(settings, code_host=StallingHost(f"worker-{i}", recorder), run_migrations=False)
        for i in range(3)
    ]
    yield built
    for container in built:
        container.close()


def test_workers_racing_for_many_queues_through_stalls_never_write_together(
    settings: Settings, workers: list[Container], recorder: Recorder, git_repo: GitRepo
) -> None:
    """Four queues (branches q0..q3) get two PRs each. Three workers race for them while every
    build and landing stalls longer than a lease; midway one worker stops and a fourth starts,
    so queues change hands. Every PR merges in order on its branch, some queue was worked by
    more than one worker, and no two workers' effects on one queue ever overlapped.
    """
    api_container = workers[0]
    token = api_container.admin.create_token("acme")
    api_container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command=None
    )
    client = TestClient(create_app(container=api_container))
    api = Api(client, token, dict(REPO_JSON))
    clock: Any = FakeClock()  # unused by the workers, which run on the system clock
    scenarios = []
    for index in range(QUEUES):
        branch = f"q{index}"
        git_repo.git("branch", branch, "main")
        scenario = Scenario(
            container=api_container, api=api, repo=git_repo, clock=clock, branch=branch
        )
        scenario.create_queue()
        scenarios.append(scenario)
    for number in range(1, QUEUES * PRS_PER_QUEUE + 1):
        scenario = scenarios[number % QUEUES]
        recorder.queue_of_pr[number] = scenario.branch
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)

    stops = [threading.Event() for _ in range(4)]
    threads = [
        threading.Thread(target=w.worker.serve, args=(stops[i],), daemon=True)
        for i, w in enumerate(workers)
    ]
    for thread in threads:
        thread.start()
    churned = False
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and any(s.live_entries() for s in scenarios):
            for scenario in scenarios:
                scenario.answer_ci()
            if not churned and any(
                state == "merged" for s in scenarios for state in s.states().values()
            ):
                # Worker 0 stops (handing its leases back) and a fourth worker joins.
                churned = True
                stops[0].set()
                workers[0].worker.wake()
                late = bootstrap(
                    settings, code_host=StallingHost("worker-3", recorder), run_migrations=False
                )
                workers.append(late)
                threads.append(
                    threading.Thread(target=late.worker.serve, args=(stops[3],), daemon=True)
                )
                threads[-1].start()
            time.sleep(0.05)
    finally:
        for stop, container in zip(stops, workers, strict=False):
            stop.set()
            container.worker.wake()
        for thread in threads:
            thread.join(timeout=30)
        client.close()

    for index, scenario in enumerate(scenarios):
        numbers = [n for n in range(1, QUEUES * PRS_PER_QUEUE + 1) if n % QUEUES == index]
        assert scenario.final() == dict.fromkeys(numbers, ("merged", "merged_by_queue"))
        assert scenario.main_log() == [
            *(f"Add {n} (#{n})" for n in reversed(numbers)),
            "initial commit",
        ]
    assert churned
    assert_one_writer_at_a_time(recorder)


def assert_one_writer_at_a_time(recorder: Recorder) -> None:
    """Every queue saw effects, some queue from more than one worker, none overlapping."""
    by_queue: dict[str, list[tuple[str, float, float]]] = {}
    for queue, worker, start, end in recorder.effects:
        by_queue.setdefault(queue, []).append((worker, start, end))
    assert sorted(by_queue) == [f"q{i}" for i in range(QUEUES)]
    assert any(len({w for w, _, _ in effects}) > 1 for effects in by_queue.values()), by_queue
    for queue, effects in by_queue.items():
        spans = sorted(effects, key=lambda effect: effect[1])
        for (worker, _, end), (other, next_start, _) in itertools.pairwise(spans):
            assert end <= next_start, f"{queue}: {worker} and {other} acted at once"
