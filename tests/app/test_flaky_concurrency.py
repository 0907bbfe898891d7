"""Uploads at the same moment, from parallel CI jobs, all land and add up (on PostgreSQL they
run truly in parallel; rollups are upserted in key order so they cannot deadlock).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from keepgreen.app.flaky.ingest import ReportFile, UploadMetadata, UploadSummary
from keepgreen.bootstrap import Container
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.ids import OrgId
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
    metadata = UploadMetadata(repo=REPO, org_url_slug="acme", commit_sha="c" * 40, branch="main")

    def upload(job: int) -> UploadSummary:
        # Half the jobs list the tests backwards; odd jobs fail test_000, even ones pass it.
        names = TESTS if job % 2 else list(reversed(TESTS))
        report = junit(names, failing={"test_000"} if job % 2 else set())
        return container.ingest.upload(
            OrgId(org), "acme", metadata, [ReportFile(f"job-{job}.xml", report)]
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        summaries = list(pool.map(upload, range(8)))
    assert [summary.tests for summary in summaries] == [len(TESTS)] * 8
    page = container.flaky.list_unhealthy(OrgId(org), REPO, TestStatus.FLAKY, size=10, token="")
    assert [view.test.name for view in page.tests] == ["test_000"]
    details = container.flaky.details(OrgId(org), REPO, page.tests[0].test.id)
    assert details.view.failure_rate_last_7d == 0.5  # 4 failures in 8 runs, none lost
