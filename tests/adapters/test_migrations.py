"""Migrations at start: idempotent, and safe when several processes start together."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from keepgreen.adapters.db.engine import make_engine, migrate
from keepgreen.adapters.db.tables import Base
from tests.conftest import BACKENDS, PG_URL
from tests.support.pgschema import fresh_schema


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
