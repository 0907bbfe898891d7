"""The ports use cases depend on. Adapters implement them; tests may pass fakes.

Repositories never commit: the unit of work does, once per use case.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self

from keepgreen.app.flaky.store import CiRunStore, FlakyListings, FlakyStore
from keepgreen.core.enums import (
    CommitState,
    IncidentKind,
    Mergeability,
    MergeMethod,
    PrState,
    TestRunKind,
)
from keepgreen.core.ids import OrgId, PullRequestId, QueueId, RepositoryId, TestRunId
from keepgreen.core.model import (
    DEFAULT_PR_REFSPEC,
    ChainLink,
    CommitStatus,
    GitAuth,
    GithubDelivery,
    GithubFeedback,
    GithubInstallation,
    ImpactedTargets,
    Incident,
    Org,
    PullRequestInfo,
    Queue,
    QueueAsk,
    QueuedOptions,
    QueueEntry,
    QueueModes,
    QueueVersion,
    RepoRef,
    Repository,
    StateChange,
    TestRun,
    TokenRead,
)
from keepgreen.core.ordering import Placed
from keepgreen.core.scheduler import Effect


class Clock(Protocol):
    """The current time, timezone-aware UTC."""

    def __call__(self) -> datetime: ...


class IdFactory(Protocol):
    """A new unique id (a UUID string)."""

    def __call__(self) -> str: ...


class CodeHostError(Exception):
    """The code host could not answer (repository missing or unreadable); `kind` says what
    went wrong, for the queue's incident history and the metrics. `retry_after`: the host said
    how many seconds to wait before asking again (a rate limit).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: IncidentKind = IncidentKind.GIT_ERROR,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class CredentialFileError(CodeHostError):
    """A file named as a repository's credentials is missing, unreadable or unusable; the
    sentence names the option (`git-token-file ...`) and never the file's content.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=IncidentKind.CREDENTIAL_FILE)


class WakeChannel(Protocol):
    """Wakes the queue workers of other processes sharing the database (an HTTP process of
    `keepgreen serve --workers N`, a `keepgreen worker` beside the API): best effort, since a
    worker that is not woken still polls.
    """

    def send(self) -> None:
        """Tell every listening worker that something was written for it; never raises."""
        ...

    def listen(self, on_wake: Callable[[], None], stop: threading.Event) -> None:
        """Call `on_wake` at each message from `send` (any process) until `stop` is set."""
        ...

    def close(self) -> None:
        """Let go of what `send` holds (a connection, a socket)."""
        ...


class CodeHost(Protocol):
    """What the queue needs to know from where the code lives."""

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        """The PR's head, title and author; None when the PR does not exist (no ref
        `repo.pull_request_ref(number)`).

        Raises CodeHostError when the repository itself cannot be read.
        """
        ...

    def pull_request_heads(
        self, repo: Repository, numbers: Sequence[int], *, fresh: bool = False
    ) -> Mapping[int, str | None]:
        """Each PR's head commit, as `pull_request` would give it (None where it gives None),
        asked at once: what the worker reads of every queued PR at every pass. `fresh`: as the
        server has them now, not as a copy fetched a moment ago has them (before a landing).
        """
        ...

    def mergeability(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> Mergeability:
        """Whether `head_sha` merges cleanly onto the tip of `target_branch`: `target_sha`
        when the caller has just read it (a pass reads it once, not once per PR), else as read
        now.
        """
        ...


@dataclass(frozen=True, slots=True)
class TestCommit:
    """A built test commit: the chain of merges on `base_sha`, its last link the branch head."""

    __test__ = False

    base_sha: str
    links: tuple[ChainLink, ...]

    @property
    def sha(self) -> str:
        return self.links[-1].commit if self.links else self.base_sha


@dataclass(frozen=True, slots=True)
class BuildConflict:
    """Building a test commit stopped: PR `number` does not merge onto the steps before it."""

    number: int


@dataclass(frozen=True, slots=True)
class Landing:
    """What to land on the target branch for one PR, taken from a passed test commit.

    `parent_commit`/`parent_tree` are the chain step before `link` (the run's base for the first
    link). `exact` asks that the branch's tree before landing equal `parent_tree`, so the tree
    that lands is exactly the tested `link.tree`; without it (parallel lanes) the PR's tested
    change is merged onto whatever the branch holds, refusing on conflict. `token` marks the
    commits made, so that repeating a landing that already happened is recognised.
    """

    target_branch: str
    expected_tip: str
    method: MergeMethod
    link: ChainLink
    parent_commit: str
    parent_tree: str
    exact: bool
    title: str
    author: str
    token: str


@dataclass(frozen=True, slots=True)
class LandResult:
    """`new_tip` when the branch moved (or had already moved for this token); `problem` else:
    `target_moved` (the branch is not at `expected_tip`), `conflict`, `tree_mismatch`, or
    `push_rejected` (the git server refused the push; `detail` says what it answered).
    """

    new_tip: str | None
    problem: str | None = None
    detail: str | None = None


class MergeHost(CodeHost, Protocol):
    """The code host's write side: test commits and branches, and the target branch's CAS."""

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        """The commit `refs/heads/<branch>` points at; None when the branch does not exist."""
        ...

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        """Merge each `(number, head_sha)` in order onto `base_sha` without a work tree and point
        `refs/heads/<branch>` at the result. Idempotent: building again rewrites the branch.
        """
        ...

    def delete_branch(self, repo: Repository, branch: str) -> None:
        """Delete `refs/heads/<branch>`; a branch already gone is fine."""
        ...

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        """Move the target branch by compare-and-swap from `landing.expected_tip`."""
        ...

    def is_up_to_date(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> bool:
        """Whether the target branch's tip (`target_sha`, as for `mergeability`) is an ancestor
        of (or equal to) `head_sha`.
        """
        ...

    def tree_of(self, repo: Repository, commit: str) -> str:
        """The tree id of a commit."""
        ...


@dataclass(frozen=True, slots=True)
class RepositorySurvey:
    """What the check before a registration found at a git URL."""

    location: str  # the canonical URL: a local repository's absolute path, a remote as given
    auth: GitAuth  # the credentials as they will be stored (file paths made absolute)
    branches: int  # refs/heads/*
    default_branch: str | None  # the branch HEAD names; None when HEAD names no branch
    pull_requests: int  # refs named by the PR refspec (refs/pull/<n>/head by default)


class RepositoryLocator(Protocol):
    """Checks that a repository's git data can be read, before it is registered."""

    def __call__(
        self, git_url: str, /, *, auth: GitAuth, pr_refspec: str = DEFAULT_PR_REFSPEC
    ) -> RepositorySurvey:
        """Read the repository's refs at `git_url`, signing in with `auth` (whose files are
        checked first), and say what is there (pull requests as `pr_refspec` names them).

        Raises CredentialFileError for a credential file that cannot be used, CodeHostError
        when no git repository can be read there; each with one sentence and no secret.
        """
        ...


