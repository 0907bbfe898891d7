"""Migration 0007: tokens made before it get a name and stay valid; repositories keep their rows
and have no credential files; down and up again is clean (SQLite and PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import MetaData, text

from keepgreen.adapters.db.engine import alembic_config, make_engine, migrate
from keepgreen.app.admin import hash_token
from keepgreen.bootstrap import bootstrap
from keepgreen.settings import Settings
from tests.conftest import BACKENDS, PG_URL
from tests.support.gitrepo import GitRepo
from tests.support.pgschema import fresh_schema

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
TOKEN_ID = "5b0e1c9a-77d2-4a8e-9c51-0d3f2e4a6b71"
SECRET = "kg_made-before-0007"


@pytest.fixture(params=BACKENDS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    assert PG_URL is not None
    with fresh_schema(PG_URL, prefix="kg_m0007") as url:
        yield url


def test_tokens_made_before_0007_get_a_name_and_still_work(
    empty_database_url: str, tmp_path: Path
) -> None:
    engine = make_engine(empty_database_url)
    command.upgrade(alembic_config(engine), "0006")
    tables = MetaData()
    tables.reflect(engine)
    repo = GitRepo(tmp_path / "widgets")
    with engine.begin() as connection:
        connection.execute(
            tables.tables["orgs"].insert(), [{"id": "org-1", "slug": "acme", "created_at": T0}]
        )
        connection.execute(
            tables.tables["api_tokens"].insert(),
            [
                {
                    "id": TOKEN_ID,
                    "org_id": "org-1",
                    "token_hash": hash_token(SECRET),
                    "created_at": T0,
                }
            ],
        )
        connection.execute(
            tables.tables["repositories"].insert(),
            [
                {
                    "id": "repo-1",
                    "org_id": "org-1",
                    "host": "github.com",
                    "owner": "acme",
                    "name": "widgets",
                    "git_url": str(repo.path),
                    "ci_command": None,
                    "created_at": T0,
                }
            ],
        )

    migrate(engine)

    container = bootstrap(
        Settings(database_url=empty_database_url, data_dir=tmp_path / "data"),
        run_migrations=False,
    )
    try:
        (token,) = container.admin.list_tokens()
        assert (token.id, token.name, token.org, token.revoked_at) == (
            TOKEN_ID,
            "token-5b0e1c9a",
            "acme",
            None,
        )
        assert container.admin.authenticate(SECRET) is not None
        (repository,) = container.admin.list_repositories()
        assert repository.repository.auth.is_empty
        assert repository.git_url == str(repo.path)
    finally:
        container.close()

    command.downgrade(alembic_config(engine), "0006")
    with engine.connect() as connection:
        columns = connection.execute(text("SELECT * FROM api_tokens")).keys()
        assert "name" not in columns
        assert "revoked_at" not in columns
    migrate(engine)
    engine.dispose()
