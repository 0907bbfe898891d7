"""Engines for SQLite and PostgreSQL, and applying migrations at start."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import QueuePool

from keepgreen.app.telemetry import PoolStats

MIGRATIONS = "keepgreen.adapters.db:migrations"
MIGRATION_LOCK_KEY = 0x6B67_6D69  # "kgmi": any constant shared by every keepgreen process


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets foreign keys, WAL, a busy timeout and serial writes."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, open transactions, so `BEGIN IMMEDIATE` below is used.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Take the write lock up front: a deferred transaction that later writes can fail with
        # SQLITE_BUSY at once instead of waiting, when two writers race.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def pool_stats(engine: Engine) -> PoolStats | None:
    """The engine's connection pool now; None for a pool that keeps no such numbers."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        return None
    return PoolStats(
        size=pool.size(),
        checked_out=pool.checkedout(),
        idle=pool.checkedin(),
        # QueuePool counts overflow from -size (room left in the pool) up; only the part
        # beyond the pool's size is overflow an operator watches.
        overflow=max(pool.overflow(), 0),
    )


def alembic_config(engine: Engine | None = None) -> Config:
    """An Alembic config that finds the packaged migrations (installed or editable)."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def migrate(engine: Engine) -> None:
    """Bring the database to the newest schema (idempotent).

    Processes that start together (several `keepgreen serve`/`worker` processes, or a CLI
    command beside the server) migrate one at a time: PostgreSQL through an advisory lock,
    a SQLite file through an OS file lock beside it.
    """
    if engine.dialect.name == "postgresql":
        with engine.connect() as lock:
            lock.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            try:
                command.upgrade(alembic_config(engine), "head")
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
                lock.commit()
        return
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        command.upgrade(alembic_config(engine), "head")
        return
    with Path(f"{database}.migrate-lock").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            command.upgrade(alembic_config(engine), "head")
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
