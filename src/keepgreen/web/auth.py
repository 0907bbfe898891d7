"""The x-api-token header: which org a request speaks for."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader
from starlette.concurrency import run_in_threadpool

from keepgreen.bootstrap import Container
from keepgreen.core.ids import OrgId
from keepgreen.web.errors import Unauthorized

TOKEN_HEADER = "x-api-token"  # noqa: S105 (a header name, not a secret)
# Declared for the OpenAPI document; the check itself is `authenticated_org`.
api_key = APIKeyHeader(name=TOKEN_HEADER, auto_error=False)


def container_of(request: Request) -> Container:
    container: Container = request.app.state.container
    return container


async def authenticate(request: Request) -> OrgId | None:
    """The org of the request's token, or None; cached on the request."""
    if hasattr(request.state, "org_id"):
        cached: OrgId | None = request.state.org_id
        return cached
    token = request.headers.get(TOKEN_HEADER, "")
    org_id = await run_in_threadpool(container_of(request).admin.authenticate, token)
    request.state.org_id = org_id
    return org_id


async def authenticated_org(
    request: Request, _token: Annotated[str | None, Depends(api_key)]
) -> OrgId:
    org_id = await authenticate(request)
    if org_id is None:
        raise Unauthorized
    return org_id


Org = Annotated[OrgId, Depends(authenticated_org)]
Services = Annotated[Container, Depends(container_of)]
