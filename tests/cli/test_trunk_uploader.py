"""Trunk's uploader against a served keepgreen, over real HTTP: the requests trunk-analytics-cli
makes (replayed: its Rust build needs crates this machine cannot fetch), with bundles made the
way it makes them. createBundleUpload, the PUT of the bundle to the URL it answers, and the
tests then in the read API under the ids getQuarantineConfig is asked about.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from keepgreen.adapters.db.tables import TestUploadRow as UploadRow
from keepgreen.bootstrap import Container
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.trunk_uploader import (
    SHA,
    BundleParts,
    Member,
    Run,
    Uploader,
    internal_bin,
    junit_bundle,
    meta_json,
    meta_test,
    tar_bytes,
    trunk_test_id,
    upload_metrics,
    zstd,
    zstd_bomb,
)
from tests.support.wire import REPO, REPO_JSON, assert_error

FILE = "spec/widgets_spec.rb"
CLASSNAME = "spec.widgets_spec"


def junit(*cases: tuple[str, str | None], suite: str = "widgets") -> bytes:
    """A report of testcases (name, failure message or None) in one suite."""
    body = "".join(
        f'<testcase name="{name}" classname="{CLASSNAME}" file="{FILE}" time="0.2">'
        + (f'<failure message="{failure}">expected true\n  at spec:3</failure>' if failure else "")
        + "</testcase>"
        for name, failure in cases
    )
    return f'<testsuite name="{suite}" tests="{len(cases)}">{body}</testsuite>'.encode()


def id_of(name: str, suite: str = "widgets") -> str:
    """The id the uploader computes for one of these reports' testcases."""
    return trunk_test_id(name=name, parent=suite, classname=CLASSNAME, file=FILE)


class ReadApi:
    """keepgreen's flaky-test read API, as a script would call it."""

    def __init__(self, url: str, token: str, clock: FakeClock) -> None:
        self.url, self.headers, self.clock = url, {"x-api-token": token}, clock

    def post(self, path: str, **fields: Any) -> Any:
        body = {"repo": dict(REPO_JSON), "org_url_slug": "acme", **fields}
        response = httpx.post(f"{self.url}/flaky-tests/{path}", json=body, headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()

    def failing(self) -> list[dict[str, Any]]:
        end = self.clock.now + timedelta(minutes=1)
        window = {"start_time": (end - timedelta(days=7)).isoformat(), "end_time": end.isoformat()}
        tests: list[dict[str, Any]] = self.post(
            "list-failing-tests", page_query={"page_size": 100}, **window
        )["tests"]
        return tests

    def details(self, test_id: str) -> dict[str, Any]:
        test: dict[str, Any] = self.post("get-test-details", test_id=test_id)["test"]
        return test


@pytest.fixture
def uploader(live_url: str, token: str, registered_repo: GitRepo) -> Uploader:
    """The uploader with TRUNK_PUBLIC_API_ADDRESS set to the served keepgreen."""
    return Uploader(live_url.removesuffix("/v1"), token)


@pytest.fixture
def read_api(live_url: str, token: str, clock: FakeClock) -> ReadApi:
    return ReadApi(live_url, token, clock)


def two_reports() -> BundleParts:
    """`trunk flakytests test` after a run with one failure, on PR 12 in GitHub Actions."""
    failed = meta_test("turns", "widgets", classname=CLASSNAME, file=FILE, quarantined=False)
    return junit_bundle(
        [
            ("reports/widgets.xml", junit(("turns", "expected true"), ("spins", None))),
            ("reports/gears.xml", junit(("meshes", None), suite="gears")),
        ],
        codeowners="/spec/ @acme/widgets-team\n",
        failed_tests=[failed],
    )


# -- the upload, end to end ----------------------------------------------------------------


def test_a_bundle_put_to_the_url_lands_in_the_read_api(
    uploader: Uploader, read_api: ReadApi, live_url: str
) -> None:
    created = uploader.create_bundle_upload()
    assert created.status_code == 200, created.text
    answer = created.json()
    assert set(answer) >= {"id", "idV2", "url", "key"}
    assert answer["url"].startswith(f"{live_url}/flaky-tests/bundles/")
    assert answer["id"] in answer["key"]

    put = uploader.put_bundle(answer["url"], two_reports().bundle())
    assert put.status_code == 200, put.text
    summary = put.json()
    assert (summary["files"], summary["tests"], summary["passed"], summary["failed"]) == (
        2,
        3,
        2,
        1,
    )
    assert summary["already_stored"] is False
    # The id the uploader computes for the failure is the one keepgreen stored it under.
    assert [failure["test_id"] for failure in summary["failures"]] == [id_of("turns")]

    (failing,) = read_api.failing()
    assert failing["id"] == id_of("turns")
    assert (failing["name"], failing["parent"], failing["file_path"]) == ("turns", "widgets", FILE)
    # Its owners come from the CODEOWNERS the bundle carried; PR 12 from the CI's variables.
    assert failing["codeowners"] == ["@acme/widgets-team"]
    assert failing["pull_requests_impacted_last_7d"] == 1
    assert read_api.details(id_of("meshes", suite="gears"))["name"] == "meshes"


def test_getquarantineconfig_names_the_bundles_tests_by_the_uploaders_ids(
    uploader: Uploader, read_api: ReadApi
) -> None:
    assert uploader.put_bundle(uploader.upload_url(), two_reports().bundle()).status_code == 200
    read_api.post("update-settings", settings={"quarantine": {"enabled": True}})
    read_api.post("set-quarantine-override", test_id=id_of("turns"), setting="ALWAYS_QUARANTINE")
    answer = uploader.get_quarantine_config([id_of("turns"), id_of("spins")])
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"isDisabled": False, "testIds": [id_of("turns")]}


