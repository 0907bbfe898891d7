"""Waking the queue workers of other processes: what one process writes for the worker (a
submitted PR, a reported status) is read at once by a worker that runs elsewhere, instead of
at its next poll (`KEEPGREEN_WORKER_POLL_SECONDS`).

PostgreSQL: `NOTIFY keepgreen_wake_<key>` on a connection of the channel's own, heard by every
worker that `LISTEN`s, on any machine; the key is made of the database's name and connection
options (its schema), since PostgreSQL's channels span a whole database. SQLite (one machine
by nature): a datagram to each worker's socket in a folder of the temporary directory named
after the database file (mode 0700, so only processes of the same user wake it).

Either way a message carries nothing; sends closer together than `COALESCE_SECONDS` go as one,
which the worker's wake delay (25 ms) covers: a write committed before the skipped send is
committed before the woken pass begins.
Failures are logged at debug level and dropped: the poll stays the fallback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import structlog
from sqlalchemy import Engine

from keepgreen.app.ports import WakeChannel

log = structlog.get_logger(__name__)

COALESCE_SECONDS = 0.01
# How often a listener checks `stop`, and waits before it tries a lost connection again.
LISTEN_TICK_SECONDS = 0.5
RECONNECT_SECONDS = 1.0


def wake_channel(engine: Engine) -> WakeChannel:
    """The channel for `engine`'s database (SQLite in memory: one that does nothing)."""
    if engine.dialect.name == "postgresql":
        return PostgresWake(engine)
    database = engine.url.database
    if not database or database == ":memory:":
        return NoWake()
    return SqliteWake(Path(database))


class NoWake:
    """No other process can share the database."""

    def send(self) -> None:
        return

    def listen(self, on_wake: Callable[[], None], stop: threading.Event) -> None:  # noqa: ARG002
        stop.wait()

    def close(self) -> None:
        return


class _Coalesced:
    """`due()`: whether a send now is more than `COALESCE_SECONDS` after the last one."""

    def __init__(self) -> None:
        self._last = float("-inf")
        self._lock = threading.Lock()

    def due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last < COALESCE_SECONDS:
                return False
            self._last = now
            return True


class PostgresWake:
    """NOTIFY and LISTEN on connections of their own (autocommit; the pool is not used)."""

    def __init__(self, engine: Engine) -> None:
        # The driver's arguments as the engine's own connections get them (the password stays
        # in memory only).
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        self._connect_args: tuple[list[Any], dict[str, Any]] = (
            list(cargs),
            {**cparams, "autocommit": True},
        )
        where = f"{engine.url.database}?{sorted(engine.url.query.items())}"
        self.channel = f"keepgreen_wake_{hashlib.sha256(where.encode()).hexdigest()[:12]}"
        self._coalesced = _Coalesced()
        self._lock = threading.Lock()
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None

    def send(self) -> None:
        if not self._coalesced.due():
            return
        with self._lock:
            try:
                if self._connection is None or self._connection.closed:
                    # Short: the request that sends waits on it (its own write is done).
                    self._connection = self._connect(timeout=2)
                self._connection.execute(f"NOTIFY {self.channel}")
            except psycopg.Error as error:
                log.debug("worker wake not sent", error=type(error).__name__)
                if self._connection is not None:
                    self._connection.close()
                self._connection = None

    def listen(self, on_wake: Callable[[], None], stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                with self._connect(timeout=5) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    on_wake()  # what was sent while this listener was not connected
                    while not stop.is_set():
                        for _ in conn.notifies(timeout=LISTEN_TICK_SECONDS, stop_after=1):
                            on_wake()
            except psycopg.Error as error:
                log.debug("worker wake listener reconnecting", error=type(error).__name__)
                stop.wait(RECONNECT_SECONDS)

    def _connect(self, *, timeout: int) -> psycopg.Connection[tuple[object, ...]]:
        cargs, cparams = self._connect_args
        connection: psycopg.Connection[tuple[object, ...]] = psycopg.connect(
            *cargs, **{**cparams, "connect_timeout": timeout}
        )
        return connection

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
            self._connection = None


class SqliteWake:
    """A datagram to each listening worker's socket in the database's wake folder."""

    def __init__(self, database: Path) -> None:
        key = hashlib.sha256(str(database.resolve()).encode()).hexdigest()[:16]
        # Short enough for a socket's path (108 bytes), whatever the database's own path.
        self.folder = Path(tempfile.gettempdir()) / f"keepgreen-wake-{os.getuid()}-{key}"
        self._coalesced = _Coalesced()
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None

    def send(self) -> None:
        if not self._coalesced.due() or not self._is_ours():
            return
        with self._lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.settimeout(0.0)  # never blocks a request
            try:
                listeners = list(os.scandir(self.folder))
            except OSError:
                return
            for listener in listeners:
                try:
                    self._sender.sendto(b"w", listener.path)
                except ConnectionRefusedError:
                    with contextlib.suppress(OSError):  # a worker gone without its cleanup
                        Path(listener.path).unlink()
                except OSError:
                    continue  # its queue is full (a wake is pending anyway), or it just left

    def listen(self, on_wake: Callable[[], None], stop: threading.Event) -> None:
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
        except OSError as error:
            log.debug("worker wake folder not made", error=str(error))
        if not self._is_ours():
            log.warning("worker wake folder not usable; the worker polls", folder=str(self.folder))
            stop.wait()
            return
        path = self.folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
            listener.bind(str(path))
            listener.settimeout(LISTEN_TICK_SECONDS)
            on_wake()  # what was sent before this listener was there
            try:
                while not stop.is_set():
                    try:
                        listener.recv(16)
                    except TimeoutError:
                        continue
                    on_wake()
            finally:
                with contextlib.suppress(OSError):
                    path.unlink()

    def _is_ours(self) -> bool:
        """The folder exists, is a real folder (not a link) of this user, closed to others."""
        try:
            info = self.folder.lstat()
        except OSError:
            return False
        return (
            stat.S_ISDIR(info.st_mode)
            and info.st_uid == os.getuid()
            and stat.S_IMODE(info.st_mode) & 0o077 == 0
        )

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
            self._sender = None
