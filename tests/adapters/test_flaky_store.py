"""The flaky-test store keeps each repository's tests apart, on SQLite and PostgreSQL.

Test ids are public, so two repositories (here of two orgs, under the same name) can hold a
test with the same id. Every store method takes the repository: whatever one repository's
writes name, the other's test, results, rollups and history read the same afterwards; and the
schema itself refuses a row of one repository under another's test.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from keepgreen.adapters.db import tables
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import FlakyStore, SavedStatus, UploadRecord
from keepgreen.app.flaky.tally import TestTally
from keepgreen.app.ports import UnitOfWork
from keepgreen.bootstrap import Container
from keepgreen.core.flaky.model import StatusChange
from keepgreen.core.flaky.monitors import ManualFlag, MonitorState, TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings
from keepgreen.core.model import Repository
from tests.support.builders import T0
from tests.support.gitrepo import GitRepo
from tests.support.tallies import a_tally
from tests.support.wire import REPO

SHARED = "5e1f0c3a-9b7e-5d2c-8a41-0c6f3b2a1d90"  # a v5 UUID both repositories' reports name
SHA = "a" * 40


@pytest.fixture
def acme(container: Container, tmp_path: Path) -> Repository:
    return container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(GitRepo(tmp_path / "acme").path), ci_command=None
    )


@pytest.fixture
def globex(container: Container, tmp_path: Path) -> Repository:
    """Another org's repository, registered under the very same name."""
    return container.admin.add_repository(
        org_slug="globex", ref=REPO, git_url=str(GitRepo(tmp_path / "globex").path), ci_command=None
    )


def an_upload(repository: Repository, upload_id: str, **fields: Any) -> UploadRecord:
    values: dict[str, Any] = {
        "id": upload_id,
        "repository_id": repository.id,
        "commit_sha": SHA,
        "branch": "main",
        "pr_number": 7,
        "job_url": None,
        "run_id": None,
        "variant": "",
        "received_at": T0,
        "files": 1,
        "tests": 1,
        "results": 1,
        "failed": 1,
        "skipped": 0,
        "excluded": False,
        **fields,
    }
    return UploadRecord(**values)


def add_tests(store: FlakyStore, repository: Repository, *tallies: TestTally) -> None:
    """Store `tallies` as one upload of `repository`."""
    upload = an_upload(repository, str(uuid.uuid4()))
    assert store.claim_upload(upload) is None
    store.add_tests(upload, list(tallies), {}, roll_up=True)


def store_everything(
    store: FlakyStore, repository: Repository, *, name: str, upload_id: str, summary: str
) -> None:
    """`repository`'s test SHARED with a failed result, rollups, a status change, a status,
    a manual flag, an override, a ticket and settings: every write the store has.
    """
    repository_id = repository.id
    store.save_settings(
        repository_id,
        FlakySettings(quarantine=QuarantineSettings(enabled=True, auto_quarantine_flaky=True)),
        at=T0,
    )
    upload = an_upload(repository, upload_id)
    assert store.claim_upload(upload) is None
    tally = a_tally(SHARED, name, passes=1, failures=1, message=summary)
    store.add_tests(upload, [tally], {}, roll_up=True)
    monitors = {
        "pass_on_retry": MonitorState(
            active=True, since=T0, reason=summary, classification=TestStatus.FLAKY
        )
    }
    store.save_statuses(
        repository_id, [SavedStatus(SHARED, TestStatus.FLAKY, summary, T0, monitors)]
    )
    store.add_status_change(repository_id, StatusChange(SHARED, T0, TestStatus.FLAKY, summary))
    store.set_manual_flag(repository_id, SHARED, ManualFlag(summary, T0))
    store.set_override(repository_id, SHARED, QuarantineOverride.ALWAYS, at=T0)
    store.set_ticket(repository_id, SHARED, f"{name}-1")


