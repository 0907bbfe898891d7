"""Migrations at start: idempotent, and safe when several processes start together."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, MetaData, inspect, text

from keepgreen.adapters.db.engine import alembic_config, make_engine, migrate
from keepgreen.adapters.db.tables import Base
from keepgreen.app.flaky.settings import monitors_to_dict
from keepgreen.app.flaky.store import UploadRecord
from keepgreen.bootstrap import bootstrap
from keepgreen.core.flaky.model import StatusChange
from keepgreen.core.flaky.monitors import TestStatus, default_settings
from keepgreen.core.ids import RepositoryId
from keepgreen.core.model import RepoRef
from keepgreen.settings import Settings
from tests.conftest import BACKENDS, PG_URL
from tests.support.pgschema import fresh_schema
from tests.support.tallies import a_tally


def test_migrating_twice_changes_nothing(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)  # the fixture's database is already at head
    migrate(engine)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert set(Base.metadata.tables) <= tables


@pytest.fixture(params=BACKENDS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all: a new SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    assert PG_URL is not None
    with fresh_schema(PG_URL, prefix="kg_race") as url:
        yield url


def test_processes_starting_together_migrate_once(empty_database_url: str) -> None:
    """Four engines (as four processes would) migrate one empty database at the same moment."""
    engines = [make_engine(empty_database_url) for _ in range(4)]
    try:
        with ThreadPoolExecutor(len(engines)) as pool:
            list(pool.map(migrate, engines))
        with engines[0].connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
        assert len(versions) == 1
        assert set(Base.metadata.tables) <= set(inspect(engines[0]).get_table_names())
    finally:
        for engine in engines:
            engine.dispose()


# -- 0004: tests keyed by (repository, test id) ---------------------------------------------------

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
ACME_REPO, GLOBEX_REPO = "r-acme-widgets", "r-globex-widgets"
SHARED, GLOBEX_ONLY = "11111111-1111-5111-8111-111111111111", "22222222-2222-5222-8222-222222222222"


def _rows_at_0003() -> dict[str, list[dict[str, Any]]]:
    """acme's test SHARED with its history, and globex's upload whose result named SHARED
    (stored, before 0004, in acme's test) next to a test of globex's own.
    """

    def test_case(repository_id: str, test_id: str, name: str) -> dict[str, Any]:
        return {
            "id": test_id,
            "repository_id": repository_id,
            "name": name,
            "variant": "",
            "status": "flaky",
            "status_reason": "flagged",
            "status_at": T0,
            "monitors": {},
            "codeowners": [],
            "first_seen_at": T0,
            "last_seen_at": T0,
        }

    def upload(upload_id: str, repository_id: str) -> dict[str, Any]:
        return {
            "id": upload_id,
            "repository_id": repository_id,
            "commit_sha": "a" * 40,
            "branch": "main",
            "variant": "",
            "received_at": T0,
            "files": 1,
            "tests": 1,
            "results": 1,
            "failed": 1,
            "skipped": 0,
            "excluded": False,
        }

    def result(test_id: str, upload_id: str, repository_id: str) -> dict[str, Any]:
        return {
            "test_case_id": test_id,
            "upload_id": upload_id,
            "repository_id": repository_id,
            "at": T0,
            "outcome": "failed",
            "attempt": 1,
        }

    def hour(test_id: str) -> dict[str, Any]:
        return {
            "test_case_id": test_id,
            "hour": T0,
            "branch": "main",
            "runs": 2,
            "failures": 1,
            "last_run_at": T0,
        }

    return {
        "orgs": [
            {"id": "o-acme", "slug": "acme", "created_at": T0},
            {"id": "o-globex", "slug": "globex", "created_at": T0},
        ],
        "repositories": [
            {
                "id": repository_id,
                "org_id": org_id,
                "host": "github.com",
                "owner": "acme",
                "name": "widgets",
                "git_url": "/nonexistent",
                "created_at": T0,
            }
            for repository_id, org_id in ((ACME_REPO, "o-acme"), (GLOBEX_REPO, "o-globex"))
        ],
        "test_cases": [
            test_case(ACME_REPO, SHARED, "acme_test"),
            test_case(GLOBEX_REPO, GLOBEX_ONLY, "globex_test"),
        ],
        "test_uploads": [upload("u-acme", ACME_REPO), upload("u-globex", GLOBEX_REPO)],
        "test_results": [
            result(SHARED, "u-acme", ACME_REPO),
            result(SHARED, "u-globex", GLOBEX_REPO),  # the cross-tenant write
            result(GLOBEX_ONLY, "u-globex", GLOBEX_REPO),
        ],
        "test_hourly_rollups": [hour(SHARED), hour(GLOBEX_ONLY)],
        "test_commit_rollups": [
            {
                "test_case_id": SHARED,
                "commit_sha": "a" * 40,
                "branch": "main",
                "passes": 1,
                "failures": 1,
                "last_run_at": T0,
                "runs": 2,
            }
        ],
        "test_failure_summaries": [
            {
                "test_case_id": SHARED,
                "day": T0,
                "summary_key": "k",
                "summary": "boom",
                "occurrences": 1,
                "last_at": T0,
            }
        ],
        "test_status_changes": [
            {"test_case_id": SHARED, "at": T0, "status": "flaky", "reason": "flagged"}
        ],
    }


def _pairs(engine: Engine, table: str) -> list[tuple[str, str]]:
    with engine.connect() as connection:
        rows = connection.execute(text(f"SELECT repository_id, test_case_id FROM {table}"))  # noqa: S608 (the test's own table names)
        return sorted((row[0], row[1]) for row in rows)


def _at_0003_with_rows(url: str) -> Engine:
    """A database migrated to 0003 and holding `_rows_at_0003`."""
    engine = make_engine(url)
    command.upgrade(alembic_config(engine), "0003")
    tables = MetaData()
    tables.reflect(engine)
    with engine.begin() as connection:
        for name, rows in _rows_at_0003().items():
            connection.execute(tables.tables[name].insert(), rows)
    return engine


def test_0004_keys_tests_by_repository_and_keeps_each_repositorys_rows(
    empty_database_url: str, tmp_path: Path
) -> None:
    engine = _at_0003_with_rows(empty_database_url)

    migrate(engine)

    acme, globex = (ACME_REPO, SHARED), (GLOBEX_REPO, GLOBEX_ONLY)
    # The result globex's upload stored in acme's test is gone; every other row is kept, with
    # the repository of its test.
    assert _pairs(engine, "test_results") == [acme, globex]
    assert _pairs(engine, "test_hourly_rollups") == [acme, globex]
    for table in ("test_commit_rollups", "test_failure_templates", "test_status_changes"):
        assert _pairs(engine, table) == [acme]
    container = bootstrap(
        Settings(database_url=empty_database_url, data_dir=tmp_path / "data"),
        run_migrations=False,
    )
    try:
        with container.unit_of_work() as uow:
            assert uow.flaky.test(RepositoryId(GLOBEX_REPO), SHARED) is None
            test = uow.flaky.test(RepositoryId(ACME_REPO), SHARED)
            assert test is not None
            assert test.name == "acme_test"
            history = uow.flaky_listings.status_history(RepositoryId(ACME_REPO), SHARED)
            assert [change.reason for change in history] == ["flagged"]
            # Now globex can have a test of its own with the same id.
            upload = UploadRecord(
                id="u-globex-copy",
                repository_id=RepositoryId(GLOBEX_REPO),
                commit_sha="c" * 40,
                branch="main",
                pr_number=None,
                job_url=None,
                run_id=None,
                variant="",
                received_at=T0 + timedelta(hours=1),
                files=1,
                tests=1,
                results=1,
                failed=0,
                skipped=0,
                excluded=False,
            )
            assert uow.flaky.claim_upload(upload) is None
            uow.flaky.add_tests(
                upload, [a_tally(SHARED, "globex_copy", passes=1)], {}, roll_up=True
            )
            uow.flaky.add_status_change(
                RepositoryId(GLOBEX_REPO),
                StatusChange(SHARED, T0 + timedelta(hours=1), TestStatus.HEALTHY, "fine"),
            )
            uow.commit()

        # Down again: one id, one test; the one seen first stays, with its rows.
        command.downgrade(alembic_config(engine), "0003")
        with engine.connect() as connection:
            cases = connection.execute(text("SELECT repository_id, id, name FROM test_cases"))
            assert sorted(tuple(row) for row in cases) == [
                (ACME_REPO, SHARED, "acme_test"),
                (GLOBEX_REPO, GLOBEX_ONLY, "globex_test"),
            ]
            changes = connection.execute(
                text("SELECT test_case_id, reason FROM test_status_changes")
            )
            assert [tuple(row) for row in changes] == [(SHARED, "flagged")]
        migrate(engine)
        with container.unit_of_work() as uow:
            assert uow.flaky.test(RepositoryId(ACME_REPO), SHARED) is not None
            assert uow.flaky.test(RepositoryId(GLOBEX_REPO), SHARED) is None
    finally:
        container.close()
        engine.dispose()


# -- 0015: roll-ups keyed by time, with hour and day totals ----------------------------------------


def test_0015_totals_the_hourly_history_it_finds(empty_database_url: str, tmp_path: Path) -> None:
    engine = make_engine(empty_database_url)
    command.upgrade(alembic_config(engine), "0014")
    tables = MetaData()
    tables.reflect(engine)
    now = T0 + timedelta(days=3, hours=5)
    # SHARED ran on two branches in the same hour, and on days before; GLOBEX_ONLY once, long
    # ago (outside both windows).
    hourly = [
        (SHARED, now - timedelta(hours=1), "main", 4, 1),
        (SHARED, now - timedelta(hours=1), "feature/x", 2, 2),
        (SHARED, now - timedelta(hours=30), "main", 10, 0),
        (SHARED, now - timedelta(days=6), "main", 5, 5),
        (GLOBEX_ONLY, now - timedelta(days=20), "main", 3, 3),
    ]
    with engine.begin() as connection:
        connection.execute(
            tables.tables["test_hourly_rollups"].insert(),
            [
                {
                    "repository_id": ACME_REPO,
                    "test_case_id": test_id,
                    "hour": hour.replace(minute=0, tzinfo=None),
                    "branch": branch,
                    "runs": runs,
                    "failures": failures,
                    "last_run_at": hour.replace(tzinfo=None),
                    "last_failure_at": None,
                }
                for test_id, hour, branch, runs, failures in hourly
            ],
        )

    migrate(engine)

    container = bootstrap(
        Settings(database_url=empty_database_url, data_dir=tmp_path / "data"),
        run_migrations=False,
    )
    try:
        with container.unit_of_work(read_only=True) as uow:
            rates = uow.flaky_listings.failure_rates(
                RepositoryId(ACME_REPO), [SHARED, GLOBEX_ONLY], now=now
            )
        # The week: every SHARED row; the last 24 hours: both branches of the last hour.
        assert (rates[SHARED].runs_7d, rates[SHARED].failures_7d) == (21, 8)
        assert (rates[SHARED].runs_24h, rates[SHARED].failures_24h) == (6, 3)
        assert GLOBEX_ONLY not in rates
        with engine.connect() as connection:
            days = connection.execute(
                text("SELECT test_case_id, runs FROM test_day_totals ORDER BY day, runs")
            ).all()
        assert [tuple(row) for row in days] == [
            (GLOBEX_ONLY, 3),
            (SHARED, 5),
            (SHARED, 10),
            (SHARED, 6),
        ]
        # Down and up again keeps the hourly rows.
        command.downgrade(alembic_config(engine), "0013")
        migrate(engine)
        with engine.connect() as connection:
            kept = connection.execute(text("SELECT COUNT(*) FROM test_hourly_rollups")).scalar()
        assert kept == len(hourly)
    finally:
        container.close()
        engine.dispose()


# -- 0016: failures per day, templates per day ---------------------------------------------------


def test_0016_counts_the_failures_and_keeps_the_summaries_it_finds(
    empty_database_url: str, tmp_path: Path
) -> None:
    engine = _at_0003_with_rows(empty_database_url)
    command.upgrade(alembic_config(engine), "0015")
    tables = MetaData()
    tables.reflect(engine)
    # SHARED failed at T0 (from 0003's rows), twice more that day and once the next day.
    later = [T0 + timedelta(hours=2), T0 + timedelta(hours=5), T0 + timedelta(days=1)]
    with engine.begin() as connection:
        connection.execute(
            tables.tables["test_results"].insert(),
            [
                {
                    "repository_id": ACME_REPO,
                    "test_case_id": SHARED,
                    "upload_id": "u-acme",
                    "at": at.replace(tzinfo=None),
                    "outcome": "failed",
                    "attempt": 1,
                }
                for at in later
            ],
        )
        connection.execute(
            tables.tables["test_failure_summaries"].insert(),
            {
                "repository_id": ACME_REPO,
                "test_case_id": SHARED,
                "day": T0.replace(hour=0, tzinfo=None),
                "summary_key": "k2",
                "summary": "Timeout after <duration>",
                "occurrences": 2,
                "last_at": later[1].replace(tzinfo=None),
            },
        )

    migrate(engine)

    container = bootstrap(
        Settings(database_url=empty_database_url, data_dir=tmp_path / "data"),
        run_migrations=False,
    )
    repository = RepositoryId(ACME_REPO)
    try:
        with container.unit_of_work(read_only=True) as uow:
            listings = uow.flaky_listings
            # Whole days, then a window that cuts the first day between its failures.
            whole = listings.page_failing(
                repository, T0 - timedelta(hours=9), T0 + timedelta(days=2), offset=0, limit=10
            )
            cut = listings.page_failing(
                repository, T0 + timedelta(hours=1), T0 + timedelta(days=2), offset=0, limit=10
            )
            failures = listings.failure_counts(repository, [SHARED], T0 - timedelta(days=1))
        assert [test.id for test in whole[0]] == [SHARED]
        assert whole[1] == 1
        with engine.connect() as connection:
            days = connection.execute(
                text(
                    "SELECT failures FROM test_failure_days WHERE test_case_id = :test ORDER BY day"
                ),
                {"test": SHARED},
            ).all()
        assert [row[0] for row in days] == [3, 1]  # T0's day, the next
        assert [test.id for test in cut[0]] == [SHARED]
        assert sorted((f.summary, f.count) for f in failures[SHARED]) == [
            ("Timeout after <duration>", 2),
            ("boom", 1),
        ]
        # Down and up again keeps the summaries.
        command.downgrade(alembic_config(engine), "0015")
        with engine.connect() as connection:
            kept = connection.execute(
                text("SELECT summary, occurrences FROM test_failure_summaries ORDER BY summary")
            ).all()
        assert [tuple(row) for row in kept] == [("Timeout after <duration>", 2), ("boom", 1)]
        migrate(engine)
    finally:
        container.close()
        engine.dispose()


# -- 0021: broken tests may be quarantined ---------------------------------------------------------


def test_0021_keeps_broken_tests_out_of_quarantine_where_settings_were_saved(
    empty_database_url: str, tmp_path: Path
) -> None:
    engine = _at_0003_with_rows(empty_database_url)
    command.upgrade(alembic_config(engine), "0019")
    tables = MetaData()
    tables.reflect(engine)
    # acme quarantines flaky tests; its test SHARED (flaky in 0003's rows) now is broken.
    with engine.begin() as connection:
        connection.execute(
            tables.tables["flaky_settings"].insert(),
            {
                "repository_id": ACME_REPO,
                "quarantine_enabled": True,
                "auto_quarantine_flaky": True,
                "ticket_url_template": None,
                "monitors": monitors_to_dict(default_settings()),
                "updated_at": T0.replace(tzinfo=None),
            },
        )
        connection.execute(text("UPDATE test_cases SET status = 'broken'"))

    migrate(engine)

    container = bootstrap(
        Settings(database_url=empty_database_url, data_dir=tmp_path / "data"),
        run_migrations=False,
    )
    repository = RepositoryId(ACME_REPO)
    try:
        with container.unit_of_work(read_only=True) as uow:
            saved = uow.flaky.settings(repository)
            assert saved.quarantine.enabled
            assert saved.quarantine.auto_quarantine_flaky
            assert not saved.quarantine.auto_quarantine_broken  # as before 0021
            assert uow.flaky.quarantined_ids(repository, saved, [SHARED]) == set()
            broken_too = replace(
                saved, quarantine=replace(saved.quarantine, auto_quarantine_broken=True)
            )
            assert uow.flaky.quarantined_ids(repository, broken_too, [SHARED]) == {SHARED}
            assert uow.flaky_listings.count_quarantined(repository, broken_too) == 1
        # Down and up again keeps the settings.
        command.downgrade(alembic_config(engine), "0019")
        migrate(engine)
        with engine.connect() as connection:
            kept = connection.execute(
                text("SELECT quarantine_enabled, auto_quarantine_broken FROM flaky_settings")
            ).all()
        assert [tuple(row) for row in kept] == [(True, False)]
    finally:
        container.close()
        engine.dispose()


def test_0025_turns_comment_commands_on_for_the_queues_it_finds(
    empty_database_url: str, tmp_path: Path
) -> None:
    container = bootstrap(Settings(database_url=empty_database_url, data_dir=tmp_path / "data"))
    engine = make_engine(empty_database_url)
    subprocess.run(["git", "init", "-q", str(tmp_path / "widgets")], check=True)
    try:
        repository = container.admin.add_repository(
            org_slug="acme", ref=RepoRef("github.com", "acme", "widgets"),
            git_url=str(tmp_path / "widgets"), ci_command=None,
        )  # fmt: skip
        for branch in ("main", "release"):
            container.queues.create(repository.org_id, repository.ref, branch)
        command.downgrade(alembic_config(engine), "0024")
        with engine.begin() as connection:  # as queues were created before 0025: off
            connection.execute(text("UPDATE queues SET commands_enabled = false"))
        migrate(engine)
        with engine.connect() as connection:
            after = connection.execute(text("SELECT commands_enabled FROM queues")).scalars().all()
        assert after == [True, True]
    finally:
        container.close()
        engine.dispose()
