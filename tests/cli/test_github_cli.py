"""`keepgreen github manifest`: the App manifest GitHub registers an App from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from keepgreen.app.github.intake import ACTED_ON
from keepgreen.cli.main import app

EXAMPLES = Path(__file__).parent.parent / "fixtures" / "github" / "webhooks-examples.json"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["github", *args], env={"KEEPGREEN_PUBLIC_URL": "", **(env or {})}
    )
    return result.exit_code, result.stdout, result.stderr


def test_the_manifest_sends_webhooks_to_keepgreen_and_asks_what_the_queue_needs() -> None:
    code, out, _ = run("manifest", env={"KEEPGREEN_PUBLIC_URL": "https://kg.example.com/"})
    assert code == 0
    manifest = json.loads(out)
    assert manifest["url"] == "https://kg.example.com"
    assert manifest["hook_attributes"] == {
        "url": "https://kg.example.com/webhooks/github",
        "active": True,
    }
    assert manifest["public"] is False
    permissions = manifest["default_permissions"]
    assert set(permissions.values()) <= {"read", "write"}
    for needed in ("contents", "workflows", "pull_requests", "checks", "issues"):
        assert permissions[needed] == "write", needed
    # Every event asked for is one GitHub publishes, and one the webhook intake acts on.
    published = {item["name"] for item in json.loads(EXAMPLES.read_text())}
    assert set(manifest["default_events"]) <= published
    assert set(manifest["default_events"]) <= ACTED_ON


def test_the_option_names_the_url_and_the_app() -> None:
    code, out, _ = run("manifest", "--public-url", "https://ci.acme.dev/kg", "--name", "acme-queue")
    assert code == 0
    manifest = json.loads(out)
    assert manifest["name"] == "acme-queue"
    assert manifest["hook_attributes"]["url"] == "https://ci.acme.dev/kg/webhooks/github"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "set KEEPGREEN_PUBLIC_URL or pass --public-url"),
        (("--public-url", "kg.example.com"), "must be an absolute http(s) URL"),
        (("--public-url", "ftp://kg.example.com"), "must be an absolute http(s) URL"),
        (("--public-url", "https://kg.example.com/?x=1"), "without a query"),
        (("--public-url", "https://u:p@kg.example.com"), "must not hold credentials"),
        (("--public-url", "https://kg.example.com", "--name", "x" * 35), "1 to 34 characters"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], said: str) -> None:
    code, out, err = run("manifest", *args)
    assert code == 2
    assert out == ""
    assert said in err
    assert err.startswith("error: ")
    assert err.count("\n") == 1


def test_link_gives_an_installations_repositories_to_an_org(tmp_path: Path) -> None:
    from tests.support.fake_github import FakeGithub
    from tests.support.github_app import app_files

    with FakeGithub(tmp_path / "github") as fake:
        installation = fake.add_installation("initech")
        fake.add_repository(installation, "initech", "tps", files={"README.md": "t\n"})
        env = {
            "KEEPGREEN_DATA_DIR": str(tmp_path / "data"),
            **app_files(fake, tmp_path / "app").environment(),
        }
        code, out, err = run("link", "--installation", str(installation), "--org", "eng", env=env)
        assert (code, err) == (0, "")
        assert out.splitlines() == [
            f"installation {installation} linked to org eng",
            "added initech/tps",
        ]
        code, out, _ = run("installations", env=env)
        assert code == 0
        assert out.strip() == f"{installation}  account initech  org eng  repositories: initech/tps"

        code, _, err = run("link", "--installation", "777", "--org", "eng", env=env)
        assert code == 1
        assert err.startswith("error: GitHub knows no installation 777 of this App")
        assert fake.violations == []


def test_link_without_the_app_configured_says_which_settings(tmp_path: Path) -> None:
    env = {"KEEPGREEN_DATA_DIR": str(tmp_path / "data")}
    code, _, err = run("link", "--installation", "1", "--org", "eng", env=env)
    assert code == 2
    assert "KEEPGREEN_GITHUB_APP_ID and KEEPGREEN_GITHUB_PRIVATE_KEY_FILE" in err


def test_a_private_key_file_that_is_not_a_key_stops_with_one_sentence(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    env = {
        "KEEPGREEN_DATA_DIR": str(tmp_path / "data"),
        "KEEPGREEN_GITHUB_APP_ID": "12",
        "KEEPGREEN_GITHUB_PRIVATE_KEY_FILE": str(key),
    }
    code, _, err = run("installations", env=env)
    assert code == 2
    assert err.strip() == (
        "error: KEEPGREEN_GITHUB_PRIVATE_KEY_FILE: the file must hold the App's private key in "
        "PEM form, as GitHub gives it (-----BEGIN RSA PRIVATE KEY-----)"
    )
    assert "not a key" not in err
