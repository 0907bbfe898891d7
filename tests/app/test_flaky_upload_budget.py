"""The limits one upload is read under, through IngestService with a recording fake parser:
one result budget shared by all its reports, and a cap on the text its results keep.

Both refusals come before anything is written: the unit of work here only finds the
repository, in a read-only unit, and refuses to open any other.
"""

from __future__ import annotations

import gc
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.detection import Detector
from keepgreen.app.flaky.ingest import (
    MAX_RESULTS_PER_UPLOAD,
    IngestService,
    ReportFile,
    ResultLimitReached,
    UploadMetadata,
)
from keepgreen.app.flaky.tally import cyclic_gc_paused
from keepgreen.bootstrap import Container
from keepgreen.core.flaky.results import CaseResult, Outcome
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import RepoRef, Repository
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO

METADATA = UploadMetadata(
    repo=RepoRef("github.com", "acme", "widgets"),
    org_url_slug="acme",
    commit_sha="a" * 40,
    branch="main",
)


class FakeParser:
    """Answers each report with the results given for it, honouring the budget it is handed."""

    def __init__(self, results_of: dict[str, list[CaseResult]]) -> None:
        self.results_of = results_of
        self.budgets: list[tuple[str, int]] = []

    def __call__(self, filename: str, data: bytes, *, max_results: int) -> list[CaseResult]:
        del data  # the fake answers by file name
        self.budgets.append((filename, max_results))
        results = self.results_of[filename]
        if len(results) > max_results:
            raise ResultLimitReached
        return results


REPOSITORY = Repository(
    id=RepositoryId("repo"),
    org_id=OrgId("org"),
    ref=METADATA.repo,
    git_url="/nowhere",
    ci_command=None,
    created_at=datetime(2026, 11, 1, tzinfo=UTC),
)


class FindOnly:
    """A read-only unit of work that knows one repository and nothing else."""

    def __init__(self) -> None:
        self.repositories = self

    def find(self, org_id: OrgId, ref: RepoRef) -> Repository | None:
        return REPOSITORY if (org_id, ref) == (REPOSITORY.org_id, REPOSITORY.ref) else None

    def __enter__(self) -> FindOnly:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass


def read_only_units(*, read_only: bool = False) -> Any:
    if not read_only:
        raise AssertionError("a refused upload must not open a unit that writes")
    return FindOnly()


def service(parser: FakeParser) -> IngestService:
    return IngestService(
        read_only_units,
        parse=parser,
        owners=None,  # type: ignore[arg-type]  # never asked: the upload is refused before
        detector=Detector(),
        clock=lambda: datetime(2026, 11, 2, tzinfo=UTC),
        new_id=lambda: "id",
    )


def passed(name: str) -> CaseResult:
    return CaseResult(
        name=name, classname=None, parent=None, file=None, custom_id=None, outcome=Outcome.PASSED
    )


def test_every_report_is_read_against_what_the_ones_before_it_left() -> None:
    parser = FakeParser(
        {
            "a.xml": [passed("a")] * 150_000,
            "b.xml": [passed("b")] * 50_000,
            "c.xml": [passed("c")],
        }
    )
    files = [ReportFile(name, b"") for name in ("a.xml", "b.xml", "c.xml")]

    with pytest.raises(InvalidInput) as caught:
        service(parser).upload(OrgId("org"), "acme", METADATA, files)

    assert parser.budgets == [
        ("a.xml", MAX_RESULTS_PER_UPLOAD),
        ("b.xml", MAX_RESULTS_PER_UPLOAD - 150_000),
        ("c.xml", 0),
    ]
    assert caught.value.code == "too_many_results"
    assert caught.value.message.startswith("file c.xml: the upload holds more than 200,000 results")


def test_the_text_the_results_keep_is_capped_per_upload() -> None:
    # Names of a million characters cannot come from the parser (it cuts fields to 1,000), but
    # two hundred thousand distinct names of 1,000 characters can; this is their total. The
    # text counted is what the upload keeps: each test's names once, however many results.
    long_name = "n" * 1024 * 1024
    parser = FakeParser(
        {
            "a.xml": [passed(f"{long_name}{index}") for index in range(100)] * 3,
            "b.xml": [passed(f"{long_name}{index}") for index in range(100, 129)],
        }
    )
    files = [ReportFile("a.xml", b""), ReportFile("b.xml", b"")]

    with pytest.raises(InvalidInput) as caught:
        service(parser).upload(OrgId("org"), "acme", METADATA, files)

    assert caught.value.code == "too_much_text"
    assert caught.value.message.startswith(
        "file b.xml: the results of the upload hold more than 128 Mi characters"
    )


def test_the_cycle_collector_is_paused_while_reading_and_back_after() -> None:
    assert gc.isenabled()
    inner = threading.Event()
    release = threading.Event()

    def other_reader() -> None:
        with cyclic_gc_paused():
            inner.set()
            release.wait(5)

    thread = threading.Thread(target=other_reader)
    with cyclic_gc_paused():
        assert not gc.isenabled()
        thread.start()
        inner.wait(5)
    assert not gc.isenabled()  # the other reader is still in its block
    release.set()
    thread.join(5)
    assert gc.isenabled()
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_the_collector_stays_paused_until_the_stored_tally_is_gone(
    container: Container, registered_repo: GitRepo, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first collection after the pause scans whatever the pause built and still holds:
    with the tally held while it is stored, that was a whole upload's objects in one go.
    """
    org = container.admin.authenticate(token)
    assert org is not None
    seen: list[bool] = []
    evaluate = Detector.reevaluate

    def watched(self: Detector, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(Detector, "reevaluate", watched)
    cases = "".join(f'<testcase classname="c" name="t{i}"/>' for i in range(50))
    report = f'<testsuite name="s">{cases}<testcase name="x"><failure/></testcase></testsuite>'
    summary = container.ingest.upload(
        OrgId(org),
        "acme",
        UploadMetadata(repo=REPO, org_url_slug="acme", commit_sha="b" * 40, branch="main"),
        [ReportFile("r.xml", report.encode())],
    )
    assert summary.failed == 1
    assert seen  # detection ran
    assert not any(seen)  # with the collector paused
    assert gc.isenabled()