class RunLogs(Protocol):
    """The built-in runner's log of a test run, as kept on this host."""

    def __call__(self, run_id: str, /, *, limit_bytes: int) -> bytes | None:
        """The last `limit_bytes` of the log; None when this host holds none for the run."""
        ...


class RefNameCheck(Protocol):
    """git's own verdict on a name (`git check-ref-format`), for the names an operator sets."""

    def __call__(self, name: str, /, *, branch: bool = False) -> bool:
        """Whether git takes `name` as a full ref name (`refs/...`), or with `branch` as a
        branch name.
        """
        ...


class StatusReporter(Protocol):
    """Where the built-in runner reports a commit status (the same path as setCommitStatus)."""

    def __call__(
        self,
        repo: Repository,
        /,
        *,
        sha: str,
        context: str,
        state: CommitState,
        target_url: str | None,
        description: str | None,
    ) -> object: ...


class CiRunner(Protocol):
    """The built-in CI: runs a repository's command on a commit and reports `keepgreen/ci`."""

    def start(self, repo: Repository, *, run_id: str, sha: str, timeout_seconds: float) -> None:
        """Start (in the background) the command on `sha`; starting a run id twice is a no-op."""
        ...

    def cancel(self, run_id: str) -> None:
        """Stop the run's command if it is still going; unknown ids are fine."""
        ...

    def is_running(self, run_id: str) -> bool:
        """True while the run is queued or its command runs in this process."""
        ...

    def forget(self, run_id: str) -> None:
        """Let a lost run id (not running) be started again."""
        ...

    def close(self, wait: bool = True) -> None:
        """Stop taking runs; unless `wait`, kill the running commands without reporting."""
        ...


