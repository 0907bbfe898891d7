"""The operator's commands, run as `keepgreen ...` on the test's database: --version, tokens
(create, list, revoke: refused at the next request), repositories (add, list, show, update,
remove), and no secret in any output.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from keepgreen import __version__
from keepgreen.app.admin import hash_token
from keepgreen.bootstrap import Container
from keepgreen.cli.main import app
from keepgreen.core.ids import RepositoryId
from keepgreen.core.model import RepoRef, Repository
from tests.cli.conftest import REPO_ARG
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import git_daemon, http_git_server
from tests.support.wire import Api, queue_body

TOKEN = "ghs_CliTokenThatMustNeverShow77"


@dataclass(frozen=True)
class Admin:
    """`keepgreen ...` in-process on the test's database and data dir."""

    env: Mapping[str, str]

    def __call__(self, *args: str, input: str | None = None) -> Result:  # noqa: A002 (click's name)
        return CliRunner().invoke(app, list(args), env=dict(self.env), input=input)

    def ok(self, *args: str, input: str | None = None) -> Result:  # noqa: A002 (click's name)
        result = self(*args, input=input)
        assert result.exit_code == 0, (
            f"keepgreen {' '.join(args)} exited {result.exit_code}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
        return result

    def refused(self, *args: str, code: int = 1) -> str:
        """Run a command that must be refused with one `error: ...` line; that line's text."""
        result = self(*args)
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: "), result.stderr
        return lines[0].removeprefix("error: ")

    def json(self, *args: str) -> object:
        return json.loads(self.ok(*args, "--json").stdout)


@pytest.fixture
def admin(database_url: str, tmp_path: Path) -> Admin:
    return Admin({"KEEPGREEN_DATABASE_URL": database_url, "KEEPGREEN_DATA_DIR": str(tmp_path)})


def add_args(org: str, ref: str, url: str, *more: str) -> list[str]:
    host, owner, name = ref.split("/")
    return ["repo", "add", "--org", org, "--host", host, "--owner", owner, "--name", name,
            "--git-url", url, *more]  # fmt: skip


# -- version and tokens ---------------------------------------------------------------------------


def test_version_prints_the_version(admin: Admin) -> None:
    assert admin.ok("--version").stdout == f"keepgreen {__version__}\n"
    installed = subprocess.run(
        ["keepgreen", "--version"], capture_output=True, text=True, check=True
    )
    assert installed.stdout == f"keepgreen {__version__}\n"


def test_a_revoked_token_is_refused_at_the_very_next_request(
    admin: Admin, live_url: str, token: str
) -> None:
    created = admin.ok("token", "create", "--org", "acme", "--name", "deploy bot")
    secret = created.stdout.splitlines()[-1]
    assert created.stdout == f"{secret}\n"
    assert secret not in created.stderr
    (listed,) = [
        t for t in admin.json("token", "list", "--org", "acme") if t["name"] == "deploy bot"
    ]
    assert created.stderr.startswith(f"Created token {listed['id']} ('deploy bot') for org 'acme'")
    assert set(listed) == {"id", "org", "name", "createdAt", "revokedAt"}
    assert (listed["org"], listed["revokedAt"]) == ("acme", None)

    def ask(with_token: str) -> int:
        # acme has no repository: a 404 answers a request whose token was accepted.
        headers = {"x-api-token": with_token}
        return httpx.post(f"{live_url}/getQueue", json=queue_body(), headers=headers).status_code

    assert ask(secret) == 404
    revoked = admin.ok("token", "revoke", listed["id"])
    assert revoked.stdout == (
        f"Revoked token {listed['id']} ('deploy bot', org 'acme'); it is refused from now on.\n"
    )
    assert ask(secret) == 401
    assert ask(token) == 404  # the org's other token is untouched

    again = admin.ok("token", "revoke", listed["id"])
    assert again.stdout.startswith(f"Token {listed['id']} ('deploy bot', org 'acme') was revoked")
    (after,) = [t for t in admin.json("token", "list") if t["id"] == listed["id"]]
    assert after["revokedAt"] is not None
    table = admin.ok("token", "list").stdout
    (row,) = [line for line in table.splitlines() if listed["id"] in line]
    assert "deploy bot" in row
    assert row.count(" UTC") == 2  # created, and revoked
    everything = table + json.dumps(admin.json("token", "list"))
    assert secret not in everything
    assert hash_token(secret) not in everything


def test_tokens_are_listed_per_org_and_unnamed_ones_get_a_name(admin: Admin) -> None:
    admin.ok("token", "create", "--org", "acme")
    admin.ok("token", "create", "--org", "globex", "--name", "ci")
    globex = admin.json("token", "list", "--org", "globex")
    assert [(t["org"], t["name"]) for t in globex] == [("globex", "ci")]
    (acme,) = admin.json("token", "list", "--org", "acme")
    assert acme["name"] == f"token-{acme['id'][:8]}"
    assert admin.refused("token", "list", "--org", "initech") == "org 'initech' does not exist"


def test_revoking_what_is_not_a_token_id_is_refused_in_one_line(admin: Admin) -> None:
    unknown = "0f1e2d3c-4b5a-4968-8776-655443322110"
    assert admin.refused("token", "revoke", unknown) == f"no token has the id {unknown}"
    secret = admin.ok("token", "create", "--org", "acme").stdout.splitlines()[-1]
    message = admin.refused("token", "revoke", secret)
    assert message == (
        "TOKEN_ID is a token's id, not its secret; `keepgreen token list` shows the ids"
    )
    assert admin.refused("token", "revoke", "latest") == (
        "TOKEN_ID must be a token id as `keepgreen token list` shows it"
    )


# -- repositories ---------------------------------------------------------------------------------


def test_a_repository_is_added_listed_shown_updated_and_removed(
    admin: Admin, tmp_path: Path
) -> None:
    first, second = GitRepo(tmp_path / "widgets"), GitRepo(tmp_path / "widgets-moved")
    first.open_pr(1, {"a.txt": "a\n"})
    added = admin.ok(*add_args("acme", REPO_ARG, str(first.path), "--ci-command", "make test"))
    assert added.stdout == (
        f"Registered {REPO_ARG} ({first.path}) with org 'acme'.\n"
        "Found 2 branches (default branch main) and 1 pull request ref (refs/pull/*/head).\n"
    )

    listed = admin.json("repo", "list")
    assert listed == [admin.json("repo", "show", REPO_ARG)]
    (shown,) = listed
    assert {k: shown[k] for k in ("org", "repo", "gitUrl", "ciCommand", "ciEnv", "queues")} == {
        "org": "acme",
        "repo": REPO_ARG,
        "gitUrl": str(first.path),
        "ciCommand": "make test",
        "ciEnv": [],
        "queues": [],
    }
    table = admin.ok("repo", "list").stdout
    assert REPO_ARG in table
    assert "make test" in table
    assert str(first.path) in table
    view = admin.ok("repo", "show", REPO_ARG).stdout
    assert "make test" in view
    assert shown["id"] in view

    moved = admin.ok(
        "repo", "update", REPO_ARG, "--git-url", str(second.path), "--ci-env", "NPM_TOKEN"
    )
    assert moved.stdout.startswith(
        f"Updated {REPO_ARG} of org 'acme'.\n"
        "Found 1 branch (default branch main) and 0 pull request refs (refs/pull/*/head).\n"
    )
    changed = admin.json("repo", "show", REPO_ARG)
    assert (changed["gitUrl"], changed["ciCommand"], changed["ciEnv"]) == (
        str(second.path),
        "make test",
        ["NPM_TOKEN"],
    )
    admin.ok("repo", "update", REPO_ARG, "--no-ci-command", "--no-ci-env")
    cleared = admin.json("repo", "show", REPO_ARG)
    assert (cleared["ciCommand"], cleared["ciEnv"], cleared["gitUrl"]) == (
        None,
        [],
        str(second.path),
    )
    assert admin.refused("repo", "update", REPO_ARG, code=2) == (
        "nothing to change; give at least one option (see --help)"
    )
    assert admin.refused(
        "repo", "update", REPO_ARG, "--ci-command", "x", "--no-ci-command", code=2
    ) == ("--ci-command and --no-ci-command contradict each other")

    declined = admin("repo", "remove", REPO_ARG, input="n\n")
    assert declined.exit_code == 1
    assert "Remove github.com/acme/widgets of org 'acme' with its queues (none)" in declined.stdout
    assert len(admin.json("repo", "list")) == 1
    removed = admin.ok("repo", "remove", REPO_ARG, input="y\n")
    assert removed.stdout.endswith(
        "Removed github.com/acme/widgets of org 'acme' (queues: none).\n"
    )
    assert admin.json("repo", "list") == []
    assert admin.refused("repo", "show", REPO_ARG) == f"repository {REPO_ARG} is not registered"


def test_a_reference_two_orgs_use_needs_the_org(admin: Admin, tmp_path: Path) -> None:
    admin.ok(*add_args("acme", REPO_ARG, str(GitRepo(tmp_path / "a").path)))
    admin.ok(*add_args("globex", REPO_ARG, str(GitRepo(tmp_path / "g").path)))
    assert admin.refused("repo", "show", REPO_ARG) == (
        f"repository {REPO_ARG} is registered by several orgs (acme, globex); say which with --org"
    )
    assert admin.json("repo", "show", REPO_ARG, "--org", "globex")["gitUrl"] == str(tmp_path / "g")
    assert [r["org"] for r in admin.json("repo", "list", "--org", "acme")] == ["acme"]
    admin.ok("repo", "remove", REPO_ARG, "--org", "globex", "--yes")
    assert admin.json("repo", "show", REPO_ARG)["org"] == "acme"
    assert admin.refused("repo", "show", REPO_ARG, "--org", "globex") == (
        f"repository {REPO_ARG} is not registered with org 'globex'"
    )


def test_an_update_checks_the_new_url_as_add_does(admin: Admin, tmp_path: Path) -> None:
    mine, theirs = GitRepo(tmp_path / "mine"), GitRepo(tmp_path / "theirs")
    admin.ok(*add_args("acme", REPO_ARG, str(mine.path)))
    admin.ok(*add_args("globex", "github.com/globex/tools", str(theirs.path)))
    assert admin.refused("repo", "update", REPO_ARG, "--git-url", str(theirs.path)) == (
        f"{theirs.path} is already registered by another organization"
    )
    assert admin.refused("repo", "update", REPO_ARG, "--git-url", str(tmp_path / "nothing")) == (
        f"git-url {tmp_path / 'nothing'} is not a directory on this machine"
    )
    # Its own URL again is fine: a registration does not conflict with itself.
    admin.ok("repo", "update", REPO_ARG, "--git-url", str(mine.path))


def test_a_repository_with_queued_pull_requests_is_removed_only_with_force(
    admin: Admin, queue: Api, registered_repo: GitRepo
) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    assert queue.post("submitPullRequest", queue_body(pr={"number": 1})).status_code == 200
    assert admin.refused("repo", "remove", REPO_ARG, "--yes") == (
        f"repository {REPO_ARG} has 1 pull request(s) still in its queues (main); cancel them "
        "first, or remove it with --force"
    )
    assert admin.json("repo", "show", REPO_ARG)["queues"] == [
        {"branch": "main", "state": "running", "activePullRequests": 1}
    ]
    removed = admin.ok("repo", "remove", REPO_ARG, "--yes", "--force")
    assert removed.stdout == (
        f"Removed {REPO_ARG} of org 'acme' (queues: main); 1 pull request(s) still queued were "
        "forgotten.\n"
    )
    assert queue.post("getQueue", queue_body()).status_code == 404


def test_a_remote_repository_is_read_before_it_is_added(admin: Admin, tmp_path: Path) -> None:
    work = GitRepo(tmp_path / "work")
    work.open_pr(1, {"a.txt": "a\n"})
    work.open_pr(2, {"b.txt": "b\n"})
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(work.path), str(served / "widgets.git")], check=True
    )
    with git_daemon(served) as base:
        url = f"{base}/widgets.git"
        added = admin.ok(*add_args("acme", REPO_ARG, url))
        missing = admin.refused(*add_args("acme", "github.com/acme/other", f"{base}/other.git"))
    assert added.stdout == (
        f"Registered {REPO_ARG} ({url}) with org 'acme'.\n"
        "Found 3 branches (default branch main) and 2 pull request refs (refs/pull/*/head).\n"
    )
    assert missing == (
        f"git-url {base}/other.git cannot be read: there is no git repository there (or it is "
        "not exported to keepgreen)"
    )


