"""The merge queue's plain data: queues, their configuration, entries, test runs and statuses.

Frozen dataclasses only; the db adapter and the HTTP edge translate to and from them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Generic, TypeVar

from keepgreen.core.enums import (
    CommitState,
    DirectMergeMode,
    FlakyFailures,
    IncidentKind,
    Mergeability,
    MergeMethod,
    OptimizationMode,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestBranchConstructionMode,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import OrgId, PullRequestId, QueueId, RepositoryId, TestRunId
from keepgreen.core.names import MAX_NAME_LENGTH
from keepgreen.core.priority import Priority

Found = TypeVar("Found")


@dataclass(frozen=True, slots=True)
class RepoRef:
    """How clients name a repository: `host/owner/name`."""

    host: str
    owner: str
    name: str

    @property
    def slug(self) -> str:
        """`owner/name`, the metrics label and the `repo` query parameter."""
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return f"{self.host}/{self.owner}/{self.name}"


DEFAULT_PR_REFSPEC = "refs/pull/{number}/head"  # GitHub, Gitea; GitLab: refs/merge-requests/…
DEFAULT_TEST_BRANCH_PREFIX = "keepgreen-merge"
DEFAULT_GIT_USERNAME = "x-access-token"  # what GitHub and most forges take with a token


@dataclass(frozen=True, slots=True)
class GitAuth:
    """How keepgreen signs in to a repository's git server: the paths of files that hold the
    secrets, never the secrets. git reads them through its credential plumbing at each call,
    so a rotated file is picked up without telling keepgreen.
    """

    token_file: str | None = None  # HTTP(S) basic auth: the password is the file's content
    username: str | None = None  # HTTP(S) basic auth user; None means DEFAULT_GIT_USERNAME
    ssh_key_file: str | None = None  # ssh -i
    ssh_known_hosts: str | None = None  # ssh's UserKnownHostsFile, checked strictly

    @property
    def is_empty(self) -> bool:
        return self == NO_AUTH


NO_AUTH = GitAuth()  # a repository that signs in to nothing (local, git://, or public)


@dataclass(frozen=True, slots=True)
class Repository:
    """A repository registered with an org; `git_url` is where its git data lives."""

    id: RepositoryId
    org_id: OrgId
    ref: RepoRef
    git_url: str
    ci_command: str | None
    created_at: datetime
    # Variables of keepgreen's environment the built-in CI command gets (never KEEPGREEN_*).
    ci_env: tuple[str, ...] = ()
    auth: GitAuth = NO_AUTH
    # The ref of pull request N on the git server (`{number}` stands for N), and the prefix of
    # the test branches keepgreen pushes there.
    pr_refspec: str = DEFAULT_PR_REFSPEC
    test_branch_prefix: str = DEFAULT_TEST_BRANCH_PREFIX
    # The GitHub App installation that gives keepgreen this repository; None: not on GitHub
    # through the App (git and PR data come from git alone).
    github_installation_id: int | None = None

    def pull_request_ref(self, number: int) -> str:
        """The ref of pull request `number` (`refs/pull/<number>/head` by default)."""
        return self.pr_refspec.format(number=number)


def canonical_json(value: object) -> str:
    """`value` as JSON text with sorted keys and no spaces: equal values, equal texts."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Every setting of a queue that `updateQueue` can change, with the documented defaults."""

    concurrency: int = 1
    bisection_concurrency: int = 1
    testing_timeout_minutes: int = 300
    pending_failure_depth: int = 0
    can_optimistically_merge: bool = False
    batch: bool = False
    batching_max_wait_time_minutes: int = 5
    batching_min_size: int = 4
    create_prs_for_testing_branches: bool = False
    comments_enabled: bool = False
    # On GitHub: whether `/keepgreen merge` and `/keepgreen cancel` comments act on this queue.
    commands_enabled: bool = True
    status_check_enabled: bool = False
    direct_merge_mode: DirectMergeMode = DirectMergeMode.OFF
    optimization_mode: OptimizationMode = OptimizationMode.OFF
    merge_method: MergeMethod = MergeMethod.SQUASH
    # None: no override is set (the repository's own CI decides); a tuple: the queue's override.
    required_statuses: tuple[str, ...] | None = None
    # Fields the hosted service answers beyond its published spec.
    # A PR `not_ready` this many hours leaves the queue (cancelled, `not_ready_timeout`). 0: never.
    not_ready_timeout_hours: int = 0
    # On GitHub: the label that submits a PR to this queue (None: the instance's
    # KEEPGREEN_GITHUB_MERGE_LABEL), and whether labels submit and cancel at all.
    enqueueing_label: str | None = None
    label_commands_enabled: bool = True
    # On GitHub: bot accounts (`name[bot]`) that may submit and cancel by comment or label.
    allowed_bot_submitters: tuple[str, ...] = ()
    # Accepted and stored, answered as set: a label per PR state, the browser extension, how
    # the hosted service builds test branches, and its batching rules (each a JSON object, kept
    # as its canonical text so that the configuration stays hashable).
    state_labels_enabled: bool = False
    extension_enabled: bool = False
    test_branch_construction_mode: TestBranchConstructionMode = (
        TestBranchConstructionMode.RENAME_TEMP_BRANCH
    )
    batching_rules: tuple[str, ...] = ()
    # keepgreen's own settings, beside the interface's.
    # A required check with no status at all this long after its run started: the run fails
    # (or is retried) as "check X never started". 0: never.
    check_start_timeout_minutes: int = 30
    # The testing timeout follows the queue's own history: p95 of its passed runs plus a margin,
    # never more than testing_timeout_minutes.
    adaptive_testing_timeout: bool = False
    # A queue holding PRs that neither merged nor started a run for this long reports a stall.
    stall_minutes: int = 60
    # Required checks that concluded skipped or neutral count as passed.
    accept_skipped_checks: bool = False
    # How often a failed run may be tested again alone before it fails or is bisected; a retry
    # happens only when the queue's recent spurious-failure rate makes it pay.
    max_retries: int = 0
    flaky_failures: FlakyFailures = FlakyFailures.RETRY
    # A failed batch does not stop the line: each of its PRs is tested alone beside the queue
    # (on the branch the batch was tested on), the PRs behind it go on without it, the culprits
    # leave and the cleared PRs rejoin the line behind the PRs in flight.
    bisect_beside_queue: bool = True
    # Batch size near 1/sqrt(p) for the queue's recent failure rate p, at most batchingMinSize.
    adaptive_batch_size: bool = False
    # Speculation depth by additive increase (+1 per passed run) and multiplicative decrease
    # (halved per failed run), between 2 and `concurrency`.
    adaptive_depth: bool = False


