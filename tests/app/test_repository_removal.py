"""Removing a repository removes every row about it, in every table, and no row of another
repository: two repositories of one org live through merges, a run in progress, statuses,
impacted targets and flaky-test uploads, then one of them is removed (SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from keepgreen.adapters.db import tables as schema
from keepgreen.adapters.db.tables import Base, QueueRow, RepositoryRow
from keepgreen.app.errors import Conflict
from keepgreen.bootstrap import Container
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.wire import REPO, Api, repo_json

GADGETS = RepoRef("github.com", "acme", "gadgets")
# The tables that must have held rows of the removed repository, so that the test shows
# each of them emptied of it (queue_effects is empty once a pass has carried its effects out).
EXPECTED_TABLES = {
    "repositories",
    "queues",
    "queue_leases",
    "queue_entries",
    "state_changes",
    "test_runs",
    "test_run_entries",
    "ci_run_holders",
    "commit_statuses",
    "impacted_targets",
    "flaky_settings",
    "test_cases",
    "test_uploads",
    "test_results",
    "test_hourly_rollups",
    "test_hour_totals",
    "test_day_totals",
    "test_commit_rollups",
    "test_failure_templates",
    "test_failure_days",
    "test_status_changes",
    "ci_runs",
}

JUNIT = b"""<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="suite" tests="2" failures="1">
  <testcase classname="tests.test_cart" name="test_total" file="tests/test_cart.py" time="0.1"/>
  <testcase classname="tests.test_cart" name="test_discount" file="tests/test_cart.py" time="0.2">
    <failure message="assert 9 == 10">AssertionError: assert 9 == 10</failure>
  </testcase>
