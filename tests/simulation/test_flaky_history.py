"""The synthetic CI history: what the uploads say must be what the labels claim.

Outcomes are read back from the JUnit XML with the standard library's parser, the way a
server would see them, not from the generator's internals.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from xml.etree import ElementTree as ET

import pytest

from keepgreen.simulation.flaky_history import (
    History,
    HistoryConfig,
    Outage,
    SyntheticUpload,
    TestKey,
    TestSpec,
    default_population,
    generate,
    labels,
)

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
OUTAGE = Outage(START + timedelta(days=3, hours=2), START + timedelta(days=3, hours=4))


def seeded(seed: int) -> random.Random:
    return random.Random(seed)  # noqa: S311 - reproducible test data, not secrets


@dataclass(frozen=True)
class Seen:
    """One testcase of one upload, as its report tells it."""

    failure_types: tuple[str, ...]  # of every failed attempt, in order
    messages: tuple[str, ...]
    passed: bool  # the last attempt passed
    reruns: int  # `rerunFailure` children
    flakes: int  # `flakyFailure` children

    @property
    def attempts(self) -> int:
        return len(self.failure_types) + self.passed


def read_case(case: ET.Element) -> Seen:
    failure = case.find("failure")
    reruns = case.findall("rerunFailure")
    flakes = case.findall("flakyFailure")
    failed = ([failure] if failure is not None else []) + reruns + flakes
    for element in reruns + flakes:
        trace = element.findtext("stackTrace")
        assert trace is not None
        assert trace.endswith(element.get("message", "?"))
    if failure is not None:
        assert (failure.text or "").endswith(failure.get("message", "?"))
    return Seen(
        failure_types=tuple(element.get("type", "") for element in failed),
        messages=tuple(element.get("message", "") for element in failed),
        passed=failure is None,
        reruns=len(reruns),
        flakes=len(flakes),
    )


def read_upload(upload: SyntheticUpload) -> dict[TestKey, Seen]:
    """Every testcase of the upload's reports, checking the Surefire shape on the way."""
    seen: dict[TestKey, Seen] = {}
    for filename, content in upload.files:
        assert filename.endswith(".xml")
        root = ET.fromstring(content)  # noqa: S314 - XML this test's generator just wrote
        assert root.tag == "testsuite"
        cases = root.findall("testcase")
        suite: list[Seen] = []
        for case in cases:
            key = (case.get("file", ""), case.get("classname", ""), case.get("name", ""))
            assert key not in seen, f"{key} twice in {upload.run_id}"
            seen[key] = read_case(case)
            suite.append(seen[key])
        assert root.get("tests") == str(len(cases))
        assert root.get("failures") == str(sum(not s.passed for s in suite))
        assert root.get("flakes") == str(sum(s.passed and s.flakes > 0 for s in suite))
    return seen


def make_config(**overrides: object) -> HistoryConfig:
    """The default week of the default population, with `overrides`."""
    fields: dict[str, object] = {
        "start": START,
        "tests": default_population(START, seeded(1)),
        "outages": (OUTAGE,),
    }
    fields.update(overrides)
    return HistoryConfig(**fields)  # type: ignore[arg-type]


@cache
def week() -> tuple[History, tuple[dict[TestKey, Seen], ...]]:
    """The default week with one outage, generated and read once for the module."""
    history = generate(make_config(), seeded(2))
    return history, tuple(read_upload(upload) for upload in history.uploads)


def commit_times(history: History) -> dict[str, datetime]:
    """When each commit was made: the time of its first run."""
    return {u.commit_sha: u.at for u in history.uploads if u.rerun_of is None}


def single_test_history(test: TestSpec, **overrides: object) -> History:
    config = make_config(tests=(test,), outages=(), **overrides)
    return generate(config, seeded(3))


# -- shape of the history ------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_bytes_and_another_seed_does_not() -> None:
    config = make_config(days=2)
    first = generate(config, seeded(7))
    again = generate(config, seeded(7))
    other = generate(config, seeded(8))
    assert first == again
    assert [u.files for u in first.uploads] == [u.files for u in again.uploads]
    assert [u.files for u in first.uploads] != [u.files for u in other.uploads]
    assert default_population(START, seeded(5)) == default_population(START, seeded(5))


def test_uploads_are_in_time_order_and_inside_the_week() -> None:
    history, _ = week()
    times = [upload.at for upload in history.uploads]
    assert times == sorted(times)
    first_runs = [u.at for u in history.uploads if u.rerun_of is None]
    assert min(times) >= START
    assert max(first_runs) < START + timedelta(days=7)
    assert all(at.tzinfo is not None for at in times)


