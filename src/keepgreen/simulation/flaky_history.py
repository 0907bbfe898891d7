"""Synthetic CI history with known labels, to measure the flaky-test detector against.

A history is some days of CI runs of one repository: runs on the main branch, each on a new
commit, and runs of pull requests on feature branches, one per push. Each run is one upload of
JUnit XML in Maven Surefire's dialect (a `testsuite` root per report file; a failed test
retried in the job is written with `flakyFailure` when a retry passed, or `failure` plus
`rerunFailure`s when none did). Every test carries its truth:

- healthy: never fails by itself;
- flaky: each attempt fails independently with its `flake_rate`;
- broken: passes on commits made before `broken_from`, fails every attempt on later ones.

Inside an infrastructure outage almost every test of an upload fails, retries included, so a
detector must leave those uploads out. Some runs that ended with a failure are rerun as a whole
minutes later, as a new upload on the same commit.

Everything is drawn from the `random.Random` passed in, in a fixed order, so one seed gives one
history byte for byte; nothing reads a clock.
"""

from __future__ import annotations

import io
import random
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import Literal, assert_never
from xml.etree import ElementTree as ET

TestKind = Literal["healthy", "flaky", "broken"]
TestKey = tuple[str, str, str]  # (file, classname, name): a test's identity in a report

FIRST_RUN_NUMBER = 7001  # run ids count up from here, so they do not look like indexes
FIRST_PR_NUMBER = 101


@dataclass(frozen=True)
class TestSpec:
    """One test of the population and the truth about it (see the module docstring)."""

    __test__ = False  # a dataclass named Test*, not a pytest test class

    classname: str
    name: str
    file: str
    kind: TestKind
    flake_rate: float = 0.0  # flaky: the chance that one attempt fails
    broken_from: datetime | None = None  # broken: commits made at or after this fail it

    def __post_init__(self) -> None:
        if self.kind == "flaky" and not 0.0 < self.flake_rate <= 1.0:
            raise ValueError(f"flaky test {self.name}: flake_rate must be in (0, 1]")
        if self.kind != "flaky" and self.flake_rate != 0.0:
            raise ValueError(f"{self.kind} test {self.name}: only flaky tests have a flake_rate")
        if (self.kind == "broken") != (self.broken_from is not None):
            raise ValueError(f"test {self.name}: broken_from is set exactly for broken tests")

    @property
    def key(self) -> TestKey:
        return (self.file, self.classname, self.name)


@dataclass(frozen=True)
class Outage:
    """An infrastructure outage: uploads made in [start, end) fail `failing_share` of all tests,
    on every attempt (a test it hits fails its retries too)."""

    start: datetime
    end: datetime
    failing_share: float = 0.95

    def __post_init__(self) -> None:
        if not self.start < self.end:
            raise ValueError("an outage ends after it starts")
        if not 0.0 <= self.failing_share <= 1.0:
            raise ValueError("failing_share is a share, in [0, 1]")

    def covers(self, at: datetime) -> bool:
        return self.start <= at < self.end


@dataclass(frozen=True, kw_only=True)
class HistoryConfig:
    """What to generate. Runs per day count first runs only; job reruns come on top."""

    start: datetime  # timezone-aware; day d spans [start + d days, start + d + 1 days)
    tests: tuple[TestSpec, ...]
    days: int = 7
    main_runs_per_day: int = 24
    pr_runs_per_day: int = 24
    retries: int = 1  # a failed test is retried in the same job this many times (Surefire)
    job_rerun_share: float = 0.1  # chance that a run ending with a failure is rerun as a whole
    outages: tuple[Outage, ...] = ()
    main_branch: str = "main"
    reports_per_upload: int = 2  # report files per upload, split by the tests' directories

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        if self.days < 1 or self.main_runs_per_day < 0 or self.pr_runs_per_day < 0:
            raise ValueError("days must be positive and runs per day not negative")
        if self.retries < 0 or self.reports_per_upload < 1:
            raise ValueError("retries must not be negative; an upload has at least one report")
        if not 0.0 <= self.job_rerun_share <= 1.0:
            raise ValueError("job_rerun_share is a share, in [0, 1]")
        if not self.tests:
            raise ValueError("a history needs at least one test")
        if len({test.key for test in self.tests}) != len(self.tests):
            raise ValueError("tests must have distinct (file, classname, name)")