@dataclass(frozen=True, slots=True)
class StoredToken:
    """A token row: only the hash of the secret is kept. A revoked token is kept (to be
    listed) and refused from `revoked_at` on.
    """

    id: str
    org_id: OrgId
    token_hash: str
    created_at: datetime
    name: str
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EntryPage:
    """One page of entries and the id of the first entry of the next page, if any."""

    entries: Sequence[QueueEntry]
    next_cursor: PullRequestId | None


class OrgRepository(Protocol):
    def get_by_slug(self, slug: str) -> Org | None: ...
    def get(self, org_id: OrgId) -> Org | None: ...
    def add(self, org: Org) -> None: ...
    def list_all(self) -> Sequence[Org]: ...


class TokenRepository(Protocol):
    def add(self, token: StoredToken) -> None: ...
    def find_by_hash(self, token_hash: str) -> StoredToken | None: ...
    def get(self, token_id: str) -> StoredToken | None: ...
    def list(self, org_id: OrgId | None = None) -> Sequence[StoredToken]:
        """Tokens of one org (every org when None), oldest first."""
        ...

    def revoke(self, token_id: str, at: datetime) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredWebSession:
    """A dashboard sign-in: only the hash of the cookie's secret is kept. It lasts until
    `expires_at`, sign-out, or the revocation of the API token it was opened with (if any).
    """

    secret_hash: str
    org_id: OrgId
    token_id: str | None  # None: opened by signing in with GitHub
    created_at: datetime
    expires_at: datetime


class WebSessionRepository(Protocol):
    def add(self, session: StoredWebSession) -> None: ...
    def find(self, secret_hash: str) -> StoredWebSession | None: ...
    def delete(self, secret_hash: str) -> None: ...
    def delete_expired(self, now: datetime) -> int:
        """Delete sessions that expired before `now`; how many."""
        ...


class RepositoryRepository(Protocol):
    def add(self, repository: Repository) -> None: ...
    def find(self, org_id: OrgId, ref: RepoRef) -> Repository | None: ...
    def get(self, repository_id: RepositoryId) -> Repository: ...
    def list_for_org(self, org_id: OrgId) -> Sequence[Repository]: ...
    def list_all(self) -> Sequence[Repository]: ...
    def with_ref(self, ref: RepoRef) -> Sequence[Repository]:
        """The repositories of every org registered as `ref`."""
        ...

    def using_git_url(self, git_url: str) -> Sequence[Repository]:
        """Every repository, of any org, registered with this git URL."""
        ...

    def save(self, repository: Repository) -> None: ...
    def delete(self, repository_id: RepositoryId) -> None:
        """Delete the repository and every row about it: commit statuses and flaky-test data.
        Its queues go first, through `QueueRepository.delete`.
        """
        ...


class QueueRepository(Protocol):
    def add(self, queue: Queue) -> None: ...
    def save(self, queue: Queue) -> None: ...
    def delete(self, queue_id: QueueId) -> None: ...
    def find(self, repository_id: RepositoryId, branch: str, *, lock: bool = False) -> Queue | None:
        """The queue of a repository's branch; `lock` holds its row until commit."""
        ...

    def get(self, queue_id: QueueId, *, lock: bool = False) -> Queue | None: ...
    def list_ids(self) -> Sequence[QueueId]: ...
    def list_for_repositories(self, repository_ids: Sequence[RepositoryId]) -> Sequence[Queue]: ...
    def decision_version(self, queue_id: QueueId) -> int | None:
        """The queue's decision counter: moved by every write to what the scheduler decides
        on (all but a PR entering unread); None when there is no such queue.
        """
        ...

    def next_position(self, queue_id: QueueId) -> int:
        """The next admission sequence number of the queue (atomic)."""
        ...


