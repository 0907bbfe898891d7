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