# -- secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://bot:hunter2secret@git.example.com/acme/widgets.git", "hunter2secret"),
        ("https://ghp_TokenAsUser123@git.example.com/acme/widgets.git", "ghp_TokenAsUser123"),
        ("ssh://git:hunter2secret@git.example.com/acme/widgets.git", "hunter2secret"),
        ("bot:hunter2secret@git.example.com/acme/widgets.git", "hunter2secret"),
    ],
)
def test_credentials_inside_a_url_are_refused_without_being_repeated(
    admin: Admin, url: str, secret: str
) -> None:
    message = admin.refused(*add_args("acme", REPO_ARG, url))
    assert secret not in message
    assert "--git-token-file" in message
    assert admin.json("repo", "list") == []


def test_credential_options_must_fit_the_url_and_their_files_must_be_usable(
    admin: Admin, tmp_path: Path
) -> None:
    url = "https://git.example.com/acme/widgets.git"
    assert admin.refused(
        *add_args("acme", REPO_ARG, url, "--git-token-file", "/nonexistent/t")
    ) == ("git-token-file /nonexistent/t does not exist")
    assert admin.refused(*add_args("acme", REPO_ARG, url, "--ssh-key-file", "/k")) == (
        "ssh-key-file and ssh-known-hosts are for ssh URLs; this git-url is http(s)"
    )
    local = str(GitRepo(tmp_path / "w").path)
    assert admin.refused(*add_args("acme", REPO_ARG, local, "--git-token-file", "/t")).startswith(
        "git-token-file, git-username, ssh-key-file and ssh-known-hosts are not used with a "
        "local repository"
    )


