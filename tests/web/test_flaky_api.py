"""The flaky-test API end to end: uploads through the real parser and store, then the read API,
quarantine and settings, on every backend.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text

from keepgreen.adapters.db import flaky_store
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.settings import Settings
from keepgreen.web.app import create_app
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO, REPO_JSON, assert_error, parse_iso

SHA_A = "a" * 40
SHA_B = "b" * 40


def case(name: str, *, failed: str | None = None, classname: str = "pkg.TestThing") -> str:
    body = f"<failure message={quoteattr(failed)}>trace</failure>" if failed else ""
    return (
        f'<testcase classname="{classname}" name="{name}" file="tests/test_thing.py" '
        f'time="0.1">{body}</testcase>'
    )


def report(*cases: str, suite: str = "suite") -> bytes:
    return f'<testsuite name="{suite}">{"".join(cases)}</testsuite>'.encode()


class Flaky:
    """The flaky-test endpoints for acme's github.com/acme/widgets."""

    def __init__(self, client: TestClient, token: str, clock: FakeClock) -> None:
        self.client = client
        self.headers = {"x-api-token": token}
        self.clock = clock

    def upload(
        self,
        *files: bytes,
        sha: str = SHA_A,
        branch: str = "main",
        names: list[str] | None = None,
        **metadata: Any,
    ) -> Any:
        meta = {
            "repo": dict(REPO_JSON),
            "org_url_slug": "acme",
            "commit_sha": sha,
            "branch": branch,
            **metadata,
        }
        parts = [
            ("file", ((names or [])[i] if names else f"report-{i}.xml", data, "application/xml"))
            for i, data in enumerate(files)
        ]
        return self.client.post(
            "/v1/flaky-tests/upload",
            headers=self.headers,
            data={"metadata": json.dumps(meta)},
            files=parts,
        )

    def ok_upload(self, *files: bytes, **kwargs: Any) -> dict[str, Any]:
        response = self.upload(*files, **kwargs)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def post(self, path: str, **fields: Any) -> Any:
        body = {"repo": dict(REPO_JSON), "org_url_slug": "acme", **fields}
        return self.client.post(f"/v1/flaky-tests/{path}", headers=self.headers, json=body)

    def ok(self, path: str, **fields: Any) -> dict[str, Any]:
        response = self.post(path, **fields)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def unhealthy(self, status: str, size: int = 100) -> list[dict[str, Any]]:
        body = self.ok(
            "list-unhealthy-tests", status=status, page_query={"page_size": size, "page_token": ""}
        )
        tests: list[dict[str, Any]] = body["tests"]
        return tests

    def test_id(self, name: str) -> str:
        """The id of a test that has failed in the last week."""
        tests = self.failing(size=100)
        return next(test["id"] for test in tests if test["name"] == name)

    def failing(self, size: int = 100, **fields: Any) -> list[dict[str, Any]]:
        window = self.window()
        body = self.ok("list-failing-tests", page_query={"page_size": size}, **{**window, **fields})
        tests: list[dict[str, Any]] = body["tests"]
        return tests

    def window(self) -> dict[str, str]:
        end = self.clock() + timedelta(minutes=1)
        return {
            "start_time": (end - timedelta(days=7)).isoformat(),
            "end_time": end.isoformat(),
        }


@pytest.fixture
def flaky(client: TestClient, token: str, registered_repo: GitRepo, clock: FakeClock) -> Flaky:
    return Flaky(client, token, clock)


# -- upload ---------------------------------------------------------------------------------


def test_an_upload_answers_what_it_stored(flaky: Flaky) -> None:
    summary = flaky.ok_upload(
        report(case("test_ok"), case("test_bad", failed="assert 1 == 2")),
        gzip.compress(report(case("test_other"), suite="other")),
    )
    assert summary["files"] == 2
    assert summary["tests"] == 3
    assert (summary["passed"], summary["failed"], summary["skipped"]) == (2, 1, 0)
    assert summary["excluded_as_infrastructure_failure"] is False
    assert summary["quarantine_enabled"] is False
    (failure,) = summary["failures"]
    assert failure["name"] == "test_bad"
    assert failure["classname"] == "pkg.TestThing"
    assert failure["quarantined"] is False


def test_a_bad_report_refuses_the_whole_upload_naming_the_file(flaky: Flaky) -> None:
    response = flaky.upload(
        report(case("test_bad", failed="boom")),
        b"<testsuite><testcase name='x'>",
        names=["good.xml", "broken.xml"],
    )
    message = assert_error(response, 400, "invalid_report")
    assert "broken.xml" in message
    assert flaky.failing() == []  # the good report was not stored either


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"commit_sha": "not-a-sha"}, "commit_sha"),
        ({"branch": ""}, "branch"),
        ({"pr_number": -3}, "pr_number"),
        ({"variant": "x" * 65}, "variant"),
    ],
)
def test_bad_metadata_is_a_400_naming_the_field(
    flaky: Flaky, metadata: dict[str, Any], field: str
) -> None:
    message = assert_error(flaky.upload(report(case("t")), **metadata), 400)
    assert field in message


