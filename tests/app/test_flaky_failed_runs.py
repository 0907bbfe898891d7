"""A failed queue run meets the JUnit results uploaded for its test commit: the engine's load
names the failed tests, those keepgreen knows flaky or quarantined apart from the others, and
says whether the repository uploads results at all (SQLite, and PostgreSQL when configured).

Every upload here goes through the real ingest (parser, detection, rollups); statuses come
from its monitors or a person's settings, never written by hand.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from keepgreen.app.engine import Loaded, QueueEngine
from keepgreen.app.flaky.failed_runs import MAX_NAME_LENGTH, MAX_NAMES
from keepgreen.app.flaky.ingest import ReportFile, UploadMetadata, UploadSummary
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.bootstrap import Container
from keepgreen.core.enums import FlakyFailures, TestRunStatus
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings
from keepgreen.core.model import QueueConfig, Repository, TestRun
from keepgreen.core.scheduler.state import TestFailures
from tests.conftest import FakeClock
from tests.support.builders import make_entry, make_queue, make_run
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO

RUN_SHA = "1" * 40
OTHER_SHA = "2" * 40
QUEUE_BRANCH = "keepgreen-merge/pr-1/run"  # where the queue's runs test, as CI reports it


def junit(*cases: str) -> bytes:
    return f'<testsuite name="s">{"".join(cases)}</testsuite>'.encode()


def passed(name: str, classname: str = "c") -> str:
    return f'<testcase classname="{classname}" name="{name}"/>'


def failed(name: str, classname: str = "c") -> str:
    return f'<testcase classname="{classname}" name="{name}"><failure message="boom"/></testcase>'


def passed_on_retry(name: str, classname: str = "c") -> str:
    """Surefire's report of a test that failed, then passed when the job retried it."""
    return (
        f'<testcase classname="{classname}" name="{name}"><flakyFailure message="boom"/></testcase>'
    )


@pytest.fixture
def repository(container: Container, git_repo: GitRepo) -> Repository:
    return container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command=None
    )


class Queued:
    """One queue of `repository` with runs stored as the scheduler left them; uploads go
    through the real ingest at the clock's time.
    """

    def __init__(self, container: Container, repository: Repository, clock: FakeClock) -> None:
        self.container = container
        self.repository = repository
        self.clock = clock
        self.queue = make_queue(repository_id=repository.id)
        entry = make_entry(number=1, queue_id=self.queue.id)
        with container.unit_of_work() as uow:
            uow.queues.add(self.queue)
            uow.entries.add(entry)
            uow.commit()
        self.entry = entry

    def configure(self, flaky_failures: FlakyFailures) -> None:
        self.queue = replace(
            self.queue, config=replace(self.queue.config, flaky_failures=flaky_failures)
        )
        with self.container.unit_of_work() as uow:
            uow.queues.save(self.queue)
            uow.commit()

    def run(self, *, sha: str = RUN_SHA, status: TestRunStatus = TestRunStatus.FAILED) -> TestRun:
        """A run of the queue testing PR 1 at `sha`, made now."""
        run = make_run(
            queue_id=self.queue.id,
            tested_prs=(self.entry.id,),
            sha=sha,
            status=status,
            created_at=self.clock.now,
        )
        with self.container.unit_of_work() as uow:
            uow.test_runs.add(run)
            uow.commit()
        return run

    def upload(self, *cases: str, sha: str = RUN_SHA, branch: str = QUEUE_BRANCH) -> UploadSummary:
        metadata = UploadMetadata(repo=REPO, org_url_slug="acme", commit_sha=sha, branch=branch)
        return self.container.ingest.upload(
            self.repository.org_id, "acme", metadata, [ReportFile("report.xml", junit(*cases))]
        )

    def load(self) -> Loaded:
        with self.container.unit_of_work() as uow:
            queue = uow.queues.get(self.queue.id)
            return QueueEngine(clock=self.clock).load(uow, queue, now=self.clock.now)

    def failures(self) -> dict[str, TestFailures]:
        return dict(self.load().state.test_failures)

    def quarantine(self, *, broken: bool = False) -> None:
        """Quarantine on, flaky tests quarantined automatically (the default once on), and
        broken ones too when `broken`.
        """
        switches = QuarantineSettings(enabled=True, auto_quarantine_broken=broken)
        settings = FlakySettings(quarantine=switches)
        self.container.flaky_manage.update_settings(self.repository.org_id, REPO, settings)

    def override(self, summary: UploadSummary, name: str, setting: QuarantineOverride) -> None:
        (test_id,) = [test.test_id for test in summary.failures if test.name == name]
        self.container.flaky_manage.set_override(self.repository.org_id, REPO, test_id, setting)

    def make_flaky(self, name: str) -> None:
        """`name` both fails and passes on one commit (a re-run job): pass-on-retry says flaky."""
        (test,) = self.upload(failed(name), sha=OTHER_SHA).failures
        self.upload(passed(name), sha=OTHER_SHA)
        with self.container.unit_of_work() as uow:
            stored = uow.flaky.test(self.repository.id, test.test_id)
        assert stored is not None
        assert stored.status is TestStatus.FLAKY

    def make_broken(self, name: str) -> UploadSummary:
        """`name` fails on main three times running: the failing streak says broken."""
        for number in range(3):
            summary = self.upload(failed(name), sha=f"{number + 3}" * 40, branch="main")
        (test_id,) = [test.test_id for test in summary.failures]
        with self.container.unit_of_work() as uow:
            test = uow.flaky.test(self.repository.id, test_id)
        assert test is not None
        assert test.status is TestStatus.BROKEN
        return summary


