"""`keepgreen github`: setting keepgreen up as a GitHub App.

`keepgreen github link --installation ID --org SLUG` gives an installation's repositories to an
org (without it, the org whose slug is the account's login gets them); `keepgreen github
installations` lists what keepgreen knows. `keepgreen github manifest` prints the App's
manifest (GitHub's "Registering a GitHub App from a manifest"): its name, where its webhooks
go, the permissions and events the queue needs. On GitHub: Settings > Developer settings >
GitHub Apps > New GitHub App from a manifest, or POST it to
https://github.com/settings/apps/new?state=... as the `manifest` form field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

if TYPE_CHECKING:  # the container is built on demand: `manifest` needs no database
    from keepgreen.app.github.installations import GithubInstallations, SyncResult
    from keepgreen.bootstrap import Container

# What the queue needs on a repository, and why (see the README's "Use it with GitHub").
PERMISSIONS = {
    "contents": "write",  # fetch, push test branches, move the target branch when landing
    "workflows": "write",  # push test branches whose PRs change .github/workflows
    "pull_requests": "write",  # read PRs, mark them merged
    "checks": "write",  # the `keepgreen` check run on each PR; CI's check runs on test branches
    "issues": "write",  # the one comment kept up to date on each PR, the state labels
    "statuses": "read",  # CI's commit statuses on test branches
    "administration": "read",  # branch protection and rulesets: the required checks
    "members": "read",  # who may enqueue: write permission through teams
    "actions": "read",  # a fork's workflow run, which setImpactedTargets accepts for a token
    "metadata": "read",  # every App has it
}
# The events the webhook intake acts on (installation events come to every App unasked).
EVENTS = ["check_run", "check_suite", "issue_comment", "pull_request", "push", "status"]

github_app = typer.Typer(
    help="keepgreen as a GitHub App: its manifest, and its installations.", no_args_is_help=True
)


def manifest(public_url: str, *, name: str) -> dict[str, Any]:
    """The App manifest for a keepgreen reached at `public_url`."""
    base = public_url.rstrip("/")
    return {
        "name": name,
        "url": base,
        "description": "keepgreen: a merge queue that keeps the branch green, and flaky tests.",
        "public": False,
        "hook_attributes": {"url": f"{base}/webhooks/github", "active": True},
        "default_permissions": dict(PERMISSIONS),
        "default_events": list(EVENTS),
    }


@github_app.command("manifest")
def manifest_command(
    public_url: Annotated[
        str | None,
        typer.Option(help="Where GitHub reaches keepgreen (default: KEEPGREEN_PUBLIC_URL)."),
    ] = None,
    name: Annotated[str, typer.Option(help="The App's name on GitHub (unique there).")] = (
        "keepgreen"
    ),
) -> None:
    """Print the GitHub App manifest: permissions, events and the webhook URL."""
    from keepgreen.settings import Settings  # the client commands start without it

    url = public_url or Settings().public_url
    if not url:
        typer.echo(
            "error: GitHub must know where to send webhooks: set KEEPGREEN_PUBLIC_URL or pass "
            "--public-url https://keepgreen.example.com",
            err=True,
        )
        raise typer.Exit(2)
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query:
        typer.echo(
            f"error: public URL {url!r} must be an absolute http(s) URL without a query "
            "(GitHub sends webhooks to <url>/webhooks/github)",
            err=True,
        )
        raise typer.Exit(2)
    if parts.username or parts.password:
        typer.echo("error: the public URL must not hold credentials", err=True)
        raise typer.Exit(2)
    if not name.strip() or len(name) > 34:  # GitHub's limit on an App's name
        typer.echo("error: --name must be 1 to 34 characters", err=True)
        raise typer.Exit(2)
    typer.echo(json.dumps(manifest(url, name=name.strip()), indent=2))


def _installation_commands(open_container: Callable[[], Container]) -> None:
    @github_app.command("link")
    def link(
        installation: Annotated[
            int, typer.Option("--installation", help="The installation id GitHub gave.", min=1)
        ],
        org: Annotated[str, typer.Option("--org", help="Org slug; created if it does not exist.")],
    ) -> None:
        """Give a GitHub App installation's repositories to an org, and register them."""
        with _installations(open_container) as installations:
            result = installations.link(installation, org)
        typer.echo(f"installation {installation} linked to org {result.org_slug}")
        _say_sync(result)

    @github_app.command("installations")
    def installations_command() -> None:
        """List the App's installations: account, org and repositories."""
        with _installations(open_container) as installations:
            listed = installations.all()
        if not listed:
            typer.echo("no installations yet (install the App on GitHub, or link one)")
        for info in listed:
            org = info.org_slug or "(not linked: keepgreen github link)"
            repos = ", ".join(info.repositories) or "none"
            typer.echo(
                f"{info.installation.id}  account {info.installation.account}  org {org}  "
                f"repositories: {repos}"
            )


def _say_sync(result: SyncResult) -> None:
    for name in result.added:
        typer.echo(f"added {name}")
    for name in result.removed:
        typer.echo(f"removed {name}")
    for problem in result.failed:
        typer.echo(f"not added: {problem}", err=True)


@contextmanager
def _installations(open_container: Callable[[], Container]) -> Iterator[GithubInstallations]:
    """The App's installations service; refusals and GitHub failing are one line, exit 1."""
    from keepgreen.app.errors import KeepgreenError
    from keepgreen.app.ports import CodeHostError

    container = open_container()
    try:
        if container.github_installations is None:
            typer.echo(
                "error: keepgreen is not configured as a GitHub App: set "
                "KEEPGREEN_GITHUB_APP_ID and KEEPGREEN_GITHUB_PRIVATE_KEY_FILE",
                err=True,
            )
            raise typer.Exit(2)
        yield container.github_installations
    except KeepgreenError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(1) from None
    except CodeHostError as error:
        typer.echo(f"error: GitHub: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        container.close()


def register(app: typer.Typer, *, open_container: Callable[[], Container]) -> None:
    _installation_commands(open_container)
    app.add_typer(github_app, name="github")
