"""Webhook deliveries as GitHub sends them: the JSON body signed with HMAC-SHA256 of the
shared secret, and GitHub's headers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

import httpx


def signature(body: bytes, secret: str | bytes) -> str:
    """The `X-Hub-Signature-256` value of `body`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def deliver(
    url: str,
    event: str,
    payload: Mapping[str, Any],
    *,
    secret: str | bytes,
    delivery_id: str,
    timeout: float = 10.0,
) -> httpx.Response:
    """POST `payload` to `url` with GitHub's webhook headers."""
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/fake",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Hook-ID": "1",
        "X-GitHub-Hook-Installation-Target-Type": "integration",
        "X-Hub-Signature-256": signature(body, secret),
    }
    return httpx.post(url, content=body, headers=headers, timeout=timeout)
