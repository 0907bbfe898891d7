"""The x-api-token header (or a Bearer token where allowed): which org a request speaks for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from keepgreen.bootstrap import Container
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef
from keepgreen.web.credentials import (
    FORK_RUN_HEADER,
    NO_GITHUB_APP,
    PUBLIC_REPO_HEADER,
    TOKEN_HEADER,
)
from keepgreen.web.errors import Unauthorized, refused
from keepgreen.web.snapshots import Snapshots as SnapshotStore

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
        raise refused(request)
    return org_id


@dataclass(frozen=True, slots=True)
class ForkRunClaim:
    """A request without a token naming a fork's workflow run (`x-forked-workflow-run-id`),
    to be checked against its body by `org_of_fork_run`.
    """

    run_id: str


# `x-forked-workflow-run-id`, an optional header parameter in the OpenAPI document of the call
# that takes it (setImpactedTargets, through `OrgOrForkRun`). Its schema is a plain string (a
# header is never null): any value gets here, and `org_of_fork_run` refuses one that is not a
# run id (401), saying why.
ForkRunHeader = Annotated[
    str | None,
    Header(
        alias=FORK_RUN_HEADER,
        json_schema_extra={"type": "string"},
        description=(
            "For a pull request from a fork, whose CI has no secrets: the GitHub Actions run "
            "id (`${{ github.run_id }}`) of the fork's running workflow run, sent instead of "
            f"{TOKEN_HEADER}. Accepted only when keepgreen is connected as a GitHub App, and "
            "only without a token: the run must be a running workflow run of the body's "
            "repository, from a fork, on `pr.sha`; the targets are then stored for the org "
            f"the repository belongs to. A valid {TOKEN_HEADER} decides whatever this says."
        ),
    ),
]


async def authenticated_org_or_fork_run(
    request: Request,
    _token: Annotated[str | None, Depends(api_key)],
    run_id: ForkRunHeader = None,
) -> OrgId | ForkRunClaim:
    """The org of a valid token; else, for a request that sent no token (nor Trunk's public
    repository id) but a fork's run id, that claim.
    """
    org_id = await authenticate(request)
    if org_id is not None:
        return org_id
    headers = request.headers
    if run_id is not None and not headers.get(TOKEN_HEADER) and PUBLIC_REPO_HEADER not in headers:
        return ForkRunClaim(run_id)
    raise refused(request)


def org_of_fork_run(services: Container, claim: ForkRunClaim, *, repo: RepoRef, sha: str) -> OrgId:
    """The org a fork's run acts for on `repo` at head `sha` (it makes a GitHub request: call
    it from a worker thread). Raises Unauthorized, or the service's Unauthenticated or
    Unavailable.
    """
    if services.fork_runs is None:
        raise Unauthorized(NO_GITHUB_APP)
    return services.fork_runs.org_of_run(claim.run_id, repo=repo, sha=sha)


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
# An org from x-api-token, or a fork's run to check against the body (setImpactedTargets only).
OrgOrForkRun = Annotated[OrgId | ForkRunClaim, Depends(authenticated_org_or_fork_run)]


# Dependencies are `async def`: FastAPI runs a plain `def` dependency in the thread pool, a hop
# that costs more than what they do.
async def services_of(request: Request) -> Container:
    return container_of(request)


Services = Annotated[Container, Depends(services_of)]


async def snapshots_of(request: Request) -> SnapshotStore:
    snapshots: SnapshotStore = request.app.state.snapshots
    return snapshots


Snapshots = Annotated[SnapshotStore, Depends(snapshots_of)]
