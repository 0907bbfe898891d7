"""Flaky-test endpoints of API v1: upload, the read API, quarantine and settings."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.ingest import ReportFile, UploadMetadata, UploadSummary
from keepgreen.app.flaky.pages import Page
from keepgreen.app.flaky.reads import TestPage, TestView
from keepgreen.app.flaky.settings import FlakySettings, monitors_from_dict, monitors_to_dict
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings
from keepgreen.core.ids import OrgId
from keepgreen.web.auth import Org, Services
from keepgreen.web.errors import TOO_DEEP, describe_validation_error
from keepgreen.web.flaky_schemas import (
    FlagTestRequest,
    FlakySettingsIn,
    FlakySettingsOut,
    LinkTicketRequest,
    ListFailingRequest,
    ListQuarantinedRequest,
    ListUnhealthyRequest,
    QuarantineConfigOut,
    QuarantineConfigRequest,
    QuarantinedListOut,
    QuarantineOverrideRequest,
    SettingsRequest,
    TestDetailsOut,
    TestDetailsRequest,
    TestListOut,
    UpdateSettingsRequest,
    UploadMetadataIn,
    UploadSummaryOut,
)
from keepgreen.web.routes.merge_queue import repo_ref, utc_since
from keepgreen.web.schemas import Empty, error_responses
from keepgreen.web.upload_gate import UploadGate

router = APIRouter(tags=["flaky tests"])

READ = error_responses(400, 401, 404, 413)
MAX_REPORT_FILES = 1000
# A client's key for one upload: sent again with a retry, the upload is stored once.
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_CHARS = 255


def public_url_of(request: Request, services: Services) -> str:
    """Where people reach keepgreen: KEEPGREEN_PUBLIC_URL, else the base URL this request was
    sent to, so links follow the port and host the client used.
    """
    return services.settings.public_url or str(request.base_url)


PublicUrl = Annotated[str, Depends(public_url_of)]


def _utc(moment: datetime) -> datetime:
    # The merge-queue routes' conversion, which clamps moments beyond what UTC can hold
    # (it answers None only for None).
    return utc_since(moment) or moment


def _test_out(view: TestView, *, org_slug: str, public_url: str) -> dict[str, Any]:
    test, ref = view.test, view.repository.ref
    out: dict[str, Any] = {
        "id": test.id,
        "repository": {"html_url": f"https://{ref.host}/{ref.owner}/{ref.name}"},
        "html_url": (
            f"{public_url.rstrip('/')}/{quote(org_slug)}/flaky-tests/test/{test.id}"
            f"?repo={quote(ref.owner + '/' + ref.name, safe='')}"
        ),
        "name": test.name,
        "variant": test.variant,
        "status": {
            "value": test.status.value,
            "reason": test.status_reason,
            "timestamp": test.status_at,
        },
        "file_path": test.file,
        "parent": test.parent,
        "classname": test.classname,
        "codeowners": list(test.codeowners),
        "pull_requests_impacted_last_7d": view.pull_requests_impacted_last_7d,
        "quarantined": view.quarantined,
        "ticket": {"html_url": view.ticket_url} if view.ticket_url else None,
        "failure_rate_last_7d": view.failure_rate_last_7d,
        "failure_rate_last_24h": view.failure_rate_last_24h,
    }
    if view.most_common_failures is not None:
        out["most_common_failures"] = [
            {
                "summary": failure.summary,
                "occurrence_count": failure.count,
                "last_occurrence": failure.last_at,
            }
            for failure in view.most_common_failures
        ]
    return out


def page_fields(page: Page) -> dict[str, Any]:
    return {
        "total_rows": page.total_rows,
        "total_pages": page.total_pages,
        "next_page_token": page.next_page_token,
        "prev_page_token": page.prev_page_token,
        "last_page_token": page.last_page_token,
        "page_index": page.page_index,
    }


def _page_out(result: TestPage, *, org_slug: str, public_url: str) -> dict[str, Any]:
    return {
        "tests": [
            _test_out(view, org_slug=org_slug, public_url=public_url) for view in result.tests
        ],
        "page": page_fields(result.page),
    }


@router.post(
    "/flaky-tests/list-unhealthy-tests",
    response_model=TestListOut,
    response_model_exclude_none=True,
    responses=READ,
)
def list_unhealthy_tests(
    body: ListUnhealthyRequest, org: Org, services: Services, public_url: PublicUrl
) -> dict[str, Any]:
    """Tests whose status is FLAKY or BROKEN, most recently changed first."""
    slug = services.admin.org_slug(org, claimed=body.org_url_slug)
    result = services.flaky.list_unhealthy(
        org,
        repo_ref(body.repo),
        TestStatus(body.status),
        size=body.page_query.page_size,
        token=body.page_query.page_token,
    )
    return _page_out(result, org_slug=slug, public_url=public_url)


@router.post(
    "/flaky-tests/list-failing-tests",
    response_model=TestListOut,
    response_model_exclude_none=True,
    responses=READ,
)
def list_failing_tests(
    body: ListFailingRequest, org: Org, services: Services, public_url: PublicUrl
) -> dict[str, Any]:
    """Distinct tests that failed in [start_time, end_time) (at most 7 days), most failures
    first.
    """
    slug = services.admin.org_slug(org, claimed=body.org_url_slug)
    result = services.flaky.list_failing(
        org,
        repo_ref(body.repo),
        start=_utc(body.start_time),
        end=_utc(body.end_time),
        size=body.page_query.page_size,
        token=body.page_query.page_token,
    )
    return _page_out(result, org_slug=slug, public_url=public_url)


@router.post(
    "/flaky-tests/get-test-details",
    response_model=TestDetailsOut,
    response_model_exclude_none=True,
    responses=READ,
)
def get_test_details(
    body: TestDetailsRequest, org: Org, services: Services, public_url: PublicUrl
) -> dict[str, Any]:
    """One test case with its failure rates, most common failures and status history."""
    slug = services.admin.org_slug(org, claimed=body.org_url_slug)
    details = services.flaky.details(org, repo_ref(body.repo), body.test_id)
    return {
        "test": _test_out(details.view, org_slug=slug, public_url=public_url),
        "status_history": [
            {"value": change.status.value, "reason": change.reason, "timestamp": change.at}
            for change in details.history
        ],
    }


@router.post(
    "/flaky-tests/list-quarantined-tests", response_model=QuarantinedListOut, responses=READ
)
def list_quarantined_tests(
    body: ListQuarantinedRequest, org: Org, services: Services
) -> dict[str, Any]:
    """Tests quarantined now: by an ALWAYS override, or automatically as flaky (or as broken,
    where the repository quarantines broken tests).
    """
    services.admin.org_slug(org, claimed=body.org_url_slug)
    result = services.flaky.list_quarantined(
        org, repo_ref(body.repo), size=body.page_query.page_size, token=body.page_query.page_token
    )
    tests = []
    for view in result.tests:
        test = view.test
        always = test.quarantine_override is QuarantineOverride.ALWAYS
        tests.append(
            {
                "name": test.name,
                "parent": test.parent,
                "file": test.file,
                "classname": test.classname,
                "status": test.status.value.upper(),
                "codeowners": list(test.codeowners),
                "quarantine_setting": "ALWAYS_QUARANTINE" if always else "AUTO_QUARANTINE",
                "quarantined_at": (
                    test.quarantine_override_at
                    if always and test.quarantine_override_at
                    else test.status_at
                ),
                "status_last_updated_at": test.status_at,
                "test_case_id": test.id,
                "variant": test.variant,
            }
        )
    return {"quarantined_tests": tests, "page": page_fields(result.page)}


@router.post("/flaky-tests/link-ticket-to-test-case", response_model=Empty, responses=READ)
def link_ticket(body: LinkTicketRequest, org: Org, services: Services) -> dict[str, Any]:
    """Link a ticket (e.g. KAN-123) to a test case; shown as `ticket.html_url`."""
    services.flaky_manage.link_ticket(
        org, repo_ref(body.repo), body.test_case_id, body.external_ticket_id
    )
    return {}


@router.post("/flaky-tests/set-quarantine-override", response_model=Empty, responses=READ)
def set_quarantine_override(
    body: QuarantineOverrideRequest, org: Org, services: Services
) -> dict[str, Any]:
    """Always or never quarantine one test (null clears the override)."""
    services.admin.org_slug(org, claimed=body.org_url_slug)
    override = QuarantineOverride(body.setting.upper()) if body.setting else None
    services.flaky_manage.set_override(org, repo_ref(body.repo), body.test_id, override)
    return {}


@router.post("/flaky-tests/flag-test", response_model=Empty, responses=READ)
def flag_test(body: FlagTestRequest, org: Org, services: Services) -> dict[str, Any]:
    """Flag a test as flaky by hand (`flaky: false` removes the flag)."""
    services.admin.org_slug(org, claimed=body.org_url_slug)
    services.flaky_manage.flag(
        org, repo_ref(body.repo), body.test_id, reason=body.reason if body.flaky else None
    )
    return {}


def _settings_out(settings: FlakySettings) -> dict[str, Any]:
    return {
        "settings": {
            "quarantine": {
                "enabled": settings.quarantine.enabled,
                "auto_quarantine_flaky": settings.quarantine.auto_quarantine_flaky,
                "auto_quarantine_broken": settings.quarantine.auto_quarantine_broken,
            },
            "monitors": monitors_to_dict(settings.monitors),
            "ticket_url_template": settings.ticket_url_template,
        }
    }


@router.post("/flaky-tests/get-settings", response_model=FlakySettingsOut, responses=READ)
def get_settings(body: SettingsRequest, org: Org, services: Services) -> dict[str, Any]:
    """The repository's monitors, quarantine switches and ticket URL template."""
    services.admin.org_slug(org, claimed=body.org_url_slug)
    return _settings_out(services.flaky_manage.settings(org, repo_ref(body.repo)))


