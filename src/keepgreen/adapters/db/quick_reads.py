"""The reads made on every polled request (the token, the queue's version), as one SQL
statement each on a DBAPI connection in autocommit: no ORM session, no SQLAlchemy execution
layer, no BEGIN/ROLLBACK round trips. A lone SELECT in autocommit is its own transaction: on
SQLite (WAL) it never waits for a writer, on PostgreSQL it takes no lock.

On PostgreSQL the connections come from a small pool of their own, opened in autocommit and
without a ping per checkout (the main pool pings); a connection found dead is dropped and the
read tried once more on a fresh one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine

from keepgreen.core.enums import PrState
from keepgreen.core.ids import OrgId, QueueId
from keepgreen.core.model import QueuedOptions, QueueVersion, RepoRef
from keepgreen.core.priority import Priority

_LIVE_TOKEN_SQL = (
    "SELECT org_id, token_hash FROM api_tokens WHERE token_hash = ? AND revoked_at IS NULL"  # noqa: S105 (a query, not a secret)
)
_QUEUE_VERSION = (
    "SELECT queues.id, queues.version FROM repositories "
    "LEFT OUTER JOIN queues ON queues.repository_id = repositories.id AND queues.branch = ? "
    "WHERE repositories.org_id = ? AND repositories.host = ? AND repositories.owner = ? "
    "AND repositories.name = ?"
)
_QUEUED_OPTIONS = (
    "SELECT queues.id, queue_entries.state, queue_entries.priority_value, "
    "queue_entries.priority_name, queue_entries.no_batch FROM repositories "
    "LEFT OUTER JOIN queues ON queues.repository_id = repositories.id AND queues.branch = ? "
    "LEFT OUTER JOIN queue_entries ON queue_entries.queue_id = queues.id "
    "AND queue_entries.number = ? "
    "WHERE repositories.org_id = ? AND repositories.host = ? AND repositories.owner = ? "
    "AND repositories.name = ?"
)
QUICK_POOL_SIZE = 4


class SqlQuickReads:
    def __init__(self, engine: Engine) -> None:
        if engine.dialect.name == "sqlite":
            # keepgreen's SQLite connections are in autocommit already (isolation_level None).
            self._engine = engine
            self._owned = False
            self._marker = "?"
        else:
            self._engine = create_engine(
                engine.url,
                isolation_level="AUTOCOMMIT",
                pool_size=QUICK_POOL_SIZE,
                max_overflow=QUICK_POOL_SIZE,
            )
            self._owned = True
            self._marker = "%s"
        self._token = _LIVE_TOKEN_SQL.replace("?", self._marker)
        self._queue_version = _QUEUE_VERSION.replace("?", self._marker)
        self._queued_options = _QUEUED_OPTIONS.replace("?", self._marker)

    def close(self) -> None:
        if self._owned:
            self._engine.dispose()

    def live_token(self, token_hash: str) -> tuple[OrgId, str] | None:
        row = self._first(self._token, (token_hash,))
        return None if row is None else (OrgId(row[0]), row[1])

    def queue_version(self, org_id: OrgId, ref: RepoRef, branch: str) -> QueueVersion | None:
        row = self._first(self._queue_version, (branch, org_id, ref.host, ref.owner, ref.name))
        if row is None:
            return None
        queue_id, version = row
        return QueueVersion(None if queue_id is None else QueueId(queue_id), version or 0)

    def queued_options(
        self, org_id: OrgId, ref: RepoRef, branch: str, number: int
    ) -> QueuedOptions | None:
        row = self._first(
            self._queued_options, (branch, number, org_id, ref.host, ref.owner, ref.name)
        )
        if row is None:
            return None
        queue_id, state, priority_value, priority_name, no_batch = row
        return QueuedOptions(
            queue_id=None if queue_id is None else QueueId(queue_id),
            state=None if state is None else PrState(state),
            priority=None if priority_value is None else Priority(priority_value, priority_name),
            no_batch=bool(no_batch),
        )

    def _first(self, sql: str, parameters: tuple[Any, ...]) -> Any:
        for attempt in (1, 2):
            connection = self._engine.raw_connection()
            try:
                cursor = connection.cursor()
                try:
                    cursor.execute(sql, parameters)
                    return cursor.fetchone()
                finally:
                    cursor.close()
            except self._engine.dialect.loaded_dbapi.OperationalError:
                # A connection the server closed (a restart, an idle timeout): drop it, and
                # try once more on a new one; a database that is down raises the second time.
                connection.invalidate()
                if attempt == 2:
                    raise
            finally:
                connection.close()
        raise AssertionError("unreachable")  # pragma: no cover