def test_an_upload_needs_metadata_and_a_file(flaky: Flaky, client: TestClient) -> None:
    no_file = client.post(
        "/v1/flaky-tests/upload",
        headers=flaky.headers,
        data={
            "metadata": json.dumps(
                {"repo": REPO_JSON, "commit_sha": SHA_A, "branch": "main", "org_url_slug": "acme"}
            )
        },
        files=[("other", ("x", b"", "text/plain"))],
    )
    assert "file" in assert_error(no_file, 400)
    no_metadata = client.post(
        "/v1/flaky-tests/upload", headers=flaky.headers, files=[("file", ("r.xml", report()))]
    )
    assert "metadata" in assert_error(no_metadata, 400)
    not_json = client.post(
        "/v1/flaky-tests/upload",
        headers=flaky.headers,
        data={"metadata": "{"},
        files=[("file", ("r.xml", report()))],
    )
    assert "metadata" in assert_error(not_json, 400)
    json_body = client.post("/v1/flaky-tests/upload", headers=flaky.headers, json={})
    assert_error(json_body, 400)


def test_uploads_need_a_token_and_see_only_their_org(
    flaky: Flaky, client: TestClient, other_token: str
) -> None:
    assert_error(client.post("/v1/flaky-tests/upload", files=[("file", ("r", b""))]), 401)
    assert_error(flaky.upload(report(case("t")), org_url_slug="globex"), 404)
    other = Flaky(client, other_token, flaky.clock)
    assert_error(other.upload(report(case("t")), org_url_slug="globex"), 404)  # not its repo


def test_an_upload_mostly_failing_is_kept_but_not_used_for_detection(flaky: Flaky) -> None:
    cases = [case(f"test_{i}", failed="connection refused") for i in range(9)] + [case("ok")]
    summary = flaky.ok_upload(report(*cases))
    assert summary["excluded_as_infrastructure_failure"] is True
    # Same commit, all passing: would be pass-on-retry for nine tests if the outage counted.
    flaky.ok_upload(report(*[case(f"test_{i}") for i in range(9)], case("ok")))
    assert flaky.unhealthy("FLAKY") == []
    assert len(flaky.failing()) == 9  # the failures are still listed as failures


# -- detection through the API ----------------------------------------------------------------


def test_pass_and_fail_on_one_commit_makes_a_test_flaky(flaky: Flaky) -> None:
    flaky.ok_upload(report(case("test_racy", failed="timeout after 5021 ms"), case("test_ok")))
    assert flaky.unhealthy("FLAKY") == []
    flaky.ok_upload(report(case("test_racy"), case("test_ok")), run_id="retry")
    (test,) = flaky.unhealthy("FLAKY")
    assert test["name"] == "test_racy"
    assert test["status"]["value"] == "flaky"
    assert test["status"]["reason"] == "Inconsistent results on the same commit (main)"
    assert "most_common_failures" not in test
    assert "failure_rate_last_7d" not in test
    assert test["file_path"] == "tests/test_thing.py"
    assert test["parent"] == "suite"
    assert test["quarantined"] is False


def test_a_test_failing_on_main_every_run_is_broken_by_the_third(
    flaky: Flaky, clock: FakeClock
) -> None:
    for run in range(3):
        assert flaky.unhealthy("BROKEN") == [], f"broken too early, after {run} runs"
        flaky.ok_upload(
            report(case("test_dead", failed="ImportError: no module x"), case("test_ok")),
            sha=f"{run:040x}",
        )
        clock.advance(minutes=20)
    (test,) = flaky.unhealthy("BROKEN")
    assert test["name"] == "test_dead"
    assert test["status"]["reason"] == "Failed in each of its last 3 runs on main, master"
    # One passing commit (the fix) resolves it.
    flaky.ok_upload(report(case("test_dead"), case("test_ok")), sha="f" * 40)
    assert flaky.unhealthy("BROKEN") == []


def test_a_pass_before_the_break_does_not_delay_broken(flaky: Flaky, clock: FakeClock) -> None:
    for run in range(5):
        flaky.ok_upload(report(case("test_x"), case("ok")), sha=f"{run:040x}")
        clock.advance(minutes=30)
    for run in range(5, 8):
        assert flaky.unhealthy("BROKEN") == []
        flaky.ok_upload(report(case("test_x", failed="broke"), case("ok")), sha=f"{run:040x}")
        clock.advance(minutes=30)
    assert [test["name"] for test in flaky.unhealthy("BROKEN")] == ["test_x"]


def test_a_failure_rate_monitor_from_settings(flaky: Flaky, clock: FakeClock) -> None:
    monitor = {
        "name": "flaky-on-main",
        "classification": "FLAKY",
        "activation": 0.3,
        "resolution": 0.1,
        "window_hours": 24,
        "min_sample": 4,
        "branches": ["main"],
    }
    flaky.ok("update-settings", settings={"monitors": {"failure_rate": [monitor]}})
    outcomes = ["bad", None, None, "bad"]  # 2 of 4 runs failed, on different commits
    for run, failed in enumerate(outcomes):
        flaky.ok_upload(report(case("test_y", failed=failed), case("ok")), sha=f"{run:040x}")
        clock.advance(minutes=10)
    (test,) = flaky.unhealthy("FLAKY")
    assert test["status"]["reason"] == "Failure rate 50% ≥ 30% over 24h on main (2 of 4 runs)"
    for run in range(4, 21):  # passes bring the rate under the 10% resolution: 2 of 21
        flaky.ok_upload(report(case("test_y"), case("ok")), sha=f"{run:040x}")
    assert flaky.unhealthy("FLAKY") == []


