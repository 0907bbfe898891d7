"""The calls CI polls all day, and the merge button, answered at the app's door when nothing
else is needed.

`getQueue` and `getSubmittedPullRequest` with a snapshot of the current version at hand, and a
`submitPullRequest` that changes nothing, need one statement (the token and the queue's version
or the PR's options, read together) and the bytes kept for them. Through the middleware,
FastAPI's routing, dependency solving and response machinery, the same answer cost several
times the read. The first submit of a PR (its queue never had it) needs that read and one
write: the door writes it with the other first submits of the same moment, in one transaction
(`PullRequestService.submit_first`: on PostgreSQL one statement on the event loop's own
connection, on SQLite a short transaction in a thread), and answers `{}` once it is committed.

`PolledCalls` stands in front of the app (`KeepgreenAPI.__call__`). It answers a request only
when it is sure of the answer: a small body declared JSON that the route's own model accepts,
a live token, the org's queue, a young snapshot of exactly the version just read (or a resubmit
that changes nothing, or a first submit written). What it answers gets what the middleware
would give it: an `X-Request-ID`, the `keepgreen_http_*` metrics and the access-log line.
Anything else (no token, another org's repository, a body the model refuses, no snapshot yet
or one to rebuild, a PR that left the queue, a draining queue, an error on the way) goes on to
the app with the body as received, which answers it as before: the 401, 404, 409 and 422
answers, the builds, the other writes and the error handling stay in one place.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keepgreen.app.errors import InvalidInput
from keepgreen.app.pull_requests import FirstSubmit, SubmitAsk
from keepgreen.bootstrap import Container
from keepgreen.core.ids import QueueId
from keepgreen.core.model import QueueAsk
from keepgreen.web.credentials import TOKEN_HEADER
from keepgreen.web.observability import (
    REQUEST_ID_HEADER_BYTES,
    ROUTE_TEMPLATE,
    record_request,
    request_id_of,
)
from keepgreen.web.routes.merge_queue import parse_priority, repo_ref
from keepgreen.web.schemas import PrLookupRequest, QueueRequest, SubmitRequest
from keepgreen.web.snapshots import Snapshot, Snapshots, pr_key, queue_key, snapshot_headers

# Bodies of these calls are a few hundred bytes; a larger one goes the long way (as does any
# body over the service's limit, which the app refuses).
MAX_BODY_BYTES = 16 * 1024
_EMPTY_OBJECT = b"{}"
_TOKEN_HEADER = TOKEN_HEADER.encode()

Model = TypeVar("Model", bound=BaseModel)
Ask = TypeVar("Ask")
Got = TypeVar("Got")
Polled = TypeVar("Polled", bound=QueueRequest)


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request to a polled call carries that its answer depends on."""

    token: str
    if_none_match: str
    body: bytes


# A call's quick answer: (status, headers, body), or None to leave the request to the app.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes] | None
QuickCall = Callable[["PolledCalls", Asked], Awaitable[Answer]]