@dataclass(frozen=True)
class SyntheticUpload:
    """One CI run's upload: where and when it ran, and its JUnit report files."""

    at: datetime  # when the upload is made (outages are judged by this instant)
    commit_sha: str  # 40 hex digits
    branch: str  # the main branch, or "feature/<pr_number>"
    pr_number: int | None
    run_id: str  # "<run number>-<attempt>"; unique per upload
    files: tuple[tuple[str, bytes], ...]  # (file name, JUnit XML)
    rerun_of: str | None = None  # a whole-job rerun: the run_id of the run it repeats


@dataclass(frozen=True)
class History:
    """A generated history: the uploads in time order and the truth they were made from."""

    uploads: tuple[SyntheticUpload, ...]
    tests: tuple[TestSpec, ...]
    outages: tuple[Outage, ...]

    def is_in_outage(self, at: datetime) -> bool:
        return any(outage.covers(at) for outage in self.outages)


def labels(history: History) -> dict[TestKey, TestKind]:
    """Each test's truth, by (file, classname, name)."""
    return {test.key: test.kind for test in history.tests}


# -- the population ------------------------------------------------------------------------------

_TIERS = ("unit", "integration")
_AREAS = ("billing", "checkout", "search", "accounts", "inventory", "notifications", "shipping")
_NOUNS = ("invoices", "sessions", "queries", "orders", "exports", "rates", "carts", "tokens")
_VERBS = ("creates", "rounds", "rejects", "retries", "expires", "paginates")
# pytest parametrize ids, some with characters XML must escape.
_PARAMS = ("eur-2", "usd-0", "a&b", "<empty>", "'quoted'")


def _identity(index: int) -> tuple[str, str, str]:
    """(file, classname, name) of the index-th test: six tests per file, files alternating
    between the unit and integration trees, each tree's files spread over areas and nouns."""
    file_index, slot = divmod(index, len(_VERBS))
    tier = _TIERS[file_index % len(_TIERS)]
    rest = file_index // len(_TIERS)
    # The counts of areas and nouns are coprime: the pairs only repeat after all of them.
    area, noun = _AREAS[rest % len(_AREAS)], _NOUNS[rest % len(_NOUNS)]
    cycle = rest // (len(_AREAS) * len(_NOUNS))
    if cycle:
        noun += str(cycle)
    name = f"test_{_VERBS[slot]}"
    if slot == len(_VERBS) - 1 and file_index % 3 == 0:
        name += f"[{_PARAMS[file_index // 3 % len(_PARAMS)]}]"
    module = f"tests.{tier}.{area}.test_{noun}"
    return f"tests/{tier}/{area}/test_{noun}.py", f"{module}.Test{noun.capitalize()}", name