@pytest.fixture
def queued(container: Container, repository: Repository, clock: FakeClock) -> Queued:
    return Queued(container, repository, clock)


def test_a_run_failed_only_by_a_quarantined_test_names_it_as_flaky(queued: Queued) -> None:
    queued.quarantine()
    queued.run()
    summary = queued.upload(failed("test_login"), passed("test_home"))
    assert queued.failures() == {RUN_SHA: TestFailures(flaky=(), other=("c.test_login",))}

    queued.override(summary, "test_login", QuarantineOverride.ALWAYS)

    failures = queued.failures()
    assert failures == {RUN_SHA: TestFailures(flaky=("c.test_login",), other=())}
    assert failures[RUN_SHA].only_flaky


def test_a_healthy_test_failing_beside_a_flaky_one_is_a_real_failure(queued: Queued) -> None:
    queued.make_flaky("test_retry")
    queued.run()
    queued.upload(failed("test_retry"), failed("test_sum"), passed("test_home"))

    failures = queued.failures()

    assert failures == {RUN_SHA: TestFailures(flaky=("c.test_retry",), other=("c.test_sum",))}
    assert not failures[RUN_SHA].only_flaky


def test_a_known_flaky_test_counts_without_quarantine_unless_a_person_said_never(
    queued: Queued,
) -> None:
    queued.make_flaky("test_retry")
    queued.run()
    summary = queued.upload(failed("test_retry"))
    assert queued.failures() == {RUN_SHA: TestFailures(flaky=("c.test_retry",), other=())}

    queued.quarantine()
    queued.override(summary, "test_retry", QuarantineOverride.NEVER)

    assert queued.failures() == {RUN_SHA: TestFailures(flaky=(), other=("c.test_retry",))}


def test_a_broken_test_is_a_real_failure_until_the_team_quarantines_it(queued: Queued) -> None:
    summary = queued.make_broken("test_db")
    queued.quarantine()  # by default auto-quarantine covers flaky tests, not broken ones
    queued.run()
    queued.upload(failed("test_db"))
    assert queued.failures() == {RUN_SHA: TestFailures(flaky=(), other=("c.test_db",))}

    queued.override(summary, "test_db", QuarantineOverride.ALWAYS)

    assert queued.failures() == {RUN_SHA: TestFailures(flaky=("c.test_db",), other=())}


def test_a_broken_test_is_forgiven_where_the_repository_quarantines_broken_tests(
    queued: Queued,
) -> None:
    summary = queued.make_broken("test_db")
    queued.quarantine(broken=True)
    queued.run()
    queued.upload(failed("test_db"), passed("test_home"))

    failures = queued.failures()
    assert failures == {RUN_SHA: TestFailures(flaky=("c.test_db",), other=())}
    assert failures[RUN_SHA].only_flaky

    queued.override(summary, "test_db", QuarantineOverride.NEVER)  # a person's NEVER wins

    assert queued.failures() == {RUN_SHA: TestFailures(flaky=(), other=("c.test_db",))}


def test_a_failure_passed_on_retry_in_the_same_upload_is_a_flaky_failure(queued: Queued) -> None:
    # The upload itself shows the test failing and passing on the run's commit: the
    # pass-on-retry monitor makes it flaky at once, and the run lists it as such.
    queued.run()
    queued.upload(passed_on_retry("test_retry"), passed("test_home"))

    assert queued.failures() == {RUN_SHA: TestFailures(flaky=("c.test_retry",), other=())}


