"""Signing in to the dashboard with GitHub: the App's OAuth web flow (authorize, exchange the
code for a user token) and the App's installations that user can reach.

The code exchange is a plain form POST to GitHub's web host (it is not part of the REST API);
the installations are read through githubkit with the user's token, which is used for that one
call and then dropped.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
from githubkit import GitHub, TokenAuthStrategy
from githubkit.exception import GitHubException
from pydantic import SecretStr

from keepgreen.app.errors import Forbidden, Unavailable

TIMEOUT_SECONDS = 15.0
PAGE_SIZE = 100
MAX_PAGES = 10


class GithubSignIn:
    """The `GithubAuthority` port over github.com or a GitHub Enterprise Server."""

    def __init__(
        self,
        *,
        web_url: str,
        api_url: str,
        client_id: str,
        client_secret: SecretStr,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._web_url = web_url.rstrip("/")
        self._api_url = api_url.rstrip("/")
        self._client_id = client_id
        self._client_secret = client_secret
        self._transport = transport

    def authorize_url(self, *, state: str, redirect_uri: str) -> str:
        query = urlencode(
            {"client_id": self._client_id, "redirect_uri": redirect_uri, "state": state}
        )
        return f"{self._web_url}/login/oauth/authorize?{query}"

    def installations(self, *, code: str, redirect_uri: str) -> set[int]:
        """The ids of the App's installations the user who granted `code` can reach."""
        token = self._exchange(code, redirect_uri)
        github: GitHub[Any] = GitHub(
            TokenAuthStrategy(token.get_secret_value()),
            base_url=self._api_url,
            auto_retry=False,
            http_cache=False,
            timeout=TIMEOUT_SECONDS,
            user_agent="keepgreen",
            transport=self._transport,
        )
        found: set[int] = set()
        try:
            for page in range(1, MAX_PAGES + 1):
                answer = github.rest.apps.list_installations_for_authenticated_user(
                    per_page=PAGE_SIZE, page=page
                )
                listed = answer.parsed_data.installations
                found.update(installation.id for installation in listed)
                if len(listed) < PAGE_SIZE:
                    break
        except GitHubException as error:
            message = f"GitHub did not list your installations ({type(error).__name__})"
            raise Unavailable("github_unavailable", message) from error
        return found

    def _exchange(self, code: str, redirect_uri: str) -> SecretStr:
        form = {
            "client_id": self._client_id,
            "client_secret": self._client_secret.get_secret_value(),
            "code": code,
            "redirect_uri": redirect_uri,
        }
        try:
            with httpx.Client(transport=self._transport, timeout=TIMEOUT_SECONDS) as client:
                answer = client.post(
                    f"{self._web_url}/login/oauth/access_token",
                    data=form,
                    headers={"Accept": "application/json", "User-Agent": "keepgreen"},
                )
        except httpx.HTTPError as error:
            raise Unavailable(
                "github_unavailable", f"GitHub could not be reached: {error}"
            ) from error
        body: Any = (
            answer.json()
            if answer.headers.get("content-type", "").startswith("application/json")
            else {}
        )
        token = body.get("access_token") if isinstance(body, dict) else None
        if answer.status_code != 200 or not isinstance(token, str) or not token:
            # GitHub says why in `error` (bad_verification_code, redirect_uri_mismatch, ...).
            reason = (
                body.get("error", f"HTTP {answer.status_code}") if isinstance(body, dict) else ""
            )
            raise Forbidden("github_sign_in_refused", f"GitHub refused the sign-in ({reason})")
        return SecretStr(token)
