"""The polled calls answered before the router (`keepgreen.web.polled`): only when the answer
is certain, with the same bytes, headers, access log and refusals as the routes give; anything
else reaches the routes with its body intact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from keepgreen.bootstrap import Container
from keepgreen.web.app import API_PREFIX
from keepgreen.web.polled import Batched, PolledCalls
from keepgreen.web.snapshots import Snapshots
from tests.conftest import LogLines
from tests.support.gitrepo import GitRepo
from tests.support.wire import Api

PR = {"number": 1}
POLLED = (
    ("getQueue", {"targetBranch": "main"}),
    ("getSubmittedPullRequest", {"targetBranch": "main", "pr": PR}),
)
IDS = [verb for verb, _ in POLLED]


@pytest.fixture
def submitted(queue: Api, registered_repo: GitRepo) -> Api:
    registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a")
    assert queue.post("submitPullRequest", targetBranch="main", pr=PR).status_code == 200
    return queue


class Counted:
    """A service method wrapped to count its calls (the routes' reads; the fast path makes
    none of them).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
        self.calls = 0
        original: Callable[..., Any] = getattr(owner, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)


def post(api: Api, verb: str, body: dict[str, Any], **headers: str) -> Any:
    return api.client.post(
        f"/v1/{verb}",
        json={"repo": api.repo, **body},
        headers={"x-api-token": api.token, **headers},
    )


def snapshot_at_hand(api: Api, verb: str, body: dict[str, Any]) -> None:
    """Ask twice: the first builds the answer's snapshot through the route, the second is
    answered by the door.
    """
    for _ in range(2):
        assert post(api, verb, body).status_code == 200


@pytest.mark.parametrize(("verb", "body"), POLLED, ids=IDS)
def test_a_young_snapshot_is_answered_before_the_router(
    submitted: Api,
    container: Container,
    monkeypatch: pytest.MonkeyPatch,
    verb: str,
    body: dict[str, Any],
) -> None:
    first = post(submitted, verb, body)  # builds the snapshot, through the route
    assert first.status_code == 200
    routed = Counted(monkeypatch, container.queues, "version")
    again = post(submitted, verb, body)
    assert routed.calls == 0
    assert again.status_code == 200
    assert again.content == first.content
    for header in ("etag", "cache-control", "content-type", "content-length"):
        assert again.headers[header] == first.headers[header], header
    assert again.headers["x-request-id"]
    not_modified = post(submitted, verb, body, **{"if-none-match": first.headers["etag"]})
    assert routed.calls == 0
    assert not_modified.status_code == 304
    assert not_modified.content == b""
    assert not_modified.headers["etag"] == first.headers["etag"]


@pytest.mark.parametrize(("verb", "body"), POLLED, ids=IDS)
def test_a_revoked_token_is_refused_with_a_snapshot_at_hand(
    submitted: Api, container: Container, verb: str, body: dict[str, Any]
) -> None:
    snapshot_at_hand(submitted, verb, body)
    (listed,) = container.admin.list_tokens(org_slug="acme")
    container.admin.revoke_token(listed.id)
    refused = post(submitted, verb, body)
    assert refused.status_code == 401
    assert "etag" not in refused.headers
    resubmitted = post(submitted, "submitPullRequest", {"targetBranch": "main", "pr": PR})
    assert resubmitted.status_code == 401


@pytest.mark.parametrize(("verb", "body"), POLLED, ids=IDS)
def test_another_orgs_token_and_unknown_names_get_the_routes_404(
    submitted: Api, other_token: str, verb: str, body: dict[str, Any]
) -> None:
    snapshot_at_hand(submitted, verb, body)
    other = post(submitted, verb, body, **{"x-api-token": other_token})
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "repository_not_found"
    no_queue = post(submitted, verb, {**body, "targetBranch": "release"})
    assert no_queue.status_code == 404
    assert no_queue.json()["error"]["code"] == "queue_not_found"


@pytest.mark.parametrize(("verb", "body"), POLLED, ids=IDS)
def test_bodies_the_model_refuses_get_the_routes_errors(
    submitted: Api, verb: str, body: dict[str, Any]
) -> None:
    assert post(submitted, verb, body).status_code == 200
    headers = {"x-api-token": submitted.token, "content-type": "application/json"}
    for raw in (b"{", b"[]", json.dumps({**body, "repo": submitted.repo, "targetBranch": 5})):
        refused = submitted.client.post(f"/v1/{verb}", content=raw, headers=headers)
        assert 400 <= refused.status_code < 500, raw
        assert "error" in refused.json() or "detail" in refused.json()
    # Not declared JSON: the route decides (and answers as it always did).
    plain = submitted.client.post(
        f"/v1/{verb}",
        content=json.dumps({"repo": submitted.repo, **body}),
        headers={"x-api-token": submitted.token, "content-type": "text/plain"},
    )
    routed = post(submitted, verb, body)
    assert plain.status_code in (routed.status_code, 400, 415, 422)


def test_a_resubmit_that_changes_something_or_is_refused_goes_to_the_route(
    submitted: Api,
) -> None:
    """PR 1 is unread (no worker pass), so getQueue does not list it yet: its own answer shows
    what the resubmits did.
    """
    read = {"targetBranch": "main", "pr": PR}
    assert post(submitted, "submitPullRequest", {"targetBranch": "main", "pr": PR}).json() == {}
    bad = post(submitted, "submitPullRequest", {"targetBranch": "main", "pr": PR, "priority": -1})
    assert bad.status_code == 400
    assert "priority" in bad.json()["error"]["message"]
    assert post(submitted, "getSubmittedPullRequest", read).json()["noBatch"] is False
    changed = post(
        submitted, "submitPullRequest", {"targetBranch": "main", "pr": PR, "noBatch": True}
    )
    assert changed.status_code == 200
    pr = post(submitted, "getSubmittedPullRequest", read).json()
    assert (pr["noBatch"], pr["state"], pr["isCurrentlySubmittedToQueue"]) == (
        True,
        "not_ready",
        True,
    )


