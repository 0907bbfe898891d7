"""Translation between table rows and core dataclasses, in both directions."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from keepgreen.adapters.db.tables import (
    CommitStatusRow,
    ImpactedTargetsRow,
    QueueEntryRow,
    QueueIncidentRow,
    QueueRow,
    RepositoryRow,
    StateChangeRow,
)
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
)
from keepgreen.core.ids import OrgId, PullRequestId, QueueId, RepositoryId, TestRunId
from keepgreen.core.model import (
    DEFAULT_PR_REFSPEC,
    DEFAULT_TEST_BRANCH_PREFIX,
    CommitStatus,
    GitAuth,
    ImpactedTargets,
    Incident,
    Queue,
    QueueConfig,
    QueueEntry,
    QueueStats,
    Readiness,
    RepoRef,
    Repository,
    StateChange,
    canonical_json,
)
from keepgreen.core.priority import Priority


def repository_from_row(row: RepositoryRow) -> Repository:
    return Repository(
        id=RepositoryId(row.id),
        org_id=OrgId(row.org_id),
        ref=RepoRef(row.host, row.owner, row.name),
        git_url=row.git_url,
        ci_command=row.ci_command,
        ci_env=tuple(row.ci_env or ()),
        created_at=row.created_at,
        auth=GitAuth(
            token_file=row.git_token_file,
            username=row.git_username,
            ssh_key_file=row.ssh_key_file,
            ssh_known_hosts=row.ssh_known_hosts,
        ),
        pr_refspec=row.pr_refspec or DEFAULT_PR_REFSPEC,
        test_branch_prefix=row.test_branch_prefix or DEFAULT_TEST_BRANCH_PREFIX,
        github_installation_id=row.github_installation_id,
    )


def write_repository(row: RepositoryRow, repository: Repository) -> None:
    """Copy a repository onto its row (every column but the id)."""
    row.org_id = repository.org_id
    row.host = repository.ref.host
    row.owner = repository.ref.owner
    row.name = repository.ref.name
    row.git_url = repository.git_url
    row.ci_command = repository.ci_command
    row.ci_env = list(repository.ci_env)
    row.created_at = repository.created_at
    row.git_token_file = repository.auth.token_file
    row.git_username = repository.auth.username
    row.ssh_key_file = repository.auth.ssh_key_file
    row.ssh_known_hosts = repository.auth.ssh_known_hosts
    # The defaults are stored as NULL, so a later change of default reaches those rows.
    row.pr_refspec = _unless(repository.pr_refspec, DEFAULT_PR_REFSPEC)
    row.test_branch_prefix = _unless(repository.test_branch_prefix, DEFAULT_TEST_BRANCH_PREFIX)
    row.github_installation_id = repository.github_installation_id


def _unless(value: str, default: str) -> str | None:
    return None if value == default else value


def queue_from_row(row: QueueRow) -> Queue:
    config = QueueConfig(
        concurrency=row.concurrency,
        bisection_concurrency=row.bisection_concurrency,
        testing_timeout_minutes=row.testing_timeout_minutes,
        pending_failure_depth=row.pending_failure_depth,
        can_optimistically_merge=row.can_optimistically_merge,
        batch=row.batch,
        batching_max_wait_time_minutes=row.batching_max_wait_time_minutes,
        batching_min_size=row.batching_min_size,
        create_prs_for_testing_branches=row.create_prs_for_testing_branches,
        comments_enabled=row.comments_enabled,
        commands_enabled=row.commands_enabled,
        status_check_enabled=row.status_check_enabled,
        direct_merge_mode=DirectMergeMode(row.direct_merge_mode),
        optimization_mode=OptimizationMode(row.optimization_mode),
        merge_method=MergeMethod(row.merge_method),
        required_statuses=(None if row.required_statuses is None else tuple(row.required_statuses)),
        check_start_timeout_minutes=row.check_start_timeout_minutes,
        adaptive_testing_timeout=row.adaptive_testing_timeout,
        stall_minutes=row.stall_minutes,
        accept_skipped_checks=row.accept_skipped_checks,
        max_retries=row.max_retries,
        flaky_failures=FlakyFailures(row.flaky_failures),
        bisect_beside_queue=row.bisect_beside_queue,
        adaptive_batch_size=row.adaptive_batch_size,
        adaptive_depth=row.adaptive_depth,
        not_ready_timeout_hours=row.not_ready_timeout_hours,
        enqueueing_label=row.enqueueing_label,
        label_commands_enabled=row.label_commands_enabled,
        allowed_bot_submitters=tuple(row.allowed_bot_submitters or ()),
        state_labels_enabled=row.state_labels_enabled,
        extension_enabled=row.extension_enabled,
        test_branch_construction_mode=TestBranchConstructionMode(row.test_branch_construction_mode),
        batching_rules=tuple(canonical_json(rule) for rule in row.batching_rules or ()),
    )
    return Queue(
        id=QueueId(row.id),
        repository_id=RepositoryId(row.repository_id),
        branch=row.branch,
        state=QueueState(row.state),
        mode=QueueMode(row.mode),
        pending_mode=None if row.pending_mode is None else QueueMode(row.pending_mode),
        config=config,
        created_at=row.created_at,
        updated_at=row.updated_at,
        target_sha=row.target_sha,
        run_seq=row.run_seq,
        version=row.version,
        host_required_statuses=(
            None if row.host_required_statuses is None else tuple(row.host_required_statuses)
        ),
        stats=stats_from_json(row.stats),
    )


def stats_from_json(data: Mapping[str, Any] | None) -> QueueStats:
    """The stored QueueStats; what does not read as one (an older shape) starts afresh."""
    if not data:
        return QueueStats()
    try:
        at = data.get("lastProgressAt")
        return QueueStats(
            ci_seconds=tuple(int(s) for s in data.get("ciSeconds", ())),
            refuted=float(data.get("refuted", 0.0)),
            confirmed=float(data.get("confirmed", 0.0)),
            last_progress_at=None if at is None else datetime.fromisoformat(str(at)),
            tested_prs=float(data.get("testedPrs", 0.0)),
            failed_runs=float(data.get("failedRuns", 0.0)),
            depth=None if data.get("depth") is None else int(data["depth"]),
        )
    except (TypeError, ValueError):
        return QueueStats()


def stats_to_json(stats: QueueStats) -> dict[str, Any]:
    at = stats.last_progress_at
    return {
        "ciSeconds": list(stats.ci_seconds),
        "refuted": stats.refuted,
        "confirmed": stats.confirmed,
        "lastProgressAt": None if at is None else at.isoformat(),
        "testedPrs": stats.tested_prs,
        "failedRuns": stats.failed_runs,
        "depth": stats.depth,
    }


def write_queue(row: QueueRow, queue: Queue) -> None:
    """Copy every field of `queue` onto `row` (the id and position counter stay)."""
    config = queue.config
    row.repository_id = queue.repository_id
    row.branch = queue.branch
    row.state = queue.state.value
    row.mode = queue.mode.value
    row.pending_mode = None if queue.pending_mode is None else queue.pending_mode.value
    row.concurrency = config.concurrency
    row.bisection_concurrency = config.bisection_concurrency
    row.testing_timeout_minutes = config.testing_timeout_minutes
    row.pending_failure_depth = config.pending_failure_depth
    row.can_optimistically_merge = config.can_optimistically_merge
    row.batch = config.batch
    row.batching_max_wait_time_minutes = config.batching_max_wait_time_minutes
    row.batching_min_size = config.batching_min_size
    row.create_prs_for_testing_branches = config.create_prs_for_testing_branches
    row.comments_enabled = config.comments_enabled
    row.commands_enabled = config.commands_enabled
    row.status_check_enabled = config.status_check_enabled
    row.direct_merge_mode = config.direct_merge_mode.value
    row.optimization_mode = config.optimization_mode.value
    row.merge_method = config.merge_method.value
    row.required_statuses = (
        None if config.required_statuses is None else list(config.required_statuses)
    )
    row.created_at = queue.created_at
    row.updated_at = queue.updated_at
    row.target_sha = queue.target_sha
    row.run_seq = queue.run_seq
    row.host_required_statuses = (
        None if queue.host_required_statuses is None else list(queue.host_required_statuses)
    )
    row.check_start_timeout_minutes = config.check_start_timeout_minutes
    row.adaptive_testing_timeout = config.adaptive_testing_timeout
    row.stall_minutes = config.stall_minutes
    row.accept_skipped_checks = config.accept_skipped_checks
    row.max_retries = config.max_retries
    row.flaky_failures = config.flaky_failures.value
    row.bisect_beside_queue = config.bisect_beside_queue
    row.adaptive_batch_size = config.adaptive_batch_size
    row.adaptive_depth = config.adaptive_depth
    row.not_ready_timeout_hours = config.not_ready_timeout_hours
    row.enqueueing_label = config.enqueueing_label
    row.label_commands_enabled = config.label_commands_enabled
    row.allowed_bot_submitters = list(config.allowed_bot_submitters)
    row.state_labels_enabled = config.state_labels_enabled
    row.extension_enabled = config.extension_enabled
    row.test_branch_construction_mode = config.test_branch_construction_mode.value
    row.batching_rules = [json.loads(rule) for rule in config.batching_rules]
    row.stats = stats_to_json(queue.stats)


def entry_from_row(row: QueueEntryRow | Row[Any]) -> QueueEntry:
    """The entry of an ORM row or of a plain row of `queue_entries`."""
    return QueueEntry(
        id=PullRequestId(row.id),
        queue_id=QueueId(row.queue_id),
        number=row.number,
        state=PrState(row.state),
        state_changed_at=row.state_changed_at,
        state_reason=StateReason(row.state_reason),
        priority=Priority(row.priority_value, row.priority_name),
        no_batch=row.no_batch,
        head_sha=row.head_sha,
        title=row.title,
        author=row.author,
        base_branch=row.base_branch,
        readiness=Readiness(
            does_base_branch_match=row.does_base_branch_match,
            mergeability=Mergeability(row.mergeability),
            requires_impacted_targets=row.requires_impacted_targets,
            has_impacted_targets=row.has_impacted_targets,
        ),
        is_submitted=row.is_submitted,
        force_enqueued=row.force_enqueued,
        position=row.position,
        submitted_at=row.submitted_at,
        verified_by_test_run=(
            None if row.verified_by_test_run is None else TestRunId(row.verified_by_test_run)
        ),
        is_up_to_date=row.is_up_to_date,
        head_branch=row.head_branch,
    )


class EntriesReadAgain:
    """Entries built from the rows of the latest `reads` reads, by what was read: a row read
    again unchanged gives the entry built from it the time before (entries are frozen), not a
    new one. The worker reads every live entry of its queue on each pass, and building them
    was half of its time under a flood of merge buttons, when all but the newest are the same
    rows as the pass before. Shared by threads.
    """

    def __init__(self, reads: int) -> None:
        self._reads: OrderedDict[Hashable, dict[tuple[Any, ...], QueueEntry]] = OrderedDict()
        self._most = reads
        self._lock = threading.Lock()

    def entries(self, read: Hashable, rows: Iterable[Row[Any]]) -> list[QueueEntry]:
        """The entries of `rows`, the answer to `read` (a key naming what was asked)."""
        with self._lock:
            before = self._reads.get(read, {})
        built: dict[tuple[Any, ...], QueueEntry] = {}
        entries = []
        for row in rows:
            values = tuple(row)
            entry = before.get(values)
            if entry is None:
                entry = entry_from_row(row)
            built[values] = entry
            entries.append(entry)
        with self._lock:
            self._reads[read] = built
            self._reads.move_to_end(read)
            while len(self._reads) > self._most:
                self._reads.popitem(last=False)
        return entries


def write_entry(row: QueueEntryRow, entry: QueueEntry) -> None:
    """Copy every field of `entry` onto `row`."""
    for column, value in entry_values(entry).items():
        setattr(row, column, value)


def entry_values(entry: QueueEntry) -> dict[str, Any]:
    """Every column of `entry`'s row but its id, by attribute name."""
    return {
        "queue_id": entry.queue_id,
        "number": entry.number,
        "state": entry.state.value,
        "state_reason": entry.state_reason.value,
        "state_changed_at": entry.state_changed_at,
        "priority_value": entry.priority.value,
        "priority_name": entry.priority.name,
        "no_batch": entry.no_batch,
        "head_sha": entry.head_sha,
        "title": entry.title,
        "author": entry.author,
        "base_branch": entry.base_branch,
        "does_base_branch_match": entry.readiness.does_base_branch_match,
        "mergeability": entry.readiness.mergeability.value,
        "requires_impacted_targets": entry.readiness.requires_impacted_targets,
        "has_impacted_targets": entry.readiness.has_impacted_targets,
        "is_submitted": entry.is_submitted,
        "force_enqueued": entry.force_enqueued,
        "position": entry.position,
        "submitted_at": entry.submitted_at,
        "verified_by_test_run": entry.verified_by_test_run,
        "is_up_to_date": entry.is_up_to_date,
        "head_branch": entry.head_branch,
    }