def settings_of(given: FlakySettingsIn) -> FlakySettings:
    names = [rate.name for rate in given.monitors.failure_rate]
    names += [count.name for count in given.monitors.failure_count]
    if len(set(names)) != len(names):
        raise InvalidInput("invalid_field", "settings.monitors: monitor names must be unique")
    for count in given.monitors.failure_count:
        if count.resolution_hours < count.window_hours:
            raise InvalidInput(
                "invalid_field",
                f"settings.monitors.failure_count[{count.name}].resolution_hours must be at "
                "least window_hours",
            )
    return FlakySettings(
        monitors=monitors_from_dict(given.monitors.model_dump()),
        quarantine=QuarantineSettings(
            enabled=given.quarantine.enabled,
            auto_quarantine_flaky=given.quarantine.auto_quarantine_flaky,
            auto_quarantine_broken=given.quarantine.auto_quarantine_broken,
        ),
        ticket_url_template=given.ticket_url_template,
    )


@router.post("/flaky-tests/update-settings", response_model=FlakySettingsOut, responses=READ)
def update_settings(body: UpdateSettingsRequest, org: Org, services: Services) -> dict[str, Any]:
    """Replace the repository's flaky-test settings; unhealthy tests are re-evaluated at once."""
    services.admin.org_slug(org, claimed=body.org_url_slug)
    settings = settings_of(body.settings)
    services.flaky_manage.update_settings(org, repo_ref(body.repo), settings)
    return _settings_out(settings)


