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


def test_the_ci_sandbox_is_bubblewrap_unless_said_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KEEPGREEN_CI_SANDBOX", raising=False)
    assert Settings().ci_sandbox == "bwrap"
    monkeypatch.setenv("KEEPGREEN_CI_SANDBOX", "none")
    assert Settings().ci_sandbox == "none"
    monkeypatch.setenv("KEEPGREEN_CI_SANDBOX", "docker")
    with pytest.raises(ValueError, match="ci_sandbox"):
        Settings()


@pytest.mark.parametrize("shown", ["/srv", "/srv/kg", "/srv/kg/ci", "/srv/other/../kg"])
def test_read_only_paths_that_would_show_the_data_dir_are_refused(
    monkeypatch: pytest.MonkeyPatch, shown: str
) -> None:
    monkeypatch.setenv("KEEPGREEN_DATA_DIR", "/srv/kg")
    monkeypatch.setenv("KEEPGREEN_CI_READONLY_PATHS", f"/opt/tools:{shown}")
    with pytest.raises(ValueError, match="would show keepgreen's data dir"):
        Settings().readonly_paths()


def test_read_only_paths_are_absolute_and_blank_parts_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEPGREEN_DATA_DIR", "/srv/kg")
    monkeypatch.setenv("KEEPGREEN_CI_READONLY_PATHS", "/opt/tools::/usr/lib/jvm:")
    assert Settings().readonly_paths() == [Path("/opt/tools"), Path("/usr/lib/jvm")]
