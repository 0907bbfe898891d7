"""Dashboard pages of the flaky tests: the unhealthy tests of a repository, and one test at
the `html_url` the API gives for it, with its quarantine override.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from keepgreen.app.admin import RepositoryInfo
from keepgreen.app.errors import NotFound
from keepgreen.app.flaky.reads import BOARD_KINDS, BoardKind, TestDetails
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings
from keepgreen.core.model import RepoRef
from keepgreen.web.auth import Services
from keepgreen.web.pages.guard import CheckedForm, PageError, Session
from keepgreen.web.pages.queues import NOTICES
from keepgreen.web.pages.render import page, query

router = APIRouter(include_in_schema=False)

# The override form's choices: the two overrides, or none (the status decides).
OVERRIDES = {
    "always": QuarantineOverride.ALWAYS,
    "never": QuarantineOverride.NEVER,
    "auto": None,
}
NO_TEST = "There is no such test."


def repo_key(ref: RepoRef) -> str:
    """How a repository is named in the dashboard's links: `host/owner/name`."""
    return f"{ref.host}/{ref.owner}/{ref.name}"


def chosen_repositories(repositories: list[RepositoryInfo], key: str | None) -> list[RepoRef]:
    """The org's repositories a `repo` parameter names: `host/owner/name` names one,
    `owner/name` (the API's `html_url`) every host's; None or "" names the first one.
    """
    refs = sorted((info.repository.ref for info in repositories), key=repo_key)
    if not key:
        return refs[:1]
    parts = key.split("/")
    if len(parts) == 3:
        return [ref for ref in refs if repo_key(ref) == key]
    if len(parts) == 2:
        return [ref for ref in refs if (ref.owner, ref.name) == (parts[0], parts[1])]
    return []


@router.get("/{org}/flaky-tests", response_class=HTMLResponse)
def flaky_tests_page(
    request: Request,
    org: str,
    session: Session,
    services: Services,
    repo: Annotated[str | None, Query(max_length=800)] = None,
    kind: Annotated[list[str] | None, Query(max_length=3)] = None,
    owner: Annotated[str, Query(max_length=200)] = "",
    q: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    repositories = services.admin.list_repositories(org_slug=session.org_slug)
    refs = chosen_repositories(repositories, repo)
    if repo and not refs:
        raise PageError(404, "There is no such repository.")
    kinds: list[BoardKind] = [k for k in BOARD_KINDS if k in (kind or BOARD_KINDS)]
    if kind and len(kinds) != len(set(kind)):
        raise PageError(400, "Choose among flaky, broken and quarantined.")
    board = None
    if refs:
        board = services.flaky.board(
            session.org_id, refs[0], kinds=kinds, owner=owner.strip(), search=q.strip()
        )
    return page(
        request,
        "flaky_tests.html",
        {
            "org": org,
            "repositories": sorted((info.repository.ref for info in repositories), key=repo_key),
            "current": refs[0] if refs else None,
            "repo_key": repo_key,
            "kinds": kinds,
            "all_kinds": BOARD_KINDS,
            "owner": owner,
            "q": q,
            "board": board,
            "now": services.dashboard.now(),
        },
    )


def _details(
    services: Services, session: Session, refs: list[RepoRef], test_id: str
) -> TestDetails:
    for ref in refs:
        try:
            return services.flaky.details(session.org_id, ref, test_id)
        except NotFound:
            continue
    raise PageError(404, NO_TEST)


@router.get("/{org}/flaky-tests/test/{test_id}", response_class=HTMLResponse)
def flaky_test_page(
    request: Request,
    org: str,
    test_id: str,
    session: Session,
    services: Services,
    repo: Annotated[str | None, Query(max_length=800)] = None,
    notice: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    """One test, at exactly the `html_url` the API reports (`?repo=owner/name`)."""
    repositories = services.admin.list_repositories(org_slug=session.org_slug)
    refs = (
        chosen_repositories(repositories, repo)
        if repo
        else [info.repository.ref for info in repositories]
    )
    details = _details(services, session, refs, test_id)
    ref = details.view.repository.ref
    daily = services.flaky.daily(session.org_id, ref, test_id)
    test = details.view.test
    override = {
        QuarantineOverride.ALWAYS: "always",
        QuarantineOverride.NEVER: "never",
        None: "auto",
    }[test.quarantine_override]
    return page(
        request,
        "flaky_test.html",
        {
            "org": org,
            "details": details,
            "view": details.view,
            "test": test,
            "repo": ref,
            "repo_key": repo_key(ref),
            "daily": daily,
            "override": override,
            "manual_only": _manual_only(details.quarantine, test.status),
            "notice": NOTICES.get(notice or ""),
            "now": services.dashboard.now(),
        },
    )


def _manual_only(quarantine: QuarantineSettings, status: TestStatus) -> str | None:
    """The status ("flaky", "broken") whose tests the repository leaves to a person's ALWAYS,
    when the test's page should say so: the test's own status, or for a healthy test the
    status it would first be quarantined under (flaky). None when nothing needs saying.
    """
    shown = TestStatus.FLAKY if status is TestStatus.HEALTHY else status
    if not quarantine.enabled or quarantine.is_automatic(shown):
        return None
    return shown.value


@router.post("/{org}/flaky-tests/test/{test_id}/quarantine")
def set_quarantine(
    org: str,
    test_id: str,
    session: Session,
    form: CheckedForm,
    services: Services,
) -> Response:
    repositories = services.admin.list_repositories(org_slug=session.org_slug)
    key = form.get("repo")
    refs = chosen_repositories(repositories, key) if isinstance(key, str) and key else []
    choice = form.get("override")
    if not refs:
        raise PageError(404, NO_TEST)
    if not isinstance(choice, str) or choice not in OVERRIDES:
        raise PageError(400, "Choose always, never or auto.")
    try:
        services.flaky_manage.set_override(session.org_id, refs[0], test_id, OVERRIDES[choice])
    except NotFound as error:
        raise PageError(404, NO_TEST) from error
    back = f"/{org}/flaky-tests/test/{test_id}" + query(
        {"repo": repo_key(refs[0]), "notice": "quarantine"}
    )
    return RedirectResponse(back, status_code=303)
