"""Dashboard sign-in: an org's API token, or GitHub (the App's OAuth web flow, for the orgs
linked to installations the user can reach), opens a session kept in a signed cookie.

The cookie holds `<secret>.<signature>`: a random 256-bit secret and its HMAC under a key of
this installation (kept in the database, so every API process of one deployment accepts it).
The database keeps only the secret's sha256, with the org, the API token it was opened with
and when it expires; sign-out deletes the row, and revoking that API token ends the session
at the next request. The CSRF token of a session is derived from its secret under the same
key, so it needs no storage and changes with every sign-in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from keepgreen.app.admin import live_token
from keepgreen.app.errors import Forbidden, NotFound
from keepgreen.app.instance_keys import instance_key
from keepgreen.app.ports import Clock, StoredWebSession, UnitOfWork, UnitOfWorkFactory
from keepgreen.core.ids import OrgId
from keepgreen.core.model import Org

SESSION_LIFETIME = timedelta(hours=12)
MAX_COOKIE_CHARS = 512
_KEY_NAME = "web-sessions"
_SECRET_BYTES = 32
_SEPARATOR = "."


@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who a dashboard request speaks for, and the CSRF token its forms must send back."""

    org_id: OrgId
    org_slug: str
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class OpenedSession:
    """A new session: `cookie` is the secret to set as the cookie's value (never logged)."""

    cookie: str
    signed_in: SignedIn

    def __repr__(self) -> str:
        return f"OpenedSession(org={self.signed_in.org_slug!r}, cookie=<hidden>)"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _mac(key: str, message: str) -> str:
    mac = hmac.new(key.encode(), message.encode(), hashlib.sha256).digest()
    return urlsafe_b64encode(mac).rstrip(b"=").decode()


class GithubAuthority(Protocol):
    """GitHub's OAuth web flow for the App, and the App's installations a user can reach."""

    def authorize_url(self, *, state: str, redirect_uri: str) -> str:
        """Where the browser goes to grant the App (GitHub comes back with `state`)."""
        ...

    def installations(self, *, code: str, redirect_uri: str) -> set[int]:
        """The ids of the App's installations the user who granted `code` can reach.

        Raises Forbidden when GitHub refuses the code, Unavailable when it cannot answer.
        """
        ...


class WebSessionService:
    """Opens, checks and closes dashboard sessions."""

    def __init__(
        self, uow: UnitOfWorkFactory, *, clock: Clock, github: GithubAuthority | None = None
    ) -> None:
        self._uow = uow
        self._clock = clock
        self._github = github
        self._key: str | None = None  # read once: the installation's key never changes

    @property
    def has_github(self) -> bool:
        """Whether signing in with GitHub is configured."""
        return self._github is not None

    def github_authorize_url(self, *, state: str, redirect_uri: str) -> str:
        if self._github is None:
            raise NotFound("github_sign_in_off", "signing in with GitHub is not configured")
        return self._github.authorize_url(state=state, redirect_uri=redirect_uri)

    def sign_in_with_github(
        self, code: str, *, redirect_uri: str, org_slug: str | None = None
    ) -> OpenedSession | tuple[str, ...]:
        """A session for the org of a GitHub App installation the user can reach, named by
        `org_slug` when several are; the slugs to choose from when `org_slug` names none.
        """
        if self._github is None:
            raise NotFound("github_sign_in_off", "signing in with GitHub is not configured")
        installation_ids = self._github.installations(code=code, redirect_uri=redirect_uri)
        key = self._signing_key()
        with self._uow() as uow:
            org_ids = {
                installation.org_id
                for installation_id in installation_ids
                if (installation := uow.github_installations.get(installation_id)) is not None
                and installation.org_id is not None
            }
            orgs = sorted(
                (org for org_id in org_ids if (org := uow.orgs.get(org_id)) is not None),
                key=lambda org: org.slug,
            )
            if not orgs:
                raise Forbidden(
                    "no_linked_org",
                    "none of the GitHub accounts you can reach has keepgreen's App installed "
                    "and linked to a keepgreen org",
                )
            chosen = next((org for org in orgs if org.slug == org_slug), None)
            if chosen is None and len(orgs) > 1:
                return tuple(org.slug for org in orgs)
            opened = self._open(uow, chosen or orgs[0], None, key)
            uow.commit()
        return opened

    def _open(self, uow: UnitOfWork, org: Org, token_id: str | None, key: str) -> OpenedSession:
        now = self._clock()
        secret = secrets.token_urlsafe(_SECRET_BYTES)
        uow.web_sessions.delete_expired(now)
        expires_at = now + SESSION_LIFETIME
        uow.web_sessions.add(StoredWebSession(_digest(secret), org.id, token_id, now, expires_at))
        signed_in = SignedIn(org.id, org.slug, _mac(key, f"csrf:{secret}"), expires_at)
        return OpenedSession(f"{secret}{_SEPARATOR}{_mac(key, secret)}", signed_in)

    def sign_in(self, token: str) -> OpenedSession | None:
        """A session for the org of a live API token; None for any other token (the caller
        says only that the token was not accepted).
        """
        key = self._signing_key()
        with self._uow() as uow:
            stored = live_token(uow, token)
            if stored is None:
                return None
            org = uow.orgs.get(stored.org_id)
            if org is None:
                return None
            opened = self._open(uow, org, stored.id, key)
            uow.commit()
        return opened

    def resolve(self, cookie: str) -> SignedIn | None:
        """The signed-in org of a cookie; None when it is forged, unknown, expired, signed
        out, or its API token was revoked.
        """
        secret, separator, signature = cookie.partition(_SEPARATOR)
        if not separator or not secret or len(cookie) > MAX_COOKIE_CHARS:
            return None
        key = self._signing_key()
        if not hmac.compare_digest(_mac(key, secret), signature):
            return None
        with self._uow(read_only=True) as uow:
            stored = uow.web_sessions.find(_digest(secret))
            if stored is None or stored.expires_at <= self._clock():
                return None
            if stored.token_id is not None:
                token = uow.tokens.get(stored.token_id)
                if token is None or token.revoked_at is not None:
                    return None
            org = uow.orgs.get(stored.org_id)
        if org is None:
            return None
        return SignedIn(org.id, org.slug, _mac(key, f"csrf:{secret}"), stored.expires_at)

    def sign_out(self, cookie: str) -> None:
        """Close the cookie's session (nothing happens for a cookie that opens none)."""
        secret, _, _ = cookie.partition(_SEPARATOR)
        with self._uow() as uow:
            uow.web_sessions.delete(_digest(secret))
            uow.commit()

    def _signing_key(self) -> str:
        if self._key is None:
            self._key = instance_key(self._uow, _KEY_NAME)
        return self._key
