"""What a test run is testing, and CI statuses reported for commits."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import structlog

from keepgreen.app.errors import InvalidInput, NotFound
from keepgreen.app.lookup import find_queue, find_repository
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.core.enums import CommitState
from keepgreen.core.ids import OrgId, TestRunId
from keepgreen.core.limits import MAX_TEXT_LENGTH
from keepgreen.core.model import (
    CommitStatus,
    ImpactedTargets,
    QueueEntry,
    RepoRef,
    Repository,
    TestRun,
)
from keepgreen.core.names import normalize_sha, plain_name_problem

BUILT_IN_CI_CONTEXT = "keepgreen/ci"

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TestRunDetails:
    """A test run with the entries it includes and the statuses reported on its head."""

    __test__ = False

    repository: Repository
    run: TestRun
    required_statuses: tuple[str, ...]
    required_statuses_source: str
    tested: Sequence[QueueEntry]
    dependent: Sequence[QueueEntry]
    statuses: Sequence[CommitStatus]
    impacted_targets: tuple[str, ...] | None
    impacted_targets_for_tested: tuple[str, ...] | None


class TestingService:
    __test__ = False

    def __init__(self, uow: UnitOfWorkFactory, *, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    def details(self, org_id: OrgId, ref: RepoRef, branch: str, run_id: str) -> TestRunDetails:
        with self._uow(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            queue = find_queue(uow, repository, branch)
            run = uow.test_runs.get(queue.id, TestRunId(run_id.strip()))
            if run is None:
                raise NotFound("test_run_not_found", f"no test run {run_id!r} in this queue")
            tested = [uow.entries.get(entry_id) for entry_id in run.tested_prs]
            dependent = [uow.entries.get(entry_id) for entry_id in run.dependent_prs]
            statuses = [] if run.sha is None else uow.statuses.list_for_sha(repository.id, run.sha)
            uploads = {
                entry.id: uow.impacted_targets.find(queue.id, entry.number, entry.head_sha)
                for entry in (*dependent, *tested)
            }
        if queue.config.required_statuses is not None:
            source = "merge_instance"
        elif queue.host_required_statuses:
            source = "repo_provider_branch_protection"
        else:
            source = "trunk_config"
        return TestRunDetails(
            repository=repository,
            run=run,
            required_statuses=run.required_statuses,
            required_statuses_source=source,
            tested=tested,
            dependent=dependent,
            statuses=statuses,
            impacted_targets=_union(uploads.values()),
            impacted_targets_for_tested=_union(uploads[entry.id] for entry in tested),
        )


def _union(uploads: Iterable[ImpactedTargets | None]) -> tuple[str, ...] | None:
    """The sorted union of uploaded target lists ("ALL" for an all-impacting PR); None when
    no PR of the run has uploaded targets.
    """
    found = [upload for upload in uploads if upload is not None]
    if not found:
        return None
    return tuple(sorted({t for upload in found for t in (upload.targets or ("ALL",))}))


class StatusService:
    """Commit statuses in: from `setCommitStatus` and from the built-in runner. Storing one
    wakes the worker, which re-reads the statuses of every open run.
    """

    def __init__(
        self, uow: UnitOfWorkFactory, *, clock: Clock, wake: Callable[[], None] = lambda: None
    ) -> None:
        self._uow = uow
        self._clock = clock
        self._wake = wake

    def set_commit_status(
        self,
        org_id: OrgId,
        ref: RepoRef,
        *,
        sha: str,
        context: str,
        state: CommitState,
        target_url: str | None,
        description: str | None,
    ) -> CommitStatus:
        """Store what CI says about a commit; the last write per (repo, sha, context) wins."""
        normalized = normalize_sha(sha)
        if normalized is None:
            raise InvalidInput("invalid_field", "sha must be a hex commit sha (4-64 digits)")
        problem = plain_name_problem(context)
        if problem is not None:
            raise InvalidInput("invalid_field", f"context {problem}")
        for field, value in (("targetUrl", target_url), ("description", description)):
            if value is not None and len(value) > MAX_TEXT_LENGTH:
                raise InvalidInput(
                    "invalid_field", f"{field} must be at most {MAX_TEXT_LENGTH} characters"
                )
        with self._uow() as uow:
            repository = find_repository(uow, org_id, ref)
        return self.record(
            repository,
            sha=normalized,
            context=context,
            state=state,
            target_url=target_url,
            description=description,
        )

    def record(
        self,
        repository: Repository,
        *,
        sha: str,
        context: str,
        state: CommitState,
        target_url: str | None,
        description: str | None,
    ) -> CommitStatus:
        """Store a validated status for a repository; the last write per context wins."""
        status = CommitStatus(
            repository_id=repository.id,
            sha=sha,
            context=context,
            state=state,
            target_url=target_url,
            description=description,
            updated_at=self._clock(),
        )
        with self._uow() as uow:
            uow.statuses.upsert(status)
            uow.commit()
        log.info(
            "status received",
            repo=str(repository.ref),
            sha=sha,
            context=context,
            result=state.value,
            description=description,
        )
        self._wake()
        return status
