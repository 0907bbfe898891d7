"""Refuse request bodies over the limit with 413, before they are read whole."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    """Raised from `receive` once a streamed body passes the limit."""


class BodyLimitMiddleware:
    """Pure ASGI middleware: a declared Content-Length over the limit is answered at once;
    a streamed body is counted chunk by chunk and cut off when it passes the limit.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            # Whatever the app answers after the body was cut off is replaced by the 413.
            if exceeded:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(BodyTooLarge):
            await self.app(scope, counting_receive, guarded_send)
        if exceeded and not started:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        limit_mib = self.max_bytes / (1024 * 1024)
        body = json.dumps(
            {
                "error": {
                    "code": "payload_too_large",
                    "message": f"the request body is over the {limit_mib:g} MiB limit",
                }
            }
        ).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
