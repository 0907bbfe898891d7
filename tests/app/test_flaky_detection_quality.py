"""Detection quality on a labelled synthetic week, through the real upload and read API.

A week of CI (24 runs on main and 24 pull-request runs a day, failed tests retried once in the
job, some failed jobs rerun) of 60 healthy, 20 flaky (2% to 30%) and 4 broken tests, with a
two-hour infrastructure outage on day 3, is posted upload by upload, the server clock set to
each upload's time, since detection runs inside the upload request. Meanwhile and at the end:

- an upload is excluded as an infrastructure failure exactly when it was made in the outage;
- no healthy test is ever reported FLAKY or BROKEN (read after every upload on main and every
  outage upload, and at the end): the outage must leave no trace, not even through a rerun
  outside it that passes on the same commit;
- a broken test is BROKEN from its 3rd run on main on a commit made after it broke;
- at the end, the tests reported FLAKY have precision >= 0.95 and recall >= 0.9 against the
  flaky tests with a flake rate of 2% or more.

About 370 uploads of 84 tests each: minutes, not seconds, hence `slow`.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from keepgreen.simulation.flaky_history import (
    HistoryConfig,
    Outage,
    TestKey,
    default_population,
    generate,
    labels,
)
from tests.conftest import FakeClock
from tests.support.flaky import unhealthy_keys, upload_at_its_time
from tests.support.gitrepo import GitRepo

RUNS_TO_CATCH_BROKEN = 3
MIN_FLAKE_RATE = 0.02


@pytest.mark.slow
def test_detection_over_a_synthetic_week_is_precise_and_ignores_the_outage(
    client: TestClient, token: str, registered_repo: GitRepo, clock: FakeClock
) -> None:
    start = clock.now
    rng = random.Random(11)  # noqa: S311 - reproducible test data, not secrets
    tests = default_population(start, rng, healthy=60, flaky=20, broken=4)
    outage = Outage(start + timedelta(days=3, hours=2), start + timedelta(days=3, hours=4))
    history = generate(HistoryConfig(start=start, tests=tests, outages=(outage,)), rng)
    truth = labels(history)
    healthy = {key for key, kind in truth.items() if kind == "healthy"}
    broken = [test for test in tests if test.broken_from is not None]
    committed: dict[str, datetime] = {
        upload.commit_sha: upload.at for upload in history.uploads if upload.rerun_of is None
    }
    assert sum(history.is_in_outage(upload.at) for upload in history.uploads) >= 3

    runs_since_break: Counter[TestKey] = Counter()
    for upload in history.uploads:
        summary = upload_at_its_time(client, token, clock, upload)
        in_outage = history.is_in_outage(upload.at)
        assert summary["excluded_as_infrastructure_failure"] is in_outage, upload.run_id
        if upload.branch != "main" and not in_outage:
            continue
        reported_broken = unhealthy_keys(client, token, "BROKEN")
        flagged = unhealthy_keys(client, token, "FLAKY") | reported_broken
        assert not flagged & healthy, (upload.run_id, sorted(flagged & healthy))
        if in_outage:
            continue
        for test in broken:
            assert test.broken_from is not None
            if committed[upload.commit_sha] >= test.broken_from:
                runs_since_break[test.key] += 1
            if runs_since_break[test.key] >= RUNS_TO_CATCH_BROKEN:
                assert test.key in reported_broken, (
                    f"{test.key} not BROKEN after {runs_since_break[test.key]} runs on main "
                    f"since it broke at {test.broken_from} (upload {upload.run_id})"
                )

    reported_flaky = unhealthy_keys(client, token, "FLAKY")
    reported_broken = unhealthy_keys(client, token, "BROKEN")
    assert not (reported_flaky | reported_broken) & healthy
    assert {test.key for test in broken} <= reported_broken
    flaky = {key for key, kind in truth.items() if kind == "flaky"}
    catchable = {test.key for test in tests if test.flake_rate >= MIN_FLAKE_RATE}
    precision = len(reported_flaky & flaky) / len(reported_flaky) if reported_flaky else 0.0
    recall = len(reported_flaky & catchable) / len(catchable)
    assert precision >= 0.95, sorted(reported_flaky - flaky)
    assert recall >= 0.9, sorted(catchable - reported_flaky)
