"""When the database cannot take a request now, the client is told to come back (503 with
Retry-After), not shown a crash: every pooled connection busy, or SQLite's write lock held
past the busy timeout. And a reader on SQLite never waits for a writer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import sessionmaker

from keepgreen.adapters.db import engine as engine_module
from keepgreen.adapters.db.engine import READ_ONLY_OPTION, make_engine
from keepgreen.adapters.db.uow import SqlUnitOfWork
from keepgreen.app.errors import Busy


@contextmanager
def writing(engine: Engine) -> Iterator[None]:
    """A transaction of `engine` that holds SQLite's write lock (BEGIN IMMEDIATE) until the
    block ends.
    """
    writer = engine.connect()
    writer.begin()
    try:
        yield
    finally:
        writer.rollback()
        writer.close()


def assert_busy(engine: Engine) -> None:
    """A unit of work of `engine` that must write is told the database is busy."""
    with pytest.raises(Busy), SqlUnitOfWork(sessionmaker(engine), lambda: "id") as uow:
        uow.repositories.list_all()


def test_a_pool_with_no_connection_left_is_busy(tmp_path: Path) -> None:
    engine = create_engine(
        f"sqlite:///{tmp_path / 'db.sqlite'}", pool_size=1, max_overflow=0, pool_timeout=0.1
    )
    sessions = sessionmaker(engine)
    held = engine.connect()
    try:
        with pytest.raises(Busy) as caught, SqlUnitOfWork(sessions, lambda: "id") as uow:
            uow.repositories.list_all()
    finally:
        held.close()
    assert caught.value.retry_after_seconds > 0
    assert caught.value.code == "database_busy"


def test_sqlite_locked_past_the_busy_timeout_is_busy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = make_engine(url)

    @event.listens_for(engine, "connect")
    def _short_timeout(dbapi_connection: object, _record: object) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=100")  # type: ignore[attr-defined]

    with engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
    # Another process's writer (an engine of its own: writers of one engine take turns
    # before they reach the file's lock).
    other = make_engine(url)
    with writing(other):
        assert_busy(engine)
    other.dispose()


def test_a_sqlite_writer_whose_turn_does_not_come_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "SQLITE_WRITE_WAIT_SECONDS", 0.1)
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with writing(engine):  # this process's writer has the turn
        assert_busy(engine)
    # The turn came back with the connection: the next writer gets it.
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (x INTEGER)"))


def test_a_sqlite_reader_reads_beside_a_writer_without_waiting(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
        setup.execute(text("INSERT INTO t VALUES (1)"))
    writer = engine.connect()
    writer.begin()
    writer.execute(text("INSERT INTO t VALUES (2)"))  # not committed: the reader sees 1 row
    seen: list[int] = []
    took: list[float] = []

    def read() -> None:
        start = time.monotonic()
        reader = engine.execution_options(**{READ_ONLY_OPTION: True})
        with reader.connect() as connection, connection.begin():
            seen.append(connection.execute(text("SELECT count(*) FROM t")).scalar_one())
        took.append(time.monotonic() - start)

    try:
        thread = threading.Thread(target=read)
        thread.start()
        thread.join(timeout=10)
    finally:
        writer.rollback()
        writer.close()
    assert seen == [1]
    assert took[0] < 2  # the busy timeout is 30 s: a reader that queued would take that long
