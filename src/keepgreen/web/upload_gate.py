"""How many flaky-test uploads one process stores at once, and what waits for a turn.

Fifty shards of one CI run finish together. Storing them all at once would only share two
cores and the database's connections fifty ways (until the connection pool gave up with a
500); they wait for a turn instead, holding nothing but their request bodies, which the
multipart parser keeps on disk. One that waits too long is answered 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from keepgreen.app.errors import Busy

# What a refused upload is told to wait before trying again, in seconds.
RETRY_AFTER_SECONDS = 10


class UploadGate:
    def __init__(self, concurrency: int, *, queue_seconds: float) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._queue_seconds = queue_seconds

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Holds one of the slots while the block runs; raises Busy after waiting
        `queue_seconds` for one.
        """
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout=self._queue_seconds)
        except TimeoutError:
            raise Busy(
                "uploads_busy",
                "the server is storing as many uploads as it can; send this one again after "
                "the time Retry-After gives (it is stored once)",
                retry_after_seconds=RETRY_AFTER_SECONDS,
            ) from None
        try:
            yield
        finally:
            self._slots.release()
