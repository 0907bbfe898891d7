"""GET /metrics: the process's own `keepgreen_*` metrics, for the operator's Prometheus.

Not part of API v1 (no org, no tenant data) and not in its OpenAPI document. Opened by the
operator's token (KEEPGREEN_METRICS_TOKEN_FILE) as `Authorization: Bearer`, never by an org's
API token; with no operator token configured it refuses everyone (secure by default).
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import Response

from keepgreen.app.telemetry import CONTENT_TYPE
from keepgreen.web.auth import bearer_token, container_of
from keepgreen.web.errors import error_response

PATH = "/metrics"
TOKEN_SETTING = "KEEPGREEN_METRICS_TOKEN_FILE"  # noqa: S105 (a setting's name, not a secret)

router = APIRouter()


@router.get(PATH, include_in_schema=False)
def service_metrics(request: Request) -> Response:
    container = container_of(request)
    expected = container.metrics_token
    if expected is None:
        return error_response(
            403,
            "metrics_disabled",
            f"GET /metrics is off until {TOKEN_SETTING} names a file holding the token "
            "Prometheus sends as Authorization: Bearer",
        )
    given = bearer_token(request.headers.get("authorization", ""))
    # Compared in constant time, as bytes (compare_digest refuses non-ASCII text).
    if given is None or not hmac.compare_digest(
        given.encode(), expected.get_secret_value().encode()
    ):
        return error_response(
            401,
            "unauthorized",
            f"GET /metrics needs Authorization: Bearer with the token of {TOKEN_SETTING}",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Response(container.telemetry.exposition(), media_type=CONTENT_TYPE)
