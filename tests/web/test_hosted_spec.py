"""schemathesis over the hosted service's published OpenAPI document (a copy of Trunk's v1 spec,
tests/fixtures/trunk/trunk-openapi.json): requests built from *its* schemas, sent to keepgreen,
with the identifiers pinned to real fixture data (the registered repository, its queue, the
submitted PR and its branch, the org's slug) so that they reach the handlers and not only
404s. Every answer must be no 5xx, and every answer whose status the document describes must
match its schema there. The differences from the document that remain are listed in the
README ("Moving from the hosted service").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.generation.case import Case
from schemathesis.specs.openapi.checks import response_schema_conformance

from keepgreen.bootstrap import Container
from keepgreen.web.app import create_app
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO_JSON, queue_body

SPEC = Path(__file__).parents[1] / "fixtures" / "trunk" / "trunk-openapi.json"

# Operations keepgreen does not serve: the hosted service's own CLI sign-in and health page.
NOT_SERVED = {"/status", "/device-auth/initiate", "/device-auth/tokens"}


@pytest.fixture
def hosted_schema(container: Container, registered_repo: GitRepo, token: str) -> object:
    app = create_app(container=container)
    registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a")  # its branch is pr-1
    with TestClient(app) as client:
        headers = {"x-api-token": token}
        for verb, body in (
            ("createQueue", queue_body()),
            ("submitPullRequest", queue_body(pr={"number": 1})),
        ):
            assert client.post(f"/v1/{verb}", json=body, headers=headers).status_code == 200
    loaded = schemathesis.openapi.from_dict(json.loads(SPEC.read_text()))
    loaded.app = app
    return loaded


schema = schemathesis.pytest.from_fixture("hosted_schema")


def _pinned(case: Case) -> None:
    """Point a positive case's identifiers at the fixture's data, three cases in four (the
    rest keep what was generated, to reach the 404s too).
    """
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return  # a negative case must stay invalid
    body: Any = case.body
    if not isinstance(body, dict) or hash(repr(body)) % 4 == 0:
        return
    if "repo" in body:
        body["repo"] = dict(REPO_JSON)
    if "targetBranch" in body:
        body["targetBranch"] = "main"
    if "org_url_slug" in body:
        body["org_url_slug"] = "acme"
    pr = body.get("pr")
    if isinstance(pr, dict):
        if "number" in pr:
            pr["number"] = 1
        if "branch" in pr:
            pr["branch"] = "pr-1"


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_keepgreen_answers_the_hosted_services_requests_by_its_document(
    case: Case, token: str
) -> None:
    if case.operation.path in NOT_SERVED:
        return
    _pinned(case)
    case.call_and_validate(
        headers={"x-api-token": token},
        checks=[not_a_server_error, response_schema_conformance],
    )


def test_the_copy_of_the_document_is_the_hosted_services_v1() -> None:
    document = json.loads(SPEC.read_text())
    assert document["servers"] == [{"url": "https://api.trunk.io/v1"}]
    assert "/submitPullRequest" in document["paths"]
