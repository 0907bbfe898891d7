"""CI runs as CI reports them (Trunk's create-ci-run): one job's run, and when a report is a
run reported again.

A report that names the provider's run id (`providers_run_id`) can be sent again for the same
run, by a CI retry or by a job reporting its start and then its end; it is the same run when
provider, provider's run id, provider's job id and attempt are the same. Without a provider's
run id nothing tells two reports of one run apart, so each report is a run of its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

from keepgreen.core.ids import CiRunId, RepositoryId

# When a run may start or end: any real CI run, with room on both sides for a zone's offset (a
# database server in any time zone reads these back as dates it can hold).
EARLIEST_RUN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_RUN_TIME = datetime(9999, 1, 1, tzinfo=UTC)


def run_time_problem(moment: datetime) -> str | None:
    """Why `moment` (timezone-aware) cannot be a run's start or end, or None."""
    if not EARLIEST_RUN_TIME <= moment < LATEST_RUN_TIME:
        return "must be from 1970-01-01 up to 9999-01-01 (UTC)"
    return None


class CiProvider(StrEnum):
    """The CI system that ran the job (the spec's list)."""

    GITHUB = "github"  # GitHub Actions
    JENKINS = "jenkins"
    CIRCLECI = "circleci"
    SEMAPHORE = "semaphore"
    TRAVIS = "travis"
    WEBAPPIO = "webappio"
    CODEBUILD = "codebuild"  # AWS CodeBuild
    BITBUCKET = "bitbucket"  # Bitbucket Pipelines
    AZURE = "azure"  # Azure Pipelines
    GITLAB = "gitlab"  # GitLab CI
    DRONE = "drone"
    BUILDKITE = "buildkite"


class RunConclusion(StrEnum):
    """How the run ended."""

    SUCCESS = "success"  # the job passed
    FAILURE = "failure"  # the job failed
    SKIPPED = "skipped"  # the job did not run
    CANCELLED = "cancelled"  # the job was stopped before it ended


class ConclusionCause(StrEnum):
    """What decided the conclusion (of a failure, mostly)."""

    TEST = "test"  # the tests: a test failed
    CI = "ci"  # CI itself: a setup step, the runner, the infrastructure


@dataclass(frozen=True, slots=True)
class CiRun:
    """One run of one CI job for one commit, as last reported.

    `reported_at` is when it was first reported, `updated_at` when last; `run_key` is None when
    the report named no provider's run id (see `run_key_of`).
    """

    id: CiRunId
    repository_id: RepositoryId
    ci_job_name: str
    branch: str
    sha: str
    run_start: datetime
    run_end: datetime
    attempt: int
    reported_at: datetime
    updated_at: datetime
    provider: CiProvider | None = None
    providers_run_id: str | None = None
    providers_job_id: str | None = None
    conclusion: RunConclusion | None = None
    conclusion_cause: ConclusionCause | None = None

    @property
    def run_key(self) -> str | None:
        return run_key_of(
            self.provider, self.providers_run_id, self.providers_job_id, attempt=self.attempt
        )


def run_key_of(
    provider: CiProvider | None,
    providers_run_id: str | None,
    providers_job_id: str | None,
    *,
    attempt: int,
) -> str | None:
    """What makes two reports one run, as 64 hex digits (the same within a repository for the
    same provider, provider's run id, job id and attempt); None without a provider's run id.
    """
    if providers_run_id is None:
        return None
    # A JSON list keeps the parts apart: ("a", "b:c") and ("a:b", "c") give different keys.
    parts = [provider.value if provider else None, providers_run_id, providers_job_id, attempt]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def reported_again(stored: CiRun, report: CiRun) -> CiRun:
    """The stored run after another report of it: it keeps its id and first report time; the
    report's fields replace the stored ones, except a conclusion or cause the report leaves
    out, which stays (a late report of the start does not erase the end's conclusion).
    """
    return replace(
        report,
        id=stored.id,
        reported_at=stored.reported_at,
        conclusion=report.conclusion or stored.conclusion,
        conclusion_cause=report.conclusion_cause or stored.conclusion_cause,
    )
