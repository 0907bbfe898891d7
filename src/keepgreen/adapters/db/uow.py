"""The SQL unit of work: one session, one transaction, every repository."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Self

import structlog
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from keepgreen.adapters.db.flaky_ci_runs import SqlCiRuns
from keepgreen.adapters.db.flaky_listings import SqlFlakyListings
from keepgreen.adapters.db.flaky_store import SqlFlakyStore
from keepgreen.adapters.db.repositories import (
    SqlCommitStatuses,
    SqlEffects,
    SqlEntries,
    SqlGithubDeliveries,
    SqlGithubFeedback,
    SqlGithubInstallations,
    SqlHistory,
    SqlImpactedTargets,
    SqlIncidents,
    SqlLeases,
    SqlOrgs,
    SqlQueues,
    SqlRepositories,
    SqlTestRuns,
    SqlTokens,
    SqlWebSessions,
    SqlWorkers,
)
from keepgreen.app.errors import Busy, Conflict, RetryableConflict
from keepgreen.app.ports import IdFactory

log = structlog.get_logger(__name__)


class SqlUnitOfWork:
    """Opens a session on enter; `commit` commits it; leaving without commit rolls back."""

    def __init__(self, session_factory: sessionmaker[Session], new_id: IdFactory) -> None:
        self._session_factory = session_factory
        self._new_id = new_id

    def __enter__(self) -> Self:
        self._session = self._session_factory()
        self._after_commit: list[Callable[[], object]] = []
        session = self._session
        self.orgs = SqlOrgs(session)
        self.tokens = SqlTokens(session)
        self.web_sessions = SqlWebSessions(session)
        self.repositories = SqlRepositories(session)
        self.queues = SqlQueues(session)
        self.entries = SqlEntries(session)
        self.history = SqlHistory(session)
        self.incidents = SqlIncidents(session)
        self.github_deliveries = SqlGithubDeliveries(session)
        self.github_installations = SqlGithubInstallations(session)
        self.github_feedback = SqlGithubFeedback(session)
        self.test_runs = SqlTestRuns(session)
        self.statuses = SqlCommitStatuses(session, self._new_id)
        self.impacted_targets = SqlImpactedTargets(session, self._new_id)
        self.effects = SqlEffects(session)
        self.leases = SqlLeases(session)
        self.workers = SqlWorkers(session)
        self.flaky = SqlFlakyStore(session, on_commit=self.on_commit)
        self.flaky_listings = SqlFlakyListings(session)
        self.ci_runs = SqlCiRuns(session)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._after_commit.clear()  # rolled back: what they would count did not happen
        self._session.rollback()
        self._session.close()
        # A unique-key race with another writer (seen at a flush or at commit) is a Conflict
        # the client can retry, not a crash.
        if isinstance(exc, IntegrityError):
            raise _write_conflict() from exc
        if isinstance(exc, DBAPIError) and _sqlstate(exc) in _RETRYABLE_STATES:
            raise RetryableConflict(
                "concurrent_write", "the database broke a deadlock with another write; retry it"
            ) from exc
        if isinstance(exc, PoolTimeout) or (isinstance(exc, DBAPIError) and _is_locked(exc)):
            # Every connection is busy (or SQLite's write lock stayed taken past the busy
            # timeout): the client should come back shortly, not see a crash.
            raise Busy(
                "database_busy",
                "the database is busy with other requests; retry after the time Retry-After gives",
                retry_after_seconds=BUSY_RETRY_AFTER_SECONDS,
            ) from exc

    def commit(self) -> None:
        self._session.commit()
        callbacks, self._after_commit = self._after_commit, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the data is committed: the caller must not see a failure
                log.exception("an after-commit callback failed")

    def on_commit(self, callback: Callable[[], object]) -> None:
        self._after_commit.append(callback)


# PostgreSQL's deadlock_detected and serialization_failure: the transaction was rolled back.
_RETRYABLE_STATES = frozenset({"40P01", "40001"})
BUSY_RETRY_AFTER_SECONDS = 5


def _sqlstate(error: DBAPIError) -> str | None:
    state = getattr(error.orig, "sqlstate", None)
    return state if isinstance(state, str) else None


def _is_locked(error: DBAPIError) -> bool:
    return "database is locked" in str(error.orig)


def _write_conflict() -> Conflict:
    return Conflict(
        "concurrent_write", "another request changed the same data at the same time; retry it"
    )