def test_each_day_has_the_configured_runs_on_main_and_on_pull_requests() -> None:
    history, _ = week()
    per_day: Counter[tuple[int, str]] = Counter()
    for upload in history.uploads:
        if upload.rerun_of is None:
            day = (upload.at - START).days
            per_day[day, "main" if upload.pr_number is None else "pr"] += 1
    assert per_day == {(day, kind): 24 for day in range(7) for kind in ("main", "pr")}


def test_every_first_run_is_a_new_commit_and_pull_requests_get_several_pushes() -> None:
    history, _ = week()
    first_runs = [u for u in history.uploads if u.rerun_of is None]
    assert len({u.commit_sha for u in first_runs}) == len(first_runs)
    assert all(len(u.commit_sha) == 40 and int(u.commit_sha, 16) >= 0 for u in first_runs)
    assert len({u.run_id for u in history.uploads}) == len(history.uploads)
    pushes: Counter[int] = Counter()
    for upload in first_runs:
        if upload.pr_number is None:
            assert upload.branch == "main"
        else:
            assert upload.branch == f"feature/{upload.pr_number}"
            pushes[upload.pr_number] += 1
    assert max(pushes.values()) <= 5
    # Each day's last PR may be cut short; all the others are pushed 2 to 5 times.
    assert sum(count >= 2 for count in pushes.values()) >= len(pushes) - 7
    assert len(pushes) >= 7 * 24 // 5


# -- what each kind of test does -----------------------------------------------------------------


def test_a_ten_percent_flaky_test_fails_about_one_attempt_in_ten() -> None:
    test = TestSpec("tests.unit.test_a.TestA", "test_a", "tests/unit/test_a.py", "flaky", 0.1)
    history = single_test_history(test, days=14, main_runs_per_day=48, pr_runs_per_day=48)
    seen = [read_upload(upload)[test.key] for upload in history.uploads]
    attempts = sum(s.attempts for s in seen)
    failed = sum(len(s.failure_types) for s in seen)
    # About 1500 attempts: one standard deviation of the observed rate is 0.008.
    assert attempts > 1400
    assert failed / attempts == pytest.approx(0.1, abs=0.025)
    # Retried only after a failure, written as flakyFailure when the retry passed.
    assert all(s.attempts == 1 for s in seen if not s.failure_types)
    assert all(s.flakes == 1 and s.reruns == 0 for s in seen if s.passed and s.failure_types)
    assert any(s.flakes for s in seen)
    assert any(not s.passed for s in seen)


def test_failure_messages_vary_but_a_test_fails_the_same_way() -> None:
    test = TestSpec("tests.unit.test_a.TestA", "test_a", "tests/unit/test_a.py", "flaky", 0.3)
    history = single_test_history(test, days=2)
    seen = [read_upload(upload)[test.key] for upload in history.uploads]
    messages = {message for s in seen for message in s.messages}
    types = {kind for s in seen for kind in s.failure_types}
    assert len(types) == 1
    assert len(messages) > 5


def test_broken_tests_fail_every_attempt_on_commits_from_broken_from_and_pass_before() -> None:
    history, seen = week()
    committed = commit_times(history)
    broken = [test for test in history.tests if test.kind == "broken"]
    assert len(broken) == 6
    for test in broken:
        assert test.broken_from is not None
        before = after = 0
        for upload, cases in zip(history.uploads, seen, strict=True):
            if history.is_in_outage(upload.at):
                continue
            case = cases[test.key]
            if committed[upload.commit_sha] >= test.broken_from:
                after += 1
                assert not case.passed
                assert case.reruns == 1  # the one in-job retry failed too
                assert case.flakes == 0
            else:
                before += 1
                assert case.passed
                assert case.failure_types == ()
        assert after >= 24, test.name  # the last one breaks with more than a day to go
        assert before > 0 or test.broken_from == START


def test_healthy_tests_never_fail_outside_outages() -> None:
    history, seen = week()
    healthy = [test.key for test in history.tests if test.kind == "healthy"]
    for upload, cases in zip(history.uploads, seen, strict=True):
        if not history.is_in_outage(upload.at):
            assert all(cases[key].passed and not cases[key].failure_types for key in healthy)


def test_outage_uploads_fail_most_tests_on_every_attempt_and_others_do_not() -> None:
    history, seen = week()
    inside = 0
    for upload, cases in zip(history.uploads, seen, strict=True):
        failing = sum(not case.passed for case in cases.values()) / len(cases)
        if history.is_in_outage(upload.at):
            inside += 1
            assert failing >= 0.8, upload.run_id
            hit = [
                cases[test.key]
                for test in history.tests
                if test.kind == "healthy" and not cases[test.key].passed
            ]
            assert all(case.reruns == 1 for case in hit)  # retries fail too
            # One cause for the whole upload, as when the database is down.
            assert len({kind for case in hit for kind in case.failure_types}) == 1
        else:
            assert failing < 0.5, upload.run_id
    assert inside >= 3


# -- job reruns ----------------------------------------------------------------------------------


