"""Dashboard settings pages: a queue's `updateQueue` settings and a repository's flaky-test
settings, validated by the API's own request models so that a page refuses exactly what the
API refuses, with the same words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from keepgreen.app.errors import KeepgreenError
from keepgreen.app.flaky.settings import monitors_to_dict
from keepgreen.web.auth import Services
from keepgreen.web.errors import describe_validation_error
from keepgreen.web.flaky_schemas import FlakySettingsIn
from keepgreen.web.pages.flaky import chosen_repositories, repo_key
from keepgreen.web.pages.guard import CheckedForm, PageError, Session
from keepgreen.web.pages.queues import NOTICES, QUEUE, AtQueue
from keepgreen.web.pages.render import page, query
from keepgreen.web.presenters import queue_config
from keepgreen.web.routes.flaky_tests import settings_of
from keepgreen.web.routes.merge_queue import queue_update_of
from keepgreen.web.schemas import UpdateQueueRequest

router = APIRouter(include_in_schema=False)

# The updateQueue fields the page offers, in its order, with what each means. `state` has its
# buttons on the queue page; `deleteRequiredStatuses` is an empty required-statuses field.
LABELS = {
    "mode": "Mode: single (one line) or parallel (lanes by impacted targets)",
    "concurrency": "Test runs at once",
    "bisectionConcurrency": "Bisection runs at once",
    "testingTimeoutMinutes": "Testing timeout (minutes)",
    "pendingFailureDepth": "Pending-failure depth (PRs behind a failure that may vouch for it)",
    "canOptimisticallyMerge": "Merge a failed PR when a later run that includes it passes",
    "batch": "Test PRs in batches",
    "batchingMaxWaitTimeMinutes": "Longest wait to fill a batch (minutes)",
    "batchingMinSize": "Batch size",
    "adaptiveBatchSize": "Adapt the batch size to the failure rate",
    "adaptiveDepth": "Adapt how deep the queue tests ahead",
    "bisectBesideQueue": "Bisect a failed batch beside the queue",
    "mergeMethod": "Merge method",
    "directMergeMode": "Direct merge of an up-to-date PR when the queue is empty",
    "optimizationMode": "Optimization mode",
    "requiredStatuses": "Required statuses (one per line; empty: the default)",
    "checkStartTimeoutMinutes": "A required check must start within (minutes)",
    "adaptiveTestingTimeout": "Adapt the testing timeout to how long runs take",
    "acceptSkippedChecks": "A skipped or neutral required check counts as passed",
    "maxRetries": "Retries of a failed run before it counts",
    "flakyFailures": "When only known flaky tests failed",
    "stallMinutes": "Say the queue is stalled after (minutes without progress)",
    "createPrsForTestingBranches": "Open a PR for each testing branch",
    "commentsEnabled": "Comment on PRs",
    "commandsEnabled": "Take commands from PR comments",
    "statusCheckEnabled": "Report a status check on PRs",
    "labelCommandsEnabled": "The enqueueing label submits a PR (on GitHub)",
    "notReadyTimeoutHours": "Cancel a PR not ready for (hours; 0: never)",
}


@dataclass(frozen=True, slots=True)
class SettingField:
    """One input of the settings form, from the API's JSON schema of its field."""

    name: str
    label: str
    kind: str  # "bool", "int", "choice" or "list"
    value: str
    options: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


def _schema() -> tuple[dict[str, Any], dict[str, Any]]:
    document = UpdateQueueRequest.model_json_schema()
    return document["properties"], document.get("$defs", {})


def _flag(text: str) -> bool | str:
    """A yes/no select's value as the API's boolean ("true"/"false"); anything else as sent,
    for the API's model to refuse in its words.
    """
    return {"true": True, "false": False}.get(text, text)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return "" if value is None else str(value)


def setting_fields(values: Mapping[str, Any]) -> list[SettingField]:
    """The form's inputs, holding `values` (the queue's configuration as the API shows it, or
    what a refused form sent).
    """
    properties, definitions = _schema()
    fields = []
    for name, label in LABELS.items():
        spec = next(s for s in properties[name]["anyOf"] if s.get("type") != "null")
        if "$ref" in spec:
            spec = definitions[spec["$ref"].rsplit("/", 1)[1]]
        value = _shown(values.get(name))
        if "enum" in spec:
            fields.append(SettingField(name, label, "choice", value, tuple(spec["enum"])))
        elif spec.get("type") == "boolean":
            fields.append(SettingField(name, label, "bool", value, ("true", "false")))
        elif spec.get("type") == "integer":
            minimum, maximum = spec.get("minimum"), spec.get("maximum")
            fields.append(SettingField(name, label, "int", value, (), minimum, maximum))
        else:
            fields.append(SettingField(name, label, "list", value))
    return fields


