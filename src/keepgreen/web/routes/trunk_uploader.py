"""Trunk's own uploader (trunk-analytics-cli, and the GitHub Action that runs it), pointed at
keepgreen with TRUNK_PUBLIC_API_ADDRESS: where it asks to upload, where it PUTs its bundle, and
where it reports on its run. (Its quarantine call, getQuarantineConfig, lives with the other
flaky-test endpoints.)
"""

from __future__ import annotations

import tempfile
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from keepgreen.web.auth import Org, Services
from keepgreen.web.flaky_schemas import (
    CreateBundleUploadOut,
    CreateBundleUploadRequest,
    UploadSummaryOut,
)
from keepgreen.web.routes.flaky_tests import PublicUrl, upload_summary_out
from keepgreen.web.routes.merge_queue import repo_ref
from keepgreen.web.schemas import Empty, error_responses
from keepgreen.web.upload_gate import UploadGate

router = APIRouter(tags=["Trunk's uploader"])

# A bundle waiting for its turn stays in memory up to this size, on disk beyond (as multipart
# reports do).
SPOOL_BYTES = 1024 * 1024
# The uploader's telemetry is a message of a few hundred bytes.
MAX_TELEMETRY_BYTES = 64 * 1024

_BINARY = {"schema": {"type": "string", "format": "binary"}}
BUNDLE_BODY = {
    "requestBody": {
        "required": True,
        "description": "The bundle: a tar, zstd-compressed, with meta.json first",
        "content": {"application/octet-stream": _BINARY},
    }
}
TELEMETRY_BODY = {
    "requestBody": {
        "required": False,
        "description": "The uploader's UploadMetrics protobuf message",
        "content": {"application/x-protobuf": _BINARY},
    }
}


@router.post(
    "/metrics/createBundleUpload",
    response_model=CreateBundleUploadOut,
    responses=error_responses(400, 401, 404, 413),
)
def create_bundle_upload(
    body: CreateBundleUploadRequest,
    org: Org,
    services: Services,
    public_url: PublicUrl,
    request: Request,
) -> dict[str, Any]:
    """Trunk's uploader asking where to send a bundle: `url` takes one PUT of it, within an
    hour, without the API token (its signature is the authorisation).
    """
    services.admin.org_slug(org, claimed=body.orgUrlSlug)
    ref = repo_ref(body.repo)
    ticket = services.bundles.create(org, ref)
    # Under KEEPGREEN_PUBLIC_URL when set, else where this request came to, as html_url.
    path = request.app.url_path_for("put_bundle", token=ticket.token)
    return {
        "id": ticket.bundle_id,
        "idV2": ticket.bundle_id,
        "url": f"{public_url.rstrip('/')}{path}",
        "key": f"{ref}/{ticket.bundle_id}/bundle.tar.zstd",
        "testCollectionBundleMetaId": None,
        "testCollectionBundleMetaCreatedAt": None,
    }


@router.put(
    "/flaky-tests/bundles/{token}",
    name="put_bundle",
    response_model=UploadSummaryOut,
    responses=error_responses(400, 403, 404, 413, 503),
    openapi_extra=BUNDLE_BODY,
)
async def put_bundle(token: str, request: Request, services: Services) -> dict[str, Any]:
    """The URL createBundleUpload answered: the bundle is stored as a multipart upload would
    be, and answered with the same summary. A second PUT to the same URL stores nothing new
    and answers 200 with the first one's summary (`already_stored`), as a repeated PUT to S3
    succeeds. 403 when the URL is forged or has expired.
    """
    grant = await run_in_threadpool(services.bundles.admit, token)
    gate: UploadGate = request.app.state.upload_gate
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as body:
        async for chunk in request.stream():
            body.write(chunk)
        body.seek(0)
        async with gate.turn():
            summary = await run_in_threadpool(services.bundles.store, grant, body)
    return upload_summary_out(summary)


@router.post(
    "/flakytests-cli/upload-metrics",
    response_model=Empty,
    responses=error_responses(401, 413),
    openapi_extra=TELEMETRY_BODY,
)
async def upload_metrics(request: Request, org: Org, services: Services) -> dict[str, Any]:
    """The uploader's report on its run: counted in keepgreen_uploader_reports_total by the
    outcome it reports, and a failure logged with its reason; any body is accepted.
    """
    del org  # authenticated like every call; the report itself names no org
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_TELEMETRY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_TELEMETRY_BYTES // 1024} KiB")
    services.bundles.note_uploader_report(bytes(body))
    return {}