def stored_uploads(container: Container) -> list[dict[str, Any]]:
    """The rows of the uploads stored, as the database holds them."""
    columns = ("commit_sha", "branch", "pr_number", "job_url", "run_id", "variant", "files")
    with container.engine.connect() as connection:
        rows = connection.execute(select(*(getattr(UploadRow, c) for c in columns)))
        return [dict(zip(columns, row, strict=True)) for row in rows]


def test_the_upload_is_the_prs_head_on_its_branch_as_its_ci_says(
    uploader: Uploader, container: Container
) -> None:
    """The commit the uploader resolved (the PR's head, not GitHub's merge commit), the PR's
    branch and number, and the job, from the CI variables the uploader captured.
    """
    assert uploader.put_bundle(uploader.upload_url(), two_reports().bundle()).status_code == 200
    assert stored_uploads(container) == [
        {
            "commit_sha": SHA,
            "branch": "feature/speedup",
            "pr_number": 12,
            "job_url": "https://github.com/acme/widgets/actions/runs/9949497745",
            "run_id": "9949497745-1",
            "variant": "",
            "files": 2,
        }
    ]


def test_without_ci_variables_the_branch_is_the_one_git_named(
    uploader: Uploader, container: Container
) -> None:
    bundle = junit_bundle(
        [("junit.xml", junit(("spins", None)))],
        envs={"TRUNK_PR_NUMBER": "77"},
        branch="refs/heads/release/2.0",
        variant="linux",
    )
    assert uploader.put_bundle(uploader.upload_url(), bundle.bundle()).status_code == 200
    (stored,) = stored_uploads(container)
    assert (stored["branch"], stored["pr_number"], stored["variant"]) == (
        "release/2.0",
        77,
        "linux",
    )
    assert (stored["job_url"], stored["run_id"]) == (None, None)


def test_a_second_put_of_the_same_url_stores_nothing_new(
    uploader: Uploader, read_api: ReadApi
) -> None:
    url = uploader.upload_url()
    first = uploader.put_bundle(url, two_reports().bundle())
    assert first.status_code == 200, first.text
    # The same URL again, even with other results in the bundle: S3 would take the PUT,
    # keepgreen answers the first upload and stores nothing.
    other = junit_bundle([("reports/widgets.xml", junit(("turns", "again"), ("new_one", "boom")))])
    again = uploader.put_bundle(url, other.bundle())
    assert again.status_code == 200, again.text
    assert again.json()["already_stored"] is True
    assert again.json()["upload_id"] == first.json()["upload_id"]
    assert [test["name"] for test in read_api.failing()] == ["turns"]
    (failure,) = read_api.details(id_of("turns"))["most_common_failures"]
    assert failure["occurrence_count"] == 1


def test_each_upload_url_is_an_upload_of_its_own(uploader: Uploader, read_api: ReadApi) -> None:
    for _ in range(2):
        assert uploader.put_bundle(uploader.upload_url(), two_reports().bundle()).status_code == 200
    (failure,) = read_api.details(id_of("turns"))["most_common_failures"]
    assert failure["occurrence_count"] == 2


# -- results only in internal.bin (RSpec's plugin) ------------------------------------------


def rspec_bundle(*runs: Run) -> BundleParts:
    """What RSpec's plugin uploads: its TestReport as the one report, nothing else."""
    return BundleParts(
        meta=meta_json(internal_files=["tmp/rspec_trunk.bin"], internal_bundled_file="internal/0"),
        internal_bin=internal_bin(*runs),
    )


