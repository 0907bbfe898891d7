"""`keepgreen upload` waits for a busy server instead of giving up while it goes on storing.

Every request carries an Idempotency-Key made of its metadata and reports, so sending it again
(after a 503, a timeout or a dropped connection) is stored once; the server's Retry-After says
how long to wait. A server that cannot be connected to at all is named at once.
"""

from __future__ import annotations

import httpx
import pytest

from keepgreen.cli.upload import UPLOAD_PATIENCE_SECONDS
from tests.cli.test_upload import COMMIT, junit, keepgreen, server, write
from tests.support.fake_upload_server import FakeServer, refusal, summary


class FakeTime:
    """A clock that only moves when the CLI sleeps; the sleeps, as asked."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


__all__ = ["server"]  # the fixture, used by name


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


def busy(retry_after: str | None) -> httpx.Response:
    response = refusal(503, "the server is storing as many uploads as it can", "uploads_busy")
    if retry_after is not None:
        response.headers["Retry-After"] = retry_after
    return response


def test_a_503_is_waited_for_as_retry_after_says_and_sent_again_with_the_same_key(
    server: FakeServer, fake_time: FakeTime
) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    server.answers = [busy("7"), busy(None), summary()]

    result = keepgreen(
        "upload",
        *COMMIT,
        "junit.xml",
        hooks=server.hooks(sleep=fake_time.sleep, clock=fake_time.clock),
    )

    assert result.exit_code == 0, result.stderr
    assert fake_time.slept == [7.0, 4.0]  # Retry-After, then the CLI's own doubling pause
    keys = {upload.request.headers["Idempotency-Key"] for upload in server.received}
    assert len(server.received) == 3
    assert len(keys) == 1
    assert "is busy (HTTP 503); trying again in 7 s" in result.stderr


def test_the_key_is_the_same_for_the_same_reports_and_differs_for_others(
    server: FakeServer,
) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    keepgreen("upload", *COMMIT, "junit.xml", server=server)
    keepgreen("upload", *COMMIT, "junit.xml", server=server)
    write("junit.xml", junit(("test_login", "failed")))
    keepgreen("upload", *COMMIT, "junit.xml", server=server)

    first, again, other = (upload.request.headers["Idempotency-Key"] for upload in server.received)
    assert first == again
    assert other != first


def test_a_timeout_is_sent_again(server: FakeServer, fake_time: FakeTime) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    calls: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ReadTimeout("the server took too long", request=request)
        return server.handle(request)

    hooks = server.hooks(sleep=fake_time.sleep, clock=fake_time.clock)
    result = keepgreen(
        "upload",
        *COMMIT,
        "junit.xml",
        hooks=type(hooks)(
            transport=httpx.MockTransport(handle), sleep=fake_time.sleep, clock=fake_time.clock
        ),
    )

    assert result.exit_code == 0, result.stderr
    assert len(calls) == 2
    assert calls[0].headers["Idempotency-Key"] == calls[1].headers["Idempotency-Key"]
    assert "did not answer in time; trying again in 2 s" in result.stderr


def test_a_server_busy_for_longer_than_the_patience_is_given_up_on(
    server: FakeServer, fake_time: FakeTime
) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    server.answers = [busy("60")] * 1000

    result = keepgreen(
        "upload",
        *COMMIT,
        "junit.xml",
        hooks=server.hooks(sleep=fake_time.sleep, clock=fake_time.clock),
    )

    assert result.exit_code == 1
    assert result.stderr.endswith("error: the server is storing as many uploads as it can\n")
    assert sum(fake_time.slept) <= UPLOAD_PATIENCE_SECONDS
    assert sum(fake_time.slept) > UPLOAD_PATIENCE_SECONDS - 60
