"""Time alone changes flaky-test data: retention deletes old results, and the worker's chores
run the sweep on their own schedule.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.engine import QueueEngine
from keepgreen.app.worker import Worker, WorkerSettings
from keepgreen.bootstrap import Container
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO_JSON
from tests.web.test_flaky_api import Flaky, case, report


def test_retention_deletes_raw_results_then_rollups_but_keeps_the_test(
    client: TestClient,
    token: str,
    registered_repo: GitRepo,
    clock: FakeClock,
    container: Container,
) -> None:
    flaky = Flaky(client, token, clock)
    flaky.ok_upload(report(case("test_old", failed="boom"), case("test_ok")))
    test_id = flaky.test_id("test_old")
    assert container.housekeeping.purge() == 0  # nothing is old yet

    clock.advance(days=31)
    deleted_results = container.housekeeping.purge()
    # The failed result, its upload and its day's count of failures (passes are only counted).
    assert deleted_results == 3
    details = flaky.ok("get-test-details", test_id=test_id)["test"]
    assert details["name"] == "test_old"  # the test case itself stays

    clock.advance(days=60)
    assert container.housekeeping.purge() >= 4  # hour, commit and failure rollups
    assert container.housekeeping.purge() == 0
    details = flaky.ok("get-test-details", test_id=test_id)["test"]
    assert details["failure_rate_last_7d"] == 0
    assert details["most_common_failures"] == []


def test_retention_deletes_ci_runs_last_reported_as_long_ago_as_old_results(
    client: TestClient,
    token: str,
    registered_repo: GitRepo,
    clock: FakeClock,
    container: Container,
) -> None:
    def report(attempt: int) -> None:
        response = client.post(
            "/v1/flaky-ci/create-ci-run",
            headers={"x-api-token": token},
            json={
                "repo": dict(REPO_JSON),
                "org_url_slug": "acme",
                "ci_job_name": "test",
                "run_start": "2026-11-02T08:00:00Z",
                "run_end": "2026-11-02T08:10:00Z",
                "branch": "main",
                "sha": "a" * 40,
                "attempt": attempt,
                "providers_run_id": "41",
            },
        )
        assert response.status_code == 200, response.text

    def attempts() -> list[int]:
        response = client.post(
            "/v1/flaky-ci/list-ci-runs",
            headers={"x-api-token": token},
            json={"repo": dict(REPO_JSON), "org_url_slug": "acme", "page_query": {"page_size": 9}},
        )
        return sorted(run["attempt"] for run in response.json()["ci_runs"])

    report(1)
    report(2)
    clock.advance(days=20)
    report(2)  # reported again: kept from this report on
    assert container.housekeeping.purge() == 0
    clock.advance(days=11)  # 31 days after the first reports, 11 after the last
    assert container.housekeeping.purge() == 1
    assert attempts() == [2]


def worker_with(container: Container, clock: FakeClock, *chores: Callable[[], object]) -> Worker:
    return Worker(
        container.unit_of_work,
        engine=QueueEngine(clock=clock),
        host=LocalGitHost(),
        runner=None,
        clock=clock,
        settings=WorkerSettings(holder="test", chore_seconds=3600),
        chores=chores,
    )


def test_the_worker_runs_its_chores_once_per_interval(
    container: Container, clock: FakeClock
) -> None:
    calls: list[str] = []
    worker = worker_with(container, clock, lambda: calls.append("sweep"))
    worker.run_chores_when_due()
    worker.run_chores_when_due()  # within chore_seconds: not again
    assert calls == ["sweep"]


def test_a_failing_chore_does_not_stop_the_others(container: Container, clock: FakeClock) -> None:
    calls: list[str] = []

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("database went away")

    worker = worker_with(container, clock, broken, lambda: calls.append("next"))
    worker.run_chores_when_due()
    assert calls == ["broken", "next"]


def test_the_served_container_sweeps_and_purges(container: Container) -> None:
    chores = container.worker._chores
    assert chores == (container.housekeeping.sweep, container.housekeeping.purge)
