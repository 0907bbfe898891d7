"""Detection reads a test's failing commits and, for a failing streak, only the commits down
to its last pass: the verdict must be the one its whole commit history gives.

Random histories (seeded, so every run sends the same) of one test per scenario: passes and
failures on main, master and a feature branch, retries on earlier commits, hours to days apart.
After every upload, the monitors are run twice over the test's stored rows: once with what
detection reads, once with every commit row in the window; the verdicts must agree.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import Connection, select

from keepgreen.adapters.db import tables
from keepgreen.adapters.db.engine import READ_ONLY_OPTION
from keepgreen.app.flaky.detection import commit_evidence
from keepgreen.bootstrap import Container
from keepgreen.core.flaky.monitors import CommitRuns, Evidence, MonitorState, evaluate
from keepgreen.core.ids import RepositoryId
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.web.test_flaky_api import Flaky, case, report

SCENARIOS = 24
UPLOADS = 14
BRANCHES = ("main", "main", "master", "feature/x")


def every_commit_row(
    container: Container, repository_id: RepositoryId, test_id: str, since: datetime
) -> list[CommitRuns]:
    columns = tables.TestCommitRow.__table__.c
    with reading(container) as connection:
        rows = connection.execute(
            select(
                columns.commit_sha,
                columns.branch,
                columns.pr_number,
                columns.passes,
                columns.failures,
                columns.first_pass_at,
                columns.first_failure_at,
                columns.last_run_at,
                columns.runs,
            ).where(
                columns.repository_id == repository_id,
                columns.test_case_id == test_id,
                columns.last_run_at >= since,
            )
        ).all()
    return [CommitRuns(*row) for row in rows]


def reading(container: Container) -> Connection:
    return container.engine.connect().execution_options(**{READ_ONLY_OPTION: True})


def id_of_test(container: Container, repository_id: RepositoryId, name: str) -> str:
    with reading(container) as connection:
        found = connection.execute(
            select(tables.TestCaseRow.id).where(
                tables.TestCaseRow.repository_id == repository_id,
                tables.TestCaseRow.name == name,
            )
        ).scalar_one()
    return str(found)


def test_what_detection_reads_gives_the_verdict_of_the_whole_history(
    client: TestClient,
    token: str,
    registered_repo: GitRepo,
    clock: FakeClock,
    container: Container,
) -> None:
    flaky = Flaky(client, token, clock)
    rng = random.Random(20261125)  # noqa: S311 (test data)
    with container.unit_of_work(read_only=True) as uow:
        repository = uow.repositories.find(
            uow.orgs.get_by_slug("acme").id,  # type: ignore[union-attr]
            RepoRef("github.com", "acme", "widgets"),
        )
    assert repository is not None
    compared = streaks_cut_short = 0
    for scenario in range(SCENARIOS):
        name = f"test_scenario_{scenario}"
        shas: list[tuple[str, str]] = []
        failing_share = rng.choice((0.2, 0.5, 0.9))
        reference_states: Mapping[str, MonitorState] = {}
        for upload in range(UPLOADS):
            if shas and rng.random() < 0.25:  # a retry of an earlier commit
                sha, branch = rng.choice(shas)
            else:
                sha, branch = f"{scenario:08x}{upload:032x}", rng.choice(BRANCHES)
                shas.append((sha, branch))
            failed = rng.random() < failing_share
            # The other test keeps each upload from being an infrastructure failure alone.
            flaky.ok_upload(
                report(case(name, failed="boom" if failed else None), case("test_steady")),
                sha=sha,
                branch=branch,
            )
            # The upload ran only the monitors it gave something new to read, and the sweep
            # runs the rest of an unhealthy test's: between them, the status is the one every
            # monitor gives over the whole history, evaluated at every upload.
            container.housekeeping.sweep()
            test_id = id_of_test(container, repository.id, name)
            with container.unit_of_work(read_only=True) as uow:
                monitors = uow.flaky.settings(repository.id).monitors
                stored = uow.flaky.tests(repository.id, [test_id])[test_id]
            since = clock.now - timedelta(hours=monitors.commit_hours + 1)
            whole = every_commit_row(container, repository.id, test_id, since)
            reference = evaluate(monitors, Evidence(commits=whole), reference_states, now=clock.now)
            reference_states = reference.monitors
            assert stored.status is reference.status, (scenario, upload, stored, reference)
            clock.advance(hours=rng.choice((0.5, 3, 20, 50)))
            with container.unit_of_work(read_only=True) as uow:
                settings = uow.flaky.settings(repository.id).monitors
                since = clock.now - timedelta(hours=settings.commit_hours + 1)
                test_id = id_of_test(container, repository.id, name)
                test = uow.flaky.tests(repository.id, [test_id])[test_id]
                read = commit_evidence(uow.flaky, repository.id, settings, {test_id: test}, since)
            whole = every_commit_row(container, repository.id, test_id, since)
            narrowed = read.get(test_id, [])
            assert {run.commit_sha for run in narrowed} <= {run.commit_sha for run in whole}
            streaks_cut_short += len(narrowed) < len(whole)
            verdicts = [
                evaluate(settings, Evidence(commits=runs), test.monitors, now=clock.now)
                for runs in (narrowed, whole)
            ]
            assert verdicts[0] == verdicts[1], (scenario, upload, narrowed, whole)
            compared += 1
    assert compared == SCENARIOS * UPLOADS
    # The point of reading less: most evaluations read only part of the history.
    assert streaks_cut_short > compared // 3