def test_the_token_is_in_no_output_error_or_process_listing(admin: Admin, tmp_path: Path) -> None:
    work = GitRepo(tmp_path / "work")
    work.open_pr(1, {"a.txt": "a\n"})
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(work.path), str(served / "widgets.git")], check=True
    )
    token_file, wrong_file = tmp_path / "token", tmp_path / "wrong"
    token_file.write_text(f"{TOKEN}\n")
    wrong_file.write_text("ghs_NotTheRightOne\n")
    outputs: list[str] = []
    with http_git_server(served, user="ci-bot", password=TOKEN) as server:
        url = f"{server.url}/widgets.git"
        auth = ["--git-token-file", str(token_file), "--git-username", "ci-bot"]
        for args in (
            add_args("acme", REPO_ARG, url, *auth),
            ["repo", "list"],
            ["repo", "list", "--json"],
            ["repo", "show", REPO_ARG],
            ["repo", "show", REPO_ARG, "--json"],
            ["repo", "update", REPO_ARG, "--git-url", url],
        ):
            result = admin.ok(*args)
            outputs += [result.stdout, result.stderr]
        outputs.append(
            admin.refused("repo", "update", REPO_ARG, "--git-token-file", str(wrong_file))
        )
    assert outputs[0] == (
        f"Registered {REPO_ARG} ({url}) with org 'acme'.\n"
        "Found 2 branches (default branch main) and 1 pull request ref (refs/pull/*/head).\n"
    )
    shown = admin.json("repo", "show", REPO_ARG)
    assert (shown["gitTokenFile"], shown["gitUsername"]) == (str(token_file), "ci-bot")
    assert outputs[-1] == (
        f"git-url {url} cannot be read: the server refused keepgreen's credentials (the token "
        f"in git-token-file {wrong_file})"
    )
    assert not [text for text in outputs if TOKEN in text or "NotTheRightOne" in text]
    assert server.processes  # looked at while git ran, at each request
    assert not [text for text in server.processes if TOKEN in text]


