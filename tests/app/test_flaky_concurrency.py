"""Uploads at the same moment, from parallel CI jobs, all land and add up (on PostgreSQL they
run truly in parallel; shared rows are taken in test id order so they cannot deadlock).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from keepgreen.app.flaky.ingest import ReportFile, UploadMetadata, UploadSummary
from keepgreen.bootstrap import Container
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.ids import OrgId
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO

TESTS = [f"test_{i:03d}" for i in range(60)]


def junit(names: list[str], *, failing: set[str]) -> bytes:
    cases = "".join(
        f'<testcase classname="c" name="{name}">'
        + ('<failure message="x"/>' if name in failing else "")
        + "</testcase>"
        for name in names
    )
    return f'<testsuite name="s">{cases}</testsuite>'.encode()


def test_parallel_uploads_on_one_commit_all_count(
    container: Container, registered_repo: GitRepo, token: str
) -> None:
    org = container.admin.authenticate(token)
    assert org is not None

    def upload(job: int) -> UploadSummary:
        # Half the jobs list the tests backwards; odd jobs fail test_000, even ones pass it.
        # Each job is its own (the same reports from the same job would be one upload, sent
        # twice).
        metadata = UploadMetadata(
            repo=REPO,
            org_url_slug="acme",
            commit_sha="c" * 40,
            branch="main",
            job_url=f"https://ci.example/job/{job}",
        )
        names = TESTS if job % 2 else list(reversed(TESTS))
        report = junit(names, failing={"test_000"} if job % 2 else set())
        return container.ingest.upload(
            OrgId(org), "acme", metadata, [ReportFile(f"job-{job}.xml", report)]
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        summaries = list(pool.map(upload, range(8)))
    assert [summary.tests for summary in summaries] == [len(TESTS)] * 8
    assert len({summary.upload_id for summary in summaries}) == 8
    page = container.flaky.list_unhealthy(OrgId(org), REPO, TestStatus.FLAKY, size=10, token="")
    assert [view.test.name for view in page.tests] == ["test_000"]
    details = container.flaky.details(OrgId(org), REPO, page.tests[0].test.id)
    assert details.view.failure_rate_last_7d == 0.5  # 4 failures in 8 runs, none lost
    # Each upload grew the day's template of the test in turn: no count was written over.
    assert details.view.most_common_failures is not None
    assert [(t.summary, t.count) for t in details.view.most_common_failures] == [("x", 4)]


def test_twenty_shards_of_one_run_at_once_lose_nothing_and_never_deadlock(
    container: Container, registered_repo: GitRepo, token: str, clock: FakeClock
) -> None:
    """The shards of one CI run finish together: each its own tests, all on one commit, plus
    a few tests every shard runs (set-up checks), listed in a different order by each.
    """
    org = container.admin.authenticate(token)
    assert org is not None
    metadata = UploadMetadata(repo=REPO, org_url_slug="acme", commit_sha="d" * 40, branch="main")
    shared = [f"test_shared_{i}" for i in range(5)]

    def shard(number: int) -> UploadSummary:
        own = [f"test_shard{number:02d}_{i:03d}" for i in range(150)]
        names = own + (shared if number % 2 else list(reversed(shared)))
        failing = {own[0], shared[0]} if number % 3 == 0 else {own[0]}
        report = junit(names, failing=failing)
        return container.ingest.upload(
            OrgId(org), "acme", metadata, [ReportFile(f"shard-{number}.xml", report)]
        )

    with ThreadPoolExecutor(max_workers=20) as pool:
        futures = [pool.submit(shard, number) for number in range(20)]
        summaries = [future.result(timeout=120) for future in futures]

    assert [summary.tests for summary in summaries] == [155] * 20
    assert len({summary.upload_id for summary in summaries}) == 20
    failing = container.flaky.list_failing(
        OrgId(org),
        REPO,
        start=clock() - timedelta(days=1),
        end=clock() + timedelta(days=1),
        size=100,
        token="",
    )
    names = {view.test.name for view in failing.tests}
    assert names == {f"test_shard{number:02d}_000" for number in range(20)} | {"test_shared_0"}
    details = container.flaky.details(
        OrgId(org), REPO, next(v.test.id for v in failing.tests if v.test.name == "test_shared_0")
    )
    # Seven of the twenty shards (0, 3, ..., 18) failed it: none of the runs was lost.
    assert details.view.failure_rate_last_7d == pytest.approx(7 / 20)
    assert details.view.most_common_failures is not None
    assert [(t.summary, t.count) for t in details.view.most_common_failures] == [("x", 7)]
