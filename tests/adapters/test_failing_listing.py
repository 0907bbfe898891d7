"""list-failing-tests counts from the day roll-ups exactly what the raw results say, whatever
the window cuts, on SQLite and PostgreSQL; an upload's failures grow the stored templates.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from random import Random

import pytest
from sqlalchemy import select

from keepgreen.adapters.db import tables
from keepgreen.bootstrap import Container
from keepgreen.core.ids import RepositoryId
from keepgreen.core.model import Repository
from tests.adapters.test_flaky_store import an_upload
from tests.support.builders import T0
from tests.support.gitrepo import GitRepo
from tests.support.tallies import a_tally
from tests.support.wire import REPO

TESTS = [str(uuid.UUID(int=n)) for n in range(1, 7)]
MIDNIGHT = T0.replace(hour=0)


@pytest.fixture
def repository(container: Container, tmp_path: Path) -> Repository:
    return container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(GitRepo(tmp_path / "acme").path), ci_command=None
    )


def store(
    container: Container, repository: Repository, at: datetime, failing: dict[str, int], *,
    excluded: bool = False, message: str = "boom",
) -> None:  # fmt: skip
    """One upload at `at`: each test of `failing` failed that many times, then passed."""
    upload = an_upload(
        repository, str(uuid.uuid4()), received_at=at, excluded=excluded, commit_sha=f"{at:%s}"
    )
    tallies = [
        a_tally(test_id, f"test_{n}", failures=failures, passes=1, message=message)
        for n, (test_id, failures) in enumerate(sorted(failing.items()))
    ]
    with container.unit_of_work() as uow:
        assert uow.flaky.claim_upload(upload) is None
        uow.flaky.add_tests(upload, tallies, {}, roll_up=not excluded)
        uow.commit()


def raw_ranking(
    container: Container, repository: Repository, start: datetime, end: datetime
) -> list[str]:
    """The failing tests of [start, end) from the raw results, most failures first."""
    with container.engine.connect() as connection:
        rows = connection.scalars(
            select(tables.TestResultRow.test_case_id).where(
                tables.TestResultRow.repository_id == repository.id,
                tables.TestResultRow.at >= start,
                tables.TestResultRow.at < end,
            )
        ).all()
    counted = Counter(rows)
    return sorted(counted, key=lambda test_id: (-counted[test_id], test_id))


def listed(
    container: Container, repository: Repository, start: datetime, end: datetime, size: int
) -> tuple[list[str], int]:
    ids: list[str] = []
    total = 0
    with container.unit_of_work(read_only=True) as uow:
        for offset in range(0, 20, size):
            page, total = uow.flaky_listings.page_failing(
                RepositoryId(repository.id), start, end, offset=offset, limit=size
            )
            ids += [test.id for test in page]
    return ids, total


def test_every_window_lists_what_the_raw_results_say(
    container: Container, repository: Repository
) -> None:
    rng = Random(15)  # noqa: S311 (test data)
    # Three days of uploads at odd times; some excluded (their failures are listed too).
    times = []
    for _ in range(40):
        at = MIDNIGHT + timedelta(minutes=rng.randrange(3 * 24 * 60), seconds=rng.randrange(60))
        times.append(at)
        failing = {test_id: rng.randint(1, 3) for test_id in rng.sample(TESTS, rng.randint(1, 4))}
        store(container, repository, at, failing, excluded=rng.random() < 0.2)
    day = timedelta(days=1)
    windows = [
        (MIDNIGHT - day, MIDNIGHT + 4 * day),  # every day whole
        (MIDNIGHT + day, MIDNIGHT + 2 * day),  # one whole day, from midnight to midnight
        (MIDNIGHT + timedelta(hours=7), MIDNIGHT + timedelta(days=2, hours=13)),  # both ends cut
        (MIDNIGHT + timedelta(hours=30), MIDNIGHT + timedelta(hours=31)),  # within one day
        (MIDNIGHT + day + timedelta(seconds=1), MIDNIGHT + 3 * day),
        (MIDNIGHT + 5 * day, MIDNIGHT + 6 * day),  # nothing failed
    ]
    # Ends on a day's first or last upload: its failures are in from the start, out at the end.
    for n in range(3):
        of_day = [at for at in times if MIDNIGHT + n * day <= at < MIDNIGHT + (n + 1) * day]
        windows += [(min(of_day), min(of_day) + day), (max(of_day) - day, max(of_day))]
    windows += [
        (start, start + timedelta(minutes=rng.randrange(1, 4 * 24 * 60)))
        for start in (MIDNIGHT + timedelta(minutes=rng.randrange(3 * 24 * 60)) for _ in range(8))
    ]
    for start, end in windows:
        expected = raw_ranking(container, repository, start, end)
        for size in (2, 20):
            assert listed(container, repository, start, end, size) == (
                expected,
                len(expected),
            ), (start, end, size)
        with container.unit_of_work(read_only=True) as uow:
            counted = uow.flaky_listings.count_failing(RepositoryId(repository.id), start, end)
        assert counted == len(expected)


def test_an_uploads_failures_grow_the_days_templates(
    container: Container, repository: Repository
) -> None:
    test_id = TESTS[0]
    messages = ["Timeout waiting for host db-primary", "Timeout waiting for host cache"]
    for n, message in enumerate(messages):
        store(container, repository, T0 + timedelta(minutes=n), {test_id: 2}, message=message)
    store(container, repository, T0 + timedelta(minutes=5), {test_id: 1}, message="KeyError: x")
    # An excluded upload's failures are listed but tell nothing about the test's failures.
    store(container, repository, T0 + timedelta(minutes=9), {test_id: 1}, excluded=True)
    with container.engine.connect() as connection:
        stored = connection.execute(
            select(
                tables.TestFailureTemplateRow.position,
                tables.TestFailureTemplateRow.summary,
                tables.TestFailureTemplateRow.occurrences,
            ).order_by(tables.TestFailureTemplateRow.position)
        ).all()
    assert [tuple(row) for row in stored] == [
        (0, "Timeout waiting for host <*>", 4),  # grown in place by the second upload
        (1, "KeyError: x", 1),
    ]
    details = container.flaky.details(repository.org_id, REPO, test_id)
    assert details.view.most_common_failures is not None
    assert [(t.summary, t.count) for t in details.view.most_common_failures] == [
        ("Timeout waiting for host <*>", 4),
        ("KeyError: x", 1),
    ]