def test_buckets_per_branch_are_kept_only_while_a_monitor_reads_them(
    flaky: Flaky, clock: FakeClock, container: Container
) -> None:
    def buckets() -> int:
        with container.engine.connect() as connection:
            return int(connection.scalar(text("SELECT COUNT(*) FROM test_hourly_rollups")) or 0)

    flaky.ok_upload(
        report(case("test_y", failed="bad"), case("ok")), sha=f"{1:040x}", branch="feature/y"
    )
    assert buckets() == 0  # the default monitors read commits, not hours
    monitor = {
        "name": "any",
        "classification": "FLAKY",
        "activation": 0.5,
        "window_hours": 24,
        "min_sample": 3,
    }
    flaky.ok("update-settings", settings={"monitors": {"failure_rate": [monitor]}})
    for run, branch in enumerate(("main", "main", "feature/x"), start=2):
        flaky.ok_upload(
            report(case("test_y", failed="bad"), case("ok")), sha=f"{run:040x}", branch=branch
        )
    assert buckets() == 4  # two tests, an hour, two branches
    # The rate counts the runs since the monitor was set: 3 of 3 failed (the earlier upload
    # is in the figures, not in the buckets).
    (test,) = flaky.unhealthy("FLAKY")
    assert (
        test["status"]["reason"] == "Failure rate 100% ≥ 50% over 24h on all branches (3 of 3 runs)"
    )
    details = flaky.ok("get-test-details", test_id=test["id"])["test"]
    assert details["failure_rate_last_24h"] == 1.0


def test_failures_on_a_feature_branch_do_not_make_a_test_broken(
    flaky: Flaky, clock: FakeClock
) -> None:
    for run in range(5):
        flaky.ok_upload(
            report(case("test_wip", failed="nope"), case("test_ok")),
            sha=f"{run:040x}",
            branch="feature/x",
            pr_number=7,
        )
        clock.advance(minutes=5)
    assert flaky.unhealthy("BROKEN") == []


def test_details_give_rates_failures_owners_and_history(flaky: Flaky, clock: FakeClock) -> None:
    owners = "* @acme/everyone\ntests/ @acme/qa\n"
    flaky.ok_upload(
        report(case("test_racy", failed="Timeout after 5021 ms on 10.0.0.7")),
        codeowners=owners,
        pr_number=12,
        branch="feature/a",
    )
    flaky.ok_upload(report(case("test_racy")), pr_number=12, branch="feature/a")
    clock.advance(hours=30)
    flaky.ok_upload(
        report(case("test_racy", failed="Timeout after 4800 ms on 10.0.0.9")), sha=SHA_B
    )
    test_id = flaky.test_id("test_racy")
    body = flaky.ok("get-test-details", test_id=test_id)
    test = body["test"]
    assert test["id"] == test_id
    assert test["status"]["value"] == "flaky"
    assert test["status"]["reason"] == "Inconsistent results on the same commit (pull request #12)"
    assert test["codeowners"] == ["@acme/qa"]
    assert test["pull_requests_impacted_last_7d"] == 1
    assert test["failure_rate_last_7d"] == pytest.approx(2 / 3)
    assert test["failure_rate_last_24h"] == pytest.approx(1.0)
    (failure,) = test["most_common_failures"]
    assert failure["occurrence_count"] == 2
    assert "5021" not in failure["summary"]
    assert parse_iso(failure["last_occurrence"]) <= parse_iso(test["status"]["timestamp"]) + (
        timedelta(hours=31)
    )
    assert test["repository"]["html_url"] == "https://github.com/acme/widgets"
    assert test["html_url"].endswith(f"/acme/flaky-tests/test/{test_id}?repo=acme%2Fwidgets")
    assert [change["value"] for change in body["status_history"]] == ["flaky"]


def test_links_name_the_host_and_port_the_request_came_to(flaky: Flaky) -> None:
    flaky.ok_upload(report(case("test_racy", failed="boom")))
    test_id = flaky.test_id("test_racy")
    path = f"/acme/flaky-tests/test/{test_id}?repo=acme%2Fwidgets"

    body = flaky.ok("get-test-details", test_id=test_id)
    assert body["test"]["html_url"] == f"http://testserver{path}"

    response = flaky.client.post(
        "/v1/flaky-tests/get-test-details",
        headers={**flaky.headers, "host": "keepgreen.internal:9321"},
        json={"repo": dict(REPO_JSON), "org_url_slug": "acme", "test_id": test_id},
    )
    assert response.status_code == 200, response.text
    assert response.json()["test"]["html_url"] == f"http://keepgreen.internal:9321{path}"
    (listed,) = flaky.failing()
    assert listed["html_url"] == f"http://testserver{path}"


def test_links_follow_keepgreen_public_url_when_set(
    database_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    settings = Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        public_url="https://keepgreen.example.com/",
    )
    container = bootstrap(settings, clock=clock, run_migrations=False)
    try:
        token = container.admin.create_token("acme")
        container.admin.add_repository(
            org_slug="acme", ref=REPO, git_url=str(GitRepo(tmp_path / "w").path), ci_command=None
        )
        with TestClient(create_app(container=container)) as client:
            flaky = Flaky(client, token, clock)
            flaky.ok_upload(report(case("test_racy", failed="boom")))
            (listed,) = flaky.failing()
    finally:
        container.close()
    assert listed["html_url"] == (
        f"https://keepgreen.example.com/acme/flaky-tests/test/{listed['id']}?repo=acme%2Fwidgets"
    )


def test_details_of_unknown_or_malformed_ids(flaky: Flaky) -> None:
    assert_error(
        flaky.post("get-test-details", test_id="0" * 8 + "-0000-5000-8000-" + "0" * 12), 404
    )
    assert "test_id" in assert_error(flaky.post("get-test-details", test_id="nope"), 400)


# -- read API rules ---------------------------------------------------------------------------