# How many passed runs' durations a queue remembers, and the weight an older retry keeps each
# time a newer one is judged (about the last 50 retries count).
STATS_DURATIONS = 50
STATS_DECAY = 0.98
# How much of the retry record is left after each failure that was not retried.
STATS_AGING = 0.9


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What the queue learned from its own recent runs, kept by the scheduler.

    `ci_seconds`: how long its last passed runs took, oldest first. `refuted` and `confirmed`:
    decayed counts of failures whose retry passed (they were spurious) and of failures whose
    every retry failed too (they were real). Only retries count: they alone test the same change
    twice, so the estimate is not biased toward either verdict. A failure not retried ages the
    record, so a queue that stopped retrying comes back to it.
    `last_progress_at`: when it last merged a PR or started a run.
    """

    ci_seconds: tuple[int, ...] = ()
    refuted: float = 0.0
    confirmed: float = 0.0
    last_progress_at: datetime | None = None
    # Decayed counts over finished main runs: PRs tested (a batch of k counts k) and failed
    # runs; and the adaptive speculation depth (None: not yet adapted, the configured one).
    tested_prs: float = 0.0
    failed_runs: float = 0.0
    depth: int | None = None

    @property
    def spurious_share(self) -> float:
        """The estimated chance that a failure is spurious (Laplace's rule: 1/2 before any
        failure was judged).
        """
        return (self.refuted + 1) / (self.refuted + self.confirmed + 2)

    def judged(self, *, spurious: bool) -> QueueStats:
        refuted = self.refuted * STATS_DECAY + (1 if spurious else 0)
        confirmed = self.confirmed * STATS_DECAY + (0 if spurious else 1)
        return replace(self, refuted=refuted, confirmed=confirmed)

    def finished_main(self, *, size: int, failed: bool) -> QueueStats:
        return replace(
            self,
            tested_prs=self.tested_prs * STATS_DECAY + size,
            failed_runs=self.failed_runs * STATS_DECAY + (1 if failed else 0),
        )

    def failure_rate(self) -> float | None:
        """The estimated chance that one PR fails a run (real or spurious failures alike);
        None before 20 PRs were tested.
        """
        if self.tested_prs < 20:
            return None
        return min(1.0, self.failed_runs / self.tested_prs)

    def aged(self) -> QueueStats:
        """The retry record after a failure that was not retried: both counts fade."""
        return replace(
            self, refuted=self.refuted * STATS_AGING, confirmed=self.confirmed * STATS_AGING
        )

    def passed_in(self, seconds: int) -> QueueStats:
        return replace(self, ci_seconds=(*self.ci_seconds, seconds)[-STATS_DURATIONS:])

    def p95_ci_seconds(self) -> int | None:
        """The 95th percentile of the remembered durations; None with fewer than 20."""
        if len(self.ci_seconds) < 20:
            return None
        ordered = sorted(self.ci_seconds)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Queue:
    """One merge queue: a repository's target branch, its state, mode and configuration.

    `pending_mode` is set while `state` is `switching_modes`: the mode the queue switches to once
    the PRs already testing have finished.
    """

    id: QueueId
    repository_id: RepositoryId
    branch: str
    state: QueueState
    mode: QueueMode
    config: QueueConfig
    created_at: datetime
    updated_at: datetime
    pending_mode: QueueMode | None = None
    # The target branch's tip as the engine last saw it (None until the worker first reads it)
    # and the count of test runs created, from which run ids are derived.
    target_sha: str | None = None
    run_seq: int = 0
    # The status checks the code host's branch protection requires of the branch (GitHub's
    # rules and rulesets), as the worker last read them; None: not read, or not on GitHub.
    host_required_statuses: tuple[str, ...] | None = None
    stats: QueueStats = field(default_factory=QueueStats)
    # Moves on at every write to what the queue's answers show (the database keeps it); not
    # part of what a queue is, so two reads of the same queue compare equal.
    version: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Readiness:
    """The signals that decide whether a submitted PR may enter the queue."""

    does_base_branch_match: bool
    mergeability: Mergeability
    requires_impacted_targets: bool
    has_impacted_targets: bool

    @property
    def is_ready(self) -> bool:
        """The spec's rule: base matches, mergeable, and targets known when they are required."""
        return (
            self.does_base_branch_match
            and self.mergeability is Mergeability.MERGEABLE
            and (self.has_impacted_targets or not self.requires_impacted_targets)
        )


