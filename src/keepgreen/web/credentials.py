"""The headers that may carry a credential, and what a request without a valid one is told."""

from __future__ import annotations

from collections.abc import Mapping

from keepgreen.app.github.fork_runs import FORK_RUN_HEADER

TOKEN_HEADER = "x-api-token"  # noqa: S105 (a header name, not a secret)
# Trunk's uploader sends this public id instead of a token for public repositories; nothing
# keepgreen holds can tell whether the sender may act for the repository, so it is refused.
PUBLIC_REPO_HEADER = "x-trunk-public-repo-id"
SET_IMPACTED_TARGETS = "setImpactedTargets"

UNAUTHORIZED = "a valid API token is required in the x-api-token header"
PUBLIC_REPO_REFUSED = (
    f"keepgreen cannot verify {PUBLIC_REPO_HEADER} (Trunk's public repository id), so it does "
    f"not stand for a token: send an API token in {TOKEN_HEADER}. For a pull request from a "
    f"fork, whose CI has no secrets, the {SET_IMPACTED_TARGETS} call may send "
    f"{FORK_RUN_HEADER} instead when keepgreen is connected as a GitHub App"
)
FORK_RUN_ELSEWHERE = (
    f"{FORK_RUN_HEADER} stands for a token only on the {SET_IMPACTED_TARGETS} call, and only "
    f"when keepgreen is connected as a GitHub App: send an API token in {TOKEN_HEADER}"
)
FORK_RUN_BAD_BODY = (
    f"{FORK_RUN_HEADER} is checked against the body's repo and pr.sha, and this body is not a "
    f"valid {SET_IMPACTED_TARGETS} request; or send an API token in {TOKEN_HEADER}"
)
NO_GITHUB_APP = (
    f"{FORK_RUN_HEADER} is not accepted: keepgreen is not connected as a GitHub App, so it "
    f"cannot ask GitHub about the run; send an API token in {TOKEN_HEADER} instead"
)


def refusal(headers: Mapping[str, str], *, path: str) -> str:
    """Why a request to `path` without a valid token is refused: the plain reason, or, when
    it sent a header in a token's place, why that header does not stand for one here.
    """
    if headers.get(TOKEN_HEADER):
        return UNAUTHORIZED  # a token was sent and decides: it is not valid
    if PUBLIC_REPO_HEADER in headers:
        return PUBLIC_REPO_REFUSED
    if FORK_RUN_HEADER in headers:
        if path.rstrip("/").endswith(f"/{SET_IMPACTED_TARGETS}"):
            return FORK_RUN_BAD_BODY  # the route itself checks a run with a valid body
        return FORK_RUN_ELSEWHERE
    return UNAUTHORIZED


__all__ = [
    "FORK_RUN_HEADER",
    "NO_GITHUB_APP",
    "PUBLIC_REPO_HEADER",
    "TOKEN_HEADER",
    "UNAUTHORIZED",
    "refusal",
]