def test_failing_tests_need_a_range_of_at_most_seven_days(flaky: Flaky) -> None:
    start = "2026-11-01T00:00:00Z"
    too_long = flaky.post(
        "list-failing-tests",
        start_time=start,
        end_time="2026-11-08T00:00:01Z",
        page_query={"page_size": 10},
    )
    assert "7 days" in assert_error(too_long, 400)
    backwards = flaky.post(
        "list-failing-tests",
        start_time=start,
        end_time="2026-10-31T00:00:00Z",
        page_query={"page_size": 10},
    )
    assert_error(backwards, 400)
    exactly_seven = flaky.post(
        "list-failing-tests",
        start_time=start,
        end_time="2026-11-08T00:00:00Z",
        page_query={"page_size": 10},
    )
    assert exactly_seven.status_code == 200


def test_start_is_inclusive_and_end_exclusive(flaky: Flaky, clock: FakeClock) -> None:
    flaky.ok_upload(report(case("test_bad", failed="x")))
    at = clock()  # the upload was stored a tick before this reading
    before = (at - timedelta(seconds=1)).isoformat()
    found = flaky.failing(start_time=before, end_time=at.isoformat())
    assert [test["name"] for test in found] == ["test_bad"]
    assert (
        flaky.failing(start_time=at.isoformat(), end_time=(at + timedelta(hours=1)).isoformat())
        == []
    )


@pytest.mark.parametrize(
    "page_query", [{}, {"page_size": 0}, {"page_size": 101}, {"page_size": "x"}]
)
def test_page_size_is_required_and_bounded(flaky: Flaky, page_query: dict[str, Any]) -> None:
    response = flaky.post("list-unhealthy-tests", status="FLAKY", page_query=page_query)
    assert "page_size" in assert_error(response, 400)


def test_unhealthy_status_must_be_flaky_or_broken(flaky: Flaky) -> None:
    response = flaky.post("list-unhealthy-tests", status="HEALTHY", page_query={"page_size": 5})
    assert "status" in assert_error(response, 400)
    lower = flaky.post("list-unhealthy-tests", status="flaky", page_query={"page_size": 5})
    assert lower.status_code == 200


def test_org_url_slug_must_be_the_tokens_org(flaky: Flaky) -> None:
    response = flaky.post(
        "list-unhealthy-tests", org_url_slug="globex", status="FLAKY", page_query={"page_size": 5}
    )
    assert_error(response, 404)


def test_pagination_walks_forwards_and_backwards(flaky: Flaky) -> None:
    names = [f"test_{i:02d}" for i in range(7)]
    flaky.ok_upload(report(*[case(name, failed="bad") for name in names], case("ok")))
    # With 7 of 8 failing (87%) the upload counts as an outage for detection, not for listing.
    window = flaky.window()
    seen: list[str] = []
    pages: list[dict[str, Any]] = []
    token = ""
    while True:
        body = flaky.ok(
            "list-failing-tests", page_query={"page_size": 3, "page_token": token}, **window
        )
        pages.append(body)
        seen += [test["name"] for test in body["tests"]]
        token = body["page"]["next_page_token"]
        if token == "":
            break
    assert sorted(seen) == names
    assert len(seen) == len(set(seen))
    assert [page["page"]["page_index"] for page in pages] == [0, 1, 2]
    assert {page["page"]["total_rows"] for page in pages} == {7}
    assert {page["page"]["total_pages"] for page in pages} == {3}
    assert pages[0]["page"]["prev_page_token"] == ""
    last = pages[-1]["page"]
    assert last["last_page_token"] == pages[0]["page"]["last_page_token"]
    # Backwards from the last page to the first, through prev tokens.
    back: list[str] = []
    token = last["prev_page_token"]
    back_pages = [pages[-1]]
    while token:
        body = flaky.ok(
            "list-failing-tests", page_query={"page_size": 3, "page_token": token}, **window
        )
        back_pages.append(body)
        token = body["page"]["prev_page_token"]
    back = [test["name"] for page in reversed(back_pages) for test in page["tests"]]
    assert back == seen
    jumped = flaky.ok(
        "list-failing-tests",
        page_query={"page_size": 3, "page_token": last["last_page_token"]},
        **window,
    )
    assert jumped["tests"] == pages[-1]["tests"]


def test_page_tokens_are_tamper_proof_and_bound_to_their_query(flaky: Flaky) -> None:
    flaky.ok_upload(report(*[case(f"t{i}", failed="bad") for i in range(4)]))
    window = flaky.window()
    first = flaky.ok("list-failing-tests", page_query={"page_size": 2}, **window)
    token = first["page"]["next_page_token"]
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    for bad in (tampered, "garbage", "x" * 600):
        response = flaky.post(
            "list-failing-tests", page_query={"page_size": 2, "page_token": bad}, **window
        )
        assert "page_token" in assert_error(response, 400)
    other_size = flaky.post(
        "list-failing-tests", page_query={"page_size": 3, "page_token": token}, **window
    )
    assert "page_token" in assert_error(other_size, 400)
    other_listing = flaky.post(
        "list-unhealthy-tests", status="FLAKY", page_query={"page_size": 2, "page_token": token}
    )
    assert "page_token" in assert_error(other_listing, 400)


def test_an_empty_listing_has_an_empty_page(flaky: Flaky) -> None:
    body = flaky.ok("list-unhealthy-tests", status="BROKEN", page_query={"page_size": 10})
    assert body == {
        "tests": [],
        "page": {
            "total_rows": 0,
            "total_pages": 0,
            "next_page_token": "",
            "prev_page_token": "",
            "last_page_token": "",
            "page_index": 0,
        },
    }


