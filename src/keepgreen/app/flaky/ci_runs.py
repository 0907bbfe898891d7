"""CI runs reported through create-ci-run: each stored once per run, and listed back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.pages import Page, PageTokens
from keepgreen.app.flaky.reads import page_size_of
from keepgreen.app.instance_keys import instance_key
from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, IdFactory, UnitOfWorkFactory
from keepgreen.core.flaky.ci_runs import (
    CiProvider,
    CiRun,
    ConclusionCause,
    RunConclusion,
    reported_again,
    run_time_problem,
)
from keepgreen.core.ids import CiRunId, OrgId
from keepgreen.core.limits import MAX_CI_RUN_ATTEMPT
from keepgreen.core.model import RepoRef
from keepgreen.core.names import normalize_sha

_BAD_SHA = "must be a hex commit sha (4-64 digits)"


@dataclass(frozen=True, slots=True)
class CiRunReport:
    """What one create-ci-run request says. Times are timezone-aware; an empty provider's run
    or job id counts as none (it cannot tell runs apart).
    """

    ci_job_name: str
    branch: str
    sha: str
    run_start: datetime
    run_end: datetime
    attempt: int
    provider: CiProvider | None = None
    providers_run_id: str | None = None
    providers_job_id: str | None = None
    conclusion: RunConclusion | None = None
    conclusion_cause: ConclusionCause | None = None


@dataclass(frozen=True, slots=True)
class CiRunPage:
    runs: tuple[CiRun, ...]
    page: Page


class CiRunService:
    def __init__(self, unit_of_work: UnitOfWorkFactory, *, clock: Clock, new_id: IdFactory) -> None:
        self._unit_of_work = unit_of_work
        self._clock = clock
        self._new_id = new_id
        self._page_key: bytes | None = None

    def record(self, org_id: OrgId, ref: RepoRef, report: CiRunReport) -> CiRun:
        """Store a run of the org's repository and answer it as stored.

        A report of a run stored already (the same provider, provider's run id, job id and
        attempt; see `run_key_of`) updates that run and answers its id: a CI retry, or a job
        that reports its start and then its end, stays one run.
        """
        sha = normalize_sha(report.sha)
        if sha is None:
            raise InvalidInput("invalid_field", f"sha {_BAD_SHA}")
        for field, moment in (("run_start", report.run_start), ("run_end", report.run_end)):
            problem = run_time_problem(moment)
            if problem is not None:
                raise InvalidInput("invalid_field", f"{field} {problem}")
        if report.run_end < report.run_start:
            raise InvalidInput("invalid_field", "run_end must not be before run_start")
        if not 0 <= report.attempt <= MAX_CI_RUN_ATTEMPT:
            raise InvalidInput(
                "invalid_field", f"attempt must be between 0 and {MAX_CI_RUN_ATTEMPT}"
            )
        now = self._clock()
        with self._unit_of_work() as uow:
            repository = find_repository(uow, org_id, ref)
            run = CiRun(
                id=CiRunId(self._new_id()),
                repository_id=repository.id,
                ci_job_name=report.ci_job_name,
                branch=report.branch,
                sha=sha,
                run_start=report.run_start,
                run_end=report.run_end,
                attempt=report.attempt,
                reported_at=now,
                updated_at=now,
                provider=report.provider,
                providers_run_id=report.providers_run_id or None,
                providers_job_id=report.providers_job_id or None,
                conclusion=report.conclusion,
                conclusion_cause=report.conclusion_cause,
            )
            stored = uow.ci_runs.claim(run)
            if stored is not None:
                run = reported_again(stored, run)
                uow.ci_runs.save(run)
            uow.commit()
        return run

    def list_runs(
        self,
        org_id: OrgId,
        ref: RepoRef,
        *,
        branch: str | None,
        sha: str | None,
        size: int,
        token: str,
    ) -> CiRunPage:
        """The repository's runs, latest start first, on `branch` and of `sha` when given."""
        size = page_size_of(size)
        if sha is not None:
            normalized = normalize_sha(sha)
            if normalized is None:
                raise InvalidInput("invalid_field", f"sha {_BAD_SHA}")
            sha = normalized
        tokens = self._tokens()
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            # "" for no filter: no branch or sha is empty.
            query = tokens.fingerprint(repository.id, size, "list-ci-runs", branch or "", sha or "")
            offset = tokens.offset(query, token)
            runs, total = uow.ci_runs.page(
                repository.id, branch=branch, sha=sha, offset=offset, limit=size
            )
        return CiRunPage(tuple(runs), tokens.page(query, offset=offset, size=size, total=total))

    def _tokens(self) -> PageTokens:
        # The flaky-test listings' key: a token names its listing, so none crosses over.
        if self._page_key is None:
            self._page_key = bytes.fromhex(instance_key(self._unit_of_work, "page-tokens"))
        return PageTokens(self._page_key)