@pytest.mark.parametrize(("verb", "body"), POLLED, ids=IDS)
def test_the_access_log_names_the_route_of_a_quick_answer(
    submitted: Api, log_lines: LogLines, verb: str, body: dict[str, Any]
) -> None:
    assert post(submitted, verb, body).status_code == 200
    answered = post(submitted, verb, body, **{"x-request-id": "poll-42"})
    assert answered.headers["x-request-id"] == "poll-42"
    access = [line for line in log_lines.events("request") if line["request_id"] == "poll-42"]
    assert [(line["route"], line["status"], line["method"]) for line in access] == [
        (f"/v1/{verb}", 200, "POST")
    ]


# -- the door alone ----------------------------------------------------------------------------


def test_a_request_it_leaves_reaches_the_app_with_its_body(
    container: Container, token: str, registered_repo: GitRepo
) -> None:
    """No snapshot yet: the app gets the very body the client sent, in one piece, then the
    client's next message.
    """
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(await receive())
        seen.append(await receive())

    body = json.dumps(
        {"repo": {"host": "github.com", "owner": "acme", "name": "widgets"}, "targetBranch": "x"}
    ).encode()
    door = PolledCalls(prefix=API_PREFIX, container=container, snapshots=Snapshots())
    incoming = iter(
        [
            {"type": "http.request", "body": body[:10], "more_body": True},
            {"type": "http.request", "body": body[10:], "more_body": False},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> dict[str, Any]:
        return next(incoming)

    async def send(_message: Any) -> None:
        raise AssertionError("the door answered")

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/getQueue",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-api-token", token.encode()),
        ],
    }
    assert door.handles(scope)
    asyncio.run(door(scope, receive, send, app))
    assert seen == [
        {"type": "http.request", "body": body, "more_body": False},
        {"type": "http.disconnect"},
    ]


# -- reads made together -------------------------------------------------------------------------


def test_reads_asked_in_one_turn_are_made_together() -> None:
    made: list[list[int]] = []

    async def read(asked: list[int]) -> list[int]:
        made.append(asked)
        await asyncio.sleep(0.01)  # the round trip, during which more are asked
        return [number * 10 for number in asked]

    async def scenario() -> list[int]:
        batched = Batched(read, together=True)
        first = [asyncio.ensure_future(batched.read(number)) for number in range(5)]
        await asyncio.sleep(0.002)  # the first five are on their way
        later = [asyncio.ensure_future(batched.read(number)) for number in range(5, 8)]
        return list(await asyncio.gather(*first, *later))

    assert asyncio.run(scenario()) == [0, 10, 20, 30, 40, 50, 60, 70]
    assert made == [[0, 1, 2, 3, 4], [5, 6, 7]]


def test_a_failed_read_fails_every_request_of_its_turn_and_alone_reads_at_once() -> None:
    async def read(asked: list[int]) -> list[int]:
        raise RuntimeError("the database went away")

    async def together() -> list[object]:
        batched = Batched(read, together=True)
        return list(
            await asyncio.gather(*(batched.read(n) for n in range(3)), return_exceptions=True)
        )

    assert [type(got) for got in asyncio.run(together())] == [RuntimeError] * 3

    made: list[list[int]] = []

    async def counted(asked: list[int]) -> list[int]:
        made.append(asked)
        return asked

    async def alone() -> list[int]:
        batched = Batched(counted, together=False)
        return list(await asyncio.gather(*(batched.read(n) for n in range(3))))

    assert asyncio.run(alone()) == [0, 1, 2]
    assert made == [[0], [1], [2]]


def test_pollers_arriving_together_share_one_read_and_each_get_their_answer(
    submitted: Api, container: Container, other_token: str
) -> None:
    """Eight getQueue, four getSubmittedPullRequest and a revoked and another org's token, at
    once through the real app: the reads are made together (on PostgreSQL that is one round
    trip), and each request gets the answer it would get alone.
    """
    alone = {verb: post(submitted, verb, body) for verb, body in POLLED}
    app = submitted.client.app
    sizes: list[int] = []
    read = container.queues.versions_for_tokens

    async def counted(asked: list[Any]) -> list[Any]:
        sizes.append(len(asked))
        return await read(asked)

    app.polled.versions = Batched(counted, together=True)  # as on PostgreSQL

    async def together() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kg") as client:

            def one(verb: str, body: dict[str, Any], token: str) -> Any:
                return client.post(
                    f"/v1/{verb}",
                    json={"repo": submitted.repo, **body},
                    headers={"x-api-token": token},
                )

            asked = [one(*POLLED[0], submitted.token) for _ in range(8)]
            asked += [one(*POLLED[1], submitted.token) for _ in range(4)]
            asked.append(one(*POLLED[0], other_token))
            return list(await asyncio.gather(*asked))

    answers = asyncio.run(together())
    assert max(sizes) > 1
    assert sum(sizes) == len(answers)
    for answer in answers[:8]:
        assert (answer.status_code, answer.content) == (200, alone["getQueue"].content)
    for answer in answers[8:12]:
        assert answer.content == alone["getSubmittedPullRequest"].content
    assert answers[12].status_code == 404
