"""Many shards at once against one server: the ones past its capacity wait for a turn, and
the ones that wait too long are answered 503 with Retry-After, never 500; sent again, they
are stored, once.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from keepgreen.bootstrap import Container
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO_JSON

SHARDS = 12
TESTS_PER_SHARD = 4000


@pytest.fixture
def extra_settings() -> dict[str, Any]:
    # One upload at a time, and almost no patience: most of the shards are turned away.
    return {"upload_concurrency": 1, "upload_queue_seconds": 0.05}


def shard_report(number: int) -> bytes:
    cases = "".join(
        f'<testcase classname="pkg.Shard{number}" name="test_{i}" time="0.01"/>'
        for i in range(TESTS_PER_SHARD)
    )
    return f'<testsuite name="shard-{number}">{cases}</testsuite>'.encode()


def send(live_url: str, token: str, number: int) -> httpx.Response:
    metadata = {"repo": REPO_JSON, "commit_sha": "e" * 40, "branch": "main"}
    return httpx.post(
        f"{live_url}/flaky-tests/upload",
        headers={"x-api-token": token},
        data={"metadata": json.dumps(metadata)},
        files=[("file", (f"shard-{number}.xml", shard_report(number), "application/xml"))],
        timeout=120,
    )


def test_shards_past_capacity_are_told_to_come_back_and_then_all_are_stored_once(
    live_url: str, token: str, registered_repo: GitRepo, container: Container
) -> None:
    with ThreadPoolExecutor(max_workers=SHARDS) as pool:
        answers = list(pool.map(lambda number: send(live_url, token, number), range(SHARDS)))

    statuses = [answer.status_code for answer in answers]
    assert set(statuses) <= {200, 503}, statuses
    refused = [number for number, answer in enumerate(answers) if answer.status_code == 503]
    assert refused, "with one slot and 50 ms of patience, some shards must be turned away"
    for number in refused:
        answer = answers[number]
        assert answer.headers["Retry-After"] == "10"
        assert answer.json()["error"]["code"] == "uploads_busy"

    # Sent again (as the CLI does after Retry-After), each refused shard is stored; the ones
    # stored already are answered as stored, not stored twice.
    again = [send(live_url, token, number) for number in range(SHARDS)]
    assert [answer.status_code for answer in again] == [200] * SHARDS
    stored_before = {number for number in range(SHARDS) if number not in refused}
    assert {n for n, a in enumerate(again) if a.json()["already_stored"]} == stored_before
    upload_ids = {answer.json()["upload_id"] for answer in again}
    assert len(upload_ids) == SHARDS
    with container.engine.connect() as connection:
        stored = connection.execute(text("SELECT count(*) FROM test_uploads")).scalar_one()
    assert stored == SHARDS
