"""Migrations at start: idempotent, and safe when several processes start together."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from keepgreen.adapters.db.engine import make_engine, migrate
from keepgreen.adapters.db.tables import Base
from tests.conftest import PG_URL


def test_migrating_twice_changes_nothing(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)  # the fixture's database is already at head
    migrate(engine)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert set(Base.metadata.tables) <= tables


@pytest.mark.skipif(PG_URL is None, reason="needs KEEPGREEN_TEST_DATABASE_URL (PostgreSQL)")
def test_processes_starting_together_migrate_once() -> None:
    """Four engines (as four processes would) migrate one empty schema at the same moment."""
    assert PG_URL is not None
    schema = f"kg_race_{uuid.uuid4().hex[:10]}"
    admin = make_engine(PG_URL)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    engines = [make_engine(url.render_as_string(hide_password=False)) for _ in range(4)]
    try:
        with ThreadPoolExecutor(len(engines)) as pool:
            list(pool.map(migrate, engines))
        with engines[0].connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
        assert len(versions) == 1
    finally:
        for engine in engines:
            engine.dispose()
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
