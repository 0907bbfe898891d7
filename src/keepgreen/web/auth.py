"""The x-api-token header (or a Bearer token where allowed): which org a request speaks for."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from keepgreen.bootstrap import Container
from keepgreen.core.ids import OrgId
from keepgreen.web.errors import Unauthorized
from keepgreen.web.snapshots import Snapshots as SnapshotStore

TOKEN_HEADER = "x-api-token"  # noqa: S105 (a header name, not a secret)
# Declared for the OpenAPI document; the check itself is `authenticated_org`.
api_key = APIKeyHeader(name=TOKEN_HEADER, auto_error=False)
# The same org tokens as `Authorization: Bearer <token>`, on the endpoints a stock Prometheus
# scrapes (it cannot send x-api-token); declared for the OpenAPI document too.
bearer = HTTPBearer(auto_error=False)


def container_of(request: Request) -> Container:
    container: Container = request.app.state.container
    return container


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value; None for any other
    scheme or a malformed value (no token, or more than one word after the scheme).
    """
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials or any(c.isspace() for c in credentials):
        return None
    return credentials


async def authenticate(request: Request, *, allow_bearer: bool = False) -> OrgId | None:
    """The org of the request's token, or None; cached on the request.

    `x-api-token` decides when present; otherwise, where `allow_bearer`, a Bearer token.
    """
    if hasattr(request.state, "org_id"):
        cached: OrgId | None = request.state.org_id
        return cached
    token = request.headers.get(TOKEN_HEADER, "")
    if not token and allow_bearer:
        token = bearer_token(request.headers.get("authorization", "")) or ""
    # In the event loop, not the thread pool: one indexed read, and a hop to a thread and
    # back costs more (the two threads hand the GIL to each other) than the read itself.
    org_id = container_of(request).admin.authenticate(token)
    request.state.org_id = org_id
    return org_id


async def authenticated_org(
    request: Request, _token: Annotated[str | None, Depends(api_key)]
) -> OrgId:
    org_id = await authenticate(request)
    if org_id is None:
        raise Unauthorized
    return org_id


async def authenticated_org_or_bearer(
    request: Request,
    _token: Annotated[str | None, Depends(api_key)],
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> OrgId:
    org_id = await authenticate(request, allow_bearer=True)
    if org_id is None:
        raise Unauthorized(
            "a valid API token is required in the x-api-token header or as "
            "Authorization: Bearer <token>"
        )
    return org_id


Org = Annotated[OrgId, Depends(authenticated_org)]
# An org from x-api-token or `Authorization: Bearer` (GET /getMergeQueueMetrics only).
OrgOrBearer = Annotated[OrgId, Depends(authenticated_org_or_bearer)]


# Dependencies are `async def`: FastAPI runs a plain `def` dependency in the thread pool, a hop
# that costs more than what they do.
async def services_of(request: Request) -> Container:
    return container_of(request)


Services = Annotated[Container, Depends(services_of)]


async def snapshots_of(request: Request) -> SnapshotStore:
    snapshots: SnapshotStore = request.app.state.snapshots
    return snapshots


Snapshots = Annotated[SnapshotStore, Depends(snapshots_of)]
