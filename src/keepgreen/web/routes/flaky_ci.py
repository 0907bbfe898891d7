"""CI-run endpoints of API v1: Trunk's create-ci-run, and keepgreen's listing of the runs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from keepgreen.app.flaky.ci_runs import CiRunReport
from keepgreen.core.flaky.ci_runs import CiRun
from keepgreen.web.auth import Org, Services
from keepgreen.web.flaky_schemas import (
    CiRunListOut,
    CreateCiRunOut,
    CreateCiRunRequest,
    ListCiRunsRequest,
)
from keepgreen.web.routes.flaky_tests import page_fields
from keepgreen.web.routes.merge_queue import repo_ref
from keepgreen.web.schemas import error_responses

router = APIRouter(tags=["flaky tests"])


@router.post(
    "/flaky-ci/create-ci-run",
    response_model=CreateCiRunOut,
    responses=error_responses(400, 401, 404, 409, 413, 503),
)
def create_ci_run(body: CreateCiRunRequest, org: Org, services: Services) -> dict[str, Any]:
    """Record one run of a CI job. The same provider, providers_run_id, providers_job_id and
    attempt reported again (a retry, or the run's end after its start) is the same run: its
    run_id is answered and its fields updated.
    """
    services.admin.org_slug(org, claimed=body.org_url_slug)
    run = services.ci_runs.record(
        org,
        repo_ref(body.repo),
        CiRunReport(
            ci_job_name=body.ci_job_name,
            branch=body.branch,
            sha=body.sha,
            run_start=body.run_start,
            run_end=body.run_end,
            attempt=body.attempt,
            provider=body.provider,
            providers_run_id=body.providers_run_id,
            providers_job_id=body.providers_job_id,
            conclusion=body.run_conclusion,
            conclusion_cause=body.run_conclusion_cause,
        ),
    )
    return {"run_id": run.id}


@router.post(
    "/flaky-ci/list-ci-runs",
    response_model=CiRunListOut,
    responses=error_responses(400, 401, 404, 413),
)
def list_ci_runs(body: ListCiRunsRequest, org: Org, services: Services) -> dict[str, Any]:
    """The runs create-ci-run stored for the repository, latest start first; `branch` and
    `sha` keep only the runs of that branch and commit.
    """
    services.admin.org_slug(org, claimed=body.org_url_slug)
    result = services.ci_runs.list_runs(
        org,
        repo_ref(body.repo),
        branch=body.branch,
        sha=body.sha,
        size=body.page_query.page_size,
        token=body.page_query.page_token,
    )
    return {"ci_runs": [_run_out(run) for run in result.runs], "page": page_fields(result.page)}


def _run_out(run: CiRun) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "ci_job_name": run.ci_job_name,
        "provider": run.provider,
        "providers_run_id": run.providers_run_id,
        "providers_job_id": run.providers_job_id,
        "attempt": run.attempt,
        "branch": run.branch,
        "sha": run.sha,
        "run_start": run.run_start,
        "run_end": run.run_end,
        "run_conclusion": run.conclusion,
        "run_conclusion_cause": run.conclusion_cause,
        "reported_at": run.reported_at,
        "updated_at": run.updated_at,
    }