@router.post("/metrics/getQuarantineConfig", response_model=QuarantineConfigOut, responses=READ)
def get_quarantine_config(
    body: QuarantineConfigRequest, org: Org, services: Services
) -> dict[str, Any]:
    """Trunk's CLI call: which of these test ids are quarantined (isDisabled when off)."""
    services.admin.org_slug(org, claimed=body.orgUrlSlug)
    ids = [identifier.id for identifier in body.testIdentifiers if identifier.id]
    config = services.flaky_manage.quarantine_config(org, repo_ref(body.repo), ids)
    return {"isDisabled": config.is_disabled, "testIds": list(config.test_ids)}


UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["metadata", "file"],
                    "properties": {
                        "metadata": {
                            "type": "string",
                            "description": "JSON: " + ", ".join(UploadMetadataIn.model_fields),
                        },
                        "file": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "JUnit XML reports, plain or gzip",
                        },
                    },
                }
            }
        },
    }
}


async def _read_upload(request: Request) -> tuple[UploadMetadataIn, list[UploadFile], FormData]:
    """The metadata and the report parts of an upload; the reports stay where the multipart
    parser put them (on disk past 1 MiB) until the upload's turn comes. The caller closes the
    form.
    """
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise InvalidInput(
            "invalid_body", "the upload must be multipart/form-data with metadata and file parts"
        )
    try:
        form = await request.form(max_files=MAX_REPORT_FILES, max_fields=20)
    except Exception as error:  # the multipart parser's errors are the client's bad body
        raise InvalidInput("invalid_body", f"the multipart body cannot be read: {error}") from error
    try:
        raw = form.get("metadata")
        if raw is None:
            raise InvalidInput("missing_field", "metadata: the upload needs a metadata part")
        text = (await raw.read()).decode() if isinstance(raw, UploadFile) else raw
        try:
            metadata = UploadMetadataIn.model_validate(json.loads(text))
        except RecursionError:
            # Python's JSON parser recurses once per level: thousands of levels exhaust it.
            raise InvalidInput("invalid_field", f"metadata: {TOO_DEEP}") from None
        except (ValueError, UnicodeDecodeError) as error:
            if isinstance(error, ValidationError):
                code, message = describe_validation_error(error.errors())
                raise InvalidInput(code, f"metadata.{message}") from error
            raise InvalidInput("invalid_field", "metadata: must be a JSON object") from error
        files = []
        for part in form.getlist("file"):
            if not isinstance(part, UploadFile):
                raise InvalidInput("invalid_field", "file: each file part must be a file")
            files.append(part)
    except BaseException:
        await form.close()
        raise
    return metadata, files, form


