"""The flaky-test API on the wire, for tests that drive it with synthetic CI history: post one
upload as multipart (a `metadata` JSON part and one `file` part per report), and read the tests
`list-unhealthy-tests` reports, walking every page.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal, Protocol

from fastapi.testclient import TestClient

from keepgreen.simulation.flaky_history import SyntheticUpload, TestKey
from tests.support.wire import REPO_JSON

ORG_SLUG = "acme"  # the org of the `token` fixture
UPLOAD_PATH = "/v1/flaky-tests/upload"
LIST_UNHEALTHY_PATH = "/v1/flaky-tests/list-unhealthy-tests"
MAX_PAGES = 1000  # a guard against a page token that never runs out


class SettableClock(Protocol):
    """A clock a test sets by hand (tests/conftest.py's FakeClock)."""

    now: datetime


def upload_metadata(
    upload: SyntheticUpload,
    *,
    repo: dict[str, str] | None = None,
    org_slug: str = ORG_SLUG,
    variant: str = "",
) -> dict[str, object]:
    """The `metadata` part describing `upload`'s CI job."""
    return {
        "repo": dict(repo or REPO_JSON),
        "org_url_slug": org_slug,
        "commit_sha": upload.commit_sha,
        "branch": upload.branch,
        "pr_number": upload.pr_number,
        "run_id": upload.run_id,
        "job_url": None,
        "variant": variant,
    }


def post_upload(
    client: TestClient,
    token: str,
    upload: SyntheticUpload,
    *,
    repo: dict[str, str] | None = None,
    org_slug: str = ORG_SLUG,
) -> Any:
    """POST `upload` to the upload endpoint; the response, whatever it is."""
    metadata = upload_metadata(upload, repo=repo, org_slug=org_slug)
    return client.post(
        UPLOAD_PATH,
        data={"metadata": json.dumps(metadata)},
        files=[("file", (name, content, "application/xml")) for name, content in upload.files],
        headers={"x-api-token": token},
    )


def upload_at_its_time(
    client: TestClient, token: str, clock: SettableClock, upload: SyntheticUpload
) -> dict[str, Any]:
    """Move `clock` to the upload's time (never backwards: the fake clock ticks on each
    reading) and post it, which must answer 200; the upload summary."""
    clock.now = max(clock.now, upload.at)
    response = post_upload(client, token, upload)
    assert response.status_code == 200, response.text
    summary: dict[str, Any] = response.json()
    return summary


def list_unhealthy(
    client: TestClient,
    token: str,
    status: Literal["FLAKY", "BROKEN"],
    *,
    repo: dict[str, str] | None = None,
    org_slug: str = ORG_SLUG,
    page_size: int = 100,
) -> list[dict[str, Any]]:
    """Every test `list-unhealthy-tests` reports with `status`, all pages walked."""
    tests: list[dict[str, Any]] = []
    page_token = ""
    for _ in range(MAX_PAGES):
        response = client.post(
            LIST_UNHEALTHY_PATH,
            json={
                "repo": dict(repo or REPO_JSON),
                "org_url_slug": org_slug,
                "status": status,
                "page_query": {"page_size": page_size, "page_token": page_token},
            },
            headers={"x-api-token": token},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        tests += body["tests"]
        page_token = body["page"]["next_page_token"]
        if page_token == "":
            return tests
    raise AssertionError(f"list-unhealthy-tests gave more than {MAX_PAGES} pages")


def unhealthy_keys(
    client: TestClient, token: str, status: Literal["FLAKY", "BROKEN"]
) -> set[TestKey]:
    """(file, classname, name) of each test reported with `status`; each checked to have it."""
    keys: set[TestKey] = set()
    for test in list_unhealthy(client, token, status):
        assert test["status"]["value"] == status.lower(), test
        keys.add((test["file_path"], test["classname"], test["name"]))
    return keys
