"""The fake GitHub's webhook payloads stay valid against GitHub's payload schemas
(`@octokit/webhooks-schemas`), and its deliveries are signed as GitHub signs them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from tests.support.fake_github import FakeGithub
from tests.support.fake_github.webhooks import Payloads

SCHEMAS = Path(__file__).parents[1] / "fixtures" / "github" / "webhooks-schemas.json"
SHA_A, SHA_B = "a" * 40, "b" * 40


def check(event: str, action: str | None, payload: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMAS.read_text())
    name = f"{event}${action or 'event'}"
    document = {**schema, "oneOf": None, "$ref": f"#/definitions/{name}"}
    del document["oneOf"]
    validator = jsonschema_rs.Draft7Validator(document)
    return [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(payload)]


@pytest.fixture
def payloads() -> Payloads:
    return Payloads(installation_id=77, owner="acme", name="widgets", repo_id=9001)


@pytest.mark.parametrize(
    "action", ["opened", "synchronize", "closed", "reopened", "edited", "labeled", "unlabeled"]
)
def test_pull_request_payloads_are_valid(payloads: Payloads, action: str) -> None:
    payload = payloads.pull_request(
        action, number=5, head_sha=SHA_B, head_ref="feature", before=SHA_A, base_from="dev",
        label="keepgreen-merge", labels=("keepgreen-merge",),
    )  # fmt: skip

    assert check("pull_request", action, payload) == []
    assert payload["pull_request"]["head"]["sha"] == SHA_B
    assert payload["repository"]["full_name"] == "acme/widgets"
    assert payload["installation"]["id"] == 77


def test_other_event_payloads_are_valid(payloads: Payloads) -> None:
    built = {
        ("installation", "created"): payloads.installation(
            "created", account="acme", repositories=[(9001, "widgets")]
        ),
        ("installation", "deleted"): payloads.installation(
            "deleted", account="acme", repositories=[(9001, "widgets")]
        ),
        ("installation_repositories", "added"): payloads.installation_repositories(
            "added", repositories=[(9002, "gadgets")]
        ),
        ("installation_repositories", "removed"): payloads.installation_repositories(
            "removed", repositories=[(9002, "gadgets")]
        ),
        ("issue_comment", "created"): payloads.issue_comment(
            number=5, body="/keepgreen merge --priority high", author="ada"
        ),
        ("push", None): payloads.push(ref="refs/heads/main", before=SHA_A, after=SHA_B),
        ("check_run", "completed"): payloads.check_run(
            head_sha=SHA_B, name="build", conclusion="failure", head_branch="keepgreen/test-1"
        ),
        ("check_suite", "completed"): payloads.check_suite(
            head_sha=SHA_B, head_branch="keepgreen/test-1", conclusion="success"
        ),
        ("status", None): payloads.status(
            sha=SHA_B, context="ci/e2e", state="success", branches=("keepgreen/test-1",)
        ),
    }

    problems = {key: check(*key, payload) for key, payload in built.items()}

    assert problems == {key: [] for key in built}
    assert built["issue_comment", "created"]["issue"]["pull_request"]["url"].endswith("/pulls/5")
    assert built["check_run", "completed"]["check_run"]["check_suite"]["head_branch"] == (
        "keepgreen/test-1"
    )


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    received: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((dict(self.headers.items()), body))
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/webhooks/github", received
    server.shutdown()
    server.server_close()


def test_a_delivery_is_signed_with_the_secret(
    tmp_path: Path, receiver: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> None:
    url, received = receiver
    with FakeGithub(tmp_path / "github") as fake:
        installation = fake.add_installation("acme")
        fake.add_repository(installation, "acme", "widgets")
        payload = fake.payloads("acme", "widgets").push(
            ref="refs/heads/main", before=SHA_A, after=SHA_B
        )

        answer = fake.deliver(url, "push", payload, secret="s3cret", delivery_id="d-1")

    headers, body = received[0]
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert answer.status_code == 202
    assert headers["X-Hub-Signature-256"] == expected
    assert headers["X-GitHub-Event"] == "push"
    assert headers["X-GitHub-Delivery"] == "d-1"
    assert headers["User-Agent"].startswith("GitHub-Hookshot/")
    assert json.loads(body)["installation"]["id"] == installation