@router.post(
    "/flaky-tests/upload",
    response_model=UploadSummaryOut,
    responses=error_responses(400, 401, 404, 413, 503),
    openapi_extra=UPLOAD_BODY,
)
async def upload(request: Request, org: Org, services: Services) -> dict[str, Any]:
    """Store one CI job's JUnit results; answers what was stored and which failures are
    quarantined.
    """
    metadata, parts, form = await _read_upload(request)
    try:
        key = request.headers.get(IDEMPOTENCY_HEADER) or metadata.idempotency_key
        if key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
            raise InvalidInput(
                "invalid_field",
                f"{IDEMPOTENCY_HEADER}: at most {MAX_IDEMPOTENCY_KEY_CHARS} characters",
            )
        slug = await run_in_threadpool(services.admin.org_slug, org, claimed=metadata.org_url_slug)
        gate: UploadGate = request.app.state.upload_gate
        async with gate.turn():
            files = [ReportFile(part.filename or "report.xml", await part.read()) for part in parts]
            summary: UploadSummary = await run_in_threadpool(
                services.ingest.upload,
                OrgId(org),
                slug,
                UploadMetadata(
                    repo=repo_ref(metadata.repo),
                    org_url_slug=metadata.org_url_slug,
                    commit_sha=metadata.commit_sha.lower(),
                    branch=metadata.branch,
                    pr_number=metadata.pr_number,
                    job_url=metadata.job_url,
                    variant=metadata.variant,
                    run_id=metadata.run_id,
                    codeowners=metadata.codeowners,
                    idempotency_key=key,
                ),
                files,
            )
            del files
    finally:
        await form.close()
    return upload_summary_out(summary)


def upload_summary_out(summary: UploadSummary) -> dict[str, Any]:
    """What an upload answers, multipart or bundle: what was stored, and its failures."""
    return {
        "upload_id": summary.upload_id,
        "files": summary.files,
        "tests": summary.tests,
        "results": summary.results,
        "passed": summary.passed,
        "failed": summary.failed,
        "skipped": summary.skipped,
        "excluded_as_infrastructure_failure": summary.excluded_as_infrastructure_failure,
        "quarantine_enabled": summary.quarantine_enabled,
        "already_stored": summary.repeated,
        "failures": [
            {
                "test_id": failure.test_id,
                "name": failure.name,
                "classname": failure.classname,
                "parent": failure.parent,
                "file": failure.file,
                "quarantined": failure.quarantined,
            }
            for failure in summary.failures
        ],
    }