</testsuite></testsuites>
"""


def live_repository(
    container: Container,
    client: TestClient,
    token: str,
    clock: FakeClock,
    repo: GitRepo,
    ref: RepoRef,
) -> Scenario:
    """A repository of acme that has lived: two PRs merged, a third testing (its built-in CI
    run held by a worker), impacted targets, a flaky-test upload, settings, a flagged test, a
    CI run reported.
    """
    container.admin.add_repository(
        org_slug="acme", ref=ref, git_url=str(repo.path), ci_command=None
    )
    api = Api(client, token, repo_json(ref))
    scenario = Scenario(container=container, api=api, repo=repo, clock=clock)
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"file-{number}.txt": f"{number}\n"})
        scenario.submit(number)
    scenario.settle()
    scenario.pr(3, {"file-3.txt": "3\n"})
    scenario.submit(3)
    scenario.targets(3, ["//cart"])
    scenario.work()
    (run,) = [run for run in scenario.open_runs() if run.sha is not None]
    with container.unit_of_work() as uow:
        uow.workers.record_ci(TestRunId(run.id), "a-worker", now=clock())
        uow.commit()
    flaky_body = {"repo": repo_json(ref), "org_url_slug": "acme"}
    # A failure-rate monitor, so that the upload writes the hourly buckets per branch too.
    rate = {"name": "r", "classification": "FLAKY", "activation": 0.5}
    rate |= {"window_hours": 24, "min_sample": 10}
    monitored = client.post(
        "/v1/flaky-tests/update-settings",
        json={**flaky_body, "settings": {"monitors": {"failure_rate": [rate]}}},
        headers={"x-api-token": token},
    )
    assert monitored.status_code == 200, monitored.text
    metadata = {**flaky_body, "commit_sha": repo.tip(), "branch": "main", "run_id": "7-1"}
    uploaded = client.post(
        "/v1/flaky-tests/upload",
        data={"metadata": json.dumps(metadata)},
        files=[("file", ("junit.xml", JUNIT, "application/xml"))],
        headers={"x-api-token": token},
    )
    assert uploaded.status_code == 200, uploaded.text
    ci_run = {
        **flaky_body,
        "ci_job_name": "test",
        "run_start": "2026-11-02T08:00:00Z",
        "run_end": "2026-11-02T08:10:00Z",
        "branch": "main",
        "sha": repo.tip(),
        "attempt": 1,
        "providers_run_id": "7-1",
    }
    reported = client.post(
        "/v1/flaky-ci/create-ci-run", json=ci_run, headers={"x-api-token": token}
    )
    assert reported.status_code == 200, reported.text
    settings = {"quarantine": {"enabled": True, "auto_quarantine_flaky": False}}
    for path, fields in (
        ("update-settings", {"settings": settings}),
        ("flag-test", {"test_id": _a_test_id(container, ref), "flaky": True, "reason": "seen"}),
    ):
        response = client.post(
            f"/v1/flaky-tests/{path}",
            json={**flaky_body, **fields},
            headers={"x-api-token": token},
        )
        assert response.status_code == 200, response.text
    return scenario


def _a_test_id(container: Container, ref: RepoRef) -> str:
    from keepgreen.adapters.db.tables import TestCaseRow

    with container.engine.connect() as connection:
        repository_id = connection.scalar(
            select(RepositoryRow.id).where(RepositoryRow.name == ref.name)
        )
        test_id = connection.scalar(
            select(TestCaseRow.id).where(TestCaseRow.repository_id == repository_id)
        )
    assert test_id is not None
    return str(test_id)


def snapshot(container: Container) -> dict[str, set[tuple[str, ...]]]:
    """Every row of every table, as comparable text."""
    tables: dict[str, set[tuple[str, ...]]] = {}
    with container.engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            rows = connection.execute(select(table)).all()
            tables[table.name] = {tuple(_text(value) for value in row) for row in rows}
    return tables


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else str(value)


@pytest.fixture
def two_repositories(
    container: Container, client: TestClient, token: str, clock: FakeClock, tmp_path: Path
) -> tuple[Scenario, Scenario]:
    widgets = live_repository(container, client, token, clock, GitRepo(tmp_path / "w"), REPO)
    gadgets = live_repository(container, client, token, clock, GitRepo(tmp_path / "g"), GADGETS)
    return widgets, gadgets


def test_a_repository_with_pull_requests_in_its_queue_is_kept_without_force(
    container: Container, two_repositories: tuple[Scenario, Scenario]
) -> None:
    before = snapshot(container)
    with pytest.raises(Conflict) as refused:
        container.admin.remove_repository(REPO, org_slug="acme")
    assert refused.value.code == "repository_busy"
    assert refused.value.message == (
        "repository github.com/acme/widgets has 1 pull request(s) still in its queues (main); "
        "cancel them first, or remove it with --force"
    )
    assert snapshot(container) == before


def test_removing_a_repository_leaves_nothing_of_it_and_everything_of_the_other(
    container: Container, two_repositories: tuple[Scenario, Scenario]
) -> None:
    with container.engine.connect() as connection:
        removed_ids = {
            str(value)
            for query in (
                select(RepositoryRow.id).where(RepositoryRow.name == REPO.name),
                select(QueueRow.id)
                .join(RepositoryRow, QueueRow.repository_id == RepositoryRow.id)
                .where(RepositoryRow.name == REPO.name),
            )
            for value in connection.scalars(query)
        }
        removed_ids |= {
            str(run_id)
            for run_id in connection.scalars(
                select(schema.TestRunRow.id).where(
                    schema.TestRunRow.queue_id.in_(list(removed_ids))
                )
            )
        }
    before = snapshot(container)

    removal = container.admin.remove_repository(REPO, org_slug="acme", force=True)

    assert (removal.queues, removal.active_prs) == (("main",), 1)
    after = snapshot(container)
    emptied = set()
    for table, rows in before.items():
        assert after[table] <= rows, f"{table} gained rows"
        gone = rows - after[table]
        if gone:
            emptied.add(table)
        # Every row that went belonged to the removed repository (by its id, or by an id of
        # its queues, entries, runs or uploads, found through the rows that went with them).
        removed_ids |= {row[0] for row in gone if _is_uuid(row[0])}
        for row in after[table]:
            assert not removed_ids & set(row), f"{table} still holds {row}"
    assert emptied >= EXPECTED_TABLES, sorted(EXPECTED_TABLES - emptied)
    # The other repository is whole: its rows are all there (after <= before), and it still
    # works, with the same worker, which held the lease of the removed repository's queue.
    _, gadgets = two_repositories
    gadgets.settle()
    assert {number: state for number, (state, _) in gadgets.final().items()} == {
        1: "merged",
        2: "merged",
        3: "merged",
    }