@dataclass(frozen=True, slots=True)
class PullRequestInfo:
    """What the code host tells about a pull request's head."""

    number: int
    head_sha: str
    title: str
    author: str
    # The branch the PR comes from, when the code host tells it (getSubmittedPullRequest can
    # name a PR by it).
    head_branch: str | None = None


def recorded_branch(branch: str | None) -> str | None:
    """The branch a PR comes from as an entry keeps it: one longer than a stored name (git
    allows it) is not kept, and such a PR is found by its number only.
    """
    return branch if branch and len(branch) <= MAX_NAME_LENGTH else None


# The head of a PR submitted without reading the code host: the submit answers at once and the
# worker reads the PR (its head, title, author, branch, whether it merges) for `PrsRead`.
UNREAD_HEAD = ""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A pull request's entry in one queue. One per (queue, PR number): resubmitting a PR after
    it left the queue starts a new episode on the same entry (same `id`, new `state_changed_at`).

    `position` is the admission sequence number inside the queue; `queue_order` sorts on it.
    """

    id: PullRequestId
    queue_id: QueueId
    number: int
    state: PrState
    state_changed_at: datetime
    state_reason: StateReason
    priority: Priority
    no_batch: bool
    head_sha: str
    title: str
    author: str
    base_branch: str
    readiness: Readiness
    is_submitted: bool
    force_enqueued: bool
    position: int
    submitted_at: datetime
    verified_by_test_run: TestRunId | None = None
    # Whether the head contains the target branch's tip (direct merge needs it).
    is_up_to_date: bool = False
    # The branch the PR came from when it was submitted, when the code host told it.
    head_branch: str | None = None

    @property
    def is_read(self) -> bool:
        """Whether the code host was read for this episode: its head, title and author."""
        return self.head_sha != UNREAD_HEAD


@dataclass(frozen=True, slots=True)
class StateChange:
    """One line of an entry's history."""

    pull_request_id: PullRequestId
    queue_id: QueueId
    from_state: PrState | None
    to_state: PrState
    reason: StateReason
    at: datetime
    test_run_id: TestRunId | None = None
    # What the reason alone does not say: the check that never started, the flaky tests that
    # were forgiven, the attempt of a retry.
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One step of a test commit: the merge of PR `number` (at `head_sha`) onto the step before.

    `commit` is the merge commit after this PR and `tree` its tree: the tree that may land when
    this PR merges.
    """

    number: int
    head_sha: str
    commit: str
    tree: str


@dataclass(frozen=True, slots=True)
class TestRun:
    """One test of a predicted future branch: the target tip plus `dependent_prs`
    (PRs ahead, not under test) plus `tested_prs` (the PR or batch this run decides).

    `chain` is the built test commit, one link per PR in order (dependents, then tested);
    `base_tree` the tree of `base_sha`. A run is open until `closed_at`: its branch exists and
    its result still matters to some entry. Bisection runs carry the id of the failed batch run
    that started the bisection (`bisection_root`).
    """

    __test__ = False

    id: TestRunId
    queue_id: QueueId
    kind: TestRunKind
    status: TestRunStatus
    branch: str
    base_sha: str
    sha: str | None
    tested_prs: tuple[PullRequestId, ...]
    dependent_prs: tuple[PullRequestId, ...]
    required_statuses: tuple[str, ...]
    created_at: datetime
    finished_at: datetime | None = None
    failure_reason: StateReason | None = None
    base_tree: str | None = None
    chain: tuple[ChainLink, ...] = ()
    bisection_root: TestRunId | None = None
    started_at: datetime | None = None
    closed_at: datetime | None = None
    # 0 for a first run; n for its n-th retry (the same PRs on the same predicted branch).
    attempt: int = 0
    # What failed it, in a few words (the checks that never started or were skipped).
    failure_detail: str | None = None

    @property
    def members(self) -> tuple[PullRequestId, ...]:
        """Every entry in the run's predicted branch, in merge order."""
        return (*self.dependent_prs, *self.tested_prs)

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True, slots=True)
class CommitStatus:
    """The last status a CI context reported for a commit of a repository."""

    repository_id: RepositoryId
    sha: str
    context: str
    state: CommitState
    target_url: str | None
    description: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ImpactedTargets:
    """The targets a PR's head commit touches; `targets is None` means it impacts everything."""

    queue_id: QueueId
    pr_number: int
    head_sha: str
    targets: tuple[str, ...] | None
    uploaded_at: datetime

    @property
    def impacts_all(self) -> bool:
        return self.targets is None


