"""The remote code host over SSH, against a real `sshd` on loopback that lets in one key: reads,
a test branch pushed and deleted, a landing by compare-and-swap, all on the served repository;
a key the server refuses and a host key keepgreen cannot check are one sentence each, naming
files and never their content; the key's content is in no process while git runs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keepgreen.adapters.git.remote_host import RemoteGitHost, mirror_path
from keepgreen.app.ports import CodeHostError, Landing, TestCommit
from keepgreen.core.enums import MergeMethod
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import GitAuth, Repository
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import SshGitServer, ssh_git_server, ssh_keygen
from tests.support.processes import all_command_lines, all_environments
from tests.support.wire import REPO

HOST_KEY_SENTENCE = (
    "the server's SSH host key is not in the known hosts (give --ssh-known-hosts with it)"
)


@dataclass
class OverSsh:
    """A developer's clone (`work`), the bare repository sshd serves, and the server."""

    work: GitRepo
    bare: Path
    server: SshGitServer
    data_dir: Path

    def publish(self) -> None:
        """Push the work clone's main and PR refs straight into the served repository."""
        self.work.git(
            "push", "-q", "--force", str(self.bare), "main:main", "refs/pull/*:refs/pull/*"
        )

    def repository(self, *, url: str | None = None, auth: GitAuth | None = None) -> Repository:
        """keepgreen's view of the served repository: by default its ssh:// URL with the key
        sshd accepts and the known_hosts line of sshd's host key.
        """
        return Repository(
            RepositoryId("r1"),
            OrgId("o"),
            REPO,
            url or self.server.url(self.bare),
            None,
            datetime(2026, 1, 1, tzinfo=UTC),
            auth=auth or self.auth(),
        )

    def auth(self, *, key: Path | None = None, known_hosts: Path | None = None) -> GitAuth:
        return GitAuth(
            ssh_key_file=str(key or self.server.client_key),
            ssh_known_hosts=str(known_hosts or self.server.known_hosts),
        )

    def server_tip(self, ref: str) -> str | None:
        result = subprocess.run(
            ["git", f"--git-dir={self.bare}", "rev-parse", "--verify", "--quiet", ref],
            capture_output=True,
            text=True,
            check=False,
        )
        return result.stdout.strip() or None

    def server_branches(self) -> list[str]:
        result = subprocess.run(
            ["git", f"--git-dir={self.bare}", "for-each-ref", "--format=%(refname:short)"],
            capture_output=True,
            text=True,
            check=True,
        )
        return [ref for ref in result.stdout.split() if not ref.startswith("pull/")]

    def tree(self, commit: str) -> str:
        return subprocess.run(
            ["git", f"--git-dir={self.bare}", "rev-parse", f"{commit}^{{tree}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()


@pytest.fixture
def over_ssh(tmp_path: Path) -> Iterator[OverSsh]:
    work = GitRepo(tmp_path / "work")
    bare = tmp_path / "served" / "widgets.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    with ssh_git_server(tmp_path / "sshd") as server:
        yield OverSsh(work, bare, server, tmp_path / "data")


def key_content(key: Path) -> list[str]:
    """The lines of a private key's body: what must show nowhere."""
    lines = key.read_text().splitlines()
    body = [line for line in lines if line and not line.startswith("-----")]
    assert body  # a key file read as expected
    return body


def shows_key(texts: list[str], key: Path) -> list[str]:
    """The texts holding any line of the key's body."""
    content = key_content(key)
    return [text for text in texts if any(line in text for line in content)]


@pytest.mark.parametrize("form", ["ssh://", "scp-like"])
def test_a_pr_goes_from_test_branch_to_main_on_the_server_over_ssh(
    over_ssh: OverSsh, form: str
) -> None:
    head = over_ssh.work.open_pr(1, {"a.txt": "a\n"}, title="Add a", author="Grace Hopper")
    over_ssh.publish()
    base = over_ssh.work.tip("main")
    server = over_ssh.server
    url = server.url(over_ssh.bare) if form == "ssh://" else server.scp_like_url(over_ssh.bare)
    repo = over_ssh.repository(url=url)
    host = RemoteGitHost(data_dir=over_ssh.data_dir, fetch_interval=0.0, timeout=20)

    info = host.pull_request(repo, 1)
    assert info is not None
    assert (info.head_sha, info.title, info.author) == (head, "Add a", "Grace Hopper")
    assert host.branch_tip(repo, "main") == base

    branch = "keepgreen-merge/pr-1/run1"
    built = host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch=branch)
    assert isinstance(built, TestCommit)
    assert over_ssh.server_tip(f"refs/heads/{branch}") == built.links[0].commit
    assert over_ssh.server_tip("refs/heads/main") == base

    landing = Landing(
        target_branch="main",
        expected_tip=base,
        method=MergeMethod.SQUASH,
        link=built.links[0],
        parent_commit=base,
        parent_tree=host.tree_of(repo, base),
        exact=True,
        title="Add a",
        author="Grace Hopper",
        token="token-1",
    )
    landed = host.land(repo, landing)
    assert landed.problem is None
    assert landed.new_tip is not None
    assert over_ssh.server_tip("refs/heads/main") == landed.new_tip
    assert over_ssh.tree(landed.new_tip) == built.links[0].tree

    host.delete_branch(repo, branch)
    assert over_ssh.server_branches() == ["main"]

    # All of it went through sshd, signed in with the key: reads and pushes alike.
    sessions = server.sessions()
    assert f"git-upload-pack '{over_ssh.bare}'" in sessions
    assert f"git-receive-pack '{over_ssh.bare}'" in sessions
    assert f"Accepted publickey for {server.user} from 127.0.0.1" in server.log()
    # While git waited on the server, every process was read: ssh ran with the key's path,
    # and the key's content was in no command line nor environment.
    seen = server.processes()
    assert [line for line in seen if f"-i {server.client_key}" in line]
    assert shows_key(seen, server.client_key) == []
    assert url not in (mirror_path(over_ssh.data_dir, "r1") / "config").read_text()


def test_a_key_the_server_refuses_is_named_but_not_shown(over_ssh: OverSsh) -> None:
    over_ssh.publish()
    wrong = ssh_keygen(over_ssh.data_dir.parent / "wrong" / "id_ed25519")
    repo = over_ssh.repository(auth=over_ssh.auth(key=wrong))
    host = RemoteGitHost(data_dir=over_ssh.data_dir, fetch_interval=0.0, timeout=20)

    with pytest.raises(CodeHostError) as refused:
        host.branch_tip(repo, "main")

    assert str(refused.value) == (
        f"git-url {repo.git_url} cannot be read: the server refused keepgreen's credentials "
        f"(the key in ssh-key-file {wrong})"
    )
    assert shows_key([str(refused.value)], wrong) == []
    assert over_ssh.server.sessions() == []  # never let in
    assert "Accepted publickey" not in over_ssh.server.log()
    assert shows_key(all_command_lines() + all_environments(), wrong) == []


def untrusting_known_hosts(over_ssh: OverSsh, case: str) -> Path | None:
    """A known_hosts file that does not vouch for the server's host key (None: none given,
    so ssh reads the user's own ~/.ssh/known_hosts, which does not know this server).
    """
    path = over_ssh.data_dir.parent / "untrusting_known_hosts"
    server_line = over_ssh.server.known_hosts.read_text()
    if case == "empty":
        path.write_text("")
    elif case == "the-key-known-for-another-host":
        path.write_text("git.example.com " + server_line.split(" ", 1)[1])
    elif case == "another-key-for-this-host":  # what a man in the middle shows
        impostor = ssh_keygen(over_ssh.data_dir.parent / "impostor" / "host_ed25519")
        key_type, body = impostor.with_suffix(".pub").read_text().split()[:2]
        path.write_text(f"[127.0.0.1]:{over_ssh.server.port} {key_type} {body}\n")
    else:
        assert case == "none-given"
        return None
    return path


@pytest.mark.parametrize(
    "case",
    ["empty", "the-key-known-for-another-host", "another-key-for-this-host", "none-given"],
)
def test_a_host_key_that_cannot_be_checked_stops_git_before_it_signs_in(
    over_ssh: OverSsh, case: str
) -> None:
    """The mirror is read once with the right known_hosts; then a push with known hosts that
    do not vouch for the server's key fails before signing in: the key is never offered,
    nothing reaches the server.
    """
    head = over_ssh.work.open_pr(1, {"a.txt": "a\n"})
    over_ssh.publish()
    base = over_ssh.work.tip("main")
    # No fetch within the interval: the build below goes straight to its push.
    host = RemoteGitHost(data_dir=over_ssh.data_dir, fetch_interval=3600.0, monotonic=lambda: 0.0)
    assert host.branch_tip(over_ssh.repository(), "main") == base
    server = over_ssh.server
    offered_before = server.log().count("Accepted key ")
    sessions_before = server.sessions()
    assert len(sessions_before) == 1

    untrusting = untrusting_known_hosts(over_ssh, case)
    repo = over_ssh.repository(
        auth=GitAuth(
            ssh_key_file=str(server.client_key),
            ssh_known_hosts=None if untrusting is None else str(untrusting),
        )
    )

    with pytest.raises(CodeHostError) as refused:
        host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch="keepgreen-merge/1")

    assert str(refused.value) == f"git-url {repo.git_url} cannot be read: {HOST_KEY_SENTENCE}"
    assert over_ssh.server_branches() == ["main"]  # the push did not happen
    assert server.sessions() == sessions_before
    assert server.log().count("Accepted key ") == offered_before  # the key was not offered
    assert shows_key([str(refused.value)], server.client_key) == []