def state_change_values(change: StateChange) -> dict[str, Any]:
    """Every column of `change`'s row but its (generated) id, by attribute name."""
    return {
        "queue_id": change.queue_id,
        "entry_id": change.pull_request_id,
        "from_state": None if change.from_state is None else change.from_state.value,
        "to_state": change.to_state.value,
        "reason": change.reason.value,
        "at": change.at,
        "test_run_id": change.test_run_id,
        "detail": change.detail,
    }


def state_change_from_row(row: StateChangeRow) -> StateChange:
    return StateChange(
        pull_request_id=PullRequestId(row.entry_id),
        queue_id=QueueId(row.queue_id),
        from_state=None if row.from_state is None else PrState(row.from_state),
        to_state=PrState(row.to_state),
        reason=StateReason(row.reason),
        at=row.at,
        test_run_id=None if row.test_run_id is None else TestRunId(row.test_run_id),
        detail=row.detail,
    )


def commit_status_from_row(row: CommitStatusRow) -> CommitStatus:
    return CommitStatus(
        repository_id=RepositoryId(row.repository_id),
        sha=row.sha,
        context=row.context,
        state=CommitState(row.state),
        target_url=row.target_url,
        description=row.description,
        updated_at=row.updated_at,
    )


def impacted_targets_from_row(row: ImpactedTargetsRow) -> ImpactedTargets:
    targets = row.targets
    return ImpactedTargets(
        queue_id=QueueId(row.queue_id),
        pr_number=row.pr_number,
        head_sha=row.head_sha,
        targets=None if targets is None else tuple(str(t) for t in targets),
        uploaded_at=row.uploaded_at,
    )


def incident_from_row(row: QueueIncidentRow) -> Incident:
    return Incident(
        id=row.id,
        queue_id=QueueId(row.queue_id),
        kind=IncidentKind(row.kind),
        message=row.message,
        started_at=row.started_at,
        last_failure_at=row.last_failure_at,
        failures=row.failures,
        pr_number=row.pr_number,
        ended_at=row.ended_at,
    )
