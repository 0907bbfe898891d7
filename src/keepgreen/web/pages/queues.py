"""Dashboard pages of the merge queue: sign-in, the org's queues, one queue (live), one PR,
a run's CI log, and the actions on them. Each route reads one service and renders one
template; every POST carries the session's CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from keepgreen.app.errors import KeepgreenError, Unavailable
from keepgreen.app.pull_requests import QueueTarget
from keepgreen.app.queues import QueueUpdate
from keepgreen.app.web_sessions import SESSION_LIFETIME, OpenedSession
from keepgreen.core.enums import QueueState
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef
from keepgreen.core.priority import PRIORITY_NAMES, PriorityError, priority_from_name
from keepgreen.web.auth import Services
from keepgreen.web.pages.guard import (
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    CheckedForm,
    PageError,
    Session,
    SignInForm,
    current_session,
    new_sign_in_token,
    set_cookie,
)
from keepgreen.web.pages.render import fragment, page, queue_path

router = APIRouter(include_in_schema=False)

QUEUE = "/{org}/queues/{host}/{owner}/{name}/{branch:path}"
SIGN_IN_SECONDS = 3600
# The OAuth round trip's state, and the org and page asked for, while the browser is at GitHub.
GITHUB_COOKIE = "keepgreen_github_sign_in"
# Notices a redirect may ask a page to show: a fixed set, so a link cannot put words there.
NOTICES = {
    "paused": "The queue is paused: running tests finish, nothing new starts or merges.",
    "running": "The queue is running.",
    "draining": "The queue is draining: it takes no new PRs and finishes the ones it has.",
    "cancelled": "The pull request was cancelled.",
    "restarted": "The pull request's tests were restarted.",
    "priority": "The pull request's priority was changed.",
    "quarantine": "The test's quarantine setting was changed.",
    "settings": "The settings were saved.",
}
_STATE_ACTIONS = {
    "pause": QueueState.PAUSED,
    "resume": QueueState.RUNNING,
    "drain": QueueState.DRAINING,
}


def _safe_next(path: str | None) -> str | None:
    """A path inside keepgreen to return to after sign-in; anything else is dropped."""
    if not path or not path.startswith("/") or path.startswith(("//", "/\\")):
        return None
    return path


@router.get("/")
async def home(request: Request) -> Response:
    session = await current_session(request)
    if session is None:
        return RedirectResponse("/-/sign-in", status_code=303)
    return RedirectResponse(f"/{session.org_slug}/queues", status_code=303)


def _sign_in_form(
    request: Request,
    services: Services,
    *,
    return_to: str | None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    """The sign-in page, with a fresh form token in its page and its cookie."""
    token = new_sign_in_token()
    context = {
        "csrf_token": token,
        "next": _safe_next(return_to),
        "github": services.web_sessions.has_github,
        "error": error,
    }
    response = page(request, "sign_in.html", context, status_code=status_code)
    set_cookie(request, response, SIGN_IN_COOKIE, token, SIGN_IN_SECONDS)
    return response


def _signed_in(request: Request, opened: OpenedSession, return_to: str | None) -> Response:
    """Into the dashboard: the session cookie set, the sign-in cookies gone."""
    target = _safe_next(return_to) or f"/{opened.signed_in.org_slug}/queues"
    response = RedirectResponse(target, status_code=303)
    lifetime = int(SESSION_LIFETIME.total_seconds())
    set_cookie(request, response, SESSION_COOKIE, opened.cookie, lifetime)
    for cookie in (SIGN_IN_COOKIE, GITHUB_COOKIE):
        response.delete_cookie(cookie, path="/")
    return response


@router.get("/-/sign-in", response_class=HTMLResponse)
def sign_in_page(
    request: Request,
    services: Services,
    return_to: Annotated[str | None, Query(alias="next", max_length=2000)] = None,
) -> Response:
    return _sign_in_form(request, services, return_to=return_to)


@router.post("/-/sign-in")
async def sign_in(request: Request, form: SignInForm, services: Services) -> Response:
    token = form.get("token")
    return_to = str(form.get("next") or "")
    opened = None
    if isinstance(token, str):
        opened = await run_in_threadpool(services.web_sessions.sign_in, token.strip())
    if opened is None:
        return _sign_in_form(
            request,
            services,
            return_to=return_to,
            error="That API token was not accepted: it is unknown or revoked.",
            status_code=401,
        )
    return _signed_in(request, opened, return_to)


def _github_callback(request: Request, services: Services) -> str:
    base = services.settings.public_url or str(request.base_url)
    return base.rstrip("/") + "/-/sign-in/github/callback"


@router.get("/-/sign-in/github")
def sign_in_with_github(
    request: Request,
    services: Services,
    org: Annotated[str | None, Query(max_length=255)] = None,
    return_to: Annotated[str | None, Query(alias="next", max_length=2000)] = None,
) -> Response:
    """Off to GitHub to grant the App; it comes back to the callback with `state`."""
    state = new_sign_in_token()
    url = services.web_sessions.github_authorize_url(
        state=state, redirect_uri=_github_callback(request, services)
    )
    response = RedirectResponse(url, status_code=303)
    remembered = urlencode({"state": state, "org": org or "", "next": _safe_next(return_to) or ""})
    set_cookie(request, response, GITHUB_COOKIE, remembered, SIGN_IN_SECONDS)
    return response


@router.get("/-/sign-in/github/callback", response_class=HTMLResponse)
async def github_callback(
    request: Request,
    services: Services,
    code: Annotated[str, Query(max_length=512)] = "",
    state: Annotated[str, Query(max_length=512)] = "",
) -> Response:
    remembered = dict(parse_qsl(request.cookies.get(GITHUB_COOKIE, "")))
    expected = remembered.get("state", "")
    if not code or not expected or not hmac.compare_digest(state.encode(), expected.encode()):
        raise PageError(403, "The sign-in with GitHub was refused: start it again.")
    try:
        opened = await run_in_threadpool(
            services.web_sessions.sign_in_with_github,
            code,
            redirect_uri=_github_callback(request, services),
            org_slug=remembered.get("org") or None,
        )
    except KeepgreenError as refused:
        status = 503 if isinstance(refused, Unavailable) else 403
        again = _sign_in_form(
            request, services, return_to=None, error=f"{refused.message}.", status_code=status
        )
        again.delete_cookie(GITHUB_COOKIE, path="/")
        return again
    if isinstance(opened, tuple):
        choice = page(
            request, "choose_org.html", {"slugs": opened, "next": remembered.get("next") or None}
        )
        choice.delete_cookie(GITHUB_COOKIE, path="/")
        return choice
    return _signed_in(request, opened, remembered.get("next"))


@router.post("/-/sign-out")
async def sign_out(request: Request, _form: CheckedForm, services: Services) -> Response:
    cookie = request.cookies.get(SESSION_COOKIE, "")
    if cookie:
        await run_in_threadpool(services.web_sessions.sign_out, cookie)
    response = RedirectResponse("/-/sign-in", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/{org}/queues", response_class=HTMLResponse)
def queues_page(request: Request, org: str, session: Session, services: Services) -> Response:
    cards = services.dashboard.queues(session.org_id)
    return page(request, "queues.html", {"org": org, "cards": cards})


@dataclass(frozen=True, slots=True)
class QueueAt:
    """The queue a page's path names, for the signed-in org, and the path itself."""

    org_id: OrgId
    org: str
    ref: RepoRef
    branch: str

    @property
    def path(self) -> str:
        return queue_path(self.org, self.ref, self.branch)

    @property
    def target(self) -> QueueTarget:
        return QueueTarget(self.org_id, self.ref, self.branch)