def default_population(
    start: datetime,
    rng: random.Random,
    *,
    healthy: int = 150,
    flaky: int = 40,
    broken: int = 6,
    days: int = 7,
) -> tuple[TestSpec, ...]:
    """A realistic mix of tests for a history starting at `start` and lasting `days`.

    Flaky rates are spread evenly over 2%..30%, with an eighth of them exactly 2% (the hardest
    to catch). The first broken test is broken from `start` (before any run), the others break
    at a random hour of days spread over 0..days-2, so each has runs left to be caught in.
    Kinds are shuffled over the tests, so flaky and broken ones sit among healthy neighbours.
    """
    if min(healthy, flaky, broken) < 0:
        raise ValueError("test counts must not be negative")
    counts: tuple[tuple[TestKind, int], ...] = (
        ("healthy", healthy),
        ("flaky", flaky),
        ("broken", broken),
    )
    kinds = [kind for kind, count in counts for _ in range(count)]
    rng.shuffle(kinds)
    exact = max(1, flaky // 8) if flaky else 0
    rates = [0.02] * exact + [
        round(0.02 + 0.28 * (i + 1) / (flaky - exact), 3) for i in range(flaky - exact)
    ]
    rng.shuffle(rates)
    breaks = [start]
    for j in range(1, broken):
        day = round((j - 1) * max(0, days - 2) / max(1, broken - 2))
        breaks.append(start + timedelta(days=day, seconds=rng.randint(3600, 23 * 3600)))
    tests: list[TestSpec] = []
    for index, kind in enumerate(kinds):
        file, classname, name = _identity(index)
        rate = rates.pop() if kind == "flaky" else 0.0
        broken_from = breaks.pop(0) if kind == "broken" else None
        tests.append(TestSpec(classname, name, file, kind, rate, broken_from))
    return tuple(tests)


# -- failures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failed attempt as a report writes it."""

    type: str  # the exception's class
    message: str
    stack: str  # the traceback, ending with "type: message"
    seconds: float


# A failure mode draws (exception type, message) with the details that vary between
# occurrences: numbers, addresses, ports, ids. Summaries must cluster them all the same.
FailureMode = Callable[[random.Random], tuple[str, str]]


def _timeout(rng: random.Random) -> tuple[str, str]:
    waited = rng.choice(("the worker to start", "the lock on 'orders'", "the queue to drain"))
    limit = rng.choice((500, 2000, 5000, 30000))
    return "TimeoutError", f"timed out after {limit} ms waiting for {waited}"


def _race(rng: random.Random) -> tuple[str, str]:
    expected = rng.randint(2, 500)
    return "AssertionError", f"assert {expected - 1} == {expected}"


def _connection_reset(rng: random.Random) -> tuple[str, str]:
    peer = f"('10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}', {rng.randint(32768, 60999)})"
    return "ConnectionResetError", f"[Errno 104] Connection reset by peer {peer}"


def _object_identity(rng: random.Random) -> tuple[str, str]:
    first, second = (0x7F0000000000 | rng.getrandbits(40) for _ in range(2))
    return "AssertionError", (
        f"<Session object at 0x{first:012x}> is not <Session object at 0x{second:012x}>"
    )


def _read_timeout(rng: random.Random) -> tuple[str, str]:
    port = rng.randint(40000, 49999)
    return "ReadTimeout", (
        f"HTTPConnectionPool(host='localhost', port={port}): Read timed out. "
        f"(read timeout={rng.choice((1.0, 2.5, 5.0))})"
    )


def _missing_attribute(_rng: random.Random) -> tuple[str, str]:
    return "AttributeError", "'Invoice' object has no attribute 'total_cents'"


def _server_error(rng: random.Random) -> tuple[str, str]:
    request = uuid.UUID(int=rng.getrandbits(128), version=4)
    return "AssertionError", f"expected status 200 but got 500 (request id {request})"


def _missing_key(_rng: random.Random) -> tuple[str, str]:
    return "KeyError", "'currency'"


def _database_down(rng: random.Random) -> tuple[str, str]:
    host = f"10.1.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    return "psycopg.OperationalError", (
        f'connection to server at "{host}", port 5432 failed: Connection refused'
    )


def _disk_full(rng: random.Random) -> tuple[str, str]:
    path = f"/tmp/pytest-of-runner/pytest-{rng.randint(1, 9999)}"  # noqa: S108 - a message
    return "OSError", f"[Errno 28] No space left on device: '{path}'"


def _name_resolution(rng: random.Random) -> tuple[str, str]:
    host = f"registry-{rng.randint(1, 40)}.ci.internal"
    return "socket.gaierror", f"[Errno -3] Temporary failure in name resolution: '{host}'"


FLAKY_MODES: tuple[FailureMode, ...] = (
    _timeout,
    _race,
    _connection_reset,
    _object_identity,
    _read_timeout,
)
BROKEN_MODES: tuple[FailureMode, ...] = (_missing_attribute, _server_error, _missing_key)
OUTAGE_MODES: tuple[FailureMode, ...] = (_database_down, _disk_full, _name_resolution)


def _stable(test: TestSpec, salt: str) -> int:
    """A number fixed per test and independent of the rng (so adding tests moves nothing)."""
    return zlib.crc32("#".join((salt, *test.key)).encode())


def _failure(test: TestSpec, mode: FailureMode, rng: random.Random) -> Failure:
    kind, message = mode(rng)
    function = test.name.split("[", 1)[0]
    stack = (
        "Traceback (most recent call last):\n"
        f'  File "{test.file}", line {12 + _stable(test, "line") % 300}, in {function}\n'
        "    assert result == expected\n"
        f"{kind}: {message}"
    )
    return Failure(kind, message, stack, round(rng.uniform(0.05, 3.0), 3))