class EntryRepository(Protocol):
    def add(self, entry: QueueEntry) -> None: ...
    def add_all(self, entries: Sequence[QueueEntry]) -> None:
        """`add` of several entries, written together."""
        ...

    def save(self, entry: QueueEntry) -> None: ...
    def save_all(self, entries: Sequence[QueueEntry]) -> None:
        """`save` of each (entries of one queue, which the caller holds)."""
        ...

    def find(self, queue_id: QueueId, number: int) -> QueueEntry | None: ...
    def find_by_branch(self, queue_id: QueueId, branch: str) -> QueueEntry | None:
        """The entry of the PR submitted from `branch`: the one in the queue if there is one,
        else the one that left it last.
        """
        ...

    def get(self, entry_id: PullRequestId) -> QueueEntry: ...
    def list_for_queues(
        self, queue_ids: Sequence[QueueId], *, states: frozenset[PrState] | None = None
    ) -> Sequence[QueueEntry]: ...
    def placed(self, queue_id: QueueId) -> Sequence[Placed]:
        """The queue's live entries, only what orders them (a cheap read)."""
        ...

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
    def add_all(self, changes: Sequence[StateChange]) -> None:
        """`add` of several changes, written together, after those added before."""
        ...

    def list_for_entry(self, entry_id: PullRequestId) -> Sequence[StateChange]: ...
    def last_for_entry(self, entry_id: PullRequestId) -> StateChange | None:
        """The entry's latest change (what its current reason and detail come from)."""
        ...

    def list_since(self, queue_ids: Sequence[QueueId], since: datetime) -> Sequence[StateChange]:
        """The whole history of every entry with a change at or after `since`, oldest first."""
        ...


class GithubDeliveryRepository(Protocol):
    """GitHub webhook deliveries stored for the worker."""

    def add_if_new(self, delivery: GithubDelivery) -> bool:
        """Store the delivery unless one with its id is stored; True when it was new."""
        ...

    def pending(self, *, limit: int) -> Sequence[GithubDelivery]:
        """Deliveries not yet acted on, oldest first."""
        ...

    def claim(self, delivery_id: str, *, at: datetime) -> bool:
        """Mark the delivery processed at `at`; False when another worker did so first."""
        ...

    def release(self, delivery_id: str) -> None:
        """Unmark it, for a later pass to try again (the work failed for a passing reason)."""
        ...


class GithubInstallationRepository(Protocol):
    def get(self, installation_id: int) -> GithubInstallation | None: ...
    def save(self, installation: GithubInstallation) -> None:
        """Insert or update."""
        ...

    def delete(self, installation_id: int) -> None: ...
    def list_all(self) -> Sequence[GithubInstallation]: ...
    def repositories(self, installation_id: int) -> Sequence[Repository]:
        """The repositories that came through this installation."""
        ...

    def by_github_name(self, owner: str, name: str) -> Sequence[Repository]:
        """The App's repositories named `owner/name` (in any org), for events."""
        ...


class GithubFeedbackRepository(Protocol):
    def get(self, repository_id: RepositoryId, number: int) -> GithubFeedback | None: ...
    def save(self, feedback: GithubFeedback) -> None:
        """Insert or update."""
        ...


