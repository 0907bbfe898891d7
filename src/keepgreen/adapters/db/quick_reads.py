"""The reads made on every polled request (the token, the queue's version), as one SQL
statement each on a DBAPI connection in autocommit: no ORM session, no SQLAlchemy execution
layer, no BEGIN/ROLLBACK round trips. A lone SELECT in autocommit is its own transaction: on
SQLite (WAL) it never waits for a writer, on PostgreSQL it takes no lock. The merge button's
one write, `enter_first`, is made the same way (its statements are `first_entries`').

The first HELD_CONNECTIONS threads to read (the event loop's first) keep a connection of their
own, opened straight from the driver; other threads read from a pool: on SQLite the engine's,
on PostgreSQL a small one of its own, opened in autocommit and without a ping per checkout
(the main pool pings). A held connection found dead is let go and the read made from the
pool, where a dead connection is dropped and the read tried once more on a fresh one.
PostgreSQL connections give up connecting after CONNECT_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from sqlalchemy import Engine, create_engine

from keepgreen.adapters.db.first_entries import SQLITE_ROWS, FirstEntryStatements
from keepgreen.core.enums import PrState, QueueMode, QueueState
from keepgreen.core.ids import OrgId, PullRequestId, QueueId
from keepgreen.core.model import (
    QueueAsk,
    QueuedOptions,
    QueueEntry,
    QueueModes,
    QueueVersion,
    RepoRef,
    StateChange,
    TokenRead,
)
from keepgreen.core.priority import Priority

Found = TypeVar("Found")

_LIVE_TOKEN_SQL = (
    "SELECT org_id, token_hash FROM api_tokens WHERE token_hash = ? AND revoked_at IS NULL"  # noqa: S105 (a query, not a secret)
)
# The queue, and PR `number`'s entry in it, of the repository the WHERE clause names.
_QUEUE_JOIN = (
    "LEFT OUTER JOIN queues ON queues.repository_id = repositories.id AND queues.branch = ? "
)
_ENTRY_JOIN = (
    "LEFT OUTER JOIN queue_entries ON queue_entries.queue_id = queues.id "
    "AND queue_entries.number = ? "
)
_REPOSITORY_IS = "repositories.host = ? AND repositories.owner = ? AND repositories.name = ?"
_VERSION_COLUMNS = "queues.id, queues.version"
_OPTIONS_COLUMNS = (
    "queues.id, queue_entries.state, queue_entries.priority_value, "
    "queue_entries.priority_name, queue_entries.no_batch, queues.state, queues.mode, "
    "queues.pending_mode"
)


# The statements are put together from the constants above; every value is a parameter.
def _of_org(columns: str, joins: str) -> str:
    """A read of an org's repository: parameters are the joins', the org, then the repository."""
    return (
        f"SELECT {columns} FROM repositories {joins}"  # noqa: S608 (constants, see above)
        f"WHERE repositories.org_id = ? AND {_REPOSITORY_IS}"
    )


# Reads for the orgs of tokens, many in one statement (the polled calls of one turn of the event
# loop): the asked rows are a VALUES list; each answer row names the asked row it answers. An
# asked row whose token is not live, or whose repository is not the token's org's, has none.
_ASKED = "asked(i, token_hash, host, owner, name, branch, number)"
_ASKED_ROW = "(?, ?, ?, ?, ?, ?, ?)"
_ASKED_JOINS = (
    "JOIN api_tokens ON api_tokens.token_hash = asked.token_hash "
    "AND api_tokens.revoked_at IS NULL "
    "JOIN repositories ON repositories.org_id = api_tokens.org_id "
    "AND repositories.host = asked.host AND repositories.owner = asked.owner "
    "AND repositories.name = asked.name "
    "LEFT OUTER JOIN queues ON queues.repository_id = repositories.id "
    "AND queues.branch = asked.branch "
)
# A lookup of each asked PR by the (queue, number) key. Written as a LATERAL subquery with a
# LIMIT, which PostgreSQL plans on its own for each asked row, as a probe of that key's index:
# as a plain join, with statistics from when the table was small (a queue that grew a
# hundredfold since the last ANALYZE, as under a flood of submits), it read every entry of
# the queue by another of its indexes for each asked row.
_ENTRY_ASKED = (
    "LEFT OUTER JOIN LATERAL (SELECT state, priority_value, priority_name, no_batch "
    "FROM queue_entries WHERE queue_entries.queue_id = queues.id "
    "AND queue_entries.number = asked.number LIMIT 1) AS queue_entries ON true "
)
MAX_ASKED = 32  # rows a statement asks at most; more are asked in several


def _of_token(columns: str, joins: str) -> str:
    """One asked row's read, without the VALUES list (SQLite plans it in a third of the time):
    parameters are the joins', the token's hash, then the repository.
    """
    return (
        f"SELECT 0, api_tokens.org_id, api_tokens.token_hash, {columns} "  # noqa: S608
        "FROM api_tokens JOIN repositories ON repositories.org_id = api_tokens.org_id "
        f"{joins}WHERE api_tokens.token_hash = ? AND api_tokens.revoked_at IS NULL "
        f"AND {_REPOSITORY_IS}"
    )


def _of_tokens(columns: str, joins: str, count: int) -> str:
    """`count` asked rows' read: the asked row's index, the token's org and hash, `columns`."""
    rows = ", ".join([_ASKED_ROW] * count)
    return (
        f"WITH {_ASKED} AS (VALUES {rows}) "  # noqa: S608 (constants, see above)
        f"SELECT asked.i, api_tokens.org_id, api_tokens.token_hash, {columns} "
        f"FROM asked {_ASKED_JOINS}{joins}"
    )