# -- runs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseRun:
    """One test in one run: its failed attempts in order, and whether the last attempt passed.

    No failures and passed: a plain pass. Failures and passed: it passed on a retry (written as
    `flakyFailure`s). Not passed: every attempt failed (`failure` then `rerunFailure`s).
    """

    test: TestSpec
    failures: tuple[Failure, ...]
    passed: bool
    seconds: float  # of the attempt that passed, or of the first failure

    def __post_init__(self) -> None:
        if not self.passed and not self.failures:
            raise ValueError("a test that did not pass failed at least once")


def _attempt_fails(
    test: TestSpec, *, committed_at: datetime, hit_by_outage: bool, rng: random.Random
) -> bool:
    if hit_by_outage:
        return True
    match test.kind:
        case "healthy":
            return False
        case "flaky":
            return rng.random() < test.flake_rate
        case "broken":
            return test.broken_from is not None and committed_at >= test.broken_from
        case _:
            assert_never(test.kind)


def _run_tests(
    config: HistoryConfig, *, at: datetime, committed_at: datetime, rng: random.Random
) -> list[CaseRun]:
    """Every test once, retried in the job up to `config.retries` times while it fails.

    A broken test fails by the commit's time (a rerun of an older commit still passes); an
    outage is judged by the upload's time and picks one cause for the whole upload.
    """
    outage = next((outage for outage in config.outages if outage.covers(at)), None)
    cause = rng.choice(OUTAGE_MODES) if outage is not None else None
    runs: list[CaseRun] = []
    for test in config.tests:
        hit = outage is not None and rng.random() < outage.failing_share
        if cause is not None and hit:
            mode = cause
        elif test.kind == "broken":
            mode = BROKEN_MODES[_stable(test, "mode") % len(BROKEN_MODES)]
        else:
            mode = FLAKY_MODES[_stable(test, "mode") % len(FLAKY_MODES)]
        failures: list[Failure] = []
        passed = False
        for _attempt in range(1 + config.retries):
            if not _attempt_fails(test, committed_at=committed_at, hit_by_outage=hit, rng=rng):
                passed = True
                break
            failures.append(_failure(test, mode, rng))
        seconds = round(rng.uniform(0.002, 1.5), 3) if passed else failures[0].seconds
        runs.append(CaseRun(test, tuple(failures), passed, seconds))
    return runs


@dataclass(frozen=True)
class _Slot:
    """A first run: when, and on which branch and PR (a new commit each)."""

    at: datetime
    branch: str
    pr_number: int | None


def _spread(day_start: datetime, count: int, rng: random.Random) -> list[datetime]:
    """`count` instants evenly spread over the day, each jittered inside its own slice."""
    width = timedelta(days=1) / max(1, count)
    return [
        (day_start + width * (i + rng.uniform(0.1, 0.9))).replace(microsecond=0)
        for i in range(count)
    ]


def _schedule(config: HistoryConfig, rng: random.Random) -> list[_Slot]:
    """The first runs of every day: main runs, then PR pushes (2-5 per PR, interleaved)."""
    slots: list[_Slot] = []
    next_pr = FIRST_PR_NUMBER
    for day in range(config.days):
        day_start = config.start + timedelta(days=day)
        slots += [
            _Slot(at, config.main_branch, None)
            for at in _spread(day_start, config.main_runs_per_day, rng)
        ]
        pushes: list[int] = []
        while len(pushes) < config.pr_runs_per_day:
            pushes += [next_pr] * min(rng.randint(2, 5), config.pr_runs_per_day - len(pushes))
            next_pr += 1
        rng.shuffle(pushes)
        for at, number in zip(_spread(day_start, len(pushes), rng), pushes, strict=True):
            slots.append(_Slot(at, f"feature/{number}", number))
    slots.sort(key=lambda slot: slot.at)
    return slots