def reruns_and_originals(
    history: History, seen: tuple[dict[TestKey, Seen], ...]
) -> tuple[list[SyntheticUpload], list[SyntheticUpload]]:
    """(the reruns, the first runs that ended with a failed test)."""
    failed = [
        upload
        for upload, cases in zip(history.uploads, seen, strict=True)
        if upload.rerun_of is None and any(not case.passed for case in cases.values())
    ]
    return [u for u in history.uploads if u.rerun_of is not None], failed


def test_a_rerun_repeats_a_failed_run_on_the_same_commit_minutes_later() -> None:
    config = make_config(days=2, job_rerun_share=1.0)
    history = generate(config, seeded(4))
    seen = tuple(read_upload(upload) for upload in history.uploads)
    reruns, failed = reruns_and_originals(history, seen)
    assert len(reruns) == len(failed) > 0
    by_run = {upload.run_id: upload for upload in history.uploads}
    rerolled = 0
    for rerun in reruns:
        assert rerun.rerun_of is not None
        original = by_run[rerun.rerun_of]
        assert original in failed
        assert rerun.run_id != original.run_id
        assert (rerun.commit_sha, rerun.branch, rerun.pr_number) == (
            original.commit_sha,
            original.branch,
            original.pr_number,
        )
        assert timedelta(minutes=3) <= rerun.at - original.at <= timedelta(minutes=30)
        rerolled += rerun.files != original.files
    assert rerolled == len(reruns)


def test_about_the_configured_share_of_failed_runs_is_rerun() -> None:
    history, seen = week()
    reruns, failed = reruns_and_originals(history, seen)
    assert len(reruns) / len(failed) == pytest.approx(0.1, abs=0.05)
    none = generate(make_config(days=2, job_rerun_share=0.0), seeded(4))
    assert all(upload.rerun_of is None for upload in none.uploads)


# -- the reports ---------------------------------------------------------------------------------


def test_reports_are_two_surefire_files_holding_every_test_once() -> None:
    history, seen = week()
    keys = set(labels(history))
    for upload, cases in zip(history.uploads, seen, strict=True):
        assert [name for name, _ in upload.files] == [
            "TEST-tests.integration.xml",
            "TEST-tests.unit.xml",
        ]
        assert set(cases) == keys
    flaky_cases = [case for cases in seen for case in cases.values() if case.flakes]
    rerun_cases = [case for cases in seen for case in cases.values() if case.reruns]
    assert flaky_cases
    assert rerun_cases
    assert all(case.passed for case in flaky_cases)
    assert all(not case.passed for case in rerun_cases)


def test_names_with_markup_characters_survive_the_xml() -> None:
    history, seen = week()
    odd = [key for key in labels(history) if any(c in key[2] for c in "<&'")]
    assert odd
    assert all(key in seen[0] for key in odd)
    assert b"test_paginates[a&amp;b]" in b"".join(c for _, c in history.uploads[0].files)


# -- the population ------------------------------------------------------------------------------


def test_the_default_population_mixes_kinds_rates_breaks_and_directories() -> None:
    tests = default_population(START, seeded(1))
    kinds = Counter(test.kind for test in tests)
    assert kinds == {"healthy": 150, "flaky": 40, "broken": 6}
    assert len({test.key for test in tests}) == len(tests)
    rates = sorted(test.flake_rate for test in tests if test.kind == "flaky")
    assert rates[0] == rates[4] == 0.02
    assert rates[-1] == 0.3
    assert len(set(rates)) > 30
    breaks = sorted(test.broken_from for test in tests if test.broken_from is not None)
    assert breaks[0] == START
    assert len(set(breaks)) == 6
    assert sum(b < START + timedelta(days=1) for b in breaks) >= 2
    assert breaks[-1] <= START + timedelta(days=6)
    directories = {test.file.rsplit("/", 1)[0] for test in tests}
    assert len(directories) >= 6
    for test in tests:
        module, _, cls = test.classname.rpartition(".")
        assert cls.startswith("Test")
        assert test.file == module.replace(".", "/") + ".py"


def test_labels_map_each_test_to_its_kind() -> None:
    history, _ = week()
    truth = labels(history)
    assert len(truth) == len(history.tests)
    assert all(truth[test.key] == test.kind for test in history.tests)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TestSpec("c", "n", "f", "flaky"),
        lambda: TestSpec("c", "n", "f", "healthy", flake_rate=0.1),
        lambda: TestSpec("c", "n", "f", "broken"),
        lambda: Outage(START, START),
        lambda: make_config(start=datetime(2026, 11, 2)),  # noqa: DTZ001 - naive on purpose
        lambda: make_config(tests=(TestSpec("c", "n", "f", "healthy"),) * 2),
        lambda: make_config(job_rerun_share=1.5),
    ],
)
def test_nonsense_is_refused(make: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        make()  # type: ignore[operator]