def changes_of(form: FormData, current: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the form changed, as the API's JSON would carry them."""
    changed: dict[str, Any] = {}
    for field in setting_fields(current):
        sent = form.get(field.name)
        if not isinstance(sent, str) or sent.strip() == field.value.strip():
            continue
        text = sent.strip()
        if field.kind == "bool":
            changed[field.name] = _flag(text)
        elif field.kind == "int":
            changed[field.name] = int(text) if text.lstrip("-").isdigit() else text
        elif field.kind == "list":
            names = [line.strip() for line in text.replace(",", "\n").splitlines()]
            names = [name for name in names if name]
            if names:
                changed[field.name] = names
            else:
                changed["deleteRequiredStatuses"] = True
        else:
            changed[field.name] = text
    return changed


def _queue_settings(
    request: Request,
    at: AtQueue,
    services: Services,
    *,
    values: Mapping[str, Any] | None = None,
    error: str | None = None,
    notice: str | None = None,
) -> Response:
    queue = services.queues.get(at.org_id, at.ref, at.branch).queue
    label = services.settings.github_merge_label
    current = queue_config(queue, default_label=label).model_dump(mode="json")
    return page(
        request,
        "queue_settings.html",
        {
            "org": at.org,
            "repo": at.ref,
            "branch": at.branch,
            "path": at.path,
            "fields": setting_fields({**current, **(values or {})}),
            "error": error,
            "notice": notice,
        },
        status_code=400 if error else 200,
    )


@router.get(QUEUE + "/settings", response_class=HTMLResponse)
def queue_settings_page(
    request: Request,
    at: AtQueue,
    services: Services,
    notice: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    return _queue_settings(request, at, services, notice=NOTICES.get(notice or ""))


@router.post(QUEUE + "/settings")
def save_queue_settings(
    request: Request, at: AtQueue, form: CheckedForm, services: Services
) -> Response:
    current = queue_config(
        services.queues.get(at.org_id, at.ref, at.branch).queue,
        default_label=services.settings.github_merge_label,
    )
    changes = changes_of(form, current.model_dump(mode="json"))
    sent = {key: value for key, value in form.items() if key in LABELS}
    repo = {"host": at.ref.host, "owner": at.ref.owner, "name": at.ref.name}
    try:
        body = UpdateQueueRequest.model_validate(
            {"repo": repo, "targetBranch": at.branch, **changes}
        )
        services.queues.update(at.org_id, at.ref, at.branch, queue_update_of(body))
    except ValidationError as refused:
        _, message = describe_validation_error(list(refused.errors()))
        return _queue_settings(request, at, services, values=sent, error=message)
    except KeepgreenError as refused:
        return _queue_settings(request, at, services, values=sent, error=refused.message)
    return RedirectResponse(f"{at.path}/settings?notice=settings", status_code=303)


# -- a repository's flaky-test settings -----------------------------------------------------------

# The `settings.quarantine` switches the page offers, each a yes/no select of its own name.
QUARANTINE_SWITCHES = ("enabled", "auto_quarantine_flaky", "auto_quarantine_broken")


def _flaky_settings(
    request: Request,
    org: str,
    session: Session,
    services: Services,
    key: str | None,
    *,
    sent: Mapping[str, str] | None = None,
    error: str | None = None,
    notice: str | None = None,
) -> Response:
    repositories = services.admin.list_repositories(org_slug=session.org_slug)
    refs = chosen_repositories(repositories, key)
    if not refs:
        raise PageError(404, "There is no such repository.")
    settings = services.flaky_manage.settings(session.org_id, refs[0])
    shown = {
        "enabled": _shown(settings.quarantine.enabled),
        "auto_quarantine_flaky": _shown(settings.quarantine.auto_quarantine_flaky),
        "auto_quarantine_broken": _shown(settings.quarantine.auto_quarantine_broken),
        "ticket_url_template": settings.ticket_url_template or "",
        "monitors": json.dumps(monitors_to_dict(settings.monitors), indent=2),
    }
    return page(
        request,
        "flaky_settings.html",
        {
            "org": org,
            "repo_key": repo_key(refs[0]),
            "values": {**shown, **(sent or {})},
            "error": error,
            "notice": notice,
        },
        status_code=400 if error else 200,
    )


@router.get("/{org}/flaky-tests/settings", response_class=HTMLResponse)
def flaky_settings_page(
    request: Request,
    org: str,
    session: Session,
    services: Services,
    repo: Annotated[str | None, Query(max_length=800)] = None,
    notice: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    return _flaky_settings(request, org, session, services, repo, notice=NOTICES.get(notice or ""))


@router.post("/{org}/flaky-tests/settings")
def save_flaky_settings(
    request: Request, org: str, session: Session, form: CheckedForm, services: Services
) -> Response:
    key = form.get("repo")
    key = key if isinstance(key, str) else ""
    sent = {name: str(form.get(name) or "") for name in QUARANTINE_SWITCHES}
    sent |= {name: str(form.get(name) or "") for name in ("ticket_url_template", "monitors")}
    refs = chosen_repositories(services.admin.list_repositories(org_slug=session.org_slug), key)
    if not refs:
        raise PageError(404, "There is no such repository.")
    try:
        monitors = json.loads(sent["monitors"] or "{}")
    except json.JSONDecodeError as error:
        message = f"settings.monitors is not JSON: {error.msg} (line {error.lineno})"
        return _flaky_settings(request, org, session, services, key, sent=sent, error=message)
    given = {
        "quarantine": {name: _flag(sent[name]) for name in QUARANTINE_SWITCHES},
        "monitors": monitors,
        "ticket_url_template": sent["ticket_url_template"].strip() or None,
    }
    try:
        settings = settings_of(FlakySettingsIn.model_validate(given))
        services.flaky_manage.update_settings(session.org_id, refs[0], settings)
    except ValidationError as refused:
        _, message = describe_validation_error(list(refused.errors()))
        message = f"settings.{message}" if not message.startswith("settings") else message
        return _flaky_settings(request, org, session, services, key, sent=sent, error=message)
    except KeepgreenError as refused:
        return _flaky_settings(
            request, org, session, services, key, sent=sent, error=refused.message
        )
    back = f"/{org}/flaky-tests/settings" + query({"repo": repo_key(refs[0]), "notice": "settings"})
    return RedirectResponse(back, status_code=303)
