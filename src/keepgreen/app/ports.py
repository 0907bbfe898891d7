"""The ports use cases depend on. Adapters implement them; tests may pass fakes.

Repositories never commit: the unit of work does, once per use case.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self

from keepgreen.core.enums import Mergeability, PrState, TestRunKind
from keepgreen.core.ids import OrgId, PullRequestId, QueueId, RepositoryId, TestRunId
from keepgreen.core.model import (
    CommitStatus,
    ImpactedTargets,
    Org,
    PullRequestInfo,
    Queue,
    QueueEntry,
    RepoRef,
    Repository,
    StateChange,
    TestRun,
)


class Clock(Protocol):
    """The current time, timezone-aware UTC."""

    def __call__(self) -> datetime: ...


class IdFactory(Protocol):
    """A new unique id (a UUID string)."""

    def __call__(self) -> str: ...


class CodeHostError(Exception):
    """The code host could not answer (repository missing or unreadable)."""


class CodeHost(Protocol):
    """What the queue needs to know from where the code lives."""

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        """The PR's head, title and author; None when the PR does not exist.

        Raises CodeHostError when the repository itself cannot be read.
        """
        ...

    def mergeability(self, repo: Repository, *, head_sha: str, target_branch: str) -> Mergeability:
        """Whether `head_sha` merges cleanly onto the tip of `target_branch`."""
        ...


@dataclass(frozen=True, slots=True)
class StoredToken:
    """A token row: only the hash of the secret is kept."""

    id: str
    org_id: OrgId
    token_hash: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class EntryPage:
    """One page of entries and the id of the first entry of the next page, if any."""

    entries: Sequence[QueueEntry]
    next_cursor: PullRequestId | None


class OrgRepository(Protocol):
    def get_by_slug(self, slug: str) -> Org | None: ...
    def add(self, org: Org) -> None: ...


class TokenRepository(Protocol):
    def add(self, token: StoredToken) -> None: ...
    def find_by_hash(self, token_hash: str) -> StoredToken | None: ...


class RepositoryRepository(Protocol):
    def add(self, repository: Repository) -> None: ...
    def find(self, org_id: OrgId, ref: RepoRef) -> Repository | None: ...
    def get(self, repository_id: RepositoryId) -> Repository: ...
    def list_for_org(self, org_id: OrgId) -> Sequence[Repository]: ...


class QueueRepository(Protocol):
    def add(self, queue: Queue) -> None: ...
    def save(self, queue: Queue) -> None: ...
    def delete(self, queue_id: QueueId) -> None: ...
    def find(self, repository_id: RepositoryId, branch: str, *, lock: bool = False) -> Queue | None:
        """The queue of a repository's branch; `lock` holds its row until commit."""
        ...

    def list_for_repositories(self, repository_ids: Sequence[RepositoryId]) -> Sequence[Queue]: ...
    def next_position(self, queue_id: QueueId) -> int:
        """The next admission sequence number of the queue (atomic)."""
        ...


class EntryRepository(Protocol):
    def add(self, entry: QueueEntry) -> None: ...
    def save(self, entry: QueueEntry) -> None: ...
    def find(self, queue_id: QueueId, number: int) -> QueueEntry | None: ...
    def get(self, entry_id: PullRequestId) -> QueueEntry: ...
    def list_for_queues(
        self, queue_ids: Sequence[QueueId], *, states: frozenset[PrState] | None = None
    ) -> Sequence[QueueEntry]: ...
    def page(
        self,
        queue_id: QueueId,
        *,
        state: PrState | None,
        concluded_since: datetime | None,
        cursor: PullRequestId | None,
        take: int,
    ) -> EntryPage:
        """Entries in submission order from `cursor` on (inclusive)."""
        ...

    def exists(self, queue_id: QueueId, entry_id: PullRequestId) -> bool: ...


class HistoryRepository(Protocol):
    def add(self, change: StateChange) -> None: ...
    def list_for_entry(self, entry_id: PullRequestId) -> Sequence[StateChange]: ...
    def list_since(self, queue_ids: Sequence[QueueId], since: datetime) -> Sequence[StateChange]:
        """The whole history of every entry with a change at or after `since`, oldest first."""
        ...


class TestRunRepository(Protocol):
    def add(self, run: TestRun) -> None: ...
    def save(self, run: TestRun) -> None: ...
    def get(self, queue_id: QueueId, run_id: TestRunId) -> TestRun | None: ...
    def list_active(self, queue_ids: Sequence[QueueId]) -> Sequence[TestRun]: ...
    def kinds(self, run_ids: Collection[TestRunId]) -> Mapping[TestRunId, TestRunKind]: ...


class CommitStatusRepository(Protocol):
    def upsert(self, status: CommitStatus) -> None:
        """Store the status; a later write for the same (repository, sha, context) replaces it."""
        ...

    def list_for_sha(self, repository_id: RepositoryId, sha: str) -> Sequence[CommitStatus]: ...


class ImpactedTargetsRepository(Protocol):
    def upsert(self, targets: ImpactedTargets) -> None:
        """Store the targets of a PR head; a later upload for the same head replaces them."""
        ...

    def find(self, queue_id: QueueId, pr_number: int, head_sha: str) -> ImpactedTargets | None: ...


class UnitOfWork(Protocol):
    """One transaction over every repository. Leaving the block without `commit` rolls back."""

    @property
    def orgs(self) -> OrgRepository: ...
    @property
    def tokens(self) -> TokenRepository: ...
    @property
    def repositories(self) -> RepositoryRepository: ...
    @property
    def queues(self) -> QueueRepository: ...
    @property
    def entries(self) -> EntryRepository: ...
    @property
    def history(self) -> HistoryRepository: ...
    @property
    def test_runs(self) -> TestRunRepository: ...
    @property
    def statuses(self) -> CommitStatusRepository: ...
    @property
    def impacted_targets(self) -> ImpactedTargetsRepository: ...

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def commit(self) -> None: ...


class UnitOfWorkFactory(Protocol):
    def __call__(self) -> UnitOfWork: ...