class IncidentRepository(Protocol):
    """The history of faults of each queue's git server (see `Incident`)."""

    def record(
        self,
        queue_id: QueueId,
        kind: IncidentKind,
        message: str,
        *,
        now: datetime,
        pr_number: int | None = None,
    ) -> Incident:
        """Count a failure: the open incident of the same queue, kind and PR gets it (with the
        latest message), or a new one opens. The answer is the incident as it now stands.
        """
        ...

    def close(
        self,
        queue_id: QueueId,
        *,
        now: datetime,
        kinds: Collection[IncidentKind],
        pr_number: int | None = None,
    ) -> Sequence[Incident]:
        """End the open incidents of `kinds` (of one PR, or of the queue when None); the ones
        ended, as they now stand.
        """
        ...

    def list_open(self, queue_ids: Sequence[QueueId]) -> Sequence[Incident]: ...
    def recent(
        self, queue_id: QueueId, *, limit: int, since: datetime | None = None
    ) -> Sequence[Incident]:
        """Open incidents and those ended at or after `since` (all when None), newest first."""
        ...


class TestRunRepository(Protocol):
    def add(self, run: TestRun) -> None: ...
    def save(self, run: TestRun) -> None: ...
    def get(self, queue_id: QueueId, run_id: TestRunId) -> TestRun | None: ...
    def list_active(self, queue_ids: Sequence[QueueId]) -> Sequence[TestRun]: ...
    def kinds(self, run_ids: Collection[TestRunId]) -> Mapping[TestRunId, TestRunKind]: ...
    def list_open(self, queue_id: QueueId) -> Sequence[TestRun]: ...
    def list_failed_in_bisections(
        self, queue_id: QueueId, roots: Collection[TestRunId]
    ) -> Sequence[TestRun]: ...
    def bisection_roots(self, run_ids: Collection[TestRunId]) -> Mapping[TestRunId, TestRunId]:
        """The failed batch run each of `run_ids` belongs to the bisection of (runs outside a
        bisection are left out), without loading the runs.
        """
        ...

    def save_members(self, run: TestRun) -> None: ...


class CommitStatusRepository(Protocol):
    def upsert(self, status: CommitStatus) -> None:
        """Store the status; a later write for the same (repository, sha, context) replaces it."""
        ...

    def list_for_sha(self, repository_id: RepositoryId, sha: str) -> Sequence[CommitStatus]: ...
    def states_for_shas(
        self, repository_id: RepositoryId, shas: Collection[str]
    ) -> dict[str, dict[str, CommitState]]: ...


class EffectRepository(Protocol):
    """The outbox: effects decided but not yet carried out."""

    def add(self, queue_id: QueueId, effect: Effect, at: datetime) -> None: ...
    def list(self, queue_id: QueueId) -> Sequence[tuple[int, Effect]]: ...
    def delete(self, effect_id: int) -> bool: ...


class LeaseRepository(Protocol):
    def acquire(self, queue_id: QueueId, holder: str, *, now: datetime, until: datetime) -> bool:
        """Take or renew the lease by compare-and-swap; False while another holds it."""
        ...

    def release(self, queue_id: QueueId, holder: str) -> None: ...
    def release_all(self, holder: str) -> None:
        """Hand back every lease of `holder`."""
        ...

    def holds(self, queue_id: QueueId, holder: str) -> bool:
        """Fencing: True when `holder` has the lease, kept until the transaction ends."""
        ...


class WorkerRepository(Protocol):
    """Worker liveness (heartbeats) and the worker that started each built-in CI run."""

    def beat(self, holder: str, *, host: str, pid: int, now: datetime) -> None: ...
    def remove(self, holder: str) -> None: ...
    def alive(self, holders: Collection[str], *, since: datetime) -> set[str]: ...
    def record_ci(self, run_id: TestRunId, holder: str, *, now: datetime) -> None: ...
    def ci_holders(self, run_ids: Collection[TestRunId]) -> dict[TestRunId, str]: ...


class ImpactedTargetsRepository(Protocol):
    def upsert(self, targets: ImpactedTargets) -> None:
        """Store the targets of a PR head; a later upload for the same head replaces them."""
        ...

    def find(self, queue_id: QueueId, pr_number: int, head_sha: str) -> ImpactedTargets | None: ...
    def find_for_heads(
        self, queue_id: QueueId, heads: Collection[tuple[int, str]]
    ) -> dict[tuple[int, str], ImpactedTargets]: ...