def everything_read(uow: UnitOfWork, repository: Repository) -> dict[str, Any]:
    """Every read of the store and the listings about `repository`'s test SHARED."""
    store, listings, repository_id = uow.flaky, uow.flaky_listings, repository.id
    settings = store.settings(repository_id)
    since = T0 - timedelta(days=7)
    end = T0 + timedelta(hours=1)
    return {
        "test": store.test(repository_id, SHARED),
        "tests": store.tests(repository_id, [SHARED]),
        "settings": settings,
        "mixed": store.mixed_on_commit(repository_id, SHA),
        "buckets": store.buckets(repository_id, [SHARED], since),
        "failing_commits": store.failing_commits(repository_id, [SHARED], since),
        "commits_since": store.commits_since(repository_id, since),
        "commit_runs": store.commit_runs(repository_id, [SHA], [SHARED]),
        "unhealthy": store.unhealthy_ids(repository_id),
        "quarantined": store.quarantined_ids(repository_id, settings, [SHARED]),
        "history": listings.status_history(repository_id, SHARED),
        "rates": listings.failure_rates(repository_id, [SHARED], now=end),
        "impacted": listings.pull_requests_impacted(repository_id, [SHARED], since),
        "failures": listings.failure_counts(repository_id, [SHARED], since),
        "failing": listings.page_failing(repository_id, since, end, offset=0, limit=10),
        "failing_count": listings.count_failing(repository_id, since, end),
        "flaky": listings.page_by_status(repository_id, TestStatus.FLAKY, offset=0, limit=10),
        "quarantine_list": listings.page_quarantined(repository_id, settings, offset=0, limit=10),
    }


def test_one_test_id_in_two_repositories_is_two_tests(
    container: Container, acme: Repository, globex: Repository
) -> None:
    with container.unit_of_work() as uow:
        add_tests(uow.flaky, acme, a_tally(SHARED, "acme_name"))
        add_tests(uow.flaky, globex, a_tally(SHARED, "globex_name"))
        uow.commit()
    with container.unit_of_work() as uow:
        acme_test, globex_test = (uow.flaky.test(r.id, SHARED) for r in (acme, globex))
        assert acme_test is not None
        assert globex_test is not None
        assert (acme_test.name, globex_test.name) == ("acme_name", "globex_name")
        assert uow.flaky.tests(acme.id, [SHARED])[SHARED].name == "acme_name"
        assert uow.flaky.tests(globex.id, [SHARED])[SHARED].name == "globex_name"


def test_every_write_of_one_repository_leaves_the_others_test_as_it_was(
    container: Container, acme: Repository, globex: Repository
) -> None:
    with container.unit_of_work() as uow:
        store_everything(uow.flaky, acme, name="acme", upload_id="u-acme", summary="acme failed")
        uow.commit()
    with container.unit_of_work() as uow:
        before = everything_read(uow, acme)
    assert before["test"] is not None
    assert before["test"].ticket == "acme-1"

    with container.unit_of_work() as uow:
        store_everything(
            uow.flaky, globex, name="globex", upload_id="u-globex", summary="injected by globex"
        )
        uow.flaky.set_override(globex.id, SHARED, QuarantineOverride.NEVER, at=T0)
        uow.flaky.set_manual_flag(globex.id, SHARED, None)
        uow.commit()

    with container.unit_of_work() as uow:
        assert everything_read(uow, acme) == before
        theirs = everything_read(uow, globex)
    assert theirs["test"] is not None
    assert (theirs["test"].name, theirs["test"].ticket) == ("globex", "globex-1")
    assert theirs["test"].quarantine_override is QuarantineOverride.NEVER
    assert theirs["test"].manual_flag is None
    assert [failure.summary for failure in theirs["failures"][SHARED]] == ["injected by globex"]
    assert theirs["rates"][SHARED].runs_7d == 2  # globex's own runs, not acme's added in


