"""What the JUnit results uploaded for failed merge-queue runs say: which failed tests keepgreen
knows to be flaky or quarantined, and which failed for real.

The queue engine reads these for the heads of its open failed runs only, so a load stays
cheap; the scheduler decides what to do with them (the queue's `flakyFailures`).

What counts as a failed test of a run: every test with a failed attempt in an upload of the
run's test commit, received since the run was made. A test that failed and then passed on a
retry within the same upload is listed too: it did fail on that commit. Whether it is listed
as flaky is keepgreen's data's call like for any test, and with the pass-on-retry monitor on
(the default) that very upload has made it flaky. Skipped tests never count.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import FailedOnCommit, FlakyStore
from keepgreen.core.enums import TestRunStatus
from keepgreen.core.flaky.quarantine import is_forgivable
from keepgreen.core.ids import RepositoryId
from keepgreen.core.model import TestRun
from keepgreen.core.scheduler.state import TestFailures

# A repository "uploads test results" when it sent one within this window: the queue then
# waits a little for a failed run's results before counting the failure.
UPLOADS_LATELY = timedelta(days=7)
# An upload for a run's test commit comes after the run was made (the commit is built for it);
# the margin only absorbs clocks of different keepgreen processes that disagree a little.
CLOCK_MARGIN = timedelta(minutes=10)
# Names kept per list: enough to say what failed, while one broken build failing thousands of
# tests does not bloat every load of the queue's state.
MAX_NAMES = 20
# A name longer than this (a hostile or generated report) is cut, with an ellipsis: the names
# go into the PR's history, its explanation and its GitHub comment.
MAX_NAME_LENGTH = 200


def uploads_test_results(store: FlakyStore, repository_id: RepositoryId, *, now: datetime) -> bool:
    """Whether the repository sent JUnit results lately (within UPLOADS_LATELY of `now`)."""
    return store.has_upload_since(repository_id, now - UPLOADS_LATELY)


def failed_run_tests(
    store: FlakyStore, repository_id: RepositoryId, runs: Iterable[TestRun]
) -> dict[str, TestFailures]:
    """By test commit sha, what the uploads for the failed runs among `runs` say; no entry
    for a commit without an upload since its run was made.
    """
    received_since: dict[str, datetime] = {}
    for run in runs:
        if run.status is not TestRunStatus.FAILED or run.sha is None:
            continue
        since = run.created_at - CLOCK_MARGIN
        received_since[run.sha] = min(since, received_since.get(run.sha, since))
    if not received_since:
        return {}
    failed = store.failed_on_commits(repository_id, received_since)
    if not failed:
        return {}
    settings = store.settings(repository_id)
    return {sha: split(tests, settings) for sha, tests in sorted(failed.items())}


def split(tests: Iterable[FailedOnCommit], settings: FlakySettings) -> TestFailures:
    """The failed tests' names, sorted, those keepgreen may forgive apart from the others;
    each list cut at MAX_NAMES.
    """
    flaky: set[str] = set()
    other: set[str] = set()
    for test in tests:
        forgivable = is_forgivable(settings.quarantine, test.quarantine_override, test.status)
        (flaky if forgivable else other).add(shortened(display_name(test)))
    return TestFailures(
        flaky=tuple(sorted(flaky)[:MAX_NAMES]), other=tuple(sorted(other)[:MAX_NAMES])
    )


def shortened(name: str) -> str:
    return name if len(name) <= MAX_NAME_LENGTH else name[: MAX_NAME_LENGTH - 1] + "…"


def display_name(test: FailedOnCommit) -> str:
    """The test as people read it in a report: its name qualified by its class (as JUnit
    viewers print it), or the name alone when the class adds nothing (JavaScript reporters
    put the full title in the name and all or part of it in the class).
    """
    name, classname = test.name, test.classname
    if not classname or classname == name:
        return name
    if name.startswith(f"{classname} ") or name.endswith(f" {classname}"):
        return name
    return f"{classname}.{name}"