class Batched(Generic[Ask, Got]):
    """Reads made together: while one is on its way, those asked meanwhile wait, and are
    made together by the next call of `read` as soon as it is answered.

    On PostgreSQL each read is a round trip to the server, during which the event loop
    serves other requests; the polled calls that arrive meanwhile share the next round trip.
    Each request is still read after it arrived, so it sees every write made before it.
    `together=False` (SQLite, where a read is a few microseconds of file access) reads each
    at once. The door's first submits use it for writes the same way, on both backends: those
    that arrive while one transaction commits are written in the next.
    """

    def __init__(
        self, read: Callable[[list[Ask]], Awaitable[list[Got]]], *, together: bool
    ) -> None:
        self._read = read
        self._together = together
        # Per event loop (a test client runs its own): the reads waiting, and their futures.
        self._asked: dict[asyncio.AbstractEventLoop, list[tuple[Ask, asyncio.Future[Got]]]] = {}
        # The task reading, per event loop (kept: the loop holds its tasks weakly).
        self._reading: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}

    async def read(self, ask: Ask) -> Got:
        if not self._together:
            return (await self._read([ask]))[0]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Got] = loop.create_future()
        self._asked.setdefault(loop, []).append((ask, future))
        if loop not in self._reading:
            self._reading[loop] = loop.create_task(self._read_all(loop))
        return await future

    async def _read_all(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read what is asked, round after round, until nothing is."""
        try:
            while asked := self._asked.pop(loop, None):
                try:
                    got = await self._read([ask for ask, _future in asked])
                except Exception as error:  # noqa: BLE001 (their requests go the long way)
                    for _ask, future in asked:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (_ask, future), one in zip(asked, got, strict=True):
                    if not future.done():  # its request may have been cancelled (client left)
                        future.set_result(one)
        finally:
            self._reading.pop(loop, None)


class PolledCalls:
    """The door of the polled calls (see the module)."""

    def __init__(
        self,
        *,
        prefix: str,
        container: Container,
        snapshots: Snapshots,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.container = container
        self.snapshots = snapshots
        self.max_body_bytes = min(max_body_bytes, MAX_BODY_BYTES)
        together = container.engine.dialect.name != "sqlite"
        self.versions = Batched(container.queues.versions_for_tokens, together=together)
        self.submits = Batched(container.pull_requests.read_submits, together=together)
        # Writes, on both backends: the first submits of one moment share one transaction,
        # made while the one before it commits.
        self.first_submits = Batched(container.pull_requests.submit_first, together=True)
        self.calls: dict[str, tuple[str, QuickCall]] = {
            f"{prefix}{template}": (f"{prefix}{template}", call)
            for template, call in (
                ("/getQueue", PolledCalls.get_queue),
                ("/getSubmittedPullRequest", PolledCalls.get_submitted),
                ("/submitPullRequest", PolledCalls.submit),
            )
        }

    def handles(self, scope: Scope) -> bool:
        """Whether the request may be one this door answers (else: straight to the app)."""
        return scope["type"] == "http" and scope["path"] in self.calls

    async def __call__(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Answer the request, or leave it to `app` with its body."""
        started = time.perf_counter()
        template, call = self.calls[scope["path"]]
        asked = _headers(scope, self.max_body_bytes) if scope["method"] == "POST" else None
        if asked is None:
            await app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        answer = None
        if complete:
            try:
                answer = await call(self, Asked(asked[0], asked[1], body))
            except Exception:  # noqa: BLE001 (the app answers it, with its error handling)
                answer = None
        if answer is None:
            await app(scope, _replay(body, complete, receive), send)
            return
        request_id = request_id_of(scope)
        scope[ROUTE_TEMPLATE] = template  # the access log's and the metrics' route
        status, headers, content = answer
        headers.append((REQUEST_ID_HEADER_BYTES, request_id.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})
        record_request(
            self.container.telemetry, scope, status=status, started=started, request_id=request_id
        )

    async def get_queue(self, asked: Asked) -> Answer:
        return await self._kept(asked, QueueRequest, lambda _body, queue_id: queue_key(queue_id))

    async def get_submitted(self, asked: Asked) -> Answer:
        # A PR named by its branch has no key here: the route finds its number.
        return await self._kept(
            asked,
            PrLookupRequest,
            lambda body, queue_id: (
                None if body.pr.number is None else pr_key(queue_id, body.pr.number)
            ),
        )

    async def _kept(
        self,
        asked: Asked,
        model: type[Polled],
        key_of: Callable[[Polled, QueueId | None], Hashable | None],
    ) -> Answer:
        """The kept answer of a polled read (the same key the route keeps it under)."""
        body = _valid(model, asked.body)
        if body is None:
            return None
        found = await self.versions.read(
            (asked.token, QueueAsk(repo_ref(body.repo), body.targetBranch))
        )
        if found is None:
            return None
        _org, current = found
        key = key_of(body, current.queue_id)
        if key is None:
            return None
        return _snapshot(self.snapshots.get(key, current.version), asked)

    async def submit(self, asked: Asked) -> Answer:
        """A resubmit that changes nothing, or the first submit of a PR (the merge button):
        `{}` once it is written. Any other submit goes the long way.
        """
        body = _valid(SubmitRequest, asked.body)
        if body is None:
            return None
        try:
            priority = parse_priority(body)
        except InvalidInput:
            return None
        ask = QueueAsk(repo_ref(body.repo), body.targetBranch, body.pr.number)
        read = await self.submits.read(SubmitAsk(asked.token, ask, priority, body.noBatch))
        if isinstance(read, FirstSubmit):
            read = await self.first_submits.read(read)
        if not read:
            return None
        return 200, _json_headers(_EMPTY_OBJECT), _EMPTY_OBJECT


def _headers(scope: Scope, max_body_bytes: int) -> tuple[str, str] | None:
    """The token and If-None-Match of a request with a small JSON body; None otherwise."""
    token = if_none_match = ""
    json_body = small = False
    for name, value in scope["headers"]:
        if name == _TOKEN_HEADER:
            token = value.decode("latin-1")
        elif name == b"if-none-match":
            if_none_match = value.decode("latin-1")
        elif name == b"content-type":
            json_body = value.split(b";", 1)[0].strip().lower() == b"application/json"
        elif name == b"content-length":
            small = value.isdigit() and int(value) <= max_body_bytes
    return (token, if_none_match) if token and json_body and small else None


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request's body, and whether it is whole (False: the client went away first)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A `receive` that gives the app the body already read, then the client's messages."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replayed


def _valid(model: type[Model], body: bytes) -> Model | None:
    """`body` as the route's model reads it (as FastAPI does: JSON, then the model); None for
    a body it refuses, whose error the app answers.
    """
    try:
        return model.model_validate(json.loads(body))
    except ValueError:  # JSONDecodeError and ValidationError both are
        return None


def _snapshot(snapshot: Snapshot | None, asked: Asked) -> Answer:
    if snapshot is None:
        return None  # none yet, or one to rebuild: the app builds it
    status, headers = snapshot_headers(snapshot, asked.if_none_match)
    raw = [(name.encode(), value.encode()) for name, value in headers.items()]
    if status == 304:
        return 304, raw, b""
    return 200, raw + _json_headers(snapshot.body), snapshot.body


def _json_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
