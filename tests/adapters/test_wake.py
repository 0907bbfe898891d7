"""Waking the queue worker of another process: a send through one process's channel wakes a
worker listening through another's, on the same database only (PostgreSQL's NOTIFY, SQLite's
datagram sockets); a send with nobody listening is no error, and a stopped listener leaves
nothing behind.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from keepgreen.adapters.db.engine import make_engine
from keepgreen.adapters.db.wake import COALESCE_SECONDS, SqliteWake, wake_channel
from keepgreen.app.ports import WakeChannel
from tests.conftest import BACKENDS, PG_URL
from tests.support.pgschema import fresh_schema

WAIT_SECONDS = 5.0


@pytest.fixture(params=BACKENDS)
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    """Engines of two databases of the backend (two SQLite files, two PostgreSQL schemas)."""
    if request.param == "sqlite":
        yield (
            make_engine(f"sqlite:///{tmp_path / 'a.db'}"),
            make_engine(f"sqlite:///{tmp_path / 'b.db'}"),
        )
        return
    assert PG_URL is not None
    with (
        fresh_schema(PG_URL, prefix="kg_wake") as one,
        fresh_schema(PG_URL, prefix="kg_wake") as two,
    ):
        yield make_engine(one), make_engine(two)


class Listener:
    """A worker's listening thread: counts its wakes."""

    def __init__(self, channel: WakeChannel) -> None:
        self.woken = threading.Event()
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=channel.listen, args=(self.on_wake, self.stop))
        self.thread.start()

    def on_wake(self) -> None:
        self.count += 1
        self.woken.set()

    def ready(self) -> None:
        """Until it listens: a listener wakes once when it starts listening (for what was
        sent before it was there).
        """
        assert self.woken.wait(WAIT_SECONDS)
        self.woken.clear()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(WAIT_SECONDS)
        assert not self.thread.is_alive()


def test_a_send_from_another_process_wakes_the_listening_worker(
    engines: tuple[Engine, Engine],
) -> None:
    url, _ = engines
    worker, api = wake_channel(url), wake_channel(url)  # each process has its own
    listener = Listener(worker)
    try:
        listener.ready()
        api.send()
        assert listener.woken.wait(WAIT_SECONDS)
        listener.woken.clear()
        time.sleep(COALESCE_SECONDS * 2)
        api.send()  # apart: a wake of its own
        assert listener.woken.wait(WAIT_SECONDS)
    finally:
        listener.close()
        api.close()
        worker.close()


def test_another_database_is_not_woken(engines: tuple[Engine, Engine]) -> None:
    url, other = engines
    worker, elsewhere, here = wake_channel(url), wake_channel(other), wake_channel(url)
    listener = Listener(worker)
    try:
        listener.ready()
        elsewhere.send()
        assert not listener.woken.wait(0.5)
        here.send()  # the same database still wakes it
        assert listener.woken.wait(WAIT_SECONDS)
    finally:
        listener.close()
        for channel in (worker, elsewhere, here):
            channel.close()


def test_a_send_with_nobody_listening_is_no_error(engines: tuple[Engine, Engine]) -> None:
    url, _ = engines
    channel = wake_channel(url)
    channel.send()
    channel.close()


def test_a_stopped_sqlite_listener_leaves_no_socket_and_a_dead_ones_is_cleared(
    tmp_path: Path,
) -> None:
    url = make_engine(f"sqlite:///{tmp_path / 'k.db'}")
    channel = wake_channel(url)
    assert isinstance(channel, SqliteWake)
    listener = Listener(channel)
    listener.ready()
    listener.close()
    assert list(channel.folder.iterdir()) == []
    # A worker killed before its cleanup: its socket stays, bound by nobody.
    dead = channel.folder / f"{os.getpid()}-dead"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
        gone.bind(str(dead))
    channel.send()
    assert not dead.exists()
    channel.close()


def test_a_sqlite_wake_folder_open_to_others_is_not_used(tmp_path: Path) -> None:
    url = make_engine(f"sqlite:///{tmp_path / 'k.db'}")
    channel = wake_channel(url)
    assert isinstance(channel, SqliteWake)
    channel.folder.mkdir(mode=0o700)
    channel.folder.chmod(0o777)  # anyone could put a socket there, or read who listens
    listener = Listener(channel)
    try:
        assert not listener.woken.wait(0.2)  # it does not listen: the worker polls
        assert list(channel.folder.iterdir()) == []
        channel.send()
        assert not listener.woken.wait(0.3)
    finally:
        listener.close()
        channel.close()
