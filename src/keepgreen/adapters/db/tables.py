"""The schema: one portable set of tables for SQLite and PostgreSQL.

Rows here are persistence only; `repositories.py` translates them to core dataclasses.
Enum-valued columns hold the lowercase wire value as plain strings (no native ENUM types),
so adding a state is a code change, not a migration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.expression import false, text, true

from keepgreen.adapters.db.types import UtcDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# PR numbers go to 2^32 - 1: 64 bits on PostgreSQL (SQLite's INTEGER is 64 bits already).
PR_NUMBER = Integer().with_variant(BigInteger(), "postgresql")
ID = String(36)  # UUIDs are made in Python and stored as text on every backend
NAME = String(255)
SHA = String(64)
STATE = String(32)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class OrgRow(Base):
    __tablename__ = "orgs"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    slug: Mapped[str] = mapped_column(NAME, unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ApiTokenRow(Base):
    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    org_id: Mapped[str] = mapped_column(ID, ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the secret
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    name: Mapped[str] = mapped_column(NAME, server_default="")  # for people; not unique
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())  # refused from then on


class WebSessionRow(Base):
    """A dashboard sign-in; `secret_hash` is the sha256 hex of the cookie's secret."""

    __tablename__ = "web_sessions"

    secret_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    org_id: Mapped[str] = mapped_column(ID, ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    # The API token it was opened with; None when opened by signing in with GitHub.
    token_id: Mapped[str | None] = mapped_column(
        ID, ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)


class RepositoryRow(Base):
    __tablename__ = "repositories"
    __table_args__ = (UniqueConstraint("org_id", "host", "owner", "name"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    org_id: Mapped[str] = mapped_column(ID, ForeignKey("orgs.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(NAME)
    owner: Mapped[str] = mapped_column(NAME)
    name: Mapped[str] = mapped_column(NAME)
    git_url: Mapped[str] = mapped_column(Text)
    ci_command: Mapped[str | None] = mapped_column(Text)
    # Names of variables of keepgreen's environment passed to the built-in CI command.
    ci_env: Mapped[list[str]] = mapped_column(JSON, default=list, server_default=text("'[]'"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # Where the git server's credentials are: paths of files keepgreen reads, never secrets.
    git_username: Mapped[str | None] = mapped_column(Text)
    git_token_file: Mapped[str | None] = mapped_column(Text)
    ssh_key_file: Mapped[str | None] = mapped_column(Text)
    ssh_known_hosts: Mapped[str | None] = mapped_column(Text)
    # The ref of PR N (`{number}` in it) and the prefix of test branches; NULL: the defaults.
    pr_refspec: Mapped[str | None] = mapped_column(Text)
    test_branch_prefix: Mapped[str | None] = mapped_column(Text)
    # The GitHub App installation that gives keepgreen this repository (NULL: not through it).
    github_installation_id: Mapped[int | None] = mapped_column(BigInteger)


class QueueRow(Base):
    __tablename__ = "queues"
    __table_args__ = (UniqueConstraint("repository_id", "branch"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE")
    )
    branch: Mapped[str] = mapped_column(NAME)
    state: Mapped[str] = mapped_column(STATE)
    mode: Mapped[str] = mapped_column(STATE)
    pending_mode: Mapped[str | None] = mapped_column(STATE)
    concurrency: Mapped[int] = mapped_column(Integer)
    bisection_concurrency: Mapped[int] = mapped_column(Integer)
    testing_timeout_minutes: Mapped[int] = mapped_column(Integer)
    pending_failure_depth: Mapped[int] = mapped_column(Integer)
    can_optimistically_merge: Mapped[bool] = mapped_column(Boolean)
    batch: Mapped[bool] = mapped_column(Boolean)
    batching_max_wait_time_minutes: Mapped[int] = mapped_column(Integer)
    batching_min_size: Mapped[int] = mapped_column(Integer)
    create_prs_for_testing_branches: Mapped[bool] = mapped_column(Boolean)
    comments_enabled: Mapped[bool] = mapped_column(Boolean)
    commands_enabled: Mapped[bool] = mapped_column(Boolean)
    status_check_enabled: Mapped[bool] = mapped_column(Boolean)
    direct_merge_mode: Mapped[str] = mapped_column(STATE)
    optimization_mode: Mapped[str] = mapped_column(STATE)
    merge_method: Mapped[str] = mapped_column(STATE)
    required_statuses: Mapped[list[str] | None] = mapped_column(JSON)
    # Entry sequence: bumped atomically at each submission (see next_position).
    position_seq: Mapped[int] = mapped_column(Integer, default=0)
    # The target tip the engine last saw, and its test-run counter (run ids derive from it).
    target_sha: Mapped[str | None] = mapped_column(SHA)
    run_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # The checks GitHub's branch protection requires of the branch (NULL: not read).
    host_required_statuses: Mapped[list[str] | None] = mapped_column(JSON)
    # keepgreen's own settings (beside the interface's).
    check_start_timeout_minutes: Mapped[int] = mapped_column(Integer, server_default="30")
    adaptive_testing_timeout: Mapped[bool] = mapped_column(Boolean, server_default=false())
    stall_minutes: Mapped[int] = mapped_column(Integer, server_default="60")
    accept_skipped_checks: Mapped[bool] = mapped_column(Boolean, server_default=false())
    max_retries: Mapped[int] = mapped_column(Integer, server_default="0")
    flaky_failures: Mapped[str] = mapped_column(STATE, server_default="retry")
    bisect_beside_queue: Mapped[bool] = mapped_column(Boolean, server_default=true())
    adaptive_batch_size: Mapped[bool] = mapped_column(Boolean, server_default=false())
    adaptive_depth: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # Fields the hosted service answers beyond its published spec (migration 0023).
    not_ready_timeout_hours: Mapped[int] = mapped_column(Integer, server_default="0")
    enqueueing_label: Mapped[str | None] = mapped_column(NAME)
    label_commands_enabled: Mapped[bool] = mapped_column(Boolean, server_default=true())
    allowed_bot_submitters: Mapped[list[str]] = mapped_column(JSON, server_default="[]")
    state_labels_enabled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    extension_enabled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    test_branch_construction_mode: Mapped[str] = mapped_column(
        STATE, server_default="rename_temp_branch"
    )
    batching_rules: Mapped[list[dict[str, Any]]] = mapped_column(JSON, server_default="[]")
    # What the scheduler learned from the queue's runs (QueueStats); NULL: nothing yet.
    stats: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Moved on by triggers (migration 0019) at every write to what the queue's answers show;
    # never written by keepgreen's code.
    version: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # Moved on by the same triggers (0027) but for a PR entering unread: what the worker's
    # decisions are made on. Never written by keepgreen's code.
    decision_version: Mapped[int] = mapped_column(BigInteger, server_default="0")


class QueueLeaseRow(Base):
    """One writer per queue: a worker holds a queue while `expires_at` is in the future.

    Taken and renewed by compare-and-swap on (holder, expires_at), by the worker's heartbeat.
    """

    __tablename__ = "queue_leases"

    queue_id: Mapped[str] = mapped_column(
        ID, ForeignKey("queues.id", ondelete="CASCADE"), primary_key=True
    )
    holder: Mapped[str] = mapped_column(NAME)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())


class QueueIncidentRow(Base):
    """A fault of a queue's code host (or of one PR's ref there), open until `ended_at`.

    Written by the worker beside the engine's state: a fault is what kept the queue from
    acting, not a decision of the queue. `pr_number` is set when the fault concerns one PR.
    """

    __tablename__ = "queue_incidents"
    __table_args__ = (Index("ix_queue_incidents_queue_id_ended_at", "queue_id", "ended_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    queue_id: Mapped[str] = mapped_column(ID, ForeignKey("queues.id", ondelete="CASCADE"))
    pr_number: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(STATE)
    message: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_failure_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    failures: Mapped[int] = mapped_column(Integer)


class QueueEntryRow(Base):
    """A pull request in a queue; one row per (queue, PR number), reused across episodes."""

    __tablename__ = "queue_entries"
    __table_args__ = (
        UniqueConstraint("queue_id", "number"),
        Index("ix_queue_entries_queue_id_state", "queue_id", "state"),
        Index("ix_queue_entries_queue_id_position", "queue_id", "position"),
        Index("ix_queue_entries_queue_id_head_branch", "queue_id", "head_branch"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    queue_id: Mapped[str] = mapped_column(ID, ForeignKey("queues.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(BigInteger)  # PR numbers go up to 2**32 - 1
    state: Mapped[str] = mapped_column(STATE)
    state_reason: Mapped[str] = mapped_column(STATE)
    state_changed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    priority_value: Mapped[int] = mapped_column(Integer)
    priority_name: Mapped[str] = mapped_column(STATE)
    no_batch: Mapped[bool] = mapped_column(Boolean)
    head_sha: Mapped[str] = mapped_column(SHA)
    title: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(NAME)
    base_branch: Mapped[str] = mapped_column(NAME)
    does_base_branch_match: Mapped[bool] = mapped_column(Boolean)
    mergeability: Mapped[str] = mapped_column(STATE)
    requires_impacted_targets: Mapped[bool] = mapped_column(Boolean)
    has_impacted_targets: Mapped[bool] = mapped_column(Boolean)
    is_submitted: Mapped[bool] = mapped_column(Boolean)
    force_enqueued: Mapped[bool] = mapped_column(Boolean)
    # Sequence number from the queue's counter, taken at each (re)submission: FIFO order.
    position: Mapped[int] = mapped_column(Integer)
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime())
    verified_by_test_run: Mapped[str | None] = mapped_column(ID)
    is_up_to_date: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    head_branch: Mapped[str | None] = mapped_column(NAME)


class StateChangeRow(Base):
    """The history of every entry; also the source of the rolling metrics."""

    __tablename__ = "state_changes"
    __table_args__ = (Index("ix_state_changes_queue_id_at", "queue_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    queue_id: Mapped[str] = mapped_column(ID, ForeignKey("queues.id", ondelete="CASCADE"))
    entry_id: Mapped[str] = mapped_column(
        ID, ForeignKey("queue_entries.id", ondelete="CASCADE"), index=True
    )
    from_state: Mapped[str | None] = mapped_column(STATE)
    to_state: Mapped[str] = mapped_column(STATE)
    reason: Mapped[str] = mapped_column(STATE)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    test_run_id: Mapped[str | None] = mapped_column(ID)
    detail: Mapped[str | None] = mapped_column(Text)


class WorkerRow(Base):
    """A worker process that is alive while `heartbeat_at` is recent (it beats every second or
    two); removed when it stops cleanly. Tells a run whose worker died from one still going.
    """

    __tablename__ = "workers"

    holder: Mapped[str] = mapped_column(NAME, primary_key=True)
    host: Mapped[str] = mapped_column(NAME)
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime())


class CiRunHolderRow(Base):
    """Which worker started a run's built-in CI (the command lives in that worker's process).

    Written before the command starts; a run whose holder is no longer alive is lost.
    """

    __tablename__ = "ci_run_holders"

    test_run_id: Mapped[str] = mapped_column(
        ID, ForeignKey("test_runs.id", ondelete="CASCADE"), primary_key=True
    )
    holder: Mapped[str] = mapped_column(NAME)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())


class TestRunRow(Base):
    __tablename__ = "test_runs"
    __table_args__ = (
        Index("ix_test_runs_queue_id_status", "queue_id", "status"),
        Index("ix_test_runs_queue_id_closed_at", "queue_id", "closed_at"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    queue_id: Mapped[str] = mapped_column(ID, ForeignKey("queues.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(STATE)
    status: Mapped[str] = mapped_column(STATE)
    branch: Mapped[str] = mapped_column(Text)
    base_sha: Mapped[str] = mapped_column(SHA)
    sha: Mapped[str | None] = mapped_column(SHA)
    required_statuses: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    failure_reason: Mapped[str | None] = mapped_column(STATE)
    base_tree: Mapped[str | None] = mapped_column(SHA)
    # The built test commit: [[number, head_sha, commit, tree], ...] in merge order.
    chain: Mapped[list[list[Any]] | None] = mapped_column(JSON)
    bisection_root: Mapped[str | None] = mapped_column(ID)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    attempt: Mapped[int] = mapped_column(Integer, server_default="0")
    failure_detail: Mapped[str | None] = mapped_column(Text)


class QueueEffectRow(Base):
    """The outbox: effects the scheduler decided, written in the same transaction as the state
    that decided them, deleted in the transaction that records their result.
    """

    __tablename__ = "queue_effects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    queue_id: Mapped[str] = mapped_column(
        ID, ForeignKey("queues.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(STATE)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class TestRunEntryRow(Base):
    """Which entries a run includes: `tested` ones it decides, `dependent` ones under them."""

    __tablename__ = "test_run_entries"

    test_run_id: Mapped[str] = mapped_column(
        ID, ForeignKey("test_runs.id", ondelete="CASCADE"), primary_key=True
    )
    entry_id: Mapped[str] = mapped_column(
        ID, ForeignKey("queue_entries.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(STATE)  # "tested" | "dependent"
    ordinal: Mapped[int] = mapped_column(Integer)


class CommitStatusRow(Base):
    __tablename__ = "commit_statuses"
    __table_args__ = (UniqueConstraint("repository_id", "sha", "context"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE")
    )
    sha: Mapped[str] = mapped_column(SHA)
    context: Mapped[str] = mapped_column(NAME)
    state: Mapped[str] = mapped_column(STATE)
    target_url: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ImpactedTargetsRow(Base):
    """Impacted targets per PR head sha; `targets` NULL means ALL."""

    __tablename__ = "impacted_targets"
    __table_args__ = (UniqueConstraint("queue_id", "pr_number", "head_sha"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    queue_id: Mapped[str] = mapped_column(ID, ForeignKey("queues.id", ondelete="CASCADE"))
    pr_number: Mapped[int] = mapped_column(BigInteger)
    head_sha: Mapped[str] = mapped_column(SHA)
    targets: Mapped[Any] = mapped_column(JSON)
    uploaded_at: Mapped[datetime] = mapped_column(UtcDateTime())


# --- flaky tests -------------------------------------------------------------------------------

BIG_ID = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER keys only
BRANCH = String(255)


class FlakySettingsRow(Base):
    """A repository's flaky-test settings; absent means the defaults."""

    __tablename__ = "flaky_settings"

    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True
    )
    quarantine_enabled: Mapped[bool] = mapped_column(Boolean)
    auto_quarantine_flaky: Mapped[bool] = mapped_column(Boolean)
    auto_quarantine_broken: Mapped[bool] = mapped_column(Boolean, server_default=false())
    ticket_url_template: Mapped[str | None] = mapped_column(Text)
    monitors: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


def _of_test_case() -> ForeignKeyConstraint:
    """A row of one repository's test case: the repository is part of the reference, so a row
    can never hang off another repository's test.
    """
    return ForeignKeyConstraint(
        ["repository_id", "test_case_id"],
        ["test_cases.repository_id", "test_cases.id"],
        ondelete="CASCADE",
    )


# A test that is flaky or broken or has an override; only such a test can be quarantined.
# flaky_rows.quarantined repeats it term for term, so that both planners use the index below.
QUARANTINE_CANDIDATE = "status IN ('flaky', 'broken') OR quarantine_override IS NOT NULL"


class TestCaseRow(Base):
    """A test case of one repository. `id` is the Trunk-compatible UUIDv5, which anyone can
    compute or send as a report's `id`, so it is only unique within its repository: the key is
    (repository_id, id), and every row about a test carries both.
    """

    __tablename__ = "test_cases"
    __table_args__ = (
        Index("ix_test_cases_repository_status", "repository_id", "status"),
        # The few tests that may be quarantined, in the order the quarantine list shows them.
        Index(
            "ix_test_cases_quarantine_candidates",
            "repository_id",
            "name",
            "id",
            postgresql_where=text(QUARANTINE_CANDIDATE),
            sqlite_where=text(QUARANTINE_CANDIDATE),
        ),
    )

    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True
    )
    id: Mapped[str] = mapped_column(ID, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    classname: Mapped[str | None] = mapped_column(Text)
    parent: Mapped[str | None] = mapped_column(Text)
    file: Mapped[str | None] = mapped_column(Text)
    variant: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(STATE)
    status_reason: Mapped[str] = mapped_column(Text)
    status_at: Mapped[datetime] = mapped_column(UtcDateTime())
    monitors: Mapped[dict[str, Any]] = mapped_column(JSON)
    manual_flag_reason: Mapped[str | None] = mapped_column(Text)
    manual_flag_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    quarantine_override: Mapped[str | None] = mapped_column(STATE)
    quarantine_override_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    ticket: Mapped[str | None] = mapped_column(NAME)
    codeowners: Mapped[list[str]] = mapped_column(JSON)
    first_seen_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UtcDateTime())


class TestUploadRow(Base):
    """One upload of JUnit reports: one CI job's results for one commit."""

    __tablename__ = "test_uploads"
    __table_args__ = (
        Index("ix_test_uploads_repository_received", "repository_id", "received_at"),
        Index("ux_test_uploads_repository_key", "repository_id", "upload_key", unique=True),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE")
    )
    commit_sha: Mapped[str] = mapped_column(SHA)
    branch: Mapped[str] = mapped_column(BRANCH)
    pr_number: Mapped[int | None] = mapped_column(PR_NUMBER)
    job_url: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(NAME)
    variant: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime] = mapped_column(UtcDateTime())
    files: Mapped[int] = mapped_column(Integer)
    tests: Mapped[int] = mapped_column(Integer)
    results: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    skipped: Mapped[int] = mapped_column(Integer)
    excluded: Mapped[bool] = mapped_column(Boolean)  # infrastructure failure: not in detection
    # The client's idempotency key, else a digest of the run and its reports (see ingest).
    upload_key: Mapped[str | None] = mapped_column(SHA)
    failed_tests: Mapped[list[str] | None] = mapped_column(JSON)  # final outcome failed


class TestResultRow(Base):
    """One failed attempt of one test in one upload (kept for the retention days); passes and
    skips are only counted, in the roll-ups.
    """

    __tablename__ = "test_results"
    __table_args__ = (
        _of_test_case(),
        # A test's failed attempts in a time range: what list-failing-tests counts on a day its
        # window cuts through (it ranks from test_failure_days otherwise).
        Index("ix_test_results_test_case_at", "repository_id", "test_case_id", "at"),
    )

    id: Mapped[int] = mapped_column(BIG_ID, primary_key=True, autoincrement=True)
    repository_id: Mapped[str] = mapped_column(ID)
    test_case_id: Mapped[str] = mapped_column(ID)
    upload_id: Mapped[str] = mapped_column(
        ID, ForeignKey("test_uploads.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    outcome: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    summary: Mapped[str | None] = mapped_column(Text)


class TestHourRow(Base):
    """Rollup: one test's non-skipped results of one hour on one branch (excluded uploads
    left out); the rate and count monitors read these, never the raw results.

    The roll-ups have no foreign key to their test: one row per test per upload is written,
    and checking each cost PostgreSQL as much as writing it. Their rows are only written for
    the tests an upload has just stored, and removing a repository deletes them explicitly.

    Keyed by hour and branch first, like the totals below: the rows an upload writes sit side
    by side in the key, so the pages it dirties do not grow with the history stored. A test's
    buckets are read by probing the hours and branches uploads came from.
    """

    __tablename__ = "test_hourly_rollups"
    __table_args__ = (PrimaryKeyConstraint("repository_id", "hour", "branch", "test_case_id"),)

    repository_id: Mapped[str] = mapped_column(ID, primary_key=True)
    test_case_id: Mapped[str] = mapped_column(ID, primary_key=True)
    hour: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    branch: Mapped[str] = mapped_column(BRANCH, primary_key=True)
    runs: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    last_run_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_failure_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class TestHourTotalRow(Base):
    """Rollup: one test's runs and failures of one hour on every branch: its failure rate of
    the last 24 hours, read by probing 25 hours per test.
    """

    __tablename__ = "test_hour_totals"

    repository_id: Mapped[str] = mapped_column(ID, primary_key=True)
    hour: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    test_case_id: Mapped[str] = mapped_column(ID, primary_key=True)
    runs: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)


class TestDayTotalRow(Base):
    """Rollup: one test's runs and failures of one day (UTC) on every branch: its failure rate
    of the last 7 days, read by probing 8 days per test.
    """

    __tablename__ = "test_day_totals"

    repository_id: Mapped[str] = mapped_column(ID, primary_key=True)
    day: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    test_case_id: Mapped[str] = mapped_column(ID, primary_key=True)
    runs: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)


class TestCommitRow(Base):
    """Rollup: one test's passes and failures on one commit (pass-on-retry, failing streaks,
    PRs impacted).

    Keyed by commit first: an upload writes one row per test of its commit, and those rows
    then sit side by side in the key's index instead of one in each test's range, so the pages
    an upload dirties do not grow with the history stored. A test's history is read through
    its failing rows (ix_test_commit_rollups_failing_test) and, for a failing streak, its rows
    on the commits before, found by commit.
    """

    __tablename__ = "test_commit_rollups"
    __table_args__ = (
        PrimaryKeyConstraint("repository_id", "commit_sha", "test_case_id"),
        # A commit's failing tests (mixed on a commit), without the commit's passing ones.
        Index(
            "ix_test_commit_rollups_failed",
            "repository_id",
            "commit_sha",
            postgresql_where=text("failures > 0"),
            sqlite_where=text("failures > 0"),
        ),
        # A test's failing commits: about one row in thirty, so a small index. It holds what
        # the PRs a test impacted are counted from, so that count reads the index alone.
        Index(
            "ix_test_commit_rollups_failing_test",
            "repository_id",
            "test_case_id",
            "last_failure_at",
            "pr_number",
            postgresql_where=text("failures > 0"),
            sqlite_where=text("failures > 0"),
        ),
    )

    repository_id: Mapped[str] = mapped_column(ID, primary_key=True)
    test_case_id: Mapped[str] = mapped_column(ID, primary_key=True)
    commit_sha: Mapped[str] = mapped_column(SHA, primary_key=True)
    branch: Mapped[str] = mapped_column(BRANCH)
    pr_number: Mapped[int | None] = mapped_column(PR_NUMBER)
    passes: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    first_pass_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    first_failure_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    last_failure_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    last_run_at: Mapped[datetime] = mapped_column(UtcDateTime())
    runs: Mapped[int] = mapped_column(Integer)  # uploads that ran the test on this commit


class TestFailureDayRow(Base):
    """Rollup: one test's failed attempts of one day (UTC), every upload counted, and the
    first and last of them: what list-failing-tests ranks by.

    A day lying wholly in a listing's window is counted from here; a test's day the window
    cuts through (not all of that day's failures in the window) is counted from the raw
    results.
    Keyed by day first, so a window reads its days' rows side by side.
    """

    __tablename__ = "test_failure_days"
    __table_args__ = ({"sqlite_with_rowid": False},)

    repository_id: Mapped[str] = mapped_column(ID, primary_key=True)
    day: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    test_case_id: Mapped[str] = mapped_column(ID, primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    first_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_at: Mapped[datetime] = mapped_column(UtcDateTime())


class TestFailureTemplateRow(Base):
    """Rollup: one template of one test's failure summaries on one day, with how often it
    occurred and when last (field notes §5).

    Each upload mines its failures into the day's templates of the test (absorb_failures), so
    a listing mines a few templates per test and day instead of every distinct summary.
    `position` is the template's place among the test's templates of the day, which a
    template keeps as it grows.
    """

    __tablename__ = "test_failure_templates"
    __table_args__ = (_of_test_case(),)

    repository_id: Mapped[str] = mapped_column(ID, primary_key=True)
    test_case_id: Mapped[str] = mapped_column(ID, primary_key=True)
    day: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    summary: Mapped[str] = mapped_column(Text)
    occurrences: Mapped[int] = mapped_column(Integer)
    last_at: Mapped[datetime] = mapped_column(UtcDateTime())


class TestStatusChangeRow(Base):
    """The history of a test's status value."""

    __tablename__ = "test_status_changes"
    __table_args__ = (
        _of_test_case(),
        Index("ix_test_status_changes_test_case", "repository_id", "test_case_id"),
    )

    id: Mapped[int] = mapped_column(BIG_ID, primary_key=True, autoincrement=True)
    repository_id: Mapped[str] = mapped_column(ID)
    test_case_id: Mapped[str] = mapped_column(ID)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    status: Mapped[str] = mapped_column(STATE)
    reason: Mapped[str] = mapped_column(Text)


class CiRunRow(Base):
    """A run of a CI job as CI reported it (create-ci-run); not the queue's test runs, nor the
    built-in runner's. `run_key` is a digest of the provider, the provider's run id, job id
    and attempt, so that a run reported again is stored once; NULL when the report named no
    provider's run id (NULLs never collide in a unique index, on either backend).
    """

    __tablename__ = "ci_runs"
    __table_args__ = (
        Index("ux_ci_runs_repository_key", "repository_id", "run_key", unique=True),
        # The listing: a repository's runs, latest start first; and the runs of one commit.
        Index("ix_ci_runs_repository_start", "repository_id", "run_start"),
        Index("ix_ci_runs_repository_sha", "repository_id", "sha"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE")
    )
    run_key: Mapped[str | None] = mapped_column(SHA)
    ci_job_name: Mapped[str] = mapped_column(NAME)
    provider: Mapped[str | None] = mapped_column(STATE)
    providers_run_id: Mapped[str | None] = mapped_column(NAME)
    providers_job_id: Mapped[str | None] = mapped_column(NAME)
    attempt: Mapped[int] = mapped_column(BigInteger)  # up to 2^32 - 1
    branch: Mapped[str] = mapped_column(BRANCH)
    sha: Mapped[str] = mapped_column(SHA)
    run_start: Mapped[datetime] = mapped_column(UtcDateTime())
    run_end: Mapped[datetime] = mapped_column(UtcDateTime())
    run_conclusion: Mapped[str | None] = mapped_column(STATE)
    run_conclusion_cause: Mapped[str | None] = mapped_column(STATE)
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime())  # the first report
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())  # the last one


class InstanceSecretRow(Base):
    """Secrets of this installation (e.g. the key that signs page tokens), made on first use."""

    __tablename__ = "instance_secrets"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    value: Mapped[str] = mapped_column(String(128))


class GithubDeliveryRow(Base):
    """A GitHub webhook delivery, stored when it arrives (the answer goes back at once) and
    acted on by the worker; `id` is GitHub's X-GitHub-Delivery, so a redelivery is a no-op.
    """

    __tablename__ = "github_deliveries"
    __table_args__ = (Index("ix_github_deliveries_processed_at", "processed_at", "received_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    payload: Mapped[dict[str, object]] = mapped_column(JSON)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime())
    processed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class GithubInstallationRow(Base):
    """An installation of the GitHub App, and the org its repositories belong to."""

    __tablename__ = "github_installations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account: Mapped[str] = mapped_column(NAME)
    org_id: Mapped[str | None] = mapped_column(ID, ForeignKey("orgs.id", ondelete="SET NULL"))
    linked: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class GithubFeedbackRow(Base):
    """The check run and the comment keepgreen keeps up to date on a PR."""

    __tablename__ = "github_feedback"

    repository_id: Mapped[str] = mapped_column(
        ID, ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(PR_NUMBER, primary_key=True, autoincrement=False)
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    check_run_sha: Mapped[str | None] = mapped_column(String(64))
    comment_id: Mapped[int | None] = mapped_column(BigInteger)
    shown: Mapped[str] = mapped_column(String(64))
    shown_comment: Mapped[str] = mapped_column(String(64))
    shown_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    merged_sha: Mapped[str | None] = mapped_column(String(64))
    state_label: Mapped[str | None] = mapped_column(String(64))