def generate(config: HistoryConfig, rng: random.Random) -> History:
    """The history `config` describes, drawn from `rng`; uploads sorted by time.

    A run that ended with at least one failed test is rerun as a whole with probability
    `job_rerun_share`, 3 to 30 minutes later, on the same commit, branch and PR; every test is
    rolled again. A rerun is not itself rerun.
    """
    groups = _report_groups(config.tests, config.reports_per_upload)
    uploads: list[SyntheticUpload] = []

    def upload(slot: _Slot, sha: str, run_id: str, at: datetime, rerun_of: str | None) -> bool:
        runs = _run_tests(config, at=at, committed_at=slot.at, rng=rng)
        hostname = f"runner-{rng.randint(1, 12)}"
        files = tuple(
            (filename, write_junit(suite, [runs[i] for i in members], at=at, hostname=hostname))
            for filename, suite, members in groups
        )
        uploads.append(
            SyntheticUpload(at, sha, slot.branch, slot.pr_number, run_id, files, rerun_of)
        )
        return any(not run.passed for run in runs)

    for number, slot in enumerate(_schedule(config, rng), start=FIRST_RUN_NUMBER):
        sha = f"{rng.getrandbits(160):040x}"
        first = f"{number}-1"
        if upload(slot, sha, first, slot.at, None) and rng.random() < config.job_rerun_share:
            later = slot.at + timedelta(seconds=rng.randint(3 * 60, 30 * 60))
            upload(slot, sha, f"{number}-2", later, first)
    uploads.sort(key=lambda item: item.at)
    return History(tuple(uploads), config.tests, config.outages)


# -- JUnit XML -----------------------------------------------------------------------------------


def _report_dir(file: str) -> str:
    """The directory a test's report goes by: the first two levels of its file's directory."""
    return "/".join(PurePosixPath(file).parent.parts[:2]) or "."


def _report_groups(tests: Sequence[TestSpec], count: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """(file name, suite name, indexes into `tests`) of each report file: the sorted report
    directories cut into at most `count` contiguous runs. Fixed by the tests alone, so a test's
    suite (part of its id on the server) never changes between uploads."""
    directories = sorted({_report_dir(test.file) for test in tests})
    parts = min(count, len(directories))
    groups: list[tuple[str, str, tuple[int, ...]]] = []
    for part in range(parts):
        chosen = directories[
            part * len(directories) // parts : (part + 1) * len(directories) // parts
        ]
        suite = "+".join(chosen)
        members = tuple(i for i, test in enumerate(tests) if _report_dir(test.file) in chosen)
        filename = "TEST-" + suite.replace("/", ".").replace("+", "_") + ".xml"
        groups.append((filename, suite, members))
    return groups


def _failure_element(tag: str, failure: Failure) -> ET.Element:
    """A Surefire rerun element (`rerunFailure`, `flakyFailure`): the trace in a child."""
    element = ET.Element(tag, message=failure.message, type=failure.type)
    element.set("time", f"{failure.seconds:.3f}")
    ET.SubElement(element, "stackTrace").text = failure.stack
    return element


def _testcase(run: CaseRun) -> ET.Element:
    test = run.test
    case = ET.Element("testcase", name=test.name, classname=test.classname, file=test.file)
    case.set("time", f"{run.seconds:.3f}")
    if run.passed:
        case.extend(_failure_element("flakyFailure", failure) for failure in run.failures)
        return case
    first, *reruns = run.failures
    failure = ET.SubElement(case, "failure", message=first.message, type=first.type)
    failure.text = first.stack
    case.extend(_failure_element("rerunFailure", rerun) for rerun in reruns)
    return case


def write_junit(suite: str, runs: Sequence[CaseRun], *, at: datetime, hostname: str) -> bytes:
    """One Surefire report: a `testsuite` named `suite` holding `runs`, finished at `at`.

    Surefire counts a test that passed on a retry in `flakes`, not in `failures`; the suite's
    timestamp is when it started (its total time before `at`).
    """
    seconds = sum(run.seconds + sum(f.seconds for f in run.failures) for run in runs)
    root = ET.Element("testsuite", name=suite)
    root.set("time", f"{seconds:.3f}")
    root.set("tests", str(len(runs)))
    root.set("errors", "0")
    root.set("skipped", "0")
    root.set("failures", str(sum(not run.passed for run in runs)))
    root.set("flakes", str(sum(run.passed and bool(run.failures) for run in runs)))
    started = at - timedelta(seconds=round(seconds))
    root.set("timestamp", started.isoformat(timespec="seconds"))
    root.set("hostname", hostname)
    root.extend(_testcase(run) for run in runs)
    ET.indent(root)
    buffer = io.BytesIO()
    ET.ElementTree(root).write(buffer, encoding="UTF-8", xml_declaration=True)
    return buffer.getvalue()