# -- quarantine, tickets, flags, settings -------------------------------------------------------


def make_flaky(flaky: Flaky, name: str = "test_racy") -> str:
    flaky.ok_upload(report(case(name, failed="flake"), case("test_ok")))
    flaky.ok_upload(report(case(name), case("test_ok")))
    return flaky.test_id(name)


def enable_quarantine(flaky: Flaky, **quarantine: Any) -> None:
    flaky.ok("update-settings", settings={"quarantine": {"enabled": True, **quarantine}})


def test_quarantine_follows_settings_and_overrides(flaky: Flaky) -> None:
    racy = make_flaky(flaky)
    flaky.ok_upload(report(case("test_dead", failed="x"), case("test_ok")), sha=SHA_B)
    dead = flaky.test_id("test_dead")
    listed = flaky.ok("list-quarantined-tests", page_query={"page_size": 10})
    assert listed["quarantined_tests"] == []  # quarantining is off by default

    enable_quarantine(flaky)
    listed = flaky.ok("list-quarantined-tests", page_query={"page_size": 10})
    (entry,) = listed["quarantined_tests"]
    assert entry["test_case_id"] == racy
    assert entry["status"] == "FLAKY"
    assert entry["quarantine_setting"] == "AUTO_QUARANTINE"
    assert entry["parent"] == "suite"

    flaky.ok("set-quarantine-override", test_id=dead, setting="ALWAYS_QUARANTINE")
    flaky.ok("set-quarantine-override", test_id=racy, setting="NEVER_QUARANTINE")
    listed = flaky.ok("list-quarantined-tests", page_query={"page_size": 10})
    (entry,) = listed["quarantined_tests"]
    assert (entry["test_case_id"], entry["quarantine_setting"]) == (dead, "ALWAYS_QUARANTINE")

    summary = flaky.ok_upload(
        report(case("test_dead", failed="x"), case("test_racy", failed="y")), sha="c" * 40
    )
    assert summary["quarantine_enabled"] is True
    assert {f["name"]: f["quarantined"] for f in summary["failures"]} == {
        "test_dead": True,
        "test_racy": False,
    }
    config = flaky.client.post(
        "/v1/metrics/getQuarantineConfig",
        headers=flaky.headers,
        json={
            "repo": REPO_JSON,
            "orgUrlSlug": "acme",
            "testIdentifiers": [{"id": dead}, {"id": racy}],
        },
    )
    assert config.json() == {"isDisabled": False, "testIds": [dead]}
    flaky.ok("set-quarantine-override", test_id=racy, setting=None)
    assert flaky.ok("get-test-details", test_id=racy)["test"]["quarantined"] is True


def make_broken(flaky: Flaky, clock: FakeClock, name: str = "test_dead") -> str:
    """`name` fails in three runs on main in a row: the failing streak says broken."""
    for run in range(3):
        flaky.ok_upload(report(case(name, failed="x"), case("ok")), sha=f"{run:040x}")
        clock.advance(minutes=10)
    (test,) = flaky.unhealthy("BROKEN")
    assert test["name"] == name
    return str(test["id"])


