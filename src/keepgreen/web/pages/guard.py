"""What stands in front of every dashboard page: the session cookie, the org in the path,
CSRF on every POST, and the security headers of every page.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keepgreen.app.web_sessions import SignedIn
from keepgreen.web.auth import container_of

SESSION_COOKIE = "keepgreen_session"
# The sign-in form's own CSRF token (double submit): there is no session yet to derive it from.
SIGN_IN_COOKIE = "keepgreen_sign_in"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
MAX_FORM_FIELDS = 50

# No inline script or style anywhere: scripts, styles and images come from keepgreen only.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
STATIC_PREFIX = "/-/static/"
PAGE_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class PageError(Exception):
    """A page that cannot be shown: rendered as an HTML error page with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SignInRequired(Exception):
    """No valid session: the browser is sent to the sign-in page, then back."""


def is_secure(request: Request) -> bool:
    public = container_of(request).settings.public_url or ""
    return request.url.scheme == "https" or public.startswith("https://")


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="lax",
        secure=is_secure(request),
    )


async def current_session(request: Request) -> SignedIn | None:
    """The request's signed-in org, or None; cached on the request."""
    if hasattr(request.state, "signed_in"):
        cached: SignedIn | None = request.state.signed_in
        return cached
    cookie = request.cookies.get(SESSION_COOKIE, "")
    signed_in = None
    if cookie:
        signed_in = await run_in_threadpool(container_of(request).web_sessions.resolve, cookie)
    request.state.signed_in = signed_in
    return signed_in


async def signed_in_org(request: Request, org: str) -> SignedIn:
    """The session of a page under `/{org}/`: another org's path is a 404, as if it did not
    exist, so that a page never says which orgs exist.
    """
    session = await current_session(request)
    if session is None:
        raise SignInRequired
    if org != session.org_slug:
        raise PageError(404, "There is no such page.")
    return session


Session = Annotated[SignedIn, Depends(signed_in_org)]


def is_same_origin(request: Request) -> bool:
    """False when the browser says the request came from another site: its `Origin` is
    neither this request's host nor KEEPGREEN_PUBLIC_URL's (a proxy may rewrite the host).
    """
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        sent = origin.split("://", 1)[-1]
        public = container_of(request).settings.public_url or ""
        hosts = {request.headers.get("host", ""), urlsplit(public).netloc}
        return sent in hosts - {""}
    return request.headers.get("sec-fetch-site", "same-origin") in {"same-origin", "none"}


async def _form_with_token(request: Request, expected: str) -> FormData:
    form = await request.form(max_fields=MAX_FORM_FIELDS, max_files=0)
    sent = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
    if (
        not expected
        or not isinstance(sent, str)
        or not hmac.compare_digest(sent.encode(), expected.encode())
        or not is_same_origin(request)
    ):
        raise PageError(403, "The form was refused: reload the page and try again.")
    return form


async def checked_form(request: Request) -> FormData:
    """The form of a state-changing POST, after the session's CSRF token matched (403
    otherwise, and without a session).
    """
    session = await current_session(request)
    return await _form_with_token(request, session.csrf_token if session else "")


async def checked_sign_in_form(request: Request) -> FormData:
    """The sign-in form, after its own token matched the one its page set as a cookie (there
    may be no session yet, or one of another org).
    """
    return await _form_with_token(request, request.cookies.get(SIGN_IN_COOKIE, ""))


CheckedForm = Annotated[FormData, Depends(checked_form)]
SignInForm = Annotated[FormData, Depends(checked_sign_in_form)]


def new_sign_in_token() -> str:
    return secrets.token_urlsafe(32)


class PageHeaders:
    """Adds the security headers to every answer that is not the JSON API's."""

    def __init__(self, app: ASGIApp, *, api_prefixes: tuple[str, ...]) -> None:
        self._app = app
        self._api_prefixes = api_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or str(scope["path"]).startswith(self._api_prefixes):
            await self._app(scope, receive, send)
            return

        # Pages are never cached (they hold a CSRF token and an org's data); the stylesheet,
        # the icon and htmx may be, for an hour.
        extra = PAGE_HEADERS
        if str(scope["path"]).startswith(STATIC_PREFIX):
            extra = {**PAGE_HEADERS, "cache-control": "public, max-age=3600"}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in extra.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self._app(scope, receive, send_with_headers)
