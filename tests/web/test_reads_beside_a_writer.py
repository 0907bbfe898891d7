"""The calls CI polls never wait for a write: while another transaction holds the write lock
(on SQLite, an upload's or the worker's), each authenticated read answers at once.

Each call authenticates its token first; that read, too, must not take the write lock.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from keepgreen.bootstrap import Container
from tests.support.wire import Api

# SQLite's busy timeout is 30 s: a read that waited for the writer would take that long.
PROMPT_SECONDS = 5.0

# Each call and what it answers here: nothing was submitted, so no PR or run is found.
READS: dict[str, tuple[str, dict[str, Any], int]] = {
    "getQueue": ("getQueue", {"targetBranch": "main"}, 200),
    "getSubmittedPullRequest": (
        "getSubmittedPullRequest",
        {"targetBranch": "main", "pr": {"number": 1}},
        404,
    ),
    "getMergeQueueTestingDetails": (
        "getMergeQueueTestingDetails",
        {"targetBranch": "main", "testRunId": str(uuid.uuid4())},
        404,
    ),
    "get-settings": ("flaky-tests/get-settings", {"org_url_slug": "acme"}, 200),
}


@pytest.mark.parametrize("call", list(READS))
def test_a_read_answers_while_a_writer_holds_the_lock(
    container: Container, queue: Api, call: str
) -> None:
    verb, body, expected = READS[call]
    answered: list[tuple[int, float]] = []

    def read() -> None:
        started = time.monotonic()
        response = queue.post(verb, body)
        answered.append((response.status_code, time.monotonic() - started))

    with container.engine.connect() as writer, writer.begin():
        # SQLite: BEGIN IMMEDIATE, the database's one write lock; PostgreSQL: the tokens' rows.
        writer.execute(text("UPDATE api_tokens SET name = name"))
        thread = threading.Thread(target=read)
        thread.start()
        thread.join(timeout=PROMPT_SECONDS)
        held_while_answered = not thread.is_alive()
    thread.join()
    assert held_while_answered, f"{call} waited for the writer"
    status, seconds = answered[0]
    assert status == expected
    assert seconds < PROMPT_SECONDS