class UnitOfWork(Protocol):
    """One transaction over every repository. Leaving the block without `commit` rolls back."""

    @property
    def orgs(self) -> OrgRepository: ...
    @property
    def tokens(self) -> TokenRepository: ...
    @property
    def web_sessions(self) -> WebSessionRepository: ...
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
    def incidents(self) -> IncidentRepository: ...
    @property
    def github_deliveries(self) -> GithubDeliveryRepository: ...
    @property
    def github_installations(self) -> GithubInstallationRepository: ...
    @property
    def github_feedback(self) -> GithubFeedbackRepository: ...
    @property
    def statuses(self) -> CommitStatusRepository: ...
    @property
    def impacted_targets(self) -> ImpactedTargetsRepository: ...
    @property
    def effects(self) -> EffectRepository: ...
    @property
    def leases(self) -> LeaseRepository: ...
    @property
    def workers(self) -> WorkerRepository: ...
    @property
    def flaky(self) -> FlakyStore: ...
    @property
    def flaky_listings(self) -> FlakyListings: ...
    @property
    def ci_runs(self) -> CiRunStore: ...

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def commit(self) -> None: ...
    def on_commit(self, callback: Callable[[], object]) -> None:
        """Call `callback` once this unit's next `commit` has succeeded; never when it rolls
        back. For what must only count once the data is durable (metrics); a failing callback
        is logged, not raised, since the transaction already committed.
        """
        ...


class QuickReads(Protocol):
    """The reads made on every polled request, each one statement in its own short read
    transaction, outside any unit of work.
    """

    def live_token(self, token_hash: str) -> tuple[OrgId, str] | None:
        """The org and stored hash of the live (not revoked) token of this hash."""
        ...

    def queue_version(self, org_id: OrgId, ref: RepoRef, branch: str) -> QueueVersion | None:
        """The org's queue's id and version: None when the repository is not the org's; a
        QueueVersion without a queue id when it has no queue for `branch`.
        """
        ...

    def queued_options(
        self, org_id: OrgId, ref: RepoRef, branch: str, number: int
    ) -> QueuedOptions | None:
        """PR `number`'s state and options in the org's queue: None when the repository is
        not the org's; without a queue id when it has no queue for `branch`.
        """
        ...

    async def token_queue_versions(
        self, asked: Sequence[tuple[str, QueueAsk]]
    ) -> list[TokenRead[QueueVersion] | None]:
        """`queue_version` of each asked queue for the org of the live token of the hash it
        comes with, all in one statement (the token checked in it): for each, None when there
        is no such token or the repository is not its org's.
        """
        ...

    async def token_queued_options(
        self, asked: Sequence[tuple[str, QueueAsk]]
    ) -> list[TokenRead[QueuedOptions] | None]:
        """`queued_options` of each asked PR the same way. Both are awaited in an event loop,
        which serves other requests meanwhile where the read is a network round trip.
        """
        ...


class FirstEntries(Protocol):
    """The merge button's write, outside any unit of work (beside `QuickReads`)."""

    async def enter_first(
        self,
        queue_id: QueueId,
        modes: QueueModes,
        entries: Sequence[QueueEntry],
        changes: Sequence[StateChange],
    ) -> set[PullRequestId]:
        """Write PRs the queue has never had, `entries`, with their history lines `changes`,
        in one transaction of their own, when the queue is still as `modes` was read (there,
        not draining, in the same mode and switching to the same): the ids of the entries
        written. Each entry's `position` counts from 1 among `entries`; they take the queue's
        next positions in that order. None is written when the queue is not as read; an entry
        whose PR the queue has meanwhile (another process was first) is left out.
        """
        ...


class UnitOfWorkFactory(Protocol):
    def __call__(self, *, read_only: bool = False) -> UnitOfWork:
        """A unit of work; `read_only` for one that only reads, which never waits for a
        writer (on SQLite it reads the last committed state instead of queueing for the
        write lock).
        """
        ...
