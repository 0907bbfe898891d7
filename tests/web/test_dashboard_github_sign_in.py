"""Signing in to the dashboard with GitHub, against the fake GitHub (held to GitHub's REST
description for `GET /user/installations`, and answering the OAuth code exchange as GitHub
documents it): the state round trip, the org of an installation the user reaches, the choice
between several, and every refusal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from keepgreen.core.model import GithubInstallation
from keepgreen.web.pages.guard import SESSION_COOKIE
from tests.support.fake_github import FakeGithub

CALLBACK = "http://testserver/-/sign-in/github/callback"


@pytest.fixture
def extra_settings(fake_github: FakeGithub, tmp_path: Path) -> dict[str, Any]:
    secret = tmp_path / "client-secret"
    secret.write_text(fake_github.client_secret + "\n")
    return {
        "github_api_url": fake_github.api_url,
        "github_client_id": fake_github.client_id,
        "github_client_secret_file": secret,
    }


def link(container: Container, fake: FakeGithub, account: str, org: str) -> int:
    """The App installed on `account` on the fake, and linked to keepgreen org `org`."""
    installation_id = fake.add_installation(account)
    container.admin.ensure_org(org)
    with container.unit_of_work() as uow:
        found = uow.orgs.get_by_slug(org)
        assert found is not None
        uow.github_installations.save(
            GithubInstallation(installation_id, account, found.id, datetime.now(UTC), linked=True)
        )
        uow.commit()
    return installation_id


def go_to_github(client: TestClient, **params: str) -> dict[str, str]:
    """Click "Sign in with GitHub": where it sends the browser, as query parameters."""
    answer = client.get("/-/sign-in/github", params=params, follow_redirects=False)
    assert answer.status_code == 303
    return {
        key: values[0]
        for key, values in parse_qs(urlsplit(answer.headers["location"]).query).items()
    }


def test_the_sign_in_page_offers_github_when_it_is_configured(client: TestClient) -> None:
    assert 'href="/-/sign-in/github"' in client.get("/-/sign-in").text


def test_a_member_of_a_linked_installation_signs_in_to_its_org(
    client: TestClient, container: Container, fake_github: FakeGithub
) -> None:
    installation = link(container, fake_github, "acme-gh", "acme")
    sent = go_to_github(client, next="/acme/flaky-tests")
    location = client.get("/-/sign-in/github", follow_redirects=False).headers["location"]
    assert location.startswith(f"{fake_github.web_url}/login/oauth/authorize?")
    assert sent["client_id"] == fake_github.client_id
    assert sent["redirect_uri"] == CALLBACK
    # The second click replaced the first one's state; sign in with the latest.
    state = parse_qs(urlsplit(location).query)["state"][0]
    code = fake_github.authorize("ada", [installation], CALLBACK)
    back = client.get(
        "/-/sign-in/github/callback", params={"code": code, "state": state}, follow_redirects=False
    )
    assert (back.status_code, back.headers["location"]) == (303, "/acme/queues")
    assert SESSION_COOKIE in back.cookies
    assert client.get("/acme/queues").status_code == 200
    assert client.get("/globex/queues").status_code == 404
    token = next(iter(fake_github.user_tokens))
    assert token not in back.text
    assert token not in str(back.headers)
    assert any(
        r.operation_id == "apps/list-installations-for-authenticated-user" and r.status == 200
        for r in fake_github.requests
    )


def test_the_org_and_page_asked_for_survive_the_round_trip(
    client: TestClient, container: Container, fake_github: FakeGithub
) -> None:
    installation = link(container, fake_github, "acme-gh", "acme")
    sent = go_to_github(client, next="/acme/flaky-tests")
    code = fake_github.authorize("ada", [installation], CALLBACK)
    back = client.get(
        "/-/sign-in/github/callback",
        params={"code": code, "state": sent["state"]},
        follow_redirects=False,
    )
    assert back.headers["location"] == "/acme/flaky-tests"


def test_a_user_of_several_orgs_chooses_one(
    client: TestClient, container: Container, fake_github: FakeGithub
) -> None:
    ids = [
        link(container, fake_github, "acme-gh", "acme"),
        link(container, fake_github, "gx", "globex"),
    ]
    sent = go_to_github(client)
    code = fake_github.authorize("ada", ids, CALLBACK)
    choice = client.get("/-/sign-in/github/callback", params={"code": code, "state": sent["state"]})
    assert choice.status_code == 200
    assert 'href="/-/sign-in/github?org=acme"' in choice.text
    assert 'href="/-/sign-in/github?org=globex"' in choice.text
    assert SESSION_COOKIE not in client.cookies
    again = go_to_github(client, org="globex")
    code = fake_github.authorize("ada", ids, CALLBACK)
    back = client.get(
        "/-/sign-in/github/callback",
        params={"code": code, "state": again["state"]},
        follow_redirects=False,
    )
    assert back.headers["location"] == "/globex/queues"


def test_a_wrong_state_or_a_replayed_code_opens_nothing(
    client: TestClient, container: Container, fake_github: FakeGithub
) -> None:
    installation = link(container, fake_github, "acme-gh", "acme")
    sent = go_to_github(client)
    code = fake_github.authorize("ada", [installation], CALLBACK)
    forged = client.get("/-/sign-in/github/callback", params={"code": code, "state": "forged"})
    assert forged.status_code == 403
    stranger = TestClient(client.app)  # no state cookie at all
    assert (
        stranger.get(
            "/-/sign-in/github/callback", params={"code": code, "state": sent["state"]}
        ).status_code
        == 403
    )
    used = client.get("/-/sign-in/github/callback", params={"code": code, "state": sent["state"]})
    assert used.status_code == 200  # signed in
    replay = go_to_github(client)
    again = client.get(
        "/-/sign-in/github/callback", params={"code": code, "state": replay["state"]}
    )
    assert again.status_code == 403
    assert "bad_verification_code" in again.text


def test_a_user_without_a_linked_installation_is_told_why(
    client: TestClient, container: Container, fake_github: FakeGithub
) -> None:
    unlinked = fake_github.add_installation("someone-else")
    link(container, fake_github, "acme-gh", "acme")
    sent = go_to_github(client)
    code = fake_github.authorize("eve", [unlinked], CALLBACK)
    answer = client.get("/-/sign-in/github/callback", params={"code": code, "state": sent["state"]})
    assert answer.status_code == 403
    assert "linked to a keepgreen org" in answer.text
    assert SESSION_COOKIE not in client.cookies