def test_writes_naming_a_test_the_repository_lacks_change_nothing(
    container: Container, acme: Repository, globex: Repository
) -> None:
    with container.unit_of_work() as uow:
        store_everything(uow.flaky, acme, name="acme", upload_id="u-acme", summary="acme failed")
        uow.commit()
    with container.unit_of_work() as uow:
        before = everything_read(uow, acme)

    with container.unit_of_work() as uow:
        store = uow.flaky
        store.save_statuses(globex.id, [SavedStatus(SHARED, TestStatus.BROKEN, "globex", T0, {})])
        store.set_manual_flag(globex.id, SHARED, None)
        store.set_override(globex.id, SHARED, QuarantineOverride.NEVER, at=T0)
        store.set_ticket(globex.id, SHARED, "GLOBEX-1")
        assert store.test(globex.id, SHARED) is None
        assert store.tests(globex.id, [SHARED]) == {}
        uow.commit()

    with container.unit_of_work() as uow:
        assert everything_read(uow, acme) == before


@pytest.mark.parametrize("row", ["result", "failure", "status_change"])
def test_the_schema_refuses_a_row_under_another_repositorys_test(
    container: Container, acme: Repository, globex: Repository, row: str
) -> None:
    with container.unit_of_work() as uow:
        add_tests(uow.flaky, acme, a_tally(SHARED, "acme_name"))
        uow.flaky.claim_upload(an_upload(globex, "u-globex"))
        uow.commit()
    rows: dict[str, tuple[Any, dict[str, Any]]] = {
        "result": (
            tables.TestResultRow,
            {"upload_id": "u-globex", "at": T0, "outcome": "failed", "attempt": 0},
        ),
        "failure": (
            tables.TestFailureTemplateRow,
            {"day": T0, "position": 0, "summary": "boom", "occurrences": 1, "last_at": T0},
        ),
        "status_change": (
            tables.TestStatusChangeRow,
            {"at": T0, "status": "flaky", "reason": "x"},
        ),
    }
    table, values = rows[row]
    statement = insert(table).values(repository_id=globex.id, test_case_id=SHARED, **values)
    with container.engine.connect() as connection, pytest.raises(IntegrityError):
        connection.execute(statement)


def test_add_tests_writes_only_the_uploads_repository(
    container: Container, acme: Repository, globex: Repository
) -> None:
    with container.unit_of_work() as uow:
        add_tests(uow.flaky, acme, a_tally(SHARED, "acme_name", passes=1))
        uow.commit()
    with container.unit_of_work() as uow:
        before = everything_read(uow, acme)
    with container.unit_of_work() as uow:
        add_tests(uow.flaky, globex, a_tally(SHARED, "globex_name", failures=3, message="boom"))
        uow.commit()
    with container.unit_of_work() as uow:
        assert everything_read(uow, acme) == before
        assert uow.flaky_listings.failure_rates(globex.id, [SHARED], now=T0)[SHARED].runs_7d == 3


def test_the_sweep_sees_each_repositorys_unhealthy_tests_under_that_repository(
    container: Container, acme: Repository, globex: Repository
) -> None:
    other = "0b1d2e3f-4a5b-5c6d-8e7f-8091a2b3c4d5"
    with container.unit_of_work() as uow:
        add_tests(uow.flaky, acme, a_tally(SHARED, "a"), a_tally(other, "b"))
        add_tests(uow.flaky, globex, a_tally(SHARED, "c"))
        flaky = [SavedStatus(SHARED, TestStatus.FLAKY, "x", T0, {})]
        uow.flaky.save_statuses(acme.id, flaky)
        uow.flaky.save_statuses(globex.id, [replace(flaky[0], status=TestStatus.BROKEN)])
        uow.commit()
    with container.unit_of_work() as uow:
        assert dict(uow.flaky.unhealthy_by_repository()) == {
            acme.id: [SHARED],
            globex.id: [SHARED],
        }
        assert uow.flaky.unhealthy_ids(acme.id) == [SHARED]
        assert uow.flaky.tests(globex.id, [SHARED])[SHARED].status is TestStatus.BROKEN
        assert uow.flaky.tests(acme.id, [SHARED])[SHARED].status is TestStatus.FLAKY
        assert uow.flaky.tests(acme.id, [other])[other].status is TestStatus.HEALTHY
