"""Operator commands on the database itself: `keepgreen token ...` and `keepgreen repo ...`.

They open the configured database directly (no server needed). Human output is Rich tables;
`--json` prints JSON. Exit codes: 0 done, 1 refused (`error: <sentence>` on stderr), 2 a usage
problem. No command prints a secret: a token's secret appears once, at its creation, alone on
the last line of stdout; credential files are shown by path; URLs are shown redacted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from keepgreen.cli.client import parse_repo
from keepgreen.core.model import GitAuth, RepoRef, Repository

if TYPE_CHECKING:
    from keepgreen.app.admin import (
        QueueSummary,
        Registration,
        RepositoryInfo,
        TokenInfo,
    )
    from keepgreen.app.ports import RepositorySurvey
    from keepgreen.bootstrap import Container

ContainerFactory = Callable[[], "Container"]
NONE = "-"
_WIDE = 400  # columns for output that is not a terminal: tables never fold ids or paths

OrgFilter = Annotated[
    str | None, typer.Option("--org", help="Only this org's.", show_default=False)
]
OrgChoice = Annotated[
    str | None,
    typer.Option(
        "--org", help="The repository's org (needed when several orgs use the reference)."
    ),
]
RefArgument = Annotated[
    RepoRef,
    typer.Argument(
        parser=parse_repo, metavar="HOST/OWNER/NAME", help="e.g. github.com/acme/widgets"
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
GitTokenFile = Annotated[
    str | None,
    typer.Option(
        "--git-token-file",
        metavar="PATH",
        help="HTTP(S) basic auth: a file whose content (stripped) is the password or token.",
        show_default=False,
    ),
]
GitUsername = Annotated[
    str | None,
    typer.Option(
        "--git-username",
        help="HTTP(S) basic auth user to go with --git-token-file [default: x-access-token].",
        show_default=False,
    ),
]
SshKeyFile = Annotated[
    str | None,
    typer.Option(
        "--ssh-key-file", metavar="PATH", help="Private SSH key for ssh URLs.", show_default=False
    ),
]
SshKnownHosts = Annotated[
    str | None,
    typer.Option(
        "--ssh-known-hosts",
        metavar="PATH",
        help="known_hosts file holding the server's host key (checked strictly).",
        show_default=False,
    ),
]
PrRefspec = Annotated[
    str | None,
    typer.Option(
        "--pr-refspec",
        metavar="REF",
        help="The ref of pull request {number} on the git server, e.g. "
        "'refs/merge-requests/{number}/head' for GitLab [default: refs/pull/{number}/head].",
        show_default=False,
    ),
]
TestBranchPrefix = Annotated[
    str | None,
    typer.Option(
        "--test-branch-prefix",
        metavar="PREFIX",
        help="Test branches are pushed as PREFIX/pr-<N>/<test run id> [default: keepgreen-merge].",
        show_default=False,
    ),
]
CiCommand = Annotated[
    str | None,
    typer.Option("--ci-command", help="Shell command the built-in CI runs.", show_default=False),
]
CiEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--ci-env",
        help="A variable of keepgreen's environment the CI command gets (repeatable; "
        "never KEEPGREEN_*).",
        show_default=False,
    ),
]


def register(app: typer.Typer, *, open_container: ContainerFactory) -> None:
    """Add the `token` and `repo` command groups to `app`."""
    token_app = typer.Typer(help="API tokens: create, list, revoke.", no_args_is_help=True)
    repo_app = typer.Typer(
        help="Repositories: add, list, show, update, remove.", no_args_is_help=True
    )
    app.add_typer(token_app, name="token")
    app.add_typer(repo_app, name="repo")
    _token_commands(token_app, open_container)
    _repo_commands(repo_app, open_container)
    _repo_change_commands(repo_app, open_container)


@contextmanager
def _service(open_container: ContainerFactory) -> Iterator[Container]:
    """The container for one command; a refusal becomes `error: ...` and exit code 1."""
    from keepgreen.app.errors import KeepgreenError

    container = open_container()
    try:
        yield container
    except KeepgreenError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        container.close()


# -- tokens ---------------------------------------------------------------------------------------


def _token_commands(token_app: typer.Typer, open_container: ContainerFactory) -> None:
    @token_app.command("create")
    def token_create(
        org: Annotated[str, typer.Option("--org", help="Org slug; created if it does not exist.")],
        name: Annotated[
            str | None,
            typer.Option(
                "--name", help="What the token is for [default: token-<id>].", show_default=False
            ),
        ] = None,
    ) -> None:
        """Create an API token for an org and print it alone on the last line."""
        with _service(open_container) as container:
            issued = container.admin.issue_token(org, name=name)
        typer.echo(
            f"Created token {issued.info.id} ({issued.info.name!r}) for org {org!r}. "
            "It is shown once; keep it secret:",
            err=True,
        )
        typer.echo(issued.secret)

    @token_app.command("list")
    def token_list(org: OrgFilter = None, json_output: JsonFlag = False) -> None:
        """List tokens (never their secrets), revoked ones too."""
        with _service(open_container) as container:
            tokens = container.admin.list_tokens(org_slug=org)
        if json_output:
            _print_json([_token_json(token) for token in tokens])
            return
        if not tokens:
            typer.echo("No tokens." if org is None else f"No tokens in org {org!r}.")
            return
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for column in ("id", "org", "name", "created", "revoked"):
            table.add_column(column, no_wrap=column in ("id", "created", "revoked"))
        for token in tokens:
            revoked = _when(token.revoked_at) if token.revoked_at else NONE
            table.add_row(
                token.id,
                Text(token.org),
                Text(token.name),
                _when(token.created_at),
                Text(revoked, style="red" if token.revoked_at else ""),
            )
        _console().print(table)

    @token_app.command("revoke")
    def token_revoke(
        token_id: Annotated[
            str, typer.Argument(metavar="TOKEN_ID", help="The id `keepgreen token list` shows.")
        ],
    ) -> None:
        """Revoke a token: every request with it is refused (401) from now on."""
        with _service(open_container) as container:
            revocation = container.admin.revoke_token(token_id)
        token = revocation.token
        if revocation.already:
            typer.echo(
                f"Token {token.id} ({token.name!r}, org {token.org!r}) was revoked already, "
                f"at {_when(token.revoked_at)}."
            )
        else:
            typer.echo(
                f"Revoked token {token.id} ({token.name!r}, org {token.org!r}); it is refused "
                "from now on."
            )


def _token_json(token: TokenInfo) -> dict[str, Any]:
    return {
        "id": token.id,
        "org": token.org,
        "name": token.name,
        "createdAt": _iso(token.created_at),
        "revokedAt": _iso(token.revoked_at),
    }


# -- repositories ---------------------------------------------------------------------------------


def _repo_commands(repo_app: typer.Typer, open_container: ContainerFactory) -> None:
    @repo_app.command("add")
    def repo_add(
        org: Annotated[str, typer.Option("--org", help="Org slug; created if it does not exist.")],
        host: Annotated[str, typer.Option("--host", help="Repository host, e.g. github.com.")],
        owner: Annotated[str, typer.Option("--owner", help="Repository owner.")],
        name: Annotated[str, typer.Option("--name", help="Repository name.")],
        git_url: Annotated[
            str,
            typer.Option(
                "--git-url",
                help="Local path, or https://, http://, ssh://, git:// or user@host:path URL "
                "(without credentials).",
            ),
        ],
        ci_command: CiCommand = None,
        ci_env: CiEnv = None,
        git_token_file: GitTokenFile = None,
        git_username: GitUsername = None,
        ssh_key_file: SshKeyFile = None,
        ssh_known_hosts: SshKnownHosts = None,
        pr_refspec: PrRefspec = None,
        test_branch_prefix: TestBranchPrefix = None,
    ) -> None:
        """Register a repository with an org, once its git data can be read."""
        auth = GitAuth(
            token_file=git_token_file,
            username=git_username,
            ssh_key_file=ssh_key_file,
            ssh_known_hosts=ssh_known_hosts,
        )
        with _service(open_container) as container:
            registration = container.admin.register_repository(
                org_slug=org,
                ref=RepoRef(host, owner, name),
                git_url=git_url,
                ci_command=ci_command,
                ci_env=ci_env or (),
                auth=auth,
                pr_refspec=pr_refspec,
                test_branch_prefix=test_branch_prefix,
            )
        info = registration.info
        typer.echo(f"Registered {info.repository.ref} ({info.git_url}) with org {org!r}.")
        if registration.survey is not None:
            typer.echo(_found(registration.survey, info.repository))

    @repo_app.command("list")
    def repo_list(org: OrgFilter = None, json_output: JsonFlag = False) -> None:
        """List registered repositories."""
        with _service(open_container) as container:
            repositories = container.admin.list_repositories(org_slug=org)
        if json_output:
            _print_json([_repository_json(info) for info in repositories])
            return
        if not repositories:
            typer.echo("No repositories." if org is None else f"No repositories in org {org!r}.")
            return
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        columns = ("repository", "org", "git url", "sign-in", "PR refs", "test branches")
        for column in (*columns, "CI command", "queues"):
            table.add_column(column, overflow="fold")
        for info in repositories:
            table.add_row(
                Text(str(info.repository.ref)),
                Text(info.org),
                Text(info.git_url),
                _auth_kind(info.repository.auth),
                Text(info.repository.pr_refspec),
                Text(_test_branches(info.repository)),
                Text(info.repository.ci_command or NONE),
                Text(_queues_text(info.queues) or NONE),
            )
        _console().print(table)

    @repo_app.command("show")
    def repo_show(ref: RefArgument, org: OrgChoice = None, json_output: JsonFlag = False) -> None:
        """Show one repository: its git URL, credentials (by path), refs, CI and queues."""
        with _service(open_container) as container:
            info = container.admin.show_repository(ref, org_slug=org)
        if json_output:
            _print_json(_repository_json(info))
            return
        _console().print(_repository_view(info))
        if info.has_credentials_in_url:
            typer.echo(_CREDENTIALS_IN_URL, err=True)


def _repo_change_commands(repo_app: typer.Typer, open_container: ContainerFactory) -> None:
    @repo_app.command("update")
    def repo_update(
        ref: RefArgument,
        org: OrgChoice = None,
        git_url: Annotated[
            str | None,
            typer.Option("--git-url", help="A new git URL (checked as `repo add` checks it)."),
        ] = None,
        ci_command: CiCommand = None,
        no_ci_command: Annotated[
            bool, typer.Option("--no-ci-command", help="Remove the built-in CI command.")
        ] = False,
        ci_env: CiEnv = None,
        no_ci_env: Annotated[
            bool, typer.Option("--no-ci-env", help="Pass no variables to the CI command.")
        ] = False,
        git_token_file: GitTokenFile = None,
        git_username: GitUsername = None,
        ssh_key_file: SshKeyFile = None,
        ssh_known_hosts: SshKnownHosts = None,
        pr_refspec: PrRefspec = None,
        test_branch_prefix: TestBranchPrefix = None,
        no_git_auth: Annotated[
            bool,
            typer.Option(
                "--no-git-auth",
                help="Forget the stored credential files (before any given with this command).",
            ),
        ] = False,
    ) -> None:
        """Change a repository's git URL, credentials, PR refspec, test branch prefix or
        built-in CI settings.
        """
        from keepgreen.app.admin import RepositoryChanges

        if ci_command is not None and no_ci_command:
            _usage("--ci-command and --no-ci-command contradict each other")
        if ci_env and no_ci_env:
            _usage("--ci-env and --no-ci-env contradict each other")
        changes = RepositoryChanges(
            git_url=git_url,
            ci_command=ci_command,
            clear_ci_command=no_ci_command,
            ci_env=() if no_ci_env else (tuple(ci_env) if ci_env else None),
            auth=GitAuth(
                token_file=git_token_file,
                username=git_username,
                ssh_key_file=ssh_key_file,
                ssh_known_hosts=ssh_known_hosts,
            ),
            clear_auth=no_git_auth,
            pr_refspec=pr_refspec,
            test_branch_prefix=test_branch_prefix,
        )
        if changes == RepositoryChanges():
            _usage("nothing to change; give at least one option (see --help)")
        with _service(open_container) as container:
            registration = container.admin.update_repository(ref, changes, org_slug=org)
        _updated(registration)

    @repo_app.command("remove")
    def repo_remove(
        ref: RefArgument,
        org: OrgChoice = None,
        yes: Annotated[
            bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")
        ] = False,
        force: Annotated[
            bool,
            typer.Option(
                "--force",
                help="Remove even while pull requests are still in its queues (they are "
                "forgotten).",
            ),
        ] = False,
    ) -> None:
        """Remove a repository and its queues, PRs, test runs, statuses and flaky-test data."""
        with _service(open_container) as container:
            info = container.admin.show_repository(ref, org_slug=org)
            if not yes:
                queues = ", ".join(q.branch for q in info.queues) or "none"
                typer.confirm(
                    f"Remove {ref} of org {info.org!r} with its queues ({queues}), pull "
                    "requests, test runs, commit statuses and flaky-test data?",
                    abort=True,
                )
            removal = container.admin.remove_repository(ref, org_slug=info.org, force=force)
        forgotten = (
            f"; {removal.active_prs} pull request(s) still queued were forgotten"
            if removal.active_prs
            else ""
        )
        queues_text = ", ".join(removal.queues) or "none"
        typer.echo(
            f"Removed {removal.ref} of org {removal.org!r} (queues: {queues_text}){forgotten}."
        )


_CREDENTIALS_IN_URL = (
    "warning: this repository's git URL was stored with credentials in it (shown as ***); "
    "move them to a file with `keepgreen repo update ... --git-url URL --git-token-file PATH`"
)


def _found(survey: RepositorySurvey, repository: Repository) -> str:
    """What the reachability check found, as one line."""
    default = (
        f"default branch {survey.default_branch}"
        if survey.default_branch
        else "HEAD names no existing branch"
    )
    return (
        f"Found {_count(survey.branches, 'branch', 'branches')} ({default}) and "
        f"{_count(survey.pull_requests, 'pull request ref', 'pull request refs')} "
        f"({repository.pr_refspec.replace('{number}', '*')})."
    )


def _updated(registration: Registration) -> None:
    info = registration.info
    typer.echo(f"Updated {info.repository.ref} of org {info.org!r}.")
    if registration.survey is not None:
        typer.echo(_found(registration.survey, info.repository))
    _console().print(_repository_view(info))


def _repository_view(info: RepositoryInfo) -> Table:
    repository = info.repository
    auth = repository.auth
    table = Table(show_header=False, box=None, title=str(repository.ref), title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [
        ("org", info.org),
        ("id", repository.id),
        ("git url", info.git_url),
    ]
    if auth.token_file is not None:
        rows += [
            ("git username", auth.username or "x-access-token"),
            ("git token file", auth.token_file),
        ]
    if auth.ssh_key_file is not None:
        rows.append(("ssh key file", auth.ssh_key_file))
    if auth.ssh_known_hosts is not None:
        rows.append(("ssh known hosts", auth.ssh_known_hosts))
    rows += [
        ("PR refs", repository.pr_refspec),
        ("test branches", _test_branches(repository)),
        ("CI command", repository.ci_command or "(none: statuses come from external CI)"),
        ("CI variables", ", ".join(repository.ci_env) or "(none)"),
        ("registered", _when(repository.created_at)),
        ("queues", _queues_text(info.queues) or "(none)"),
    ]
    for label, value in rows:
        table.add_row(label, Text(value))
    return table


def _repository_json(info: RepositoryInfo) -> dict[str, Any]:
    repository = info.repository
    return {
        "id": repository.id,
        "org": info.org,
        "repo": str(repository.ref),
        "host": repository.ref.host,
        "owner": repository.ref.owner,
        "name": repository.ref.name,
        "gitUrl": info.git_url,
        "gitUsername": repository.auth.username,
        "gitTokenFile": repository.auth.token_file,
        "sshKeyFile": repository.auth.ssh_key_file,
        "sshKnownHosts": repository.auth.ssh_known_hosts,
        "prRefspec": repository.pr_refspec,
        "testBranchPrefix": repository.test_branch_prefix,
        "ciCommand": repository.ci_command,
        "ciEnv": list(repository.ci_env),
        "createdAt": _iso(repository.created_at),
        "queues": [
            {"branch": q.branch, "state": q.state.value, "activePullRequests": q.active_prs}
            for q in info.queues
        ],
    }


def _test_branches(repository: Repository) -> str:
    return f"{repository.test_branch_prefix}/pr-<N>/<run id>"


def _auth_kind(auth: GitAuth) -> str:
    if auth.token_file is not None:
        return "token file"
    if auth.ssh_key_file is not None:
        return "ssh key"
    return NONE


def _queues_text(queues: tuple[QueueSummary, ...]) -> str:
    return ", ".join(
        f"{q.branch} ({q.state.value}, {_count(q.active_prs, 'PR', 'PRs')} queued)" for q in queues
    )


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def _when(moment: datetime | None) -> str:
    return NONE if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _console() -> Console:
    # Not a terminal (a pipe, a file, a test): wide enough that a table never folds an id.
    return Console(highlight=False, width=None if sys.stdout.isatty() else _WIDE)


def _print_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _usage(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
