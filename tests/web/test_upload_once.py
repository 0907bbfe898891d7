"""A retried upload is stored once: the same reports of the same run, or the same key.

CI retries a step whose upload timed out while the server went on storing it; keepgreen must
not count those results twice (a doubled failure would double a failure rate). What counts
is the key the client sends (the Idempotency-Key header or `idempotency_key` in the
metadata), else the commit, branch, variant, run, job and PR with byte-for-byte the same
reports in the same order.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.wire import REPO_JSON
from tests.web.test_flaky_api import SHA_A, Flaky, case, flaky, report

__all__ = ["flaky"]  # the fixture, used by name

REPORT = report(case("test_ok"), case("test_bad", failed="assert 1 == 2"))


def runs_of(flaky: Flaky, name: str) -> float:
    test_id = flaky.test_id(name)
    test = flaky.ok("get-test-details", test_id=test_id)["test"]
    rate: float = test["failure_rate_last_7d"]
    return rate


def test_the_same_upload_twice_is_stored_once_and_answered_alike(flaky: Flaky) -> None:
    first = flaky.ok_upload(REPORT, run_id="build-7")
    again = flaky.ok_upload(REPORT, run_id="build-7")

    assert first["already_stored"] is False
    assert again["already_stored"] is True
    assert {**again, "already_stored": False} == first  # same id, counts and failures
    # One failure in one run, not two in two: a second, different run shows the difference.
    flaky.ok_upload(report(case("test_ok"), case("test_bad")), run_id="build-8")
    assert runs_of(flaky, "test_bad") == pytest.approx(1 / 2)


@pytest.mark.parametrize(
    "change",
    [{"run_id": "build-8"}, {"job_url": "https://ci.example/job/2"}, {"variant": "linux"}],
)
def test_another_run_of_the_same_reports_is_another_upload(
    flaky: Flaky, change: dict[str, Any]
) -> None:
    first = flaky.ok_upload(REPORT, run_id="build-7")
    second = flaky.ok_upload(REPORT, **{"run_id": "build-7", **change})
    assert second["already_stored"] is False
    assert second["upload_id"] != first["upload_id"]


def test_the_clients_key_makes_different_bytes_the_same_upload(flaky: Flaky) -> None:
    key = {"Idempotency-Key": "ci-run-41-shard-3"}
    first = flaky.client.post(
        "/v1/flaky-tests/upload",
        headers={**flaky.headers, **key},
        data={"metadata": metadata()},
        files=[("file", ("a.xml", REPORT, "application/xml"))],
    )
    # The retry rewrote its report (times differ): the key still names the same upload.
    rewritten = REPORT.replace(b'time="0.1"', b'time="0.2"')
    again = flaky.client.post(
        "/v1/flaky-tests/upload",
        headers={**flaky.headers, **key},
        data={"metadata": metadata()},
        files=[("file", ("a.xml", rewritten, "application/xml"))],
    )
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["already_stored"] is True
    assert again.json()["upload_id"] == first.json()["upload_id"]
    # The key in the metadata is the same key.
    in_metadata = flaky.ok_upload(rewritten, idempotency_key="ci-run-41-shard-3")
    assert in_metadata["upload_id"] == first.json()["upload_id"]


def test_a_key_too_long_is_refused(flaky: Flaky) -> None:
    response = flaky.client.post(
        "/v1/flaky-tests/upload",
        headers={**flaky.headers, "Idempotency-Key": "k" * 256},
        data={"metadata": metadata()},
        files=[("file", ("a.xml", REPORT, "application/xml"))],
    )
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]["message"]


def test_the_same_upload_sent_eight_times_at_once_is_stored_once(flaky: Flaky) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: flaky.upload(REPORT, run_id="build-9"), range(8)))

    assert [answer.status_code for answer in answers] == [200] * 8
    bodies = [answer.json() for answer in answers]
    assert len({body["upload_id"] for body in bodies}) == 1
    assert sorted(body["already_stored"] for body in bodies) == [False] + [True] * 7
    flaky.ok_upload(report(case("test_ok"), case("test_bad")), run_id="build-10")
    assert runs_of(flaky, "test_bad") == pytest.approx(1 / 2)


def metadata() -> str:
    return json.dumps(
        {"repo": dict(REPO_JSON), "org_url_slug": "acme", "commit_sha": SHA_A, "branch": "main"}
    )


def test_a_pr_number_past_two_to_the_31_is_stored(flaky: Flaky) -> None:
    # The API takes PR numbers up to 2^32 - 1; PostgreSQL's integer stops at 2^31 - 1.
    answer = flaky.ok_upload(REPORT, pr_number=4_294_967_295)
    assert answer["already_stored"] is False
    test = flaky.ok("get-test-details", test_id=flaky.test_id("test_bad"))["test"]
    assert test["pull_requests_impacted_last_7d"] == 1
