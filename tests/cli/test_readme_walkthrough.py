"""The README's walkthrough, its curl example and its quarantine example, run as written.

The shell blocks come from README.md itself, so the two cannot drift apart: every fenced block
right after a `<!-- walkthrough -->` line (the walkthrough, then the curl example under The
API, in the README's order), and every one after a `<!-- quarantine-example -->` line. Each
set runs in bash under `set -euo pipefail`, as a new user pastes it into one shell, in a fresh
directory (so a fresh `./keepgreen-data`) with no KEEPGREEN_* setting.

What the test adds, and nothing else: `PORT`, a free port (the walkthrough reads it, 8080
otherwise); git's identity (a new user has one); KEEPGREEN_DATABASE_URL, on PostgreSQL only; a
line between the blocks that marks where each one's output starts, and one after them that
saves KEEPGREEN_URL and KEEPGREEN_TOKEN for the quarantine example's shell (the same terminal,
for a user); and a small pytest project for the quarantine example to run in.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import free_port
from tests.conftest import BACKENDS, PG_URL
from tests.support.pgschema import fresh_schema

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
SCRIPT_TIMEOUT_SECONDS = 180  # the walkthrough takes about 15 s; this only bounds a hang
STOP_TIMEOUT_SECONDS = 10.0
BLOCK_MARK = "@@ README block {} @@"


def readme_blocks(marker: str) -> list[str]:
    """The fenced shell blocks of README.md that follow a `<!-- marker -->` line, in order."""
    pattern = re.compile(
        rf"^<!-- {re.escape(marker)} -->\n```(?:sh|bash)\n(.*?)^```$", re.MULTILINE | re.DOTALL
    )
    return pattern.findall(README.read_text(encoding="utf-8"))


def script(blocks: list[str], *, epilogue: str = "") -> str:
    """One bash script: the blocks as written, each announced by a mark on stdout."""
    parts = ["set -euo pipefail"]
    for index, block in enumerate(blocks):
        parts += [f"echo '{BLOCK_MARK.format(index)}'", block]
    return "\n".join([*parts, epilogue]) + "\n"


def block_outputs(stdout: str, count: int) -> list[str]:
    """What each block printed, split at the marks `script` put between them."""
    outputs = []
    for index in range(count):
        start = stdout.index(BLOCK_MARK.format(index)) + len(BLOCK_MARK.format(index))
        end = stdout.find(BLOCK_MARK.format(index + 1))
        outputs.append(stdout[start : end if end >= 0 else None])
    return outputs


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(params=BACKENDS)
def database_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """No database setting on SQLite (the README's default); a fresh schema on PostgreSQL."""
    if request.param == "sqlite":
        yield {}
        return
    assert PG_URL is not None
    with fresh_schema(PG_URL, prefix="kg_readme") as url:
        yield {"KEEPGREEN_DATABASE_URL": url}


@pytest.fixture
def shell_env(database_env: dict[str, str]) -> dict[str, str]:
    """A new user's environment: keepgreen and pytest on PATH, no KEEPGREEN_* setting."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("KEEPGREEN_", "PYTEST_"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PORT"] = str(free_port())
    for role in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{role}_NAME"] = "Ada Author"
        env[f"GIT_{role}_EMAIL"] = "ada@example.com"
    return {**env, **database_env}


class Shell:
    """Runs README blocks in bash; stops, at the end, whatever they left running (the server)."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.groups: list[int] = []

    def run(self, text: str, *, cwd: Path, env: dict[str, str] | None = None) -> Result:
        name = f"script-{len(self.groups)}"
        path = self.workdir.parent / f"{name}.sh"
        path.write_text(text)
        stdout, stderr = (self.workdir.parent / f"{name}.{kind}" for kind in ("out", "err"))
        with stdout.open("w") as out, stderr.open("w") as err:
            # Its own process group: the server the walkthrough starts in the background
            # outlives the script, and is stopped with the group at the end of the test.
            process = subprocess.Popen(
                ["bash", str(path)],
                cwd=cwd,
                env={**self.env, **(env or {})},
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            self.groups.append(process.pid)
            try:
                code = process.wait(timeout=SCRIPT_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                code = -1
        return Result(code, stdout.read_text(), stderr.read_text(), self.server_log())

    def server_log(self) -> str:
        log = self.workdir / "serve.log"
        return log.read_text() if log.exists() else "(no serve.log)"

    def stop(self) -> None:
        for group in self.groups:
            _stop_group(group)


@dataclass(frozen=True)
class Result:
    """How a script ended and what it and the server printed."""

    code: int  # -1 when it timed out
    stdout: str
    stderr: str
    server_log: str

    def __repr__(self) -> str:
        # What a failing assertion shows: everything needed to see which command went wrong.
        return (
            f"exit code {self.code} (-1: timed out)\n--- stdout\n{self.stdout}\n"
            f"--- stderr\n{self.stderr}\n--- serve.log\n{self.server_log}"
        )


def _stop_group(group: int) -> None:
    """SIGTERM to a process group, then SIGKILL if it lingers."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(group, signal.SIGKILL)


@pytest.fixture
def shell(tmp_path: Path, shell_env: dict[str, str]) -> Iterator[Shell]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    runner = Shell(workdir, shell_env)
    yield runner
    runner.stop()


def pytest_project(path: Path) -> Path:
    """A git checkout with one passing and one failing test, for `keepgreen test`."""
    path.mkdir()
    (path / "test_widgets.py").write_text(
        "def test_sums():\n    assert 1 + 1 == 2\n\n\ndef test_racy():\n    assert False\n"
    )
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "test_widgets.py")
    git(path, "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "commit", "-qm", "Tests")
    return path


def test_the_readme_walkthrough_curl_and_quarantine_examples_work_as_written(
    shell: Shell, tmp_path: Path
) -> None:
    walkthrough = readme_blocks("walkthrough")
    assert len(walkthrough) >= 4, "the walkthrough's blocks and the curl example are marked"
    assert "keepgreen serve" in "".join(walkthrough)
    assert "curl" in walkthrough[-1]
    session = tmp_path / "session"
    save = f'printf "%s\\n" "$KEEPGREEN_URL" "$KEEPGREEN_TOKEN" > {session}'

    started = time.monotonic()
    result = shell.run(script(walkthrough, epilogue=save), cwd=shell.workdir)
    took = time.monotonic() - started

    assert result.code == 0, result
    outputs = block_outputs(result.stdout, len(walkthrough))
    work = shell.workdir
    # The good PR landed on main as its own squashed commit; the bad one did not.
    assert git(work / "widgets", "log", "--format=%s", "main").splitlines() == [
        "Add a (#1)",
        "Add the check",
    ]
    assert "broken.txt" not in git(work / "widgets", "ls-tree", "--name-only", "main")
    statuses = "".join(outputs[:-1])
    merged = re.search(r"state\s+merged", statuses)
    failed = re.search(r"state\s+failed", statuses)
    assert merged is not None, result
    assert failed is not None, result
    assert merged.start() < failed.start()  # `status 1` comes first in the walkthrough
    assert git(work / "widgets", "for-each-ref", "refs/heads/keepgreen-merge/") == ""
    # One log per test run, each run boxed by bubblewrap (the install notes' default).
    logs = list((work / "keepgreen-data" / "ci" / "logs").glob("*.log"))
    assert len(logs) == 2
    for log in logs:
        assert "in a bubblewrap box" in log.read_text()
    # The curl example answers 200 (--fail-with-body) with the merged PR as JSON.
    answer = json.loads(outputs[-1])
    assert answer["prNumber"] == 1
    assert answer["state"] == "merged"
    url, token = session.read_text().splitlines()
    assert url == f"http://127.0.0.1:{shell.env['PORT']}/v1"

    # The quarantine example, in a CI checkout whose tests fail: first without quarantine
    # (the failure is not flaky, so the build fails as pytest did), then with the failing
    # test quarantined (the build passes).
    quarantine = readme_blocks("quarantine-example")
    assert len(quarantine) == 2
    assert "keepgreen test" in quarantine[-1]
    project = pytest_project(tmp_path / "project")
    client_env = {"KEEPGREEN_URL": url, "KEEPGREEN_TOKEN": token}

    first = shell.run(script(quarantine), cwd=project, env=client_env)

    assert first.code == 1, first
    assert (project / "reports" / "junit.xml").exists()
    assert "Uploaded 1 report file: 2 tests" in first.stdout, first
    settings = json.loads(block_outputs(first.stdout, 2)[0])
    assert settings["settings"]["quarantine"]["enabled"] is True

    racy = _failing_test_id(url, token, "test_racy")
    response = httpx.post(
        f"{url}/flaky-tests/set-quarantine-override",
        headers={"x-api-token": token},
        json={**_REPO_BODY, "test_id": racy, "setting": "ALWAYS_QUARANTINE"},
    )
    assert response.status_code == 200, response.text

    second = shell.run(script(quarantine), cwd=project, env=client_env)

    assert second.code == 0, second
    assert "every failed test is quarantined; exiting 0 instead of 1" in second.stderr
    # The walkthrough alone, as a user sees it on this machine (printed with -s).
    print(f"README walkthrough: {took:.1f} s")  # noqa: T201 (a figure the README quotes)


_REPO_BODY = {
    "repo": {"host": "github.com", "owner": "acme", "name": "widgets"},
    "org_url_slug": "acme",
}


def _failing_test_id(url: str, token: str, name: str) -> str:
    now = datetime.now(UTC)
    response = httpx.post(
        f"{url}/flaky-tests/list-failing-tests",
        headers={"x-api-token": token},
        json={
            **_REPO_BODY,
            "start_time": (now - timedelta(hours=1)).isoformat(),
            "end_time": (now + timedelta(hours=1)).isoformat(),
            "page_query": {"page_size": 100, "page_token": ""},
        },
    )
    assert response.status_code == 200, response.text
    (test,) = [test for test in response.json()["tests"] if test["name"] == name]
    return str(test["id"])