def test_a_bundle_with_only_internal_bin_is_read_with_its_retries(
    uploader: Uploader, read_api: ReadApi
) -> None:
    """RSpec retried `turns` into a pass: attempt 0 failed, attempt 1 passed. The test passed,
    and failed and passed on one commit: flaky by the pass-on-retry monitor.
    """
    bundle = rspec_bundle(
        Run("turns", status="failure", attempt_index=0, attempt_number=0, message="expected true"),
        Run("turns", status="success", attempt_index=1, attempt_number=1),
        Run("spins", status="success"),
        Run("skips", status="skipped"),
    )
    put = uploader.put_bundle(uploader.upload_url(), bundle.bundle())
    assert put.status_code == 200, put.text
    summary = put.json()
    assert (summary["tests"], summary["results"]) == (3, 4)
    assert (summary["passed"], summary["failed"], summary["skipped"]) == (2, 0, 1)
    (flaky,) = read_api.post("list-unhealthy-tests", status="FLAKY", page_query={"page_size": 10})[
        "tests"
    ]
    rspec_id = trunk_test_id(
        name="turns", parent="widgets spec", classname=CLASSNAME, file="./spec/widgets_spec.rb"
    )
    assert flaky["id"] == rspec_id
    assert read_api.details(rspec_id)["failure_rate_last_7d"] == 0.5


def test_a_failure_the_uploader_quarantined_is_still_a_failure(
    uploader: Uploader, read_api: ReadApi
) -> None:
    bundle = rspec_bundle(Run("turns", status="failure", is_quarantined=True, message="flaked"))
    summary = uploader.put_bundle(uploader.upload_url(), bundle.bundle()).json()
    assert summary["failed"] == 1
    assert [test["name"] for test in read_api.failing()] == ["turns"]


# -- refusals ------------------------------------------------------------------------------


def test_an_expired_url_is_refused_and_stores_nothing(
    uploader: Uploader, read_api: ReadApi, clock: FakeClock
) -> None:
    url = uploader.upload_url()
    clock.advance(hours=1)
    put = uploader.put_bundle(url, two_reports().bundle())
    assert_error(put, 403, "upload_url_expired")
    assert read_api.failing() == []


@pytest.mark.parametrize("part", ["payload", "signature"])
def test_a_forged_url_is_refused(uploader: Uploader, read_api: ReadApi, part: str) -> None:
    url = uploader.upload_url()
    base, _, token = url.rpartition("/")
    payload, signature = token.split(".")
    # Another bundle id in the payload under the same signature; or a signature changed.
    forged = (
        f"{payload[:-4]}AAAA.{signature}" if part == "payload" else f"{payload}.{signature[::-1]}"
    )
    assert_error(
        uploader.put_bundle(f"{base}/{forged}", two_reports().bundle()), 403, "upload_url_invalid"
    )
    assert_error(uploader.put_bundle(f"{base}/not-a-token", two_reports().bundle()), 403)
    assert read_api.failing() == []


def test_the_put_needs_no_api_token_but_createbundleupload_does(uploader: Uploader) -> None:
    no_token = httpx.post(
        f"{uploader.base}/v1/metrics/createBundleUpload",
        json={"repo": dict(REPO_JSON), "orgUrlSlug": "acme"},
    )
    assert_error(no_token, 401, "unauthorized")


def test_another_orgs_token_cannot_make_an_upload_url_for_acmes_repository(
    uploader: Uploader, other_token: str
) -> None:
    globex = Uploader(uploader.base, other_token, org="globex")
    assert_error(globex.create_bundle_upload(), 404, "repository_not_found")
    # Nor by claiming to be acme.
    assert_error(globex.create_bundle_upload(org="acme"), 404, "org_not_found")


def test_an_unregistered_repository_gets_no_upload_url(uploader: Uploader) -> None:
    response = uploader.create_bundle_upload(repo=RepoRef("github.com", "acme", "gadgets"))
    assert_error(response, 404, "repository_not_found")


def test_a_bundle_about_another_repository_is_refused(
    uploader: Uploader, read_api: ReadApi
) -> None:
    elsewhere = junit_bundle(
        [("junit.xml", junit(("turns", "x")))], repo=RepoRef("github.com", "acme", "gadgets")
    )
    put = uploader.put_bundle(uploader.upload_url(), elsewhere.bundle())
    assert "gadgets" in assert_error(put, 400, "bundle_mismatch")
    assert read_api.failing() == []


