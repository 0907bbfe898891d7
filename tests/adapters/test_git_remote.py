"""Reading a repository before it is registered, from real git servers on loopback: a local
path, `git daemon`, smart HTTP with basic auth from a token file. Failures are one sentence
with no secret in it, the token is in no command line nor environment, nothing is left running.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keepgreen.adapters.git.credentials import (
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
    checked_auth,
    ssh_command,
)
from keepgreen.adapters.git.remote import failure_sentence
from keepgreen.adapters.git.survey import RepositorySurveyor
from keepgreen.app.ports import CodeHostError, CredentialFileError
from keepgreen.core.model import GitAuth
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import free_port, git_daemon, http_git_server, silent_server
from tests.support.processes import all_command_lines

TOKEN = "ghs_Zx9TokenThatMustNeverShow42"
survey = RepositorySurveyor()


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """A directory of served repositories: `widgets.git` with main, dev and PRs 1 and 2."""
    work = GitRepo(tmp_path / "work")
    work.open_pr(1, {"a.txt": "a\n"})
    work.open_pr(2, {"b.txt": "b\n"})
    work.git("branch", "dev")
    base = tmp_path / "served"
    base.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(work.path), str(base / "widgets.git")], check=True
    )
    return base


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "secrets" / "git-token"
    path.parent.mkdir()
    path.write_text(f"  {TOKEN}\n")  # stripped: editors and `echo` add a newline
    path.chmod(0o600)
    return path


def test_a_local_repository_is_counted(git_repo: GitRepo) -> None:
    git_repo.open_pr(1, {"a.txt": "a\n"})
    git_repo.open_pr(12, {"b.txt": "b\n"})
    git_repo.git("update-ref", "refs/pull/12/merge", "HEAD")  # not a PR head: not counted
    found = survey(str(git_repo.path), auth=GitAuth())
    # main, pr-1 and pr-12 (the branches open_pr works on), and the two PR heads.
    assert (found.location, found.branches, found.default_branch, found.pull_requests) == (
        str(git_repo.path.resolve()),
        3,
        "main",
        2,
    )


def test_an_empty_repository_has_no_default_branch_yet(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "empty.git")], check=True)
    found = survey(str(tmp_path / "empty.git"), auth=GitAuth())
    assert (found.branches, found.default_branch, found.pull_requests) == (0, None, 0)


def test_a_git_daemon_repository_is_read_with_ls_remote(served: Path) -> None:
    with git_daemon(served) as url:
        found = survey(f"{url}/widgets.git", auth=GitAuth())
        with pytest.raises(CodeHostError) as missing:
            survey(f"{url}/nothing-here.git", auth=GitAuth())
    assert (found.location, found.branches, found.default_branch, found.pull_requests) == (
        f"{url}/widgets.git",
        4,  # main, dev, pr-1, pr-2
        "main",
        2,
    )
    assert str(missing.value) == (
        f"git-url {url}/nothing-here.git cannot be read: there is no git repository there "
        "(or it is not exported to keepgreen)"
    )


def test_the_token_file_reaches_the_http_server_as_basic_auth_and_nowhere_else(
    served: Path, token_file: Path
) -> None:
    with http_git_server(served, user="x-access-token", password=TOKEN) as server:
        found = survey(f"{server.url}/widgets.git", auth=GitAuth(token_file=str(token_file)))
    assert (found.branches, found.default_branch, found.pull_requests) == (4, "main", 2)
    basic = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    # git asks without credentials first, is told 401, then asks its helper.
    assert server.authorizations[0] is None
    assert basic in server.authorizations
    # While git and its helpers waited for each answer, no command line or environment of
    # any process held the token (it is read from its file, by the helper, when git asks).
    assert server.processes
    assert not [text for text in server.processes if TOKEN in text]
    assert any("git" in line and "ls-remote" in line for line in server.processes)


def test_a_username_goes_with_the_token(served: Path, token_file: Path) -> None:
    auth = GitAuth(token_file=str(token_file), username="deploy-bot")
    with http_git_server(served, user="deploy-bot", password=TOKEN) as server:
        assert survey(f"{server.url}/widgets.git", auth=auth).pull_requests == 2


def test_a_wrong_token_is_a_clear_error_without_the_token(served: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong-token"
    wrong.write_text("ghs_WrongTokenValue123\n")
    with http_git_server(served, user="x-access-token", password=TOKEN) as server:
        url = f"{server.url}/widgets.git"
        with pytest.raises(CodeHostError) as refused:
            survey(url, auth=GitAuth(token_file=str(wrong)))
        with pytest.raises(CodeHostError) as anonymous:
            survey(url, auth=GitAuth())
    assert str(refused.value) == (
        f"git-url {url} cannot be read: the server refused keepgreen's credentials "
        f"(the token in git-token-file {wrong})"
    )
    assert "WrongTokenValue" not in str(refused.value)
    assert str(anonymous.value) == (
        f"git-url {url} cannot be read: the server refused keepgreen's credentials; it wants "
        "credentials: give --git-token-file PATH or --ssh-key-file PATH"
    )


def test_the_operators_credential_helpers_neither_answer_nor_store_the_token(
    served: Path, token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator whose git config stores credentials (`credential.helper=store`) and holds
    a stale one for the server: keepgreen's helper alone answers, and nothing is written.
    """
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
    with http_git_server(served, user="x-access-token", password=TOKEN) as server:
        stored = home / ".git-credentials"
        stored.write_text(f"http://x-access-token:stale@{server.url.removeprefix('http://')}\n")
        monkeypatch.setenv("HOME", str(home))
        survey(f"{server.url}/widgets.git", auth=GitAuth(token_file=str(token_file)))
    assert TOKEN not in stored.read_text()


