"""CLI fixtures: a real HTTP server on a free port for the test's container, and a CLI runner."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from typer.testing import CliRunner, Result

from keepgreen.bootstrap import Container
from keepgreen.cli.main import app
from keepgreen.web.app import create_app
from tests.support.wire import assert_error, queue_body

REPO_ARG = "github.com/acme/widgets"
START_TIMEOUT_SECONDS = 10.0


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty directory the keepgreen processes of a test start in."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def fresh_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh install: a data dir of its own, and no keepgreen setting
    (database URL, URL, token) but the test database the suite runs against.
    """
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("KEEPGREEN_") or name == "KEEPGREEN_TEST_DATABASE_URL"
    }
    environment["KEEPGREEN_DATA_DIR"] = str(tmp_path / "data")
    return environment


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def live_url(container: Container) -> Iterator[str]:
    """The /v1 base URL of a uvicorn server running the app on the test's container."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(container=container),
            host="127.0.0.1",
            port=port,
            # As `keepgreen serve`: logging stays as configured (here, pytest's capture).
            log_config=None,
            access_log=False,
        )
    )
    thread = threading.Thread(target=server.run, name="keepgreen-live-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            pytest.fail(f"the test server did not start on port {port}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class Cli:
    """`keepgreen ...` in-process, with KEEPGREEN_URL/KEEPGREEN_TOKEN pointing at the server."""

    url: str
    token: str

    def __call__(self, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
        base_env: dict[str, str | None] = {"KEEPGREEN_URL": self.url, "KEEPGREEN_TOKEN": self.token}
        return CliRunner().invoke(app, list(args), env={**base_env, **(env or {})})

    def ok(self, *args: str) -> Result:
        """Run a command that must succeed; fails the test with its output otherwise."""
        result = self(*args)
        assert result.exit_code == 0, (
            f"keepgreen {' '.join(args)} exited {result.exit_code}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
        return result

    def api(self, verb: str, **fields: object) -> httpx.Response:
        """The same server, straight through HTTP (to check what a command did)."""
        return httpx.post(
            f"{self.url}/{verb}",
            json=queue_body(**fields),
            headers={"x-api-token": self.token},
        )

    def api_error(self, verb: str, status: int, **fields: object) -> str:
        """The server's message when it refuses `verb` with `status` (what the CLI must print)."""
        return assert_error(self.api(verb, **fields), status)

    def api_json(self, verb: str, **fields: object) -> Any:
        response = self.api(verb, **fields)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def cli(live_url: str, token: str) -> Cli:
    return Cli(live_url, token)