def queue_at(session: Session, org: str, host: str, owner: str, name: str, branch: str) -> QueueAt:
    return QueueAt(session.org_id, org, RepoRef(host, owner, name), branch)


AtQueue = Annotated[QueueAt, Depends(queue_at)]


def _live(request: Request, at: QueueAt, services: Services) -> str:
    view = services.dashboard.queue(at.org_id, at.ref, at.branch)
    return fragment(
        request,
        "queue_live.html",
        {"org": at.org, "view": view, "path": at.path, "priorities": list(PRIORITY_NAMES)},
    )


def _version(html: str) -> str:
    return hashlib.sha256(html.encode()).hexdigest()[:16]


@router.get(QUEUE + "/live", response_class=HTMLResponse)
def queue_live(
    request: Request,
    at: AtQueue,
    services: Services,
    v: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    """The live part of the queue page; 204 (htmx leaves the page be) when it is unchanged."""
    html = _live(request, at, services)
    version = _version(html)
    if v == version:
        return Response(status_code=204)
    return HTMLResponse(html.replace("__VERSION__", version))


@router.post(QUEUE + "/state")
def change_queue_state(at: AtQueue, form: CheckedForm, services: Services) -> Response:
    action = form.get("action")
    state = _STATE_ACTIONS.get(action) if isinstance(action, str) else None
    if state is None:
        raise PageError(400, "Choose pause, resume or drain.")
    services.queues.update(at.org_id, at.ref, at.branch, QueueUpdate(state=state))
    return RedirectResponse(f"{at.path}?notice={state.value}", 303)


@router.post(QUEUE + "/pulls/{number:int}/{action}")
def pull_request_action(
    at: AtQueue, number: int, action: str, form: CheckedForm, services: Services
) -> Response:
    back_to = f"{at.path}/pulls/{number}" if form.get("back") == "pull" else at.path
    try:
        if action == "cancel":
            services.pull_requests.cancel(at.target, number)
            notice = "cancelled"
        elif action == "restart":
            services.pull_requests.restart(at.target, number)
            notice = "restarted"
        elif action == "priority":
            chosen = form.get("priority")
            if not isinstance(chosen, str) or chosen not in PRIORITY_NAMES:
                raise PageError(400, f"Choose a priority: {', '.join(PRIORITY_NAMES)}.")
            services.pull_requests.submit(at.target, number, priority=priority_from_name(chosen))
            notice = "priority"
        else:
            raise PageError(404, "There is no such page.")
    except (KeepgreenError, PriorityError) as error:
        message = error.message if isinstance(error, KeepgreenError) else str(error)
        raise PageError(409 if isinstance(error, KeepgreenError) else 400, message) from error
    return RedirectResponse(f"{back_to}?notice={notice}", 303)


@router.get(QUEUE + "/pulls/{number:int}", response_class=HTMLResponse)
def pull_request_page(
    request: Request,
    at: AtQueue,
    number: int,
    services: Services,
    notice: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    view = services.dashboard.pull_request(at.org_id, at.ref, at.branch, number)
    return page(
        request,
        "pull.html",
        {
            "org": at.org,
            "view": view,
            "path": at.path,
            "notice": NOTICES.get(notice or ""),
            "priorities": list(PRIORITY_NAMES),
        },
    )


@router.get(QUEUE + "/runs/{run_id}/log", response_class=PlainTextResponse)
def run_log(at: AtQueue, run_id: str, services: Services) -> Response:
    """The built-in runner's log, as text (never HTML: it is what PR code printed)."""
    logged = services.dashboard.run_log(at.org_id, at.ref, at.branch, run_id)
    if logged.text is None:
        raise PageError(404, "This run has no log on this keepgreen host.")
    return PlainTextResponse(logged.text, headers={"content-disposition": "inline"})


# The periods the analytics page offers, by their name in its links.
PERIODS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


@router.get(QUEUE + "/analytics", response_class=HTMLResponse)
def queue_analytics_page(
    request: Request,
    at: AtQueue,
    services: Services,
    period: Annotated[str, Query(max_length=8)] = "24h",
) -> Response:
    if period not in PERIODS:
        raise PageError(400, f"Choose a period: {', '.join(PERIODS)}.")
    end = services.dashboard.now()
    figures = services.dashboard.analytics(
        at.org_id, at.ref, at.branch, start=end - PERIODS[period], end=end
    )
    return page(
        request,
        "analytics.html",
        {
            "org": at.org,
            "repo": at.ref,
            "branch": at.branch,
            "path": at.path,
            "figures": figures,
            "period": period,
            "periods": list(PERIODS),
        },
    )


@router.get(QUEUE, response_class=HTMLResponse)
def queue_page(
    request: Request,
    at: AtQueue,
    services: Services,
    notice: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    live = _live(request, at, services)
    return page(
        request,
        "queue.html",
        {
            "org": at.org,
            "repo": at.ref,
            "branch": at.branch,
            "live": live.replace("__VERSION__", _version(live)),
            "path": at.path,
            "notice": NOTICES.get(notice or ""),
        },
    )