def quarantine_config(flaky: Flaky, *test_ids: str) -> dict[str, Any]:
    """What Trunk's CLI hears from getQuarantineConfig about `test_ids`."""
    response = flaky.client.post(
        "/v1/metrics/getQuarantineConfig",
        headers=flaky.headers,
        json={
            "repo": REPO_JSON,
            "orgUrlSlug": "acme",
            "testIdentifiers": [{"id": test_id} for test_id in test_ids],
        },
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def quarantined_ids(flaky: Flaky) -> list[str]:
    listed = flaky.ok("list-quarantined-tests", page_query={"page_size": 10})
    return [entry["test_case_id"] for entry in listed["quarantined_tests"]]


def test_broken_tests_are_not_quarantined_automatically_by_default(
    flaky: Flaky, clock: FakeClock
) -> None:
    dead = make_broken(flaky, clock)
    enable_quarantine(flaky)
    (test,) = flaky.unhealthy("BROKEN")
    assert test["quarantined"] is False
    assert quarantined_ids(flaky) == []
    assert quarantine_config(flaky, dead) == {"isDisabled": False, "testIds": []}
    summary = flaky.ok_upload(report(case("test_dead", failed="x")), sha="d" * 40)
    assert [f["quarantined"] for f in summary["failures"]] == [False]


def test_a_repository_may_quarantine_its_broken_tests(flaky: Flaky, clock: FakeClock) -> None:
    dead = make_broken(flaky, clock)
    racy = make_flaky(flaky)
    enable_quarantine(flaky, auto_quarantine_broken=True)

    (test,) = flaky.unhealthy("BROKEN")
    assert test["quarantined"] is True
    assert flaky.ok("get-test-details", test_id=dead)["test"]["quarantined"] is True
    listed = flaky.ok("list-quarantined-tests", page_query={"page_size": 10})
    entries = {entry["test_case_id"]: entry for entry in listed["quarantined_tests"]}
    assert set(entries) == {dead, racy}
    assert (entries[dead]["status"], entries[dead]["quarantine_setting"]) == (
        "BROKEN",
        "AUTO_QUARANTINE",
    )
    assert listed["page"]["total_rows"] == 2
    assert quarantine_config(flaky, dead, racy) == {"isDisabled": False, "testIds": [dead, racy]}
    summary = flaky.ok_upload(report(case("test_dead", failed="x")), sha="d" * 40)
    assert [f["quarantined"] for f in summary["failures"]] == [True]

    # Broken tests only: the flaky one leaves, the broken one stays.
    enable_quarantine(flaky, auto_quarantine_flaky=False, auto_quarantine_broken=True)
    assert quarantined_ids(flaky) == [dead]
    assert quarantine_config(flaky, dead, racy)["testIds"] == [dead]

    # A person's NEVER keeps the broken test out.
    flaky.ok("set-quarantine-override", test_id=dead, setting="NEVER_QUARANTINE")
    assert quarantined_ids(flaky) == []
    assert quarantine_config(flaky, dead)["testIds"] == []
    assert flaky.ok("get-test-details", test_id=dead)["test"]["quarantined"] is False


def test_quarantine_switches_default_and_are_replaced_like_every_setting(flaky: Flaky) -> None:
    default = {"enabled": False, "auto_quarantine_flaky": True, "auto_quarantine_broken": False}
    assert flaky.ok("get-settings")["settings"]["quarantine"] == default

    switches = {"enabled": True, "auto_quarantine_flaky": False, "auto_quarantine_broken": True}
    answer = flaky.ok("update-settings", settings={"quarantine": switches})
    assert answer["settings"]["quarantine"] == switches
    assert flaky.ok("get-settings")["settings"]["quarantine"] == switches

    # update-settings replaces every setting: an omitted switch takes its default again.
    flaky.ok("update-settings", settings={"quarantine": {"enabled": True}})
    assert flaky.ok("get-settings")["settings"]["quarantine"] == {**default, "enabled": True}


def test_link_ticket_shows_on_the_test(flaky: Flaky) -> None:
    test_id = make_flaky(flaky)
    body = {"repo": REPO_JSON, "test_case_id": test_id, "external_ticket_id": "KAN-123"}
    response = flaky.client.post(
        "/v1/flaky-tests/link-ticket-to-test-case", headers=flaky.headers, json=body
    )
    assert response.status_code == 200
    assert response.json() == {}
    test = flaky.ok("get-test-details", test_id=test_id)["test"]
    assert test["ticket"] == {"html_url": "urn:ticket:KAN-123"}
    flaky.ok(
        "update-settings",
        settings={"ticket_url_template": "https://acme.atlassian.net/browse/{id}"},
    )
    test = flaky.ok("get-test-details", test_id=test_id)["test"]
    assert test["ticket"] == {"html_url": "https://acme.atlassian.net/browse/KAN-123"}
    unknown = {**body, "test_case_id": "0" * 8 + "-0000-5000-8000-" + "0" * 12}
    assert_error(
        flaky.client.post(
            "/v1/flaky-tests/link-ticket-to-test-case", headers=flaky.headers, json=unknown
        ),
        404,
    )


def test_a_manual_flag_makes_a_test_flaky_until_removed(flaky: Flaky) -> None:
    flaky.ok_upload(report(case("test_suspect", failed="odd"), case("ok")))
    test_id = flaky.test_id("test_suspect")
    flaky.ok("flag-test", test_id=test_id, flaky=True, reason="seen it flake locally")
    (test,) = flaky.unhealthy("FLAKY")
    assert test["status"]["reason"] == "Manually flagged as flaky: seen it flake locally"
    flaky.ok("flag-test", test_id=test_id, flaky=False)
    assert flaky.unhealthy("FLAKY") == []
    history = flaky.ok("get-test-details", test_id=test_id)["status_history"]
    assert [change["value"] for change in history] == ["flaky", "healthy"]


def test_disabling_a_monitor_resolves_its_tests_at_once(flaky: Flaky) -> None:
    make_flaky(flaky)
    settings = flaky.ok("get-settings")["settings"]
    assert settings["monitors"]["pass_on_retry"]["enabled"] is True
    settings["monitors"]["pass_on_retry"]["enabled"] = False
    flaky.ok("update-settings", settings=settings)
    assert flaky.unhealthy("FLAKY") == []


def test_pass_on_retry_recovers_after_its_recovery_days(flaky: Flaky, clock: FakeClock) -> None:
    make_flaky(flaky)
    clock.advance(days=6)
    flaky.client.app.state.container.housekeeping.sweep()
    assert len(flaky.unhealthy("FLAKY")) == 1
    clock.advance(days=1, hours=1)
    flaky.client.app.state.container.housekeeping.sweep()
    assert flaky.unhealthy("FLAKY") == []
    test_id = flaky.ok("list-failing-tests", page_query={"page_size": 5}, **flaky.window())
    assert test_id["tests"] == []  # and the failure is older than a week now


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"monitors": {"pass_on_retry": {"recovery_days": 16}}}, "recovery_days"),
        ({"monitors": {"failure_rate": [{"name": "x", "classification": "flaky"}]}}, "activation"),
        ({"monitors": {"infrastructure_failure_share": 0}}, "infrastructure_failure_share"),
        ({"ticket_url_template": "https://no-placeholder"}, "ticket_url_template"),
        ({"quarantine": {"enabled": "yes"}}, "enabled"),
        ({"quarantine": {"auto_quarantine_broken": 1}}, "auto_quarantine_broken"),
    ],
)
def test_bad_settings_are_refused(flaky: Flaky, settings: dict[str, Any], field: str) -> None:
    assert field in assert_error(flaky.post("update-settings", settings=settings), 400)


