"""Shared fixtures: databases (SQLite always, PostgreSQL when configured), the app, git repos.

Every db and API test runs once per backend: `sqlite` always, `postgresql` too when
KEEPGREEN_TEST_DATABASE_URL names a PostgreSQL database (CI sets it).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from keepgreen.adapters.db.engine import make_engine, migrate
from keepgreen.adapters.db.tables import Base
from keepgreen.app.ports import MergeHost
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.logs import log_handler, route_structlog_to_stdlib
from keepgreen.settings import Settings
from keepgreen.web.app import create_app
from tests.support.fake_github import FakeGithub
from tests.support.gitrepo import GitRepo
from tests.support.pgschema import fresh_schema
from tests.support.wire import REPO, REPO_JSON, Api

PG_URL = os.environ.get("KEEPGREEN_TEST_DATABASE_URL")
BACKENDS = ["sqlite", *(["postgresql"] if PG_URL else [])]


class FakeClock:
    """A clock tests move by hand; starts at a fixed instant and ticks 1 ms per reading."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(autouse=True, scope="session")
def _structlog_through_logging() -> None:
    """keepgreen's structlog events reach the standard library, as in the served process, so
    that pytest's log capture (and `log_lines`) sees them.
    """
    route_structlog_to_stdlib()


class LogLines:
    """What keepgreen logged during a test, rendered as the JSON lines `serve` would write."""

    def __init__(self, stream: io.StringIO) -> None:
        self._stream = stream

    def all(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._stream.getvalue().splitlines()]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.all() if line["event"] == event]

    def text(self) -> str:
        return self._stream.getvalue()


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    """keepgreen's log at INFO and above, in the JSON format of KEEPGREEN_LOG_FORMAT=json."""
    stream = io.StringIO()
    handler = log_handler("json", stream)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield LogLines(stream)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (migrating once is the slow part)."""
    path = tmp_path_factory.mktemp("template") / "keepgreen.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    return path


@pytest.fixture(scope="session")
def pg_schema_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for this test session, migrated once."""
    assert PG_URL is not None
    with fresh_schema(PG_URL, prefix="kg_test") as url:
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        yield url


@pytest.fixture(params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[str]:
    if request.param == "sqlite":
        path = tmp_path / "db" / "keepgreen.db"
        path.parent.mkdir()
        shutil.copy(sqlite_template, path)
        yield f"sqlite:///{path}"
        return
    url = request.getfixturevalue("pg_schema_url")
    yield url
    engine = make_engine(url)
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {tables} CASCADE"))
    engine.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ci_control(tmp_path: Path) -> Path:
    """A directory the built-in CI's box shows read-only: a test's commands wait on files the
    test puts there.
    """
    control = tmp_path / "ci-control"
    control.mkdir(exist_ok=True)
    return control


@pytest.fixture
def code_host() -> MergeHost | None:
    """The container's code host: None for the built-in local one; a module may override it."""
    return None


@pytest.fixture
def extra_settings() -> dict[str, Any]:
    """Settings the container gets besides the tests' own; a module may override it."""
    return {}


@pytest.fixture
def container(
    database_url: str,
    tmp_path: Path,
    clock: FakeClock,
    ci_control: Path,
    code_host: MergeHost | None,
    extra_settings: dict[str, Any],
) -> Iterator[Container]:
    settings = Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        ci_readonly_paths=str(ci_control),
        # Passes in tests follow each other at once: a failing git server is tried again at
        # each (the backoff has tests of its own).
        **{"git_retry_max_seconds": 0.0, **extra_settings},
    )
    built = bootstrap(settings, clock=clock, run_migrations=False, code_host=code_host)
    yield built
    built.close()


@pytest.fixture
def client(container: Container) -> Iterator[TestClient]:
    with TestClient(create_app(container=container)) as test_client:
        yield test_client


@pytest.fixture
def token(container: Container) -> str:
    return container.admin.create_token("acme")


@pytest.fixture
def other_token(container: Container) -> str:
    """A token of another org, which must not see acme's data."""
    return container.admin.create_token("globex")


@pytest.fixture
def git_repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "widgets")


@pytest.fixture
def registered_repo(container: Container, git_repo: GitRepo, token: str) -> GitRepo:
    container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command=None
    )
    return git_repo


@pytest.fixture
def api(client: TestClient, token: str, registered_repo: GitRepo) -> Api:
    return Api(client, token, dict(REPO_JSON))


@pytest.fixture
def queue(api: Api) -> Api:
    """The API with a queue for `main` created."""
    response = api.post("createQueue", targetBranch="main")
    assert response.status_code == 200, response.text
    return api


@pytest.fixture
def fake_github(tmp_path: Path) -> Iterator[FakeGithub]:
    """The fake GitHub, serving; every exchange it had must have kept to GitHub's description."""
    with FakeGithub(tmp_path / "github") as served:
        yield served
    assert served.violations == []
