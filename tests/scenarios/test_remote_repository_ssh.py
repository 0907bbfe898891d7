"""A repository on a git server reached over SSH, queued end to end: registered with `keepgreen
repo add --git-url ssh://... --ssh-key-file ... --ssh-known-hosts ...`, a good and a bad PR
submitted through the API, the worker and the built-in runner merging on the server through a
real sshd; the server's main ends with exactly the good PR, no test branch is left there, and
the key's content shows nowhere.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from keepgreen.bootstrap import Container
from keepgreen.cli.main import app
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import ssh_git_server
from tests.support.processes import all_command_lines
from tests.support.scenario import Scenario
from tests.support.wire import Api, repo_json

SERVED = RepoRef("git.example.test", "acme", "served")
# Fails when the checkout holds a BAD-<n> marker, passes otherwise.
CI_COMMAND = "! ls BAD-* >/dev/null 2>&1"


def test_the_builtin_runner_merges_the_good_pr_on_an_ssh_server(
    container: Container,
    client: TestClient,
    token: str,
    tmp_path: Path,
    clock: FakeClock,
    database_url: str,
) -> None:
    work = GitRepo(tmp_path / "work")
    bare = tmp_path / "served" / "served.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work.path), str(bare)], check=True)

    def on_server(*args: str) -> str:
        result = subprocess.run(
            ["git", f"--git-dir={bare}", *args], capture_output=True, text=True, check=True
        )
        return result.stdout.strip()

    def keepgreen(*args: str) -> str:
        env = {"KEEPGREEN_DATABASE_URL": database_url, "KEEPGREEN_DATA_DIR": str(tmp_path)}
        result = CliRunner().invoke(app, list(args), env=env)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return result.stdout

    with ssh_git_server(tmp_path / "sshd") as server:
        url = server.url(bare)
        key = server.client_key
        # As the README says: the host key as ssh-keyscan reads it.
        scanned = subprocess.run(
            ["ssh-keyscan", "-p", str(server.port), "127.0.0.1"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert scanned == server.known_hosts.read_text()
        known_hosts = tmp_path / "secrets" / "known_hosts"
        known_hosts.parent.mkdir()
        known_hosts.write_text(scanned)
        keepgreen(
            "repo", "add", "--org", "acme", "--host", SERVED.host, "--owner", SERVED.owner,
            "--name", SERVED.name, "--git-url", url, "--ci-command", CI_COMMAND,
            "--ssh-key-file", str(key), "--ssh-known-hosts", str(known_hosts),
        )  # fmt: skip
        shown = json.loads(keepgreen("repo", "show", str(SERVED), "--json"))
        assert (shown["gitUrl"], shown["sshKeyFile"], shown["sshKnownHosts"]) == (
            url,
            str(key),
            str(known_hosts),
        )

        api = Api(client, token, repo_json(SERVED))
        scenario = Scenario(container=container, api=api, repo=work, clock=clock, ci_answers=False)
        scenario.create_queue(statuses=[])
        scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
        scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
        work.git("push", "-q", "--force", str(bare), "main:main", "refs/pull/*:refs/pull/*")
        scenario.submit(1)
        scenario.submit(2)

        scenario.wait_for(
            lambda: all(state in ("merged", "failed") for state in scenario.states().values()),
            seconds=90,
        )

        assert scenario.final() == {
            1: ("merged", "merged_by_queue"),
            2: ("failed", "tests_failed"),
        }
        assert on_server("log", "--first-parent", "--format=%s", "main").splitlines() == [
            "Add a (#1)",
            "initial commit",
        ]
        assert set(on_server("ls-tree", "-r", "--name-only", "main").split()) == {
            "README.md",
            "a.txt",
        }

        def branches() -> list[str]:
            return on_server("for-each-ref", "--format=%(refname:short)", "refs/heads").split()

        scenario.wait_for(lambda: branches() == ["main"], seconds=20)  # no test branch left
        sessions = server.sessions()
        assert f"git-receive-pack '{bare}'" in sessions  # it all went through sshd

        key_lines = [line for line in key.read_text().splitlines() if not line.startswith("-")]
        seen = [
            str(scenario.get_pr(1)),
            str(scenario.get_pr(2)),
            str(scenario.get_queue()),
            keepgreen("repo", "show", str(SERVED)),
            *server.processes(),  # every process, read while git waited on the server
            *all_command_lines(),
        ]
        assert [text for text in seen if any(line in text for line in key_lines)] == []