def test_a_failure_count_monitor_from_settings(flaky: Flaky, clock: FakeClock) -> None:
    monitor = {
        "name": "any-failure",
        "classification": "flaky",
        "failures": 2,
        "window_hours": 24,
        "resolution_hours": 48,
    }
    flaky.ok("update-settings", settings={"monitors": {"failure_count": [monitor]}})
    flaky.ok_upload(report(case("test_x", failed="a"), case("ok")), sha="1" * 40)
    assert flaky.unhealthy("FLAKY") == []
    flaky.ok_upload(report(case("test_x", failed="a"), case("ok")), sha="2" * 40)
    (test,) = flaky.unhealthy("FLAKY")
    assert test["status"]["reason"] == "2 failures in 24h on all branches"
    clock.advance(hours=49)
    flaky.client.app.state.container.housekeeping.sweep()
    assert flaky.unhealthy("FLAKY") == []


def test_owners_come_from_the_repositorys_codeowners_on_its_default_branch(
    flaky: Flaky, registered_repo: GitRepo
) -> None:
    registered_repo.commit({".github/CODEOWNERS": "*.py @acme/python\n"}, "Add owners")
    flaky.ok_upload(report(case("test_owned", failed="x"), case("ok")))
    test_id = flaky.test_id("test_owned")
    assert flaky.ok("get-test-details", test_id=test_id)["test"]["codeowners"] == ["@acme/python"]
    registered_repo.commit({".github/CODEOWNERS": "tests/ @acme/qa\n"}, "New owners")
    flaky.ok_upload(report(case("test_owned", failed="x"), case("ok")), sha=SHA_B)
    assert flaky.ok("get-test-details", test_id=test_id)["test"]["codeowners"] == ["@acme/qa"]


def walk(flaky: Flaky, path: str, items: str, **fields: Any) -> tuple[list[str], list[str]]:
    """Every page forwards by next_page_token, then backwards by prev_page_token from the
    last page; the item names in page order, both ways.
    """
    pages: list[dict[str, Any]] = []
    token = ""
    while True:
        body = flaky.ok(path, page_query={"page_size": 2, "page_token": token}, **fields)
        pages.append(body)
        token = body["page"]["next_page_token"]
        if not token:
            break
    backwards = [pages[-1]]
    token = pages[-1]["page"]["prev_page_token"]
    while token:
        body = flaky.ok(path, page_query={"page_size": 2, "page_token": token}, **fields)
        backwards.append(body)
        token = body["page"]["prev_page_token"]
    forward = [item["name"] for page in pages for item in page[items]]
    back = [item["name"] for page in reversed(backwards) for item in page[items]]
    return forward, back


def test_every_listing_pages_both_ways(flaky: Flaky) -> None:
    names = [f"test_{i}" for i in range(5)]
    passing = [case(f"ok_{i}") for i in range(5)]
    flaky.ok_upload(report(*[case(name, failed="flake") for name in names], *passing))
    flaky.ok_upload(report(*[case(name) for name in names], *passing))
    enable_quarantine(flaky)
    listings = [
        ("list-unhealthy-tests", "tests", {"status": "FLAKY"}),
        ("list-quarantined-tests", "quarantined_tests", {}),
        ("list-failing-tests", "tests", flaky.window()),
    ]
    for path, items, fields in listings:
        forward, back = walk(flaky, path, items, **fields)
        assert sorted(forward) == names, path
        assert back == forward, path


def test_hostile_reports_are_refused_through_the_api(flaky: Flaky) -> None:
    bomb = gzip.compress(b"<testsuite>" + b" " * (60 * 1024 * 1024) + b"</testsuite>")
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
        b"<testsuite><testcase name='&lol2;'/></testsuite>"
    )
    for name, data in (("bomb.xml.gz", bomb), ("laughs.xml", laughs)):
        message = assert_error(flaky.upload(data, names=[name]), 400, "invalid_report")
        assert name in message
    assert flaky.failing() == []


def test_an_upload_over_20_mib_is_refused_before_it_is_read(flaky: Flaky) -> None:
    response = flaky.upload(b"x" * (21 * 1024 * 1024))
    assert_error(response, 413)


def test_times_beyond_what_utc_can_hold_are_a_400_not_a_crash(flaky: Flaky) -> None:
    response = flaky.post(
        "list-failing-tests",
        start_time="9999-12-31T23:59:59-23:59",
        end_time="9999-12-31T23:59:59-23:59",
        page_query={"page_size": 10},
    )
    assert "end_time" in assert_error(response, 400)


# -- bounded uploads and text that is not Unicode (issue 10) ----------------------------------


def rerun_flood(reruns: int) -> bytes:
    """A gzipped report of one testcase with `reruns` reruns: a result for a few bytes each."""
    return gzip.compress(
        b'<testsuite><testcase name="t">' + b"<rerunFailure/>" * reruns + b"</testcase></testsuite>"
    )


def test_an_upload_past_the_result_limit_is_refused_before_the_rest_is_read(
    flaky: Flaky,
) -> None:
    # The upload: 7.6 million results in four reports were all read (103 s, 1.7 GB)
    # before the 400. Now the first report is read up to its 200,001st result, and no further.
    started = time.monotonic()
    response = flaky.upload(*[rerun_flood(1_900_000)] * 4, names=[f"r{i}.xml.gz" for i in range(4)])
    elapsed = time.monotonic() - started

    message = assert_error(response, 400, "too_many_results")
    assert message.startswith("file r0.xml.gz: the upload holds more than 200,000 results")
    assert elapsed < 10  # about 1 s; reading it all took minutes
    assert flaky.failing() == []