QUICK_POOL_SIZE = 4
# Threads that keep a connection of their own for these reads (the event loop's first): a
# statement on a held connection skips the pool's checkout and return, which cost more than
# the statement itself on SQLite. Further threads take pooled connections.
HELD_CONNECTIONS = 4
CONNECT_TIMEOUT_SECONDS = 5  # PostgreSQL: these reads run in the event loop


class SqlQuickReads:
    def __init__(self, engine: Engine) -> None:
        self._dbapi = engine.dialect.loaded_dbapi
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        self._connect_args: tuple[list[Any], dict[str, Any]] = (list(cargs), dict(cparams))
        if engine.dialect.name == "sqlite":
            # keepgreen's SQLite connections are in autocommit already (isolation_level None).
            self._engine = engine
            self._owned = False
            self._marker = "?"
            # An in-memory database is one per connection: only the engine's pool shares it.
            self._may_hold = engine.url.database not in (None, "", ":memory:")
            self._connect_args[1].update(check_same_thread=False, isolation_level=None, timeout=5)
        else:
            self._engine = create_engine(
                engine.url,
                isolation_level="AUTOCOMMIT",
                pool_size=QUICK_POOL_SIZE,
                max_overflow=QUICK_POOL_SIZE,
                connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS},
            )
            self._owned = True
            self._marker = "%s"
            self._may_hold = True
            self._connect_args[1].update(autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        # PostgreSQL: each event loop's asynchronous connections (for `_all_awaited`), one for
        # the reads and one for the writes, so reads go on while a write waits for its commit
        # to reach the disk; those of loops that have closed are closed when another loop
        # connects, and all at `close`.
        self._async: dict[tuple[asyncio.AbstractEventLoop, bool], Any] | None = (
            None if engine.dialect.name == "sqlite" else {}
        )
        self._first_entries = FirstEntryStatements(engine.dialect)
        self._local = threading.local()
        self._held: list[Any] = []
        self._held_lock = threading.Lock()
        marked = self._marked
        self._token = marked(_LIVE_TOKEN_SQL)
        self._queue_version = marked(_of_org(_VERSION_COLUMNS, _QUEUE_JOIN))
        self._queued_options = marked(_of_org(_OPTIONS_COLUMNS, _QUEUE_JOIN + _ENTRY_JOIN))
        # Per count of asked rows; one asked row has a statement of its own.
        self._token_queue_versions = [
            marked(_of_tokens(_VERSION_COLUMNS, "", count)) for count in range(MAX_ASKED + 1)
        ]
        self._token_queue_versions[1] = marked(_of_token(_VERSION_COLUMNS, _QUEUE_JOIN))
        self._token_queued_options = [
            marked(_of_tokens(_OPTIONS_COLUMNS, _ENTRY_ASKED, count))
            for count in range(MAX_ASKED + 1)
        ]
        self._token_queued_options[1] = marked(
            _of_token(_OPTIONS_COLUMNS, _QUEUE_JOIN + _ENTRY_JOIN)
        )

    def _marked(self, sql: str) -> str:
        return sql.replace("?", self._marker)

    def close(self) -> None:
        with self._held_lock:
            held, self._held = self._held, []
            self._may_hold = False
        for connection in held:
            connection.close()
        if self._async is not None:
            for key in list(self._async):
                left = self._async.pop(key, None)
                if left is not None:
                    _finish(left)
        if self._owned:
            self._engine.dispose()

    def live_token(self, token_hash: str) -> tuple[OrgId, str] | None:
        row = self._first(self._token, (token_hash,))
        return None if row is None else (OrgId(row[0]), row[1])

    def queue_version(self, org_id: OrgId, ref: RepoRef, branch: str) -> QueueVersion | None:
        row = self._first(self._queue_version, (branch, org_id, *_named(ref)))
        return None if row is None else _version(row)

    def queued_options(
        self, org_id: OrgId, ref: RepoRef, branch: str, number: int
    ) -> QueuedOptions | None:
        row = self._first(self._queued_options, (branch, number, org_id, *_named(ref)))
        return None if row is None else _options(row)

    async def token_queue_versions(
        self, asked: Sequence[tuple[str, QueueAsk]]
    ) -> list[TokenRead[QueueVersion] | None]:
        return await self._for_tokens(self._token_queue_versions, asked, _version, numbered=False)

    async def token_queued_options(
        self, asked: Sequence[tuple[str, QueueAsk]]
    ) -> list[TokenRead[QueuedOptions] | None]:
        return await self._for_tokens(self._token_queued_options, asked, _options, numbered=True)

    async def _for_tokens(
        self,
        statements: list[str],
        asked: Sequence[tuple[str, QueueAsk]],
        found: Callable[[Any], Found],
        *,
        numbered: bool,
    ) -> list[TokenRead[Found] | None]:
        """`asked` read by `statements` (per count of asked rows; `numbered`: the one-row
        statement joins the PR's entry, and takes its number).
        """
        answers: list[TokenRead[Found] | None] = [None] * len(asked)
        for start in range(0, len(asked), MAX_ASKED):
            part = asked[start : start + MAX_ASKED]
            if len(part) == 1:
                ((token_hash, ask),) = part
                number = (ask.number,) if numbered else ()
                parameters = [ask.branch, *number, token_hash, *_named(ask.ref)]
            else:
                parameters = [
                    value
                    for index, (token_hash, ask) in enumerate(part)
                    for value in (index, token_hash, *_named(ask.ref), ask.branch, ask.number)
                ]
            for row in await self._all_awaited(statements[len(part)], tuple(parameters)):
                answers[start + row[0]] = TokenRead(OrgId(row[1]), row[2], found(row[3:]))
        return answers

    async def enter_first(
        self,
        queue_id: QueueId,
        modes: QueueModes,
        entries: Sequence[QueueEntry],
        changes: Sequence[StateChange],
    ) -> set[PullRequestId]:
        if not entries:
            return set()
        if self._async is None:
            return await asyncio.to_thread(
                self._enter_first_here, queue_id, modes, entries, changes
            )
        statements = self._first_entries
        parameters = statements.postgresql_parameters(queue_id, modes, entries, changes)
        rows = await self._all_awaited(statements.postgresql, parameters, write=True)
        return {PullRequestId(row[0]) for row in rows}

    def _enter_first_here(
        self,
        queue_id: QueueId,
        modes: QueueModes,
        entries: Sequence[QueueEntry],
        changes: Sequence[StateChange],
    ) -> set[PullRequestId]:
        """`enter_first` on SQLite: the engine's connection and transaction, so the write
        takes its turn with the process's other writers (see `make_engine`); its statements
        straight on the driver's cursor.
        """
        statements = self._first_entries
        with self._engine.connect() as connection, connection.begin():
            cursor = connection.connection.cursor()
            try:
                cursor.execute(
                    statements.take, statements.take_parameters(queue_id, modes, len(entries))
                )
                taken = cursor.fetchall()
                if not taken:
                    return set()
                rows = statements.entry_rows(entries, taken[0][0])
                entered: set[PullRequestId] = set()
                for start in range(0, len(rows), SQLITE_ROWS):
                    part = rows[start : start + SQLITE_ROWS]
                    cursor.execute(
                        statements.insert_entries(len(part)),
                        [value for row in part for value in row],
                    )
                    entered.update(PullRequestId(row[0]) for row in cursor.fetchall())
                cursor.executemany(
                    statements.insert_changes,
                    statements.change_rows(
                        [change for change in changes if change.pull_request_id in entered]
                    ),
                )
            finally:
                cursor.close()
        return entered

    async def _all_awaited(self, sql: str, parameters: Any, *, write: bool = False) -> list[Any]:
        """`_all` for a caller in an event loop. On SQLite the very same (a file read of a few
        microseconds); on PostgreSQL on the loop's own asynchronous connection, so the loop
        serves other requests during the round trip. One statement at a time per loop (its
        caller, `keepgreen.web.polled.Batched`, sends the next once this one is answered).
        A `write` goes on the loop's other connection. A connection found closed is let go,
        and a read tried once more on a new one (not a write, which may have been made before
        the connection closed).
        """
        if self._async is None:
            return self._all(sql, parameters)
        key = (asyncio.get_running_loop(), write)
        for attempt in (1, 2):
            connection = self._async.get(key)
            if connection is None or connection.closed:
                for gone in [other for other in list(self._async) if other[0].is_closed()]:
                    left = self._async.pop(gone, None)  # another thread may have been first
                    if left is not None:
                        _finish(left)
                cargs, cparams = self._connect_args
                connection = await psycopg.AsyncConnection.connect(*cargs, **cparams)
                self._async[key] = connection
            try:
                async with connection.cursor() as cursor:
                    await cursor.execute(sql, parameters)
                    return list(await cursor.fetchall())
            except psycopg.OperationalError:
                # Closed by the server: let it go, and try once more on a new connection.
                self._async.pop(key, None)
                with contextlib.suppress(psycopg.Error):
                    await connection.close()
                if attempt == 2 or write:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _first(self, sql: str, parameters: tuple[Any, ...]) -> Any:
        rows = self._all(sql, parameters)
        return rows[0] if rows else None

    def _all(self, sql: str, parameters: tuple[Any, ...]) -> list[Any]:
        held = self._held_connection()
        if held is not None:
            try:
                return _fetch_all(held, sql, parameters)
            except self._dbapi.OperationalError:
                # Closed by the server (a restart, an idle timeout): let it go, and read from
                # the pool, which tries a new connection once more.
                self._let_go(held)
        for attempt in (1, 2):
            connection = self._engine.raw_connection()
            try:
                return _fetch_all(connection, sql, parameters)
            except self._dbapi.OperationalError:
                # A connection the server closed: drop it, and try once more on a new one; a
                # database that is down raises the second time.
                connection.invalidate()
                if attempt == 2:
                    raise
            finally:
                connection.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def _held_connection(self) -> Any:
        """This thread's own connection, opened at its first read while fewer than
        HELD_CONNECTIONS are held; None for a thread past that (it reads from the pool).
        """
        held = getattr(self._local, "connection", None)
        if held is not None or getattr(self._local, "pooled", False):
            return held
        with self._held_lock:
            if not self._may_hold or len(self._held) >= HELD_CONNECTIONS:
                self._local.pooled = True
                return None
            cargs, cparams = self._connect_args
            held = self._local.connection = self._dbapi.connect(*cargs, **cparams)
            self._held.append(held)
        return held

    def _let_go(self, held: Any) -> None:
        self._local.connection = None
        with self._held_lock:
            if held in self._held:
                self._held.remove(held)
        with contextlib.suppress(self._dbapi.Error):
            held.close()


def _finish(connection: Any) -> None:
    """Close an asynchronous connection without its event loop (which may be gone): libpq's
    own close, as the connection's `close` would end.
    """
    connection.pgconn.finish()


def _fetch_all(connection: Any, sql: str, parameters: tuple[Any, ...]) -> list[Any]:
    cursor = connection.cursor()
    try:
        cursor.execute(sql, parameters)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _version(row: Any) -> QueueVersion:
    queue_id, version = row
    return QueueVersion(None if queue_id is None else QueueId(queue_id), version or 0)


def _options(row: Any) -> QueuedOptions:
    queue_id, state, priority_value, priority_name, no_batch, *queue = row
    queue_state, mode, pending_mode = queue
    return QueuedOptions(
        queue_id=None if queue_id is None else QueueId(queue_id),
        state=None if state is None else PrState(state),
        priority=None if priority_value is None else Priority(priority_value, priority_name),
        no_batch=bool(no_batch),
        queue=None
        if queue_id is None
        else QueueModes(
            QueueState(queue_state),
            QueueMode(mode),
            None if pending_mode is None else QueueMode(pending_mode),
        ),
    )


def _named(ref: RepoRef) -> tuple[str, str, str]:
    return ref.host, ref.owner, ref.name
