"""Signed upload URLs: the authorisation a bundle's PUT carries instead of an API token.

Trunk's uploader PUTs its bundle to the URL createBundleUpload answered, with no API token (it
expects a pre-signed S3 URL). keepgreen's URL holds a token in its path: which bundle (a fresh
UUID), for which org and repository, until when, and an HMAC-SHA256 over all of it with a secret
made once per installation. Nothing is stored when a URL is made: the signature proves keepgreen
made it, and the bundle id, used as the upload's idempotency key, makes a second PUT of the same
URL store nothing new.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from keepgreen.app.errors import Forbidden
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import RepoRef

# What the HMAC is taken over starts with this, so that a token of this kind can never pass for
# another signed value of keepgreen's, even were a key ever shared.
_DOMAIN = b"keepgreen bundle upload v1\0"
MAX_TOKEN_CHARS = 2048  # a real token is a few hundred characters; longer ones are not read


@dataclass(frozen=True, slots=True)
class UploadGrant:
    """What a signed upload URL allows: one bundle into one repository of one org, until
    `expires_at`.
    """

    bundle_id: str
    org_id: OrgId
    repository_id: RepositoryId
    ref: RepoRef
    expires_at: datetime


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class UploadLinks:
    """Makes and checks the tokens of upload URLs with one key (the installation's secret)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, _DOMAIN + payload, hashlib.sha256).digest()

    def sign(self, grant: UploadGrant) -> str:
        """The token: base64url(JSON payload) "." base64url(HMAC); URL-safe as it is."""
        payload = json.dumps(
            {
                "b": grant.bundle_id,
                "o": grant.org_id,
                "r": grant.repository_id,
                "h": grant.ref.host,
                "w": grant.ref.owner,
                "n": grant.ref.name,
                "e": int(grant.expires_at.timestamp()),
            },
            separators=(",", ":"),
        ).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def verify(self, token: str, *, now: datetime) -> UploadGrant:
        """The grant a token carries; Forbidden (403) when it was not made with this key or was
        altered (`upload_url_invalid`), or when its time is up (`upload_url_expired`).
        """
        invalid = Forbidden(
            "upload_url_invalid", "the upload URL is not one keepgreen made (bad signature)"
        )
        encoded, dot, signature = token.partition(".")
        if len(token) > MAX_TOKEN_CHARS or not dot:
            raise invalid
        try:
            payload, mac = _unb64(encoded), _unb64(signature)
        except (binascii.Error, ValueError):
            raise invalid from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise invalid
        # Signed by this key: the payload is keepgreen's own, but read it defensively all
        # the same (a key is long-lived; a future version may sign other fields).
        try:
            fields = json.loads(payload)
            grant = UploadGrant(
                bundle_id=_text(fields["b"]),
                org_id=OrgId(_text(fields["o"])),
                repository_id=RepositoryId(_text(fields["r"])),
                ref=RepoRef(_text(fields["h"]), _text(fields["w"]), _text(fields["n"])),
                expires_at=datetime.fromtimestamp(_number(fields["e"]), UTC),
            )
        except (ValueError, TypeError, KeyError, OverflowError, OSError):
            raise invalid from None
        if now >= grant.expires_at:
            raise Forbidden(
                "upload_url_expired",
                "the upload URL has expired; the uploader asks for a new one with each upload",
            )
        return grant


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _number(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("not an integer")
    return value