def test_nothing_listening_is_one_sentence(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/widgets.git"
    with pytest.raises(CodeHostError) as unreachable:
        survey(url, auth=GitAuth())
    assert str(unreachable.value) == (
        f"git-url {url} cannot be read: nothing answers at the server's address"
    )


def test_a_server_that_never_answers_times_out_and_leaves_no_process() -> None:
    with silent_server() as address:
        url = f"git://{address}/widgets.git"
        with pytest.raises(CodeHostError) as silent:
            RepositorySurveyor(timeout=1.5)(url, auth=GitAuth())
    assert str(silent.value) == f"git-url {url} did not answer within 1.5 s"
    assert not [line for line in all_command_lines() if url in line]


def test_ssh_urls_run_ssh_in_batch_mode_with_the_key_and_known_hosts(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key\n")
    key.chmod(0o600)
    known = tmp_path / "known_hosts"
    known.write_text("")
    auth = GitAuth(ssh_key_file=str(key), ssh_known_hosts=str(known))
    assert ssh_command(auth) == (
        "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=20 "
        f"-i {key} -o IdentitiesOnly=yes -o UserKnownHostsFile={known}"
    )
    url = f"ssh://git@127.0.0.1:{free_port()}/widgets.git"
    with pytest.raises(CodeHostError) as unreachable:
        survey(url, auth=auth)
    assert str(unreachable.value) == (
        f"git-url {url} cannot be read: nothing answers at the server's address"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("  \n", "is empty"),
        ("first\nsecond\n", "must hold the token alone on one line (no other lines)"),
    ],
)
def test_a_token_file_that_cannot_be_used_is_named_with_its_problem(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CredentialFileError) as refused:
        checked_auth(GitAuth(token_file=str(path)))
    assert str(refused.value) == f"git-token-file {path} {problem}"


def test_a_directory_is_no_token_file(tmp_path: Path) -> None:
    with pytest.raises(CredentialFileError, match="is not a regular file"):
        checked_auth(GitAuth(token_file=str(tmp_path)))


def test_a_private_key_others_may_read_is_refused_as_ssh_would(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("key\n")
    key.chmod(0o644)
    with pytest.raises(CredentialFileError) as refused:
        checked_auth(GitAuth(ssh_key_file=str(key)))
    assert str(refused.value) == (
        f"ssh-key-file {key} may be read by other users, so ssh will not use it; "
        "make it private (chmod 600)"
    )
    key.chmod(0o600)
    assert checked_auth(GitAuth(ssh_key_file=str(key))).ssh_key_file == str(key)


def test_paths_are_stored_absolute_and_links_are_kept(
    token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret mounted through a link that rotation swaps (as Kubernetes does) must be
    read through the link, not through the file it pointed at on the day of registration.
    """
    link = tmp_path / "current-token"
    link.symlink_to(token_file)
    monkeypatch.chdir(tmp_path)
    assert checked_auth(GitAuth(token_file="current-token")).token_file == str(link)


@pytest.fixture
def helper_env(token_file: Path) -> dict[str, str]:
    return {
        **os.environ,
        TOKEN_FILE_VARIABLE: str(token_file),
        USERNAME_VARIABLE: "x-access-token",
        ORIGIN_VARIABLE: "https://git.example.com:8443",
    }


@pytest.mark.parametrize(
    ("request_lines", "answered"),
    [
        ("protocol=https\nhost=git.example.com:8443\n\n", True),
        ("protocol=https\nhost=GIT.example.com:8443\npath=acme/widgets.git\n\n", True),
        ("protocol=https\nhost=evil.example.com\n\n", False),  # a redirect elsewhere
        ("protocol=http\nhost=git.example.com:8443\n\n", False),  # a downgrade
    ],
)
def test_the_credential_helper_answers_its_own_server_only(
    helper_env: dict[str, str], request_lines: str, answered: bool
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "keepgreen.adapters.git.credential_helper", "get"],
        input=request_lines,
        capture_output=True,
        text=True,
        env=helper_env,
        check=True,
    )
    expected = f"username=x-access-token\npassword={TOKEN}\n" if answered else ""
    assert result.stdout == expected


def test_the_credential_helper_ignores_store_and_erase(helper_env: dict[str, str]) -> None:
    for action in ("store", "erase"):
        result = subprocess.run(
            [sys.executable, "-m", "keepgreen.adapters.git.credential_helper", action],
            input="protocol=https\nhost=git.example.com:8443\nusername=u\npassword=p\n\n",
            capture_output=True,
            text=True,
            env=helper_env,
            check=True,
        )
        assert (result.stdout, result.stderr) == ("", "")


def test_git_words_that_match_no_known_cause_are_shown_without_secrets(token_file: Path) -> None:
    stderr = (
        f"fatal: unable to access 'https://bot:{TOKEN}@git.example.com/w.git/': "
        f"weird thing, also {TOKEN}\n"
    )
    sentence = failure_sentence(
        "https://git.example.com/w.git", GitAuth(token_file=str(token_file)), stderr
    )
    assert TOKEN not in sentence
    assert sentence == (
        "git-url https://git.example.com/w.git cannot be read: unable to access "
        "'https://***@git.example.com/w.git/': weird thing, also ***"
    )


def test_a_url_stored_with_credentials_is_redacted_in_the_code_hosts_errors() -> None:
    from datetime import UTC, datetime

    from keepgreen.adapters.git.local_host import LocalGitHost
    from keepgreen.core.ids import OrgId, RepositoryId
    from keepgreen.core.model import RepoRef, Repository

    stored = Repository(
        RepositoryId("r"),
        OrgId("o"),
        RepoRef("github.com", "acme", "old"),
        "https://bot:s3cr3tPassw0rd@git.example.com/acme/old.git",
        None,
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    with pytest.raises(CodeHostError) as refused:
        LocalGitHost().branch_tip(stored, "main")
    assert "s3cr3tPassw0rd" not in str(refused.value)
    assert "https://***@git.example.com/acme/old.git" in str(refused.value)
