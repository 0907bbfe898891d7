"""Opaque, tamper-proof page tokens: a signed offset bound to the query it pages through.

A token names its query by a fingerprint (endpoint, repository, filters, page size), so a token
from one listing is refused by another; the HMAC makes an edited token a 400, not a wrong page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
from dataclasses import dataclass

from keepgreen.app.errors import InvalidInput

MAX_TOKEN_CHARS = 512


@dataclass(frozen=True, slots=True)
class Page:
    """Where a page sits in its listing, as the API reports it."""

    total_rows: int
    total_pages: int
    page_index: int
    next_page_token: str
    prev_page_token: str
    last_page_token: str


class PageTokens:
    def __init__(self, key: bytes) -> None:
        self._key = key

    @staticmethod
    def fingerprint(*parts: object) -> str:
        canonical = json.dumps([str(part) for part in parts], separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def make(self, query: str, offset: int) -> str:
        body = json.dumps({"q": query, "o": offset}, separators=(",", ":")).encode()
        signature = hmac.new(self._key, body, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(body + signature).decode().rstrip("=")

    def offset(self, query: str, token: str) -> int:
        """The offset a token points to; "" is the first page. 400 for anything else."""
        if token == "":
            return 0
        invalid = InvalidInput("invalid_page_token", "page_query.page_token is not a valid token")
        if len(token) > MAX_TOKEN_CHARS:
            raise invalid
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except ValueError as error:
            raise invalid from error
        body, signature = raw[:-16], raw[-16:]
        expected = hmac.new(self._key, body, hashlib.sha256).digest()[:16]
        if len(raw) <= 16 or not hmac.compare_digest(signature, expected):
            raise invalid
        payload = json.loads(body)
        if payload.get("q") != query:
            raise InvalidInput(
                "invalid_page_token",
                "page_query.page_token belongs to another query (other filters or page size)",
            )
        offset = payload.get("o")
        if not isinstance(offset, int) or offset < 0:
            raise invalid
        return offset

    def page(self, query: str, *, offset: int, size: int, total: int) -> Page:
        pages = math.ceil(total / size)
        last = max(pages - 1, 0) * size
        return Page(
            total_rows=total,
            total_pages=pages,
            page_index=offset // size,
            next_page_token=self.make(query, offset + size) if offset + size < total else "",
            prev_page_token=self.make(query, max(offset - size, 0)) if offset > 0 else "",
            last_page_token=self.make(query, last) if total else "",
        )