def test_a_url_stored_with_credentials_by_an_older_keepgreen_is_shown_redacted(
    admin: Admin, container: Container
) -> None:
    container.admin.create_token("acme")
    with container.unit_of_work() as uow:
        org = uow.orgs.get_by_slug("acme")
        assert org is not None
        uow.repositories.add(
            Repository(
                id=RepositoryId("3d6f0f5e-0b4c-4c55-9b0f-1f0c2a4b5d6e"),
                org_id=org.id,
                ref=RepoRef("github.com", "acme", "old"),
                git_url="https://bot:s3cr3tPassw0rd@git.example.com/acme/old.git",
                ci_command=None,
                created_at=datetime(2026, 1, 5, tzinfo=UTC),
            )
        )
        uow.commit()
    redacted = "https://***@git.example.com/acme/old.git"
    ref = "github.com/acme/old"
    shown = admin.ok("repo", "show", ref)
    assert redacted in shown.stdout
    assert "stored with credentials in it" in shown.stderr
    assert admin.json("repo", "show", ref)["gitUrl"] == redacted
    assert [r["gitUrl"] for r in admin.json("repo", "list")] == [redacted]
    updated = admin.ok("repo", "update", ref, "--ci-command", "make")  # no git change: no check
    outputs = shown.stdout + shown.stderr + updated.stdout + admin.ok("repo", "list").stdout
    assert "s3cr3tPassw0rd" not in outputs
    assert redacted in updated.stdout