META = json.dumps(meta_json(junit=["a.xml"])).encode()
REPORT = junit(("turns", "x"))


def bundle_of(*members: Member) -> bytes:
    return zstd(tar_bytes(members))


HOSTILE: dict[str, Callable[[], bytes]] = {
    "not zstd": lambda: b"PK\x03\x04 this is a zip",
    "zstd of no tar": lambda: zstd(b"hello, world" * 100),
    "a path climbing out": lambda: bundle_of(
        Member("meta.json", META), Member("../../etc/cron.d/x", REPORT)
    ),
    "an absolute path": lambda: bundle_of(Member("meta.json", META), Member("/etc/passwd", REPORT)),
    "a symlink": lambda: bundle_of(
        Member("meta.json", META), Member("junit/0", kind=tarfile.SYMTYPE, link="/etc/passwd")
    ),
    "meta.json not first": lambda: bundle_of(Member("junit/0", REPORT), Member("meta.json", META)),
    "meta.json not JSON": lambda: bundle_of(
        Member("meta.json", b"{not json"), Member("junit/0", REPORT)
    ),
    "meta.json without repo": lambda: bundle_of(
        Member("meta.json", b'{"org": "acme"}'), Member("junit/0", REPORT)
    ),
    "a listed report missing": lambda: bundle_of(Member("meta.json", META)),
    "a bad report": lambda: bundle_of(Member("meta.json", META), Member("junit/0", b"<testsuite")),
    # meta.json, then 4 GiB of zeros (about 130 KiB compressed) in a member read past
    "a zstd bomb": lambda: zstd_bomb(meta=META, member="bazel_bep.json", size=4 * 1024**3),
    # ... or in a report, which claims its size in its header
    "a 4 GiB report": lambda: zstd_bomb(meta=META, member="junit/0", size=4 * 1024**3),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_or_broken_bundle_is_a_400_and_stores_nothing(
    uploader: Uploader, read_api: ReadApi, kind: str
) -> None:
    put = uploader.put_bundle(uploader.upload_url(), HOSTILE[kind]())
    code = "invalid_report" if kind == "a bad report" else "invalid_bundle"
    message = assert_error(put, 400, code)
    if kind == "a bad report":
        assert "a.xml" in message  # named as on the CI machine, as a multipart upload's file
    if kind == "a zstd bomb":
        assert "unpacks to more than 256 MiB" in message
    if kind == "a 4 GiB report":
        assert "larger than 50 MiB" in message
    assert read_api.failing() == []


def test_a_bundle_over_the_body_limit_is_a_413(uploader: Uploader) -> None:
    oversized = os.urandom(20 * 1024 * 1024 + 1)  # random bytes: zstd cannot shrink them
    assert_error(uploader.put_bundle(uploader.upload_url(), oversized), 413, "payload_too_large")


# -- telemetry -----------------------------------------------------------------------------


def uploader_reports(container: Container) -> dict[str, float]:
    text = container.telemetry.exposition().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("keepgreen_uploader_reports_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = float(line.rsplit(" ", 1)[1])
    return found


def test_the_uploaders_telemetry_is_accepted_and_counted(
    uploader: Uploader, container: Container
) -> None:
    assert uploader.telemetry(upload_metrics(failed=False)).json() == {}
    failed = uploader.telemetry(upload_metrics(failed=True, reason="unknown_put_bundle_to_s3"))
    assert failed.status_code == 200, failed.text
    assert uploader.telemetry(b"\xff\xff garbage").status_code == 200
    assert uploader_reports(container) == {"uploaded": 1.0, "failed": 1.0, "unreadable": 1.0}
    assert_error(uploader.telemetry(upload_metrics(failed=False), token=""), 401)
    assert_error(uploader.telemetry(bytes(65 * 1024)), 413)


# -- the URL itself ------------------------------------------------------------------------


@pytest.mark.parametrize("extra_settings", [{"public_url": "https://keepgreen.example.com/"}])
def test_the_url_is_under_keepgreens_public_url_when_set(uploader: Uploader) -> None:
    url = uploader.upload_url()
    assert url.startswith("https://keepgreen.example.com/v1/flaky-tests/bundles/")


def test_a_url_for_a_repository_removed_since_stores_nothing(
    uploader: Uploader, container: Container, git_repo: GitRepo
) -> None:
    url = uploader.upload_url()
    container.admin.remove_repository(REPO, org_slug="acme")
    # Registered again: another repository under the same name, which the URL was not for.
    container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command=None
    )
    assert_error(uploader.put_bundle(url, two_reports().bundle()), 404, "repository_not_found")