@dataclass(frozen=True, slots=True)
class Incident:
    """A fault of a queue's git server, or of one PR's ref there: open while `ended_at` is
    None. A fault that repeats pass after pass is one incident with a count, not many.
    """

    id: int
    queue_id: QueueId
    kind: IncidentKind
    message: str
    started_at: datetime
    last_failure_at: datetime
    failures: int
    pr_number: int | None = None
    ended_at: datetime | None = None

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


@dataclass(frozen=True, slots=True)
class QueueModes:
    """What of a queue a PR entering it depends on (`requires_impacted_targets`), and whether
    it takes new PRs (not draining), as one read found them.
    """

    state: QueueState
    mode: QueueMode
    pending_mode: QueueMode | None


@dataclass(frozen=True, slots=True)
class QueuedOptions:
    """What a resubmit may change of a PR's entry, as one read found it (`queue_id` None: no
    such queue, and `queue` None with it; `state` None: the PR was never submitted to it).
    """

    queue_id: QueueId | None
    state: PrState | None
    priority: Priority | None
    no_batch: bool
    queue: QueueModes | None


@dataclass(frozen=True, slots=True)
class QueueVersion:
    """A queue's id and version as one read found them (`queue_id` None: no such queue)."""

    queue_id: QueueId | None
    version: int