# -- PR refspec and test branch prefix ------------------------------------------------------------

GITLAB = "refs/merge-requests/{number}/head"
GIT_REFUSES = "is not a valid git ref name once {number} is replaced (git check-ref-format refuses"


def test_the_pr_refspec_and_test_branch_prefix_are_set_shown_and_changed(
    admin: Admin, tmp_path: Path
) -> None:
    """A GitLab-style repository: merge request N is `refs/merge-requests/N/head`; the survey
    counts those, and list, show and their --json forms print both settings.
    """
    work = GitRepo(tmp_path / "gitlab")
    for number in (1, 2):
        head = work.open_pr(number, {f"{number}.txt": "x\n"})
        work.git("update-ref", f"refs/merge-requests/{number}/head", head)
        work.git("update-ref", "-d", f"refs/pull/{number}/head")
    added = admin.ok(
        *add_args("acme", REPO_ARG, str(work.path)),
        "--pr-refspec", GITLAB, "--test-branch-prefix", "trunk-merge",
    )  # fmt: skip
    assert added.stdout.endswith(
        "Found 3 branches (default branch main) and 2 pull request refs "
        "(refs/merge-requests/*/head).\n"
    )
    shown = admin.json("repo", "show", REPO_ARG)
    assert (shown["prRefspec"], shown["testBranchPrefix"]) == (GITLAB, "trunk-merge")
    assert admin.json("repo", "list") == [shown]
    (row,) = [line for line in admin.ok("repo", "list").stdout.splitlines() if REPO_ARG in line]
    assert GITLAB in row
    assert "trunk-merge/pr-<N>/<run id>" in row
    view = admin.ok("repo", "show", REPO_ARG).stdout
    assert f"PR refs        {GITLAB}" in view
    assert "test branches  trunk-merge/pr-<N>/<run id>" in view

    # Back to the defaults, one setting at a time; a new refspec is surveyed as at `add`.
    back = admin.ok("repo", "update", REPO_ARG, "--pr-refspec", "refs/pull/{number}/head")
    assert back.stdout.startswith(
        f"Updated {REPO_ARG} of org 'acme'.\n"
        "Found 3 branches (default branch main) and 0 pull request refs (refs/pull/*/head).\n"
    )
    renamed = admin.ok("repo", "update", REPO_ARG, "--test-branch-prefix", "keepgreen-merge")
    assert "Found" not in renamed.stdout  # no git setting changed: the server is not read
    shown = admin.json("repo", "show", REPO_ARG)
    assert (shown["prRefspec"], shown["testBranchPrefix"]) == (
        "refs/pull/{number}/head",
        "keepgreen-merge",
    )


