"""`keepgreen tests ...`: thin wrappers over the flaky-test endpoints (list, show, quarantine,
flag, settings).

Like the other client commands, each one posts to API v1 and shows the answer as Rich text, or
with `--json` as JSON. Every flaky-test endpoint names the org (`org_url_slug`), so `--org` (or
KEEPGREEN_ORG) is required; without it the command exits 2 before sending anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from keepgreen.cli import render
from keepgreen.cli.api import ApiClient, ClientError, connect, reported
from keepgreen.cli.client import JsonOption, RepoOption, TokenOption, UrlOption
from keepgreen.core.model import RepoRef

MAX_PAGE_SIZE = 100
# A listing stops after this many pages, so a server that keeps answering a next page (a bug)
# cannot keep the command looping forever.
MAX_PAGES = 1000

tests_app = typer.Typer(
    help="Flaky and broken tests: list, show, quarantine, flag, settings.", no_args_is_help=True
)

OrgOption = Annotated[
    str | None,
    typer.Option(
        "--org",
        envvar="KEEPGREEN_ORG",
        help="Org slug, the API token's org (default: $KEEPGREEN_ORG; required).",
        show_default=False,
    ),
]
TestIdArgument = Annotated[
    str, typer.Argument(metavar="TEST_ID", help="The test's id (from `keepgreen tests list`).")
]


class UnhealthyStatus(StrEnum):
    """The statuses `tests list` can ask for."""

    FLAKY = "flaky"  # passes and fails on the same code
    BROKEN = "broken"  # fails consistently


def _client(org: str | None, url: str | None, token: str | None) -> tuple[ApiClient, str]:
    """The API client and the org slug; a missing org is a usage problem (exit 2)."""
    slug = (org or "").strip()
    if not slug:
        raise ClientError(
            "no org: pass --org SLUG or set KEEPGREEN_ORG (the API token's org)", exit_code=2
        )
    return connect(url, token), slug


def _body(repo: RepoRef, org: str, **fields: object) -> dict[str, object]:
    """A flaky-test request body naming `repo` and the org, plus `fields`."""
    repo_json = {"host": repo.host, "owner": repo.owner, "name": repo.name}
    return {"repo": repo_json, "org_url_slug": org, **fields}


def _post(verb: str, client: ApiClient, body: Mapping[str, object]) -> dict[str, Any]:
    return client.post(f"flaky-tests/{verb}", body)


# -- tests list -----------------------------------------------------------------------------------


@tests_app.command("list")
def list_unhealthy(
    repo: RepoOption,
    status: Annotated[
        UnhealthyStatus, typer.Option("--status", help="Which unhealthy tests to list.")
    ] = UnhealthyStatus.FLAKY,
    page_size: Annotated[
        int,
        typer.Option("--page-size", min=1, max=MAX_PAGE_SIZE, help="Tests fetched per request."),
    ] = MAX_PAGE_SIZE,
    org: OrgOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the flaky (or broken) tests of a repository, every page, most recently changed
    first.
    """
    tests: list[dict[str, Any]] = []
    with reported():
        client, slug = _client(org, url, token)
        page_token = ""
        for _ in range(MAX_PAGES):
            query = {"page_size": page_size, "page_token": page_token}
            body = _body(repo, slug, status=status.value, page_query=query)
            data = _post("list-unhealthy-tests", client, body)
            tests.extend(data.get("tests") or [])
            page_token = str((data.get("page") or {}).get("next_page_token") or "")
            if not page_token:
                break
    if json_output:
        render.print_json({"tests": tests})
        return
    out = render.console()
    if not tests:
        out.print(f"No {status.value} tests in {repo}.", markup=False)
        return
    out.print(_list_view(tests, title=f"{status.value.capitalize()} tests in {repo}"))


def _list_view(tests: list[dict[str, Any]], *, title: str) -> RenderableType:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in ("id", "name", "classname / suite", "file", "status", "reason", "since"):
        table.add_column(column, overflow="fold")
    table.add_column("quarantined")
    table.add_column("owners", overflow="fold")
    for test in tests:
        status: Mapping[str, Any] = test.get("status") or {}
        table.add_row(
            Text(render.value_of(test, "id")),
            Text(render.value_of(test, "name")),
            Text(_suite(test)),
            Text(render.value_of(test, "file_path")),
            Text(render.value_of(status, "value")),
            Text(render.value_of(status, "reason")),
            Text(render.value_of(status, "timestamp")),
            Text(render.switch(test.get("quarantined"), "yes", "no")),
            Text(", ".join(map(str, test.get("codeowners") or [])) or render.MISSING),
        )
    return table