def test_with_pass_on_retry_off_a_test_passed_on_retry_is_still_listed_as_failed(
    container: Container, queued: Queued
) -> None:
    settings = FlakySettings()
    off = replace(
        settings.monitors, pass_on_retry=replace(settings.monitors.pass_on_retry, enabled=False)
    )
    container.flaky_manage.update_settings(
        queued.repository.org_id, REPO, replace(settings, monitors=off)
    )
    queued.run()
    queued.upload(passed_on_retry("test_retry"))

    assert queued.failures() == {RUN_SHA: TestFailures(flaky=(), other=("c.test_retry",))}


def test_only_failed_runs_with_an_upload_since_they_were_made_have_an_entry(
    queued: Queued, clock: FakeClock
) -> None:
    queued.upload(failed("test_old"))  # an upload of the same commit before any run of it
    clock.advance(hours=1)
    queued.run()
    queued.run(sha=OTHER_SHA)  # failed, nothing uploaded for it
    queued.run(sha="3" * 40, status=TestRunStatus.IN_PROGRESS)
    queued.upload(failed("test_in_progress"), sha="3" * 40)
    assert queued.failures() == {}

    queued.upload(passed("test_old"))  # the run's own upload: nothing failed in it

    assert queued.failures() == {RUN_SHA: TestFailures(flaky=(), other=())}


def test_all_uploads_of_the_commit_count_and_names_are_sorted_and_capped(queued: Queued) -> None:
    queued.run()
    names = [f"test_{number:03d}" for number in range(MAX_NAMES + 5)]
    queued.upload(*[failed(name) for name in reversed(names[:10])])
    queued.upload(
        *[failed(name) for name in names[10:]],
        failed("same", classname="same"),
        failed("Cart adds an item", classname="adds an item"),
    )

    (failures,) = queued.failures().values()

    assert failures.flaky == ()
    # Sorted, cut at the cap; a JavaScript-style class already in the name is not repeated.
    expected = ["same", "Cart adds an item", *(f"c.{name}" for name in names)]
    assert failures.other == tuple(sorted(expected))[:MAX_NAMES]
    assert failures.other[:2] == ("Cart adds an item", "c.test_000")


def test_a_very_long_test_name_is_cut_before_it_reaches_the_history(queued: Queued) -> None:
    """A report may name a test with kilobytes of text: the name that reaches the PR's
    history, its explanation and its GitHub comment is cut, and says so with an ellipsis.
    """
    queued.run()
    queued.upload(failed("x" * 5000))

    ((name,),) = (f.other for f in queued.failures().values())

    assert len(name) == MAX_NAME_LENGTH
    assert name == ("c." + "x" * 5000)[: MAX_NAME_LENGTH - 1] + "…"


def test_another_repositorys_upload_of_the_same_commit_does_not_count(
    container: Container, queued: Queued, tmp_path: Path
) -> None:
    other_ref = replace(REPO, name="other")
    container.admin.add_repository(
        org_slug="acme",
        ref=other_ref,
        git_url=str(GitRepo(tmp_path / "other").path),
        ci_command=None,
    )
    queued.run()
    metadata = UploadMetadata(repo=other_ref, org_url_slug="acme", commit_sha=RUN_SHA, branch="x")
    report = ReportFile("report.xml", junit(failed("test_elsewhere")))
    container.ingest.upload(queued.repository.org_id, "acme", metadata, [report])

    assert queued.failures() == {}


def test_with_flaky_failures_off_nothing_is_loaded(queued: Queued) -> None:
    queued.run()
    queued.upload(failed("test_sum"))
    assert queued.failures() != {}
    assert queued.load().policy.uploads_test_results

    queued.configure(FlakyFailures.OFF)

    loaded = queued.load()
    assert loaded.state.test_failures == {}
    assert not loaded.policy.uploads_test_results


def test_a_repository_uploads_results_while_its_last_upload_is_under_a_week_old(
    queued: Queued, clock: FakeClock
) -> None:
    assert not queued.load().policy.uploads_test_results

    queued.upload(passed("test_home"), sha=OTHER_SHA, branch="main")
    clock.advance(days=6, hours=23)
    assert queued.load().policy.uploads_test_results

    clock.advance(hours=2)
    assert not queued.load().policy.uploads_test_results


def test_the_default_queue_setting_uses_uploaded_results() -> None:
    assert QueueConfig().flaky_failures is not FlakyFailures.OFF
