"""SQLite writers of one process take turns before they reach the file's lock: the turn goes
to the next writer the moment a writer's connection is back in the pool (committed, rolled
back, failed), and readers never wait for it. (SQLite's own wait for its lock sleeps with a
backoff up to 100 ms, which left the lock idle while queued writers slept.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import OperationalError

from keepgreen.adapters.db.engine import READ_ONLY_OPTION, make_engine


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as setup:
        setup.execute(text("CREATE TABLE t (x INTEGER)"))
    return engine


def count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM t")).scalar_one())


def write_in_thread(engine: Engine, started: threading.Event) -> threading.Thread:
    def write() -> None:
        started.set()
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO t VALUES (2)"))

    thread = threading.Thread(target=write)
    thread.start()
    return thread


@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_the_next_writer_goes_as_soon_as_a_writer_ends(engine: Engine, end: str) -> None:
    begun: list[str] = []  # the threads that sent BEGIN IMMEDIATE to SQLite, in order

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(*args: object) -> None:
        if args[2] == "BEGIN IMMEDIATE":
            begun.append(threading.current_thread().name)

    holder = engine.connect()
    holder.begin()
    holder.execute(text("INSERT INTO t VALUES (1)"))
    started = threading.Event()
    waiting = write_in_thread(engine, started)
    started.wait()
    waiting.join(timeout=0.3)
    assert waiting.is_alive()  # it waits, neither failing nor writing,
    assert begun == [threading.current_thread().name]  # for its turn, not in SQLite's sleeps
    getattr(holder, end)()
    if end != "close":
        holder.close()
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    assert count(engine) == (2 if end == "commit" else 1)
    assert begun[1] == waiting.name


def test_a_failed_transaction_gives_the_turn_back(engine: Engine) -> None:
    with pytest.raises(OperationalError), engine.begin() as connection:
        connection.execute(text("INSERT INTO no_such_table VALUES (1)"))
    with engine.begin() as connection:  # would wait forever if the turn were kept
        connection.execute(text("INSERT INTO t VALUES (1)"))
    assert count(engine) == 1


def test_a_failed_begin_gives_the_turn_back(tmp_path: Path, engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _short_timeout(dbapi_connection: object, _record: object) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=50")  # type: ignore[attr-defined]

    engine.dispose()  # connections made from now on have the short timeout
    other = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")  # another process's writer
    with other.connect() as elsewhere:
        elsewhere.begin()
        with pytest.raises(OperationalError, match="locked"), engine.begin():
            pass
        elsewhere.rollback()
    other.dispose()
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO t VALUES (1)"))
    assert count(engine) == 1


def test_a_connection_that_begins_twice_keeps_its_turn(engine: Engine) -> None:
    with engine.connect() as connection:
        for value in (1, 2):
            with connection.begin():
                connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": value})
    assert count(engine) == 2


def test_a_reader_does_not_wait_for_the_turn(engine: Engine) -> None:
    holder = engine.connect()
    holder.begin()
    try:
        start = time.monotonic()
        reader = engine.execution_options(**{READ_ONLY_OPTION: True})
        with reader.connect() as connection, connection.begin():
            assert connection.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
        assert time.monotonic() - start < 5  # the turn's wait is 30 s
    finally:
        holder.rollback()
        holder.close()


def test_writers_of_many_threads_all_write(engine: Engine) -> None:
    def write(thread: int) -> None:
        for value in range(25):
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": thread * 100 + value})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert count(engine) == 8 * 25
