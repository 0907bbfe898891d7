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


def test_the_metrics_token_is_read_from_its_file_without_the_newline(tmp_path: Path) -> None:
    path = tmp_path / "metrics.token"
    path.write_text("0123456789abcdef0123\n")
    token = Settings(metrics_token_file=path).metrics_token()
    assert token is not None
    assert token.get_secret_value() == "0123456789abcdef0123"
    assert "0123456789abcdef" not in repr(token)
    assert Settings().metrics_token() is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read"),
        (b"", "one token of printable ASCII"),
        (b"two words in it here\n", "one token of printable ASCII"),
        (b"caf\xc3\xa9caf\xc3\xa9caf\xc3\xa9caf\xc3\xa9", "one token of printable ASCII"),
        (b"short-secret", "16 to 512 characters"),
    ],
)
def test_a_metrics_token_file_keepgreen_cannot_use_is_refused_without_showing_it(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    from keepgreen.settings import SettingsError

    path = tmp_path / "metrics.token"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SettingsError) as refused:
        Settings(metrics_token_file=path).metrics_token()
    message = str(refused.value)
    assert message.startswith("KEEPGREEN_METRICS_TOKEN_FILE")
    assert problem in message
    if content:
        assert content.decode(errors="replace").strip() not in message
