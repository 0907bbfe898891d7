"""POST /webhooks/github: GitHub's deliveries for keepgreen as a GitHub App.

Not part of API v1 (GitHub signs its requests; there is no org token) and not in its OpenAPI
document. The body's HMAC-SHA256 under the App's webhook secret must match
X-Hub-Signature-256, compared in constant time, before the body is even parsed; the delivery
is then stored for the worker and answered at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from keepgreen.app.github.intake import Received
from keepgreen.web.auth import container_of
from keepgreen.web.errors import error_response

PATH = "/webhooks/github"
SECRET_SETTING = "KEEPGREEN_GITHUB_WEBHOOK_SECRET_FILE"  # noqa: S105 (a setting's name)
_PREFIX = "sha256="

router = APIRouter()


@router.post(PATH, include_in_schema=False)
async def github_webhook(request: Request) -> JSONResponse:
    container = container_of(request)
    secret = container.github_webhook_secret
    if secret is None:
        return error_response(
            404,
            "github_not_configured",
            f"keepgreen is not set up as a GitHub App here: {SECRET_SETTING} is not set",
        )
    body = await request.body()
    given = request.headers.get("x-hub-signature-256", "")
    expected = (
        _PREFIX + hmac.new(secret.get_secret_value().encode(), body, hashlib.sha256).hexdigest()
    )
    # Compared as bytes in constant time; a header that is not ASCII is simply wrong.
    if not given.isascii() or not hmac.compare_digest(given.encode(), expected.encode()):
        return error_response(
            401,
            "bad_signature",
            "X-Hub-Signature-256 does not match the body under the App's webhook secret",
        )
    delivery = request.headers.get("x-github-delivery", "")
    event = request.headers.get("x-github-event", "")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return error_response(400, "invalid_payload", "the body is not JSON")
    received = await run_in_threadpool(
        container.github_webhooks.receive, delivery_id=delivery, event=event, payload=payload
    )
    status = 202 if received is Received.QUEUED else 200
    return JSONResponse({"status": received.value, "delivery": delivery}, status_code=status)