# -- tests show -----------------------------------------------------------------------------------


@tests_app.command("show")
def show(
    test_id: TestIdArgument,
    repo: RepoOption,
    org: OrgOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show one test: its fields, failure rates, most common failures and status history."""
    with reported():
        client, slug = _client(org, url, token)
        data = _post("get-test-details", client, _body(repo, slug, test_id=test_id))
    if json_output:
        render.print_json(data)
        return
    render.console().print(_details_view(data))


def _details_view(data: Mapping[str, Any]) -> RenderableType:
    test: Mapping[str, Any] = data.get("test") or {}
    status: Mapping[str, Any] = test.get("status") or {}
    ticket: Mapping[str, Any] = test.get("ticket") or {}
    fields = Table(show_header=False, box=None)
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    rows = [
        ("id", render.value_of(test, "id")),
        ("classname / suite", _suite(test)),
        ("file", render.value_of(test, "file_path")),
        ("variant", render.value_of(test, "variant") if test.get("variant") else render.MISSING),
        ("status", render.value_of(status, "value")),
        ("reason", render.value_of(status, "reason")),
        ("since", render.value_of(status, "timestamp")),
        ("quarantined", render.switch(test.get("quarantined"), "yes", "no")),
        ("owners", ", ".join(map(str, test.get("codeowners") or [])) or render.MISSING),
        ("failure rate, 24 h", _percent(test.get("failure_rate_last_24h"))),
        ("failure rate, 7 days", _percent(test.get("failure_rate_last_7d"))),
        ("PRs impacted, 7 days", render.value_of(test, "pull_requests_impacted_last_7d")),
        ("ticket", render.value_of(ticket, "html_url")),
        ("link", render.value_of(test, "html_url")),
    ]
    for label, value in rows:
        fields.add_row(label, Text(value))
    parts: list[RenderableType] = [
        Text(f"Test {render.value_of(test, 'name')}", style="bold"),
        fields,
    ]
    parts += _listing(
        "Most common failures",
        test.get("most_common_failures"),
        [("count", "occurrence_count"), ("last seen", "last_occurrence"), ("summary", "summary")],
    )
    parts += _listing(
        "Status history",
        data.get("status_history"),
        [("since", "timestamp"), ("status", "value"), ("reason", "reason")],
    )
    return Group(*parts)


def _listing(title: str, items: object, columns: list[tuple[str, str]]) -> list[RenderableType]:
    """A titled table of `items` (a list of objects), one column per (heading, key); none when
    there are no items. The last column folds long text.
    """
    rows: list[Mapping[str, Any]] = list(items) if isinstance(items, list) else []
    if not rows:
        return []
    table = Table(title=title, title_justify="left", title_style="bold")
    for index, (heading, _key) in enumerate(columns):
        table.add_column(heading, overflow="fold" if index == len(columns) - 1 else "ellipsis")
    for row in rows:
        table.add_row(*(Text(render.value_of(row, key)) for _heading, key in columns))
    return [table]


# -- tests quarantine, tests flag -----------------------------------------------------------------


@tests_app.command("quarantine")
def quarantine_override(
    test_id: TestIdArgument,
    repo: RepoOption,
    always: Annotated[
        bool, typer.Option("--always", help="Always quarantine the test, whatever its status.")
    ] = False,
    never: Annotated[
        bool, typer.Option("--never", help="Never quarantine the test, even when flaky or broken.")
    ] = False,
    auto: Annotated[
        bool, typer.Option("--auto", help="Drop the override: the repository's settings decide.")
    ] = False,
    org: OrgOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Set a test's quarantine override: --always, --never or --auto (exactly one)."""
    choices: list[tuple[bool, str | None, str]] = [
        (always, "ALWAYS_QUARANTINE", "is always quarantined"),
        (never, "NEVER_QUARANTINE", "is never quarantined"),
        (auto, None, "is quarantined as the repository's settings say"),
    ]
    chosen = [(setting, outcome) for given, setting, outcome in choices if given]
    with reported():
        if len(chosen) != 1:
            raise ClientError("give exactly one of --always, --never and --auto", exit_code=2)
        ((setting, outcome),) = chosen
        client, slug = _client(org, url, token)
        body = _body(repo, slug, test_id=test_id, setting=setting)
        data = _post("set-quarantine-override", client, body)
    render.done(data, f"Test {test_id} in {repo} {outcome}.", json_output=json_output)


@tests_app.command("flag")
def flag(
    test_id: TestIdArgument,
    repo: RepoOption,
    reason: Annotated[
        str, typer.Option("--reason", help="Why the test is flagged (shown as its reason).")
    ] = "",
    remove: Annotated[
        bool, typer.Option("--remove", help="Remove the flag; the monitors decide again.")
    ] = False,
    org: OrgOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Flag a test as flaky by hand, or with --remove take the flag off."""
    with reported():
        if remove and reason:
            raise ClientError("--reason and --remove do not go together", exit_code=2)
        client, slug = _client(org, url, token)
        fields: dict[str, object] = {"test_id": test_id, "flaky": not remove}
        if not remove:
            fields["reason"] = reason
        data = _post("flag-test", client, _body(repo, slug, **fields))
    message = (
        f"Removed the flaky flag of test {test_id} in {repo}."
        if remove
        else f"Flagged test {test_id} in {repo} as flaky."
    )
    render.done(data, message, json_output=json_output)


# -- tests settings -------------------------------------------------------------------------------


@tests_app.command("settings")
def show_settings(
    repo: RepoOption,
    quarantine: Annotated[
        bool | None,
        typer.Option(
            "--quarantine/--no-quarantine",
            help="Turn quarantining on or off.",
            show_default=False,
        ),
    ] = None,
    auto_quarantine_flaky: Annotated[
        bool | None,
        typer.Option(
            "--auto-quarantine-flaky/--no-auto-quarantine-flaky",
            help="Quarantine flaky tests without an override while quarantining is on, or not "
            "(default on).",
            show_default=False,
        ),
    ] = None,
    auto_quarantine_broken: Annotated[
        bool | None,
        typer.Option(
            "--auto-quarantine-broken/--no-auto-quarantine-broken",
            help="Quarantine broken tests without an override while quarantining is on, or not "
            "(default off).",
            show_default=False,
        ),
    ] = None,
    org: OrgOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a repository's flaky-test settings, or change its quarantine switches.

    Without a switch the settings are only shown. The switches combine (say, `--quarantine
    --auto-quarantine-broken`) and are changed in one update; every other setting is kept.
    """
    # The quarantine switches to change, by their API names; None leaves a switch as it is.
    asked = {
        "enabled": quarantine,
        "auto_quarantine_flaky": auto_quarantine_flaky,
        "auto_quarantine_broken": auto_quarantine_broken,
    }
    changed = {name: value for name, value in asked.items() if value is not None}
    with reported():
        client, slug = _client(org, url, token)
        data = _post("get-settings", client, _body(repo, slug))
        if changed:
            # update-settings replaces every setting: send back what was read, switches changed.
            settings: dict[str, Any] = dict(data.get("settings") or {})
            settings["quarantine"] = {**(settings.get("quarantine") or {}), **changed}
            data = _post("update-settings", client, _body(repo, slug, settings=settings))
    if json_output:
        render.print_json(data)
        return
    render.console().print(_settings_view(data, title=f"Flaky-test settings of {repo}"))


def _settings_view(data: Mapping[str, Any], *, title: str) -> RenderableType:
    settings: Mapping[str, Any] = data.get("settings") or {}
    switches: Mapping[str, Any] = settings.get("quarantine") or {}
    monitors: Mapping[str, Any] = settings.get("monitors") or {}
    table = Table(show_header=False, box=None)
    table.add_column("setting", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("quarantine", Text(render.switch(switches.get("enabled"))))
    for status in ("flaky", "broken"):
        switch = switches.get(f"auto_quarantine_{status}")
        table.add_row(f"auto-quarantine {status}", Text(render.switch(switch)))
    table.add_row("ticket URL template", Text(render.value_of(settings, "ticket_url_template")))
    for name in sorted(monitors):
        # A monitor's settings as compact JSON: the names readers know from the API.
        table.add_row(f"monitor {name}", Text(json.dumps(monitors[name])))
    return Group(Text(title, style="bold"), table)


# -- small views ----------------------------------------------------------------------------------


def _suite(test: Mapping[str, Any]) -> str:
    """`classname / parent`, either alone when the other is missing."""
    parts = [str(test[key]) for key in ("classname", "parent") if test.get(key)]
    return " / ".join(parts) or render.MISSING


def _percent(value: object) -> str:
    """A fraction of the API (0.25) as a percentage (25.0%)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value * 100:.1f}%"
    return render.MISSING


def register(app: typer.Typer) -> None:
    """Add `keepgreen tests` to the `keepgreen` app."""
    app.add_typer(tests_app, name="tests")
