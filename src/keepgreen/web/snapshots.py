"""The answers CI polls all day (getQueue, getSubmittedPullRequest), serialised once per queue
version instead of once per request.

A snapshot is the JSON of one answer, kept under what it answers (a queue, or one PR of it) with
the queue's version that its build read. A request reads the queue's version (one short query,
`QueueService.version`) and is answered with the snapshot when the versions are equal: the
database moves the version on at every write to what the answers show (migration 0019), so a
write is seen by the next read. Some parts of an answer also move with time alone (a queue
becomes stalled, an incident ages out of the list, a worker stops beating), so a snapshot is
also rebuilt once it is `MAX_AGE_SECONDS` old.

One build at a time per answer: the requests that find no snapshot of their version wait for
the build in flight (and build again only if it read an older version than they did), and a
snapshot that is only old (up to `STALE_FACTOR` times the age) is answered while one request
rebuilds it in the background. Without
that, every poller that arrived in the same instant built the same answer at once, each slowed
by all the others (the p99 of a polled queue was the cost of eight builds in one).

Each snapshot carries a strong ETag (a hash of its bytes); a request whose `If-None-Match`
names it gets 304 and no body. The calls are reads sent as POST (the interface's design), so
304 is the answer here rather than the 412 RFC 9110 gives a POST whose condition fails: a
poller asks "has this changed?", and 304 says "no".
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

# What builds an answer (in the thread pool): the queue version its reads saw, and the JSON.
Build = Callable[[], tuple[int, bytes]]

MAX_AGE_SECONDS = 1.0
# An old snapshot is answered while it is rebuilt only if younger than this many times the
# maximum age; an older one (a queue nobody polled for a while) waits for its rebuild.
STALE_FACTOR = 3
MAX_SNAPSHOTS = 4096  # per process: the least recently used go first


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    body: bytes
    etag: str
    built_at: float


class Snapshots:
    """This process's snapshots. `clock` (seconds) is the service's own clock, the one the
    answers' time-dependent parts are computed with; a snapshot that seems built in the future
    (the clock went back) is as old as one past its age.
    """

    def __init__(
        self,
        *,
        max_age_seconds: float = MAX_AGE_SECONDS,
        size: int = MAX_SNAPSHOTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._max_age = max_age_seconds
        self._size = size
        self._clock = clock
        self._kept: OrderedDict[Hashable, Snapshot] = OrderedDict()
        self._lock = threading.Lock()
        # The builds in flight (touched from the event loop only).
        self._building: dict[Hashable, asyncio.Future[Snapshot]] = {}

    async def answer(self, key: Hashable, version: int, build: Build) -> Snapshot:
        """`key`'s answer at `version` or later: the kept one, or the one a build makes (the
        build in flight for `key` when there is one). Runs in the event loop.
        """
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept.version >= version:
            age = self._clock() - kept.built_at
            if 0 <= age < self._max_age:
                return kept
            if 0 <= age < self._max_age * STALE_FACTOR:
                self._start(key, build)  # answered as kept while it is rebuilt
                return kept
        while True:
            made = await asyncio.shield(self._start(key, build))
            if made.version >= version:
                return made
            # That build had read the queue before this request did: build again.

    def _start(self, key: Hashable, build: Build) -> asyncio.Future[Snapshot]:
        """The build of `key` in flight, started now if there is none."""
        pending = self._building.get(key)
        if pending is not None:
            return pending

        async def run() -> Snapshot:
            version, body = await run_in_threadpool(build)
            return self.put(key, version, body)

        task = asyncio.ensure_future(run())
        self._building[key] = task

        def done(finished: asyncio.Future[Snapshot]) -> None:
            if self._building.get(key) is finished:
                del self._building[key]
            if not finished.cancelled():
                finished.exception()  # retrieved here too: a background rebuild may fail alone

        task.add_done_callback(done)
        return task

    def get(self, key: Hashable, version: int) -> Snapshot | None:
        """The snapshot of `key` at exactly `version`, when `answer` would answer with it
        without starting a build: young enough, or only old while a rebuild is in flight.
        Else None. Runs in the event loop.
        """
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or kept.version != version:
                return None
            age = self._clock() - kept.built_at
            young = 0 <= age < self._max_age
            if not young and not (
                0 <= age < self._max_age * STALE_FACTOR and key in self._building
            ):
                return None
            self._kept.move_to_end(key)
            return kept

    def put(self, key: Hashable, version: int, body: bytes) -> Snapshot:
        """Keep `body` as `key`'s answer at `version`, unless a build of a later version is
        kept already (two requests built at once); the snapshot made of `body` either way.
        """
        made = Snapshot(version, body, etag_of(body), self._clock())
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or kept.version <= version:
                self._kept[key] = made
                self._kept.move_to_end(key)
                while len(self._kept) > self._size:
                    self._kept.popitem(last=False)
        return made


def queue_key(queue_id: Hashable) -> Hashable:
    """What getQueue's answer of a queue is kept under."""
    return ("queue", queue_id)


def pr_key(queue_id: Hashable, number: int) -> Hashable:
    """What getSubmittedPullRequest's answer of a PR of a queue is kept under."""
    return ("pr", queue_id, number)


def to_json(answer: BaseModel) -> bytes:
    """The answer's JSON as FastAPI would send it for the route's response model."""
    return answer.__pydantic_serializer__.to_json(answer)


def etag_of(body: bytes) -> str:
    return f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'


def matches(if_none_match: str, etag: str) -> bool:
    """Whether an If-None-Match value names `etag` (weak comparison, as RFC 9110 asks of
    If-None-Match: `W/` prefixes are ignored; `*` names any).
    """
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


def snapshot_headers(snapshot: Snapshot, if_none_match: str) -> tuple[int, dict[str, str]]:
    """The status (200, or 304 when the client holds the snapshot already) and the headers of
    an answer with `snapshot`, besides its body's.
    """
    headers = {"etag": snapshot.etag, "cache-control": "no-cache"}
    return (304 if matches(if_none_match, snapshot.etag) else 200), headers


def snapshot_answer(request: Request, snapshot: Snapshot) -> Response:
    """200 with the snapshot's JSON, or 304 when the client holds it already."""
    status, headers = snapshot_headers(snapshot, request.headers.get("if-none-match", ""))
    if status == 304:
        return Response(status_code=304, headers=headers)
    return Response(snapshot.body, media_type="application/json", headers=headers)