def test_the_result_limit_is_the_uploads_not_each_reports(flaky: Flaky) -> None:
    # 100,000 + 100,001 testcases: each report is within every limit of its own.
    first = b"<testsuite>" + b'<testcase name="a"/>' * 100_000 + b"</testsuite>"
    second = b"<testsuite>" + b'<testcase name="b"/>' * 100_001 + b"</testsuite>"

    response = flaky.upload(first, second, names=["first.xml", "second.xml"])

    message = assert_error(response, 400, "too_many_results")
    assert message.startswith("file second.xml: the upload holds more than 200,000 results")
    assert flaky.failing() == []


SURROGATES = ["\ud800", "a\udfffb", "\udbff"]


@pytest.mark.parametrize("surrogate", SURROGATES, ids=ascii)
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("branch", "main{}"),
        ("variant", "linux{}"),
        ("run_id", "{}"),
        ("job_url", "https://ci.example.com/{}"),
        ("codeowners", "* @acme/{}"),
        ("org_url_slug", "acme{}"),
        ("commit_sha", "{}"),
    ],
)
def test_a_lone_surrogate_in_upload_metadata_is_a_400_naming_the_field(
    flaky: Flaky, field: str, value: str, surrogate: str
) -> None:
    response = flaky.upload(report(case("test_a")), **{field: value.format(surrogate)})

    message = assert_error(response, 400)
    assert message.startswith(f"metadata.{field}: must be valid Unicode text"), message
    assert flaky.failing() == []


def test_a_lone_surrogate_in_the_uploads_repo_is_a_400(flaky: Flaky) -> None:
    response = flaky.upload(report(case("test_a")), repo={**REPO_JSON, "owner": "acme\ud800"})

    assert assert_error(response, 400).startswith("metadata.repo.owner: must be valid Unicode")


def test_upload_metadata_nested_100_000_deep_is_a_400(flaky: Flaky) -> None:
    nested = '{"repo": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = flaky.client.post(
        "/v1/flaky-tests/upload",
        headers=flaky.headers,
        data={"metadata": nested},
        files=[("file", ("r.xml", report(case("test_a")), "application/xml"))],
    )

    assert assert_error(response, 400) == (
        "metadata: is nested too deeply (JSON arrays and objects more than several hundred "
        "levels deep)"
    )


@pytest.mark.parametrize(
    ("path", "fields", "named"),
    [
        ("flag-test", {"test_id": str(uuid.uuid4()), "flaky": True, "reason": "\ud800"}, "reason"),
        (
            "link-ticket-to-test-case",
            {"test_case_id": str(uuid.uuid4()), "external_ticket_id": "KAN-\ud800"},
            "external_ticket_id",
        ),
        (
            "list-quarantined-tests",
            {"page_query": {"page_size": 5, "page_token": "\udc00"}},
            "page_query.page_token",
        ),
        ("get-settings", {"org_url_slug": "\ud800"}, "org_url_slug"),
    ],
)
def test_a_lone_surrogate_in_a_flaky_test_request_is_a_400_naming_the_field(
    flaky: Flaky, path: str, fields: dict[str, Any], named: str
) -> None:
    body = {"repo": dict(REPO_JSON), "org_url_slug": "acme", **fields}
    response = flaky.client.post(
        f"/v1/flaky-tests/{path}",
        headers={**flaky.headers, "content-type": "application/json"},
        content=json.dumps(body).encode(),  # the surrogate escaped, as a client would send it
    )

    assert assert_error(response, 400).startswith(f"{named}: must be valid Unicode text")


def test_statistics_follow_an_upload_of_many_new_tests(
    flaky: Flaky, container: Container, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL plans the listings by its statistics, which autovacuum brings up to date a
    # minute or more after a bulk load; keepgreen refreshes them after one (at most once a
    # minute per database, which another test of this process may have used up).
    monkeypatch.setattr(flaky_store, "_statistics_at", {})
    many = report(*(case(f"test_{n}") for n in range(1_200)))
    flaky.ok_upload(many)
    with container.engine.connect() as connection:
        if database_url.startswith("postgresql"):
            estimated = connection.scalar(
                text("SELECT reltuples FROM pg_class WHERE oid = 'test_cases'::regclass")
            )
            assert estimated is not None
            assert estimated >= 1_200
        else:  # SQLite keeps no statistics unless asked; the upload is stored all the same
            assert connection.scalar(text("SELECT COUNT(*) FROM test_cases")) == 1_200


def test_an_upload_joins_its_staged_tests_by_hash_and_reads_history_by_key(
    flaky: Flaky, container: Container, database_url: str
) -> None:
    # On PostgreSQL the statements that join the staged upload with the tests are planned
    # without nested loops (a new repository's tests are unknown to the statistics, and a
    # nested loop over both took minutes for 50,000 tests); detection, after them, reads each
    # test's history through the keys, which takes nested loops again.
    settings: dict[str, set[str]] = {"staged": set(), "history": set()}

    def record(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
        kind = "staged" if "kg_upload_tests" in statement else None
        kind = "history" if "unnest" in statement else kind
        if kind is None or not database_url.startswith("postgresql"):
            return
        cursor.execute("SHOW enable_nestloop")
        settings[kind].add(cursor.fetchone()[0])

    flaky.ok_upload(report(case("test_a", failed="boom"), case("test_b")))
    event.listen(container.engine, "before_cursor_execute", record)
    try:
        body = flaky.ok_upload(
            report(case("test_a", failed="boom"), case("test_b")), sha=f"{2:040x}"
        )
    finally:
        event.remove(container.engine, "before_cursor_execute", record)
    assert body["failed"] == 1
    if database_url.startswith("postgresql"):
        assert settings == {"staged": {"off"}, "history": {"on"}}
    else:  # SQLite plans its own way: nothing is set
        assert settings == {"staged": set(), "history": set()}
