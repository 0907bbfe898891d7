"""Every HTTP request measured, given a request id, and logged once (the access log).

A pure ASGI middleware, outermost, so that what it sees is what the client got: answers made
by the other middleware (413 for a body over the limit) and unexpected failures (500) included.
"""

from __future__ import annotations

import os
import re
import time

import structlog
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keepgreen.app.telemetry import UNMATCHED_ROUTE, Telemetry

REQUEST_ID_HEADER = "x-request-id"
REQUEST_ID_HEADER_BYTES = REQUEST_ID_HEADER.encode()
# An incoming id is kept when it looks like one (a UUID, a proxy's trace id): short, and of
# characters that cannot break a log line or a header. Anything else is replaced.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

access_log = structlog.get_logger("keepgreen.access")
# Where an answer made outside the router (`keepgreen.web.polled`) names its route template.
ROUTE_TEMPLATE = "keepgreen.route_template"


def route_template(scope: Scope) -> str:
    """The path template of the route that handled the request (`/v1/getQueue`), never the
    raw path: one label value per route, however many paths clients try.
    """
    answered_by = scope.get(ROUTE_TEMPLATE)
    if isinstance(answered_by, str):
        return answered_by
    route = scope.get("route")
    if not isinstance(route, BaseRoute):
        return UNMATCHED_ROUTE
    # Recent FastAPI keeps an included router's routes as they were declared, without the
    # router's prefix (`/getQueue`), and records the path as served in its own scope entry;
    # older versions copied the routes with the prefix (`route.path`).
    fastapi_scope = scope.get("fastapi")
    effective = (
        fastapi_scope.get("effective_route_context") if isinstance(fastapi_scope, dict) else None
    )
    path = getattr(effective, "path_format", None) or getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


def incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _SANE_REQUEST_ID.fullmatch(text) else None
    return None


def request_id_of(scope: Scope) -> str:
    """The request's id: the client's (or its proxy's) when it looks like one, else a new one."""
    return incoming_request_id(scope) or os.urandom(16).hex()  # as uuid4().hex


def record_request(
    telemetry: Telemetry, scope: Scope, *, status: int, started: float, request_id: str
) -> None:
    """Count the request in `keepgreen_http_*` and write its access-log line."""
    seconds = time.perf_counter() - started
    route = route_template(scope)
    method = scope["method"]
    telemetry.http_request(route=route, method=method, status=status, seconds=seconds)
    access_log.info(
        "request",
        method=method,
        route=route,
        status=status,
        duration_ms=round(seconds * 1000, 2),
        request_id=request_id,
    )


class ObservabilityMiddleware:
    """Records `keepgreen_http_*` for each request, answers with its `X-Request-ID`, and logs
    one `request` line: method, route template, status, duration and request id. The query
    string and header values are never logged (tokens travel in both).
    """

    def __init__(self, app: ASGIApp, *, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = request_id_of(scope)
        # Handlers read it as `request.state.request_id`.
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500  # what the client gets when the app fails before answering
        header = (REQUEST_ID_HEADER_BYTES, request_id.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        # Bound for the lines the request's handling logs (bind and reset: the context manager
        # costs more than the rest of this middleware).
        bound = structlog.contextvars.bind_contextvars(request_id=request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            structlog.contextvars.reset_contextvars(**bound)
            record_request(
                self.telemetry, scope, status=status, started=started, request_id=request_id
            )