@dataclass(frozen=True, slots=True)
class QueueAsk:
    """What a polled call names: a queue, and a PR of it (`number` 0 when it names none)."""

    ref: RepoRef
    branch: str
    number: int = 0


@dataclass(frozen=True, slots=True)
class TokenRead(Generic[Found]):
    """A quick read made for the org of a token, with the token's org and stored hash."""

    org_id: OrgId
    token_hash: str
    found: Found


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """A queue with its live entries, in queue order, and its recent incidents (newest first).

    `stalled_since`: set while the queue is stalled (`keepgreen.core.stall`); `waiting_on`:
    what it waits on then, or while it is paused with PRs in it (None: its open incident, if
    any, says it).
    """

    queue: Queue
    entries: tuple[QueueEntry, ...] = field(default=())
    incidents: tuple[Incident, ...] = field(default=())
    stalled_since: datetime | None = None
    waiting_on: str | None = None


@dataclass(frozen=True, slots=True)
class Org:
    """A tenant: its tokens see only its repositories."""

    id: OrgId
    slug: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class GithubDelivery:
    """A GitHub webhook delivery as it arrived: `id` is its X-GitHub-Delivery."""

    id: str
    event: str
    action: str | None
    installation_id: int | None
    payload: Mapping[str, object]
    received_at: datetime


@dataclass(frozen=True, slots=True)
class GithubInstallation:
    """An installation of keepgreen's GitHub App on an account (a GitHub org or user).

    Its repositories belong to `org_id`: the org linked to it by `keepgreen github link`, or
    else the org whose slug is the account's login. None: no such org yet, so the repositories
    it adds wait (unlinked) until one is linked.
    """

    id: int
    account: str
    org_id: OrgId | None
    created_at: datetime
    linked: bool = False  # org_id was set by `keepgreen github link`, not by the account name


@dataclass(frozen=True, slots=True)
class GithubFeedback:
    """What keepgreen last showed on a PR on GitHub: its check run, its one comment and its
    state label.
    """

    repository_id: RepositoryId
    number: int
    check_run_id: int | None = None
    check_run_sha: str | None = None  # the head the check run is on
    comment_id: int | None = None
    # Digests of what the check run and the comment last showed (unchanged views are not sent
    # again), and when the check run was last sent (its minor changes wait a while).
    shown: str = ""
    shown_comment: str = ""
    shown_at: datetime | None = None
    merged_sha: str | None = None  # the commit GitHub's merge made, once it is merged
    state_label: str | None = None  # the state label put on the PR (`stateLabelsEnabled`)
