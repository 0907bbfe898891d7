"""Settings from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepgreen.settings import Settings


def test_the_default_database_is_sqlite_in_the_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEEPGREEN_DATABASE_URL", raising=False)
    monkeypatch.setenv("KEEPGREEN_DATA_DIR", "/srv/kg")
    assert Settings().resolved_database_url() == f"sqlite:///{Path('/srv/kg/keepgreen.db')}"


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("postgresql://u@db/kg", "postgresql+psycopg://u@db/kg"),
        ("postgres://u@db/kg", "postgresql+psycopg://u@db/kg"),
        ("postgresql+psycopg://u@db/kg", "postgresql+psycopg://u@db/kg"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_postgresql_urls_get_the_shipped_driver(
    monkeypatch: pytest.MonkeyPatch, given: str, used: str
) -> None:
    monkeypatch.setenv("KEEPGREEN_DATABASE_URL", given)
    assert Settings().resolved_database_url() == used