def test_a_repository_without_the_settings_shows_the_defaults(admin: Admin, tmp_path: Path) -> None:
    admin.ok(*add_args("acme", REPO_ARG, str(GitRepo(tmp_path / "w").path)))
    shown = admin.json("repo", "show", REPO_ARG)
    assert (shown["prRefspec"], shown["testBranchPrefix"]) == (
        "refs/pull/{number}/head",
        "keepgreen-merge",
    )


@pytest.mark.parametrize(
    ("refspec", "problem"),
    [
        ("pull/{number}/head", "must start with 'refs/'"),
        ("refs/pull/*/head", "must not contain '*': it names the one ref of pull request {number}"),
        ("refs/pull/head", "must contain {number} exactly once"),
        ("refs/pull/{number}/{number}", "must contain {number} exactly once"),
        ("refs/pull/{num}/{number}", "must not contain '{' or '}' other than in {number}"),
        (
            "refs/pull/{number}/he ad",
            f"{GIT_REFUSES} 'refs/pull/1/he ad')",
        ),
        (
            "refs/pull/{number}.lock",
            f"{GIT_REFUSES} 'refs/pull/1.lock')",
        ),
        (
            "refs/pull/{number}/",
            f"{GIT_REFUSES} 'refs/pull/1/')",
        ),
    ],
)
def test_a_pr_refspec_git_would_not_take_is_refused_and_nothing_is_stored(
    admin: Admin, tmp_path: Path, refspec: str, problem: str
) -> None:
    path = str(GitRepo(tmp_path / "w").path)
    expected = f"pr-refspec {refspec!r} {problem}"
    assert admin.refused(*add_args("acme", REPO_ARG, path, "--pr-refspec", refspec)) == expected
    assert admin.json("repo", "list") == []
    admin.ok(*add_args("acme", REPO_ARG, path, "--pr-refspec", GITLAB))
    assert admin.refused("repo", "update", REPO_ARG, "--pr-refspec", refspec) == expected
    assert admin.json("repo", "show", REPO_ARG)["prRefspec"] == GITLAB


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [
        ("", "must not be empty"),
        ("/trunk-merge", "must not start or end with '/'"),
        ("trunk-merge/", "must not start or end with '/'"),
        ("-merge", "must not start with '-'"),
        ("trunk merge", None),
        ("trunk..merge", None),
        ("trunk.lock", None),
        ("trunk~merge", None),
        ("trunk//merge", None),
    ],
)
def test_a_test_branch_prefix_git_would_not_take_is_refused_and_nothing_is_stored(
    admin: Admin, tmp_path: Path, prefix: str, problem: str | None
) -> None:
    path = str(GitRepo(tmp_path / "w").path)
    branch = f"{prefix}/pr-1/00000000-0000-0000-0000-000000000000"
    expected = f"test-branch-prefix {prefix!r} " + (
        problem
        or f"does not make valid branch names (git check-ref-format --branch refuses {branch!r})"
    )
    args = add_args("acme", REPO_ARG, path, "--test-branch-prefix", prefix)
    assert admin.refused(*args) == expected
    assert admin.json("repo", "list") == []
    admin.ok(*add_args("acme", REPO_ARG, path, "--test-branch-prefix", "trunk-merge"))
    assert admin.refused("repo", "update", REPO_ARG, "--test-branch-prefix", prefix) == expected
    assert admin.json("repo", "show", REPO_ARG)["testBranchPrefix"] == "trunk-merge"


def test_a_prefix_with_slashes_inside_is_taken(admin: Admin, tmp_path: Path) -> None:
    path = str(GitRepo(tmp_path / "w").path)
    admin.ok(*add_args("acme", REPO_ARG, path, "--test-branch-prefix", "ci/merge-queue"))
    assert admin.json("repo", "show", REPO_ARG)["testBranchPrefix"] == "ci/merge-queue"
