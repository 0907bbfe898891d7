"""POST /webhooks/github: signed deliveries stored once for the worker, everything else
refused or ignored with a clear answer. Payloads are GitHub's published examples
(tests/fixtures/github, from @octokit/webhooks-examples).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from httpx import Response

from keepgreen.app.github.intake import ACTED_ON
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.settings import Settings, SettingsError
from keepgreen.web.app import create_app

SECRET = "whsec-KeepgreenWebhookSecret-8812"
EXAMPLES = Path(__file__).parent.parent / "fixtures" / "github" / "webhooks-examples.json"


@pytest.fixture
def extra_settings(tmp_path: Path) -> dict[str, Any]:
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(SECRET + "\n")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / "app.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    # No GitHub is reached here: the worker does not run, the deliveries stay stored.
    return {
        "github_webhook_secret_file": secret_file,
        "github_app_id": 1,
        "github_private_key_file": key_file,
    }


@cache
def examples() -> dict[str, list[dict[str, Any]]]:
    return {item["name"]: item["examples"] for item in json.loads(EXAMPLES.read_text())}


def example(event: str, action: str | None = None) -> dict[str, Any]:
    """GitHub's first published example of `event` (with `action`)."""
    for payload in examples()[event]:
        if action is None or payload.get("action") == action:
            return payload
    msg = f"no published example of {event}.{action}"
    raise LookupError(msg)


def deliver(
    client: TestClient,
    event: str,
    body: bytes,
    *,
    delivery: str | None = None,
    secret: str = SECRET,
    signature: str | bytes | None = None,
) -> Response:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers: dict[str, str | bytes] = {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-hub-signature-256": f"sha256={digest}" if signature is None else signature,
    }
    return client.post("/webhooks/github", content=body, headers=headers)


def stored(container: Container) -> list[Any]:
    with container.unit_of_work() as uow:
        return list(uow.github_deliveries.pending(limit=100))


def test_a_signed_delivery_is_stored_once_and_answered_at_once(
    client: TestClient, container: Container
) -> None:
    payload = example("pull_request", "labeled")
    body = json.dumps(payload).encode()
    delivery = str(uuid.uuid4())

    first = deliver(client, "pull_request", body, delivery=delivery)
    assert first.status_code == 202
    assert first.json() == {"status": "queued", "delivery": delivery}
    (kept,) = stored(container)
    assert (kept.id, kept.event, kept.action) == (delivery, "pull_request", "labeled")
    assert kept.installation_id == payload.get("installation", {}).get("id")
    assert kept.payload == payload

    again = deliver(client, "pull_request", body, delivery=delivery)  # GitHub redelivers
    assert again.status_code == 200
    assert again.json() == {"status": "duplicate", "delivery": delivery}
    assert len(stored(container)) == 1


@pytest.mark.parametrize("event", sorted(ACTED_ON))
def test_every_published_example_of_an_event_keepgreen_acts_on_is_stored(
    client: TestClient, container: Container, event: str
) -> None:
    for payload in examples()[event]:
        answer = deliver(client, event, json.dumps(payload).encode())
        assert answer.status_code == 202, answer.text
    kept = stored(container)
    assert len(kept) == len(examples()[event])
    assert {item.event for item in kept} == {event}


def test_a_forged_or_missing_signature_is_refused_and_nothing_is_stored(
    client: TestClient, container: Container
) -> None:
    body = json.dumps(example("issue_comment", "created")).encode()
    wrong_secret = deliver(client, "issue_comment", body, secret="not-the-secret")
    missing = deliver(client, "issue_comment", body, signature="")
    sha1_style = deliver(client, "issue_comment", body, signature="sha1=" + "0" * 40)
    tampered = deliver(
        client,
        "issue_comment",
        body,
        signature="sha256=" + hmac.new(SECRET.encode(), body + b" ", hashlib.sha256).hexdigest(),
    )
    not_ascii = deliver(client, "issue_comment", body, signature="sha256=é".encode("latin-1"))
    for answer in (wrong_secret, missing, sha1_style, tampered, not_ascii):
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "bad_signature"
        assert SECRET not in answer.text
    assert stored(container) == []


def test_ping_is_answered_and_events_keepgreen_does_not_act_on_are_ignored(
    client: TestClient, container: Container
) -> None:
    ping = deliver(client, "ping", json.dumps(example("ping")).encode())
    assert (ping.status_code, ping.json()["status"]) == (200, "pong")
    star = deliver(client, "star", json.dumps(example("star")).encode())
    assert (star.status_code, star.json()["status"]) == (200, "ignored")
    assert stored(container) == []


@pytest.mark.parametrize(
    ("event", "delivery", "body", "code"),
    [
        ("push", None, b"{not json", "invalid_payload"),
        ("push", None, b"\xff\xfe", "invalid_payload"),
        ("push", None, b"[1, 2]", "invalid_payload"),
        ("push", "not a guid!", b"{}", "invalid_delivery"),
        ("", None, b"{}", "invalid_event"),
        ("Push; drop", None, b"{}", "invalid_event"),
    ],
)
def test_malformed_deliveries_get_a_clear_400(
    client: TestClient,
    container: Container,
    event: str,
    delivery: str | None,
    body: bytes,
    code: str,
) -> None:
    answer = deliver(client, event, body, delivery=delivery)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == code
    assert stored(container) == []


def test_without_a_webhook_secret_the_endpoint_says_github_is_not_set_up(
    database_url: str, tmp_path: Path
) -> None:
    settings = Settings(database_url=database_url, data_dir=tmp_path / "data")
    built = bootstrap(settings, run_migrations=False)
    try:
        with TestClient(create_app(container=built)) as client:
            answer = deliver(client, "push", json.dumps(example("push")).encode())
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "github_not_configured"
        assert "KEEPGREEN_GITHUB_WEBHOOK_SECRET_FILE" in answer.json()["error"]["message"]
    finally:
        built.close()


def test_an_unusable_webhook_secret_file_stops_the_start_with_one_sentence(
    tmp_path: Path,
) -> None:
    missing = Settings(github_webhook_secret_file=tmp_path / "nowhere")
    with pytest.raises(SettingsError, match="KEEPGREEN_GITHUB_WEBHOOK_SECRET_FILE names"):
        missing.github_webhook_secret()
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match="alone on one line"):
        Settings(github_webhook_secret_file=empty).github_webhook_secret()


def test_a_webhook_secret_without_the_app_stops_the_start(
    database_url: str, tmp_path: Path
) -> None:
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(SECRET)
    settings = Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        github_webhook_secret_file=secret_file,
    )
    with pytest.raises(SettingsError, match="set them too, or unset the webhook secret"):
        bootstrap(settings, run_migrations=False)
