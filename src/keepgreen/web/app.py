"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from keepgreen import __version__
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.settings import Settings
from keepgreen.web.auth import authenticate
from keepgreen.web.body_limit import BodyLimitMiddleware
from keepgreen.web.errors import install_error_handlers
from keepgreen.web.observability import ObservabilityMiddleware
from keepgreen.web.pages import install_dashboard
from keepgreen.web.polled import PolledCalls
from keepgreen.web.routes import (
    flaky_ci,
    flaky_tests,
    github,
    merge_queue,
    metrics,
    service_metrics,
    trunk_uploader,
)
from keepgreen.web.snapshots import Snapshots
from keepgreen.web.upload_gate import UploadGate

API_PREFIX = "/v1"


class KeepgreenAPI(FastAPI):
    """The API, with the door of the polled calls in front (`keepgreen.web.polled`)."""

    polled: PolledCalls | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.polled is not None and self.polled.handles(scope):
            await self.polled(scope, receive, send, super().__call__)
            return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings | None = None, *, container: Container | None = None) -> FastAPI:
    """Build the app; pass a container to share one (tests, `keepgreen serve` with a worker)."""
    # A container the app builds is the app's to close; a container passed in is the caller's.
    owned: Container | None = None
    if container is None:
        container = owned = bootstrap(settings or Settings())

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if owned is not None:
            owned.close()

    app = KeepgreenAPI(
        title="keepgreen API",
        version=__version__,
        description="Merge queue and flaky-test service, HTTP API v1.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.container = container
    app.state.authenticate = authenticate
    # Aged by the service's clock, which the answers' stalls and ages are computed with.
    app.state.snapshots = Snapshots(clock=lambda: container.dashboard.now().timestamp())
    app.state.upload_gate = UploadGate(
        container.settings.upload_concurrency,
        queue_seconds=container.settings.upload_queue_seconds,
    )
    install_error_handlers(app)
    app.include_router(merge_queue.router, prefix=API_PREFIX)
    app.include_router(metrics.router, prefix=API_PREFIX)
    app.include_router(flaky_tests.router, prefix=API_PREFIX)
    app.include_router(flaky_ci.router, prefix=API_PREFIX)
    app.include_router(trunk_uploader.router, prefix=API_PREFIX)
    app.include_router(service_metrics.router)
    app.include_router(github.router)
    # Last: its `/{org}/...` pages must not shadow a route above.
    install_dashboard(app)
    app.polled = PolledCalls(
        prefix=API_PREFIX,
        container=container,
        snapshots=app.state.snapshots,
        max_body_bytes=container.settings.max_body_bytes,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=container.settings.max_body_bytes)
    # Added last, so outermost: it measures and logs what the client got, 413s included.
    app.add_middleware(ObservabilityMiddleware, telemetry=container.telemetry)

    def openapi_document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                servers=[{"url": API_PREFIX}],
            )
            # Paths are served under /v1; the document lists them relative to its server.
            app.openapi_schema["paths"] = {
                path.removeprefix(API_PREFIX): item
                for path, item in app.openapi_schema["paths"].items()
            }
        return app.openapi_schema

    for path in (f"{API_PREFIX}/openapi.json", "/openapi.json"):
        app.add_api_route(
            path,
            lambda: JSONResponse(openapi_document()),
            include_in_schema=False,
            methods=["GET"],
        )
    return app


def create_metrics_app(container: Container) -> FastAPI:
    """Only GET /metrics, for a process without the API (`keepgreen worker --metrics-port`):
    the same route, token rule and access log as `keepgreen serve`'s.
    """
    app = FastAPI(title="keepgreen metrics", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.container = container
    app.state.authenticate = authenticate
    install_error_handlers(app)
    app.include_router(service_metrics.router)
    app.add_middleware(ObservabilityMiddleware, telemetry=container.telemetry)
    return app
