"""The web dashboard served at `/`: server-rendered pages over the same services as the API."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from starlette.responses import RedirectResponse, Response

from keepgreen.web.credentials import TOKEN_HEADER
from keepgreen.web.pages import flaky, queues, settings
from keepgreen.web.pages.guard import STATIC_PREFIX, PageError, PageHeaders, SignInRequired
from keepgreen.web.pages.render import STATIC, page

# Paths that are the JSON API's (or the machines'): errors there stay JSON, headers theirs.
API_PREFIXES = ("/v1/", "/v1", "/webhooks/", "/metrics", "/openapi.json")
STATIC_PATH = STATIC_PREFIX.rstrip("/")


def is_page(request: Request) -> bool:
    """A request for a page: outside the API's paths, and not from an API client (one that
    sends its token), which gets the API's JSON errors wherever it calls.
    """
    return not request.url.path.startswith(API_PREFIXES) and TOKEN_HEADER not in request.headers


def error_page(request: Request, status: int, message: str) -> Response:
    """An error as a page (the status and one sentence; nothing about other orgs)."""
    return page(request, "error.html", {"status": status, "message": message}, status_code=status)


def install_dashboard(app: FastAPI) -> None:
    """Mount the pages, their static files, their headers and their error pages."""
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="static")
    # Settings first: a queue's page takes every path under it (its branch may hold slashes).
    app.include_router(settings.router)
    app.include_router(queues.router)
    app.include_router(flaky.router)
    app.state.error_page = error_page
    app.state.is_page = is_page

    @app.exception_handler(PageError)
    async def _page_error(request: Request, error: PageError) -> Response:
        return error_page(request, error.status, error.message)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _error: SignInRequired) -> Response:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        target = f"/-/sign-in?next={quote(here, safe='')}"
        if request.headers.get("hx-request"):
            # A live update or a boosted form whose session ended: the whole page goes.
            return Response(headers={"hx-redirect": target})
        return RedirectResponse(target, status_code=303)

    app.add_middleware(PageHeaders, api_prefixes=API_PREFIXES)
