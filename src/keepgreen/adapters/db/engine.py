"""Engines for SQLite and PostgreSQL, and applying migrations at start."""

from __future__ import annotations

import fcntl
import sqlite3
import threading
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.pool import QueuePool

from keepgreen.app.telemetry import PoolStats
from keepgreen.settings import SettingsError

MIGRATIONS = "keepgreen.adapters.db:migrations"
MIGRATION_LOCK_KEY = 0x6B67_6D69  # "kgmi": any constant shared by every keepgreen process
URL_FORMS = "sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE"
MAX_REASON_LENGTH = 300
# An execution option: connections with it begin a deferred (read) transaction on SQLite.
READ_ONLY_OPTION = "keepgreen_read_only"
# How long a SQLite writer waits for its turn, in this process and then in the file's lock.
SQLITE_WRITE_WAIT_SECONDS = 30
_HOLDS_WRITE_TURN = "keepgreen_holds_write_turn"


class DatabaseUnavailable(SettingsError):
    """The configured database cannot be used: one sentence naming it (password hidden) and
    the reason, for an operator to read at start instead of a driver's traceback.
    """


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets foreign keys, WAL, a busy timeout and serial writes.

    Raises DatabaseUnavailable when `url` is not a database URL keepgreen can use, or its
    SQLite file's folder cannot be made. Nothing connects yet (see `open_engine`).
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        # Not echoed: a URL that does not parse cannot be redacted reliably.
        raise DatabaseUnavailable(
            f"KEEPGREEN_DATABASE_URL is not a database URL keepgreen can use ({URL_FORMS})"
        ) from None
    if parsed.get_backend_name() != "sqlite":
        try:
            return create_engine(parsed, pool_pre_ping=True)
        except (ArgumentError, ImportError, ValueError) as error:
            raise DatabaseUnavailable(
                f"KEEPGREEN_DATABASE_URL names {parsed.drivername}, which keepgreen has "
                f"no driver for ({URL_FORMS})"
            ) from error
    if parsed.database and parsed.database != ":memory:":
        folder = Path(parsed.database).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            reason = f"cannot create the folder {folder}: {folder_problem(folder, error)}"
            raise DatabaseUnavailable(cannot_use(parsed, reason)) from error
    engine = create_engine(
        parsed, connect_args={"check_same_thread": False, "timeout": SQLITE_WRITE_WAIT_SECONDS}
    )
    # SQLite has one writer at a time. Its own wait for the write lock is a sleep that backs
    # off up to 100 ms, so writers of one process that queued there kept the lock idle while
    # they slept (half of a flood of submits went to that). They take turns here instead,
    # handed over the moment the last writer's connection is back in the pool; the busy
    # timeout still orders writers of other processes.
    write_turn = threading.Lock()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, open transactions, so `BEGIN IMMEDIATE` below is used.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL syncs at checkpoints, not at every commit: a commit survives the
        # process (a crash, a kill), and the database is never corrupted; only a power loss or
        # an OS crash can take back the last commits. (FULL: a disk flush per commit, which
        # made the flush most of a write's time.)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY_OPTION):
            # A reader never waits: in WAL mode it reads the last commit beside any writer.
            connection.exec_driver_sql("BEGIN")
            return
        if not connection.info.get(_HOLDS_WRITE_TURN):
            if not write_turn.acquire(timeout=SQLITE_WRITE_WAIT_SECONDS):
                # What SQLite itself says when its lock stays taken (the caller's Busy).
                locked = sqlite3.OperationalError("database is locked")
                raise OperationalError("BEGIN IMMEDIATE", None, locked)
            connection.info[_HOLDS_WRITE_TURN] = True
        # Take the write lock up front: a deferred transaction that later writes can fail with
        # SQLITE_BUSY at once instead of waiting, when two writers race.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        # Back in the pool (committed, rolled back, or invalidated): the next writer's turn.
        if record.info.pop(_HOLDS_WRITE_TURN, False):
            write_turn.release()

    return engine


def folder_problem(folder: Path, error: OSError) -> str:
    """Why `folder` could not be made (`error`), as a person would say it."""
    if isinstance(error, FileExistsError | NotADirectoryError):
        # mkdir's own words ("File exists") hide that a file stands where a folder is needed.
        for path in (folder, *folder.parents):
            if path.exists() and not path.is_dir():
                return f"{path} is a file, not a folder"
    return error.strerror or str(error)


def open_engine(url: str) -> Engine:
    """`make_engine(url)`, connected once: a database that is down, missing, refuses the
    user or cannot be written is a DatabaseUnavailable here rather than a traceback later.
    """
    engine = make_engine(url)
    try:
        with engine.connect():
            pass
    except DBAPIError as error:
        engine.dispose()
        raise DatabaseUnavailable(cannot_use(engine.url, driver_reason(error))) from error
    return engine


def cannot_use(url: URL, reason: str) -> str:
    """`cannot connect to the database at URL: REASON`, the password hidden in both."""
    shown = url.render_as_string(hide_password=True)
    if url.password:
        reason = reason.replace(str(url.password), "***")
    verb = "open" if url.get_backend_name() == "sqlite" else "connect to"
    return f"cannot {verb} the database at {shown}: {reason}"


def driver_reason(error: DBAPIError) -> str:
    """The driver's reason, short: psycopg's first line without its `connection to server at
    ... failed:` preamble (the URL already names the server) and its `FATAL:` tag.
    """
    text = str(error.orig or error).strip()
    first = text.splitlines()[0] if text else type(error.orig or error).__name__
    reason = first.rpartition(" failed: ")[2].strip()
    reason = reason.removeprefix("FATAL:").strip() or first
    if reason[:1].isupper() and reason[1:2].islower():
        reason = reason[0].lower() + reason[1:]  # "Connection refused" reads as a clause
    return reason[:MAX_REASON_LENGTH]


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
    lock_path = Path(f"{database}.migrate-lock")
    try:
        lock_file = lock_path.open("a")
    except OSError as error:
        reason = f"cannot write {lock_path}: {error.strerror or error}"
        raise DatabaseUnavailable(cannot_use(engine.url, reason)) from error
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            command.upgrade(alembic_config(engine), "head")
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
