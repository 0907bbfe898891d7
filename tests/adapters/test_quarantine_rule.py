"""The store's SQL quarantine rule gives the core's answer (`is_quarantined`) for every status,
override and repository setting, in each query that uses it: the quarantined ids a test run
asks about (getQuarantineConfig, an upload's summary), and the quarantine list's count and page;
on SQLite and PostgreSQL. And the quarantine list still reads the candidates' partial index.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select, text

from keepgreen.adapters.db import tables
from keepgreen.adapters.db.flaky_rows import quarantined
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import SavedStatus, UploadRecord
from keepgreen.bootstrap import Container
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings, is_quarantined
from keepgreen.core.model import Repository
from tests.support.builders import T0
from tests.support.gitrepo import GitRepo
from tests.support.tallies import a_tally
from tests.support.wire import REPO

OVERRIDES: list[QuarantineOverride | None] = [None, *QuarantineOverride]
# One test for each status and override, named after them.
CASES = {
    f"{status.value}-{override.name if override else 'auto'}": (status, override)
    for status, override in itertools.product(TestStatus, OVERRIDES)
}
EVERY_SETTING = [
    QuarantineSettings(enabled=enabled, auto_quarantine_flaky=flaky, auto_quarantine_broken=broken)
    for enabled, flaky, broken in itertools.product((False, True), repeat=3)
]


def id_of(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


@pytest.fixture
def repository(container: Container, tmp_path: Path) -> Repository:
    """A repository holding one test of each status and override."""
    repository = container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(GitRepo(tmp_path / "acme").path), ci_command=None
    )
    upload = UploadRecord(
        id=str(uuid.uuid4()),
        repository_id=repository.id,
        commit_sha="a" * 40,
        branch="main",
        pr_number=None,
        job_url=None,
        run_id=None,
        variant="",
        received_at=T0,
        files=1,
        tests=len(CASES),
        results=len(CASES),
        failed=0,
        skipped=0,
        excluded=False,
    )
    with container.unit_of_work() as uow:
        store = uow.flaky
        assert store.claim_upload(upload) is None
        tallies = [a_tally(id_of(name), name, passes=1) for name in CASES]
        store.add_tests(upload, tallies, {}, roll_up=False)
        statuses = [
            SavedStatus(id_of(name), status, "set by the test", T0, {})
            for name, (status, _) in CASES.items()
        ]
        store.save_statuses(repository.id, statuses)
        for name, (_, override) in CASES.items():
            store.set_override(repository.id, id_of(name), override, at=T0)
        uow.commit()
    return repository


@pytest.mark.parametrize(
    "quarantine",
    EVERY_SETTING,
    ids=lambda s: (
        f"on={s.enabled}-flaky={s.auto_quarantine_flaky}-broken={s.auto_quarantine_broken}"
    ),
)
def test_the_sql_rule_agrees_with_the_core_rule(
    container: Container, repository: Repository, quarantine: QuarantineSettings
) -> None:
    settings = FlakySettings(quarantine=quarantine)
    expected = sorted(
        name
        for name, (status, override) in CASES.items()
        if is_quarantined(quarantine, override, status)
    )
    names = {id_of(name): name for name in CASES}
    with container.unit_of_work(read_only=True) as uow:
        found = uow.flaky.quarantined_ids(repository.id, settings, list(names))
        count = uow.flaky_listings.count_quarantined(repository.id, settings)
        page = uow.flaky_listings.page_quarantined(repository.id, settings, offset=0, limit=100)
    assert sorted(names[test] for test in found) == expected
    assert count == len(expected)
    assert [test.name for test in page] == expected  # the list is in name order
    # The rule is not vacuous: with quarantining on, some test is in and some is out.
    if quarantine.enabled:
        assert 0 < len(expected) < len(CASES)


def test_the_quarantine_list_reads_the_candidates_partial_index(
    container: Container, repository: Repository
) -> None:
    settings = FlakySettings(
        quarantine=QuarantineSettings(enabled=True, auto_quarantine_broken=True)
    )
    row = tables.TestCaseRow
    query = select(row.id).where(quarantined(repository.id, settings)).order_by(row.name, row.id)
    engine = container.engine
    compiled = query.compile(engine, compile_kwargs={"literal_binds": True})
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            # Whether the planner can use the index at all, not whether it is the cheapest on
            # a table of nine rows.
            connection.execute(text("SET LOCAL enable_seqscan = off"))
            plan = connection.exec_driver_sql(f"EXPLAIN {compiled}").all()
        else:
            plan = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}").all()
    assert any("ix_test_cases_quarantine_candidates" in str(row) for row in plan), plan
