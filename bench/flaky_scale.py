"""Flaky-test ingest at CI scale, through a real `keepgreen serve` over HTTP, each figure beside
a reference measured in the same run.

    python bench/flaky_scale.py --backend sqlite|postgresql [--quick] [--stored N] [--json PATH]

`--backend postgresql` runs on a fresh schema of the database KEEPGREEN_TEST_DATABASE_URL
names (dropped afterwards). The server is started as an operator starts it (`keepgreen serve`,
the API and the queue worker, on KEEPGREEN_DATABASE_URL and KEEPGREEN_DATA_DIR), set up with
`keepgreen token create` and `keepgreen repo add`, and only its public interfaces are used:
`POST /v1/flaky-tests/upload` (multipart: `metadata` JSON and `file` parts), the read API,
`getQueue`, and the `keepgreen upload` and `keepgreen tests` commands. Reports are pytest's
JUnit XML (bench/pytest_reports.py), seeded, so every run sends the same bytes.

Rows (the ratio column is keepgreen's figure divided by the reference's):
- ingest: results a second over uploads of 2,000-20,000-test reports, beside the same bytes
  posted with metadata the server refuses (400 once the body is read: the HTTP floor);
  the same seconds beside lxml's bare `iterparse` of the same bytes in this process (and,
  for scale, a bare Python loop that reads and hashes each testcase's identity);
- a 50,000-test upload (gzip, as the CLI sends it), over HTTP and by `keepgreen upload`;
- 10 and 50 shards of one run (same commit) at once to one repository beside the same
  uploads one after another; what was stored is checked through list-failing-tests;
- getQueue latency and the server's memory (VmHWM, VmRSS) during a 200,000-test upload;
- an upload with `--stored` results stored (default 4.9 M, seeded by real uploads) beside
  the same upload made at the start, when the database held almost nothing;
- list-failing-tests (7 days, those results) and list-quarantined-tests (50,000 tests),
  beside a trivial authenticated call (get-settings); then the SQL of both listings with
  the database's plan (bench/sql_plans.py).
Progress goes to stderr; the tables to stdout. Seeding stops early, and the row says so, when
less than 20 GiB of disk is left (the machine is shared).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flaky_api import (  # bench/ is on sys.path when run as a script
    HOST,
    OWNER,
    Api,
    cli_upload,
    gz,
    ref_json,
    sha,
    week,
)
from flaky_shards import measure_shards
from lxml import etree
from pytest_reports import Suite, report
from run_facts import database_bytes, disk_use, machine, versions
from serve_process import (
    ORG,
    Served,
    git_repository,
    keepgreen,
    keepgreen_env,
    memory_kib,
    reset_peak_rss,
)
from sql_plans import listing_plans, print_plans

REPOSITORIES = ("big", "ingest", "fifty", "seq10", "par10", "seq50", "par50", "huge", "queue")
POLL_PAUSE_SECONDS = 0.02  # between two getQueue calls while measuring its latency
PROGRESS_SECONDS = 30.0
# Seeding stops before the machine's disk runs low (SQLite's write-ahead log can grow to many
# times the database while uploads keep coming): the machine is shared.
MIN_FREE_DISK_BYTES = 20 * 2**30


@dataclass(frozen=True)
class Scale:
    ingest_sizes: tuple[int, ...] = (2_000, 5_000, 10_000, 20_000)
    ingest_runs: int = 3  # uploads of each size, each on a new commit
    fifty: int = 50_000
    fifty_runs: int = 3  # the first makes the tests; the others are timed
    quarantined: int = 500  # of the fifty's tests, quarantined ALWAYS
    shard_tests: int = 2_000  # tests in each of the 10 shards
    many_shard_tests: int = 1_000  # tests in each of the 50 shards
    huge: int = 200_000
    huge_files: int = 10  # reports of the huge upload (a report holds at most 200,000 tests)
    stored: int = 4_900_000
    seed_tests: int = 20_000  # tests in each upload that seeds the stored results
    timed_uploads: int = 3  # beside the stored results, and in the reference at the start
    reads: int = 50  # timed calls of each listing
    idle_polls: int = 100  # getQueue calls timed while nothing else runs


QUICK = Scale(
    ingest_sizes=(200, 500),
    ingest_runs=2,
    fifty=1_000,
    fifty_runs=2,
    quarantined=10,
    shard_tests=60,
    many_shard_tests=40,
    huge=2_000,
    huge_files=2,
    stored=6_000,
    seed_tests=1_000,
    timed_uploads=2,
    reads=5,
    idle_polls=10,
)


# -- the table ------------------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    label: str
    keepgreen: str
    reference: str
    target: str
    ratio: float | None = None  # keepgreen's figure / the reference's
    figures: dict[str, Any] = field(default_factory=dict)  # the numbers, for --json
    measured: bool = True


def not_measured(key: str, label: str, target: str, why: str) -> Row:
    return Row(key, label, f"not measured: {why}", "", target, measured=False)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def p50(values: list[float]) -> float:
    return statistics.median(values)


def print_table(rows: list[Row], backend: str) -> None:
    head = ("row", f"keepgreen ({backend})", "reference", "ratio", "target")
    cells = [
        (
            row.label,
            row.keepgreen,
            row.reference,
            f"{row.ratio:.3g}x" if row.ratio else "-",
            row.target,
        )
        for row in rows
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for line in cells:
        print("| " + " | ".join(cell.replace("|", "/") for cell in line) + " |")


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def iterparse_seconds(data: bytes) -> float:
    """The reference parse: lxml's bare iterparse over the same (gzip) bytes, each element
    cleared as it ends, in this process.
    """
    started = time.perf_counter()
    for _event, element in etree.iterparse(gzip.GzipFile(fileobj=io.BytesIO(data))):
        element.clear()
    return time.perf_counter() - started


def python_floor_seconds(data: bytes) -> float:
    """The least a reader in Python does per result, over the same bytes: iterparse of the
    testcases only, each one's identity read and hashed into an id (as every test id is), and
    the ids kept. Beside iterparse it shows how much of the ratio any Python reader spends
    before storing anything.
    """
    started = time.perf_counter()
    ids: dict[str, tuple[str | None, ...]] = {}
    stream = gzip.GzipFile(fileobj=io.BytesIO(data))
    for _event, element in etree.iterparse(stream, tag="testcase"):
        get = element.get
        identity = (get("file"), get("classname"), get("name"))
        key = "#".join(part or "" for part in identity).encode()
        ids[hashlib.sha1(key).hexdigest()] = identity  # noqa: S324 (an id, as keepgreen's)
        element.clear()
    return time.perf_counter() - started


# -- the benchmark --------------------------------------------------------------------------------


class Bench:
    """One backend's run: the server, its API, and the rows as they are measured."""

    def __init__(
        self, *, scale: Scale, backend: str, url: str, workdir: Path, served: Served, api: Api,
        env: dict[str, str],
    ) -> None:  # fmt: skip
        self.scale, self.backend, self.url, self.workdir = scale, backend, url, workdir
        self.served, self.api, self.env = served, api, env
        self.rows: dict[str, Row] = {}
        self.phase_seconds: dict[str, float] = {}
        self.plans: dict[str, list[dict[str, Any]]] = {}
        self.specs = row_specs(scale, backend)
        self.big_run = 0  # uploads made to the repository of the stored results
        self.big_stored = 0  # results stored there
        self.reference_uploads: list[float] = []
        self.fifty_failed: list[str] = []

    def row(
        self, key: str, keepgreen_cell: str, reference: str, ratio: float | None, **figures: Any
    ) -> None:
        label, target = self.specs[key]
        self.rows[key] = Row(key, label, keepgreen_cell, reference, target, ratio, figures)

    @contextmanager
    def phase(self, name: str, keys: tuple[str, ...]) -> Iterator[None]:
        """A stretch of the benchmark; when it fails, its rows say so instead of a figure."""
        progress(f"{name}...")
        started = time.perf_counter()
        try:
            yield
        except Exception as error:  # noqa: BLE001 (a failed phase is reported; the others run)
            traceback.print_exc(file=sys.stderr)
            for key in keys:
                if key not in self.rows:
                    label, target = self.specs[key]
                    why = f"{name} failed ({type(error).__name__}: {str(error)[:200]})"
                    self.rows[key] = not_measured(key, label, target, why)
        self.phase_seconds[name] = time.perf_counter() - started
        progress(f"{name}: {self.phase_seconds[name]:.0f} s")

    # --- the repository of the stored results -----------------------------------------------

    def big_report(self, run: int) -> bytes:
        return gz(
            report(Suite("big", self.scale.seed_tests), range(self.scale.seed_tests), run_seed=run)
        )

    def big_upload(self, data: bytes, run: int) -> float:
        """One CI job's upload of the whole suite: on main every fourth run, else on a PR."""
        on_main = run % 4 == 0
        answer = self.api.upload(
            "big",
            [data],
            commit=sha("big", run),
            branch="main" if on_main else f"feature/{run % 97}",
            pr=None if on_main else 1 + run % 97,
        )
        self.big_run = max(self.big_run, run)
        self.big_stored += int(answer.body["results"])
        return answer.seconds

    def stored_reference(self) -> None:
        """The upload of the stored-results row, timed while the database holds almost nothing:
        the first upload makes the suite's tests; the next ones are the reference.
        """
        self.big_upload(self.big_report(1), 1)
        for run in range(2, 2 + self.scale.timed_uploads):
            self.reference_uploads.append(self.big_upload(self.big_report(run), run))

    def seed_and_time(self) -> None:
        target, started, last = self.scale.stored, time.perf_counter(), time.perf_counter()
        stopped = ""
        with ThreadPoolExecutor(max_workers=1) as maker:  # the next report is made meanwhile
            upcoming = maker.submit(self.big_report, self.big_run + 1)
            while self.big_stored < target:
                free = shutil.disk_usage(self.workdir).free
                if free < MIN_FREE_DISK_BYTES:
                    stopped = (
                        f"seeding stopped at {self.big_stored:,}: {free / 2**30:.1f} GiB of disk "
                        f"left ({disk_use(self.url)})"
                    )
                    progress(stopped)
                    break
                run, data = self.big_run + 1, upcoming.result()
                upcoming = maker.submit(self.big_report, run + 1)
                self.big_upload(data, run)
                if time.perf_counter() - last > PROGRESS_SECONDS or self.big_stored >= target:
                    last = time.perf_counter()
                    elapsed = last - started
                    left = elapsed * (target - self.big_stored) / self.big_stored
                    progress(
                        f"stored {self.big_stored:,} / {target:,} results in {elapsed:.0f} s"
                        f" (about {max(0.0, left) / 60:.1f} min left; {disk_use(self.url)})"
                    )
        timed = []
        for _ in range(self.scale.timed_uploads):
            run = self.big_run + 1
            timed.append(self.big_upload(self.big_report(run), run))
        now, then = p50(timed), p50(self.reference_uploads)
        self.row(
            "upload_stored",
            f"median {now:.2f} s ({self.scale.seed_tests:,} tests, {self.big_stored:,} stored; "
            f"{disk_use(self.url)}{'; ' + stopped if stopped else ''})",
            f"median {then:.2f} s (same uploads at the start: "
            f"{self.scale.seed_tests * (1 + self.scale.timed_uploads):,} stored)",
            now / then,
            seconds=timed,
            reference_seconds=self.reference_uploads,
            stored=self.big_stored,
            disk_bytes=database_bytes(self.url),
            stopped=stopped or None,
        )

    # --- ingest ------------------------------------------------------------------------------

    def ingest(self) -> None:
        results = 0
        upload = floor = parse = python = 0.0
        for run in range(1, self.scale.ingest_runs + 1):
            for size in self.scale.ingest_sizes:
                data = gz(report(Suite(f"ingest{size}", size), range(size), run_seed=run))
                parse += iterparse_seconds(data)
                python += python_floor_seconds(data)
                floor += self.api.upload("ingest", [data], commit="", refused=True).seconds
                answer = self.api.upload("ingest", [data], commit=sha("ingest", size, run))
                upload += answer.seconds
                results += int(answer.body["results"])
        rate, floor_rate = results / upload, results / floor
        self.row(
            "ingest_rate",
            f"{rate:,.0f} results/s ({results:,} results)",
            f"{floor_rate:,.0f} results/s (same bodies refused once read)",
            rate / floor_rate,
            results=results,
            upload_seconds=upload,
            refused_seconds=floor,
        )
        self.row(
            "ingest_vs_iterparse",
            f"{upload:.2f} s",
            f"{parse:.3f} s (iterparse, {results / parse:,.0f} results/s; a bare Python loop"
            f" reading and hashing each testcase's identity: {python:.3f} s,"
            f" {python / parse:.1f}x iterparse)",
            upload / parse,
            upload_seconds=upload,
            iterparse_seconds=parse,
            python_floor_seconds=python,
        )

    def fifty(self) -> None:
        size, timed, floors = self.scale.fifty, [], []
        first = 0.0
        failed: set[str] = set()
        for run in range(1, self.scale.fifty_runs + 1):
            data = gz(report(Suite("fifty", size), range(size), run_seed=run))
            floors.append(self.api.upload("fifty", [data], commit="", refused=True).seconds)
            answer = self.api.upload("fifty", [data], commit=sha("fifty", run))
            failed.update(failure["test_id"] for failure in answer.body["failures"])
            if run == 1:
                first = answer.seconds
            else:
                timed.append(answer.seconds)
        self.fifty_failed = sorted(failed)
        self.row(
            "upload_fifty",
            f"median {p50(timed):.2f} s (the first, making the tests: {first:.2f} s)",
            f"median {p50(floors):.3f} s (same bodies refused once read)",
            p50(timed) / p50(floors),
            seconds=timed,
            first_seconds=first,
            refused_seconds=floors,
        )
        report_file = self.workdir / "fifty.xml"
        report_file.write_bytes(report(Suite("fifty", size), range(size), run_seed=0))
        one_file = self.workdir / "one.xml"
        one_file.write_bytes(report(Suite("one", 1), range(1), run_seed=0))
        env = {**self.env, "KEEPGREEN_URL": self.api.url, "KEEPGREEN_TOKEN": self.api.token}
        one = cli_upload(one_file, "ingest", commit=sha("one"), env=env, cwd=self.workdir)
        whole = cli_upload(report_file, "fifty", commit=sha("fifty", 0), env=env, cwd=self.workdir)
        self.row(
            "upload_fifty_cli",
            f"{whole:.2f} s",
            f"{one:.2f} s (`keepgreen upload` of a 1-test report)",
            whole / one,
            seconds=whole,
            one_test_seconds=one,
        )

    def quarantine(self) -> None:
        """Quarantining on for the fifty's repository, and ALWAYS on some of its failed tests."""
        env = {**self.env, "KEEPGREEN_URL": self.api.url, "KEEPGREEN_TOKEN": self.api.token}
        keepgreen(
            "tests", "settings", "--repo", f"{HOST}/{OWNER}/fifty", "--org", ORG, "--quarantine",
            env=env, cwd=self.workdir,
        )  # fmt: skip
        for test_id in self.fifty_failed[: self.scale.quarantined]:
            self.api.flaky(
                "set-quarantine-override", "fifty", test_id=test_id, setting="ALWAYS_QUARANTINE"
            )

    def shards(self, key: str, count: int, tests: int, *, retry: bool) -> None:
        cell, reference, ratio, figures = measure_shards(self.api, count, tests, retry=retry)
        self.row(key, cell, reference, ratio, **figures)

    # --- a 200,000-test upload: the queue's API meanwhile, and the server's memory -----------

    def huge(self) -> None:
        size, files = self.scale.huge, self.scale.huge_files
        per = size // files
        suite = Suite("huge", size)
        reports = [
            gz(report(suite, range(k * per, (k + 1) * per), run_seed=1)) for k in range(files)
        ]
        queue = {"repo": ref_json("queue"), "targetBranch": "main"}
        idle = []
        for _ in range(self.scale.idle_polls):
            idle.append(self.api.post("getQueue", queue)[0])
            time.sleep(POLL_PAUSE_SECONDS)
        pid = self.served.pid
        idle_rss = memory_kib(pid)["VmRSS"]
        peak_reset = reset_peak_rss(pid)
        sampled_rss = idle_rss
        during: list[float] = []
        statuses: Counter[int] = Counter()
        with ThreadPoolExecutor(max_workers=1) as sender:
            sending = sender.submit(self.api.upload, "huge", reports, commit=sha("huge"))
            while not sending.done():
                seconds, status = self.api.timed("getQueue", queue)
                during.append(seconds)
                statuses[status] += 1
                sampled_rss = max(sampled_rss, memory_kib(pid)["VmRSS"])
                time.sleep(POLL_PAUSE_SECONDS)
            answer = sending.result()
        memory = memory_kib(pid)
        peak = memory["VmHWM"] if peak_reset else sampled_rss
        time.sleep(1.0)
        after = memory_kib(pid)["VmRSS"]
        refused = ", ".join(
            f"{count} answered {status}"
            for status, count in sorted(statuses.items())
            if status != 200
        )
        self.row(
            "getqueue",
            f"p50 {ms(p50(during))}, max {ms(max(during))} ({len(during)} calls in the "
            f"{answer.seconds:.1f} s upload{'; ' + refused if refused else ''})",
            f"idle: p50 {ms(p50(idle))}, max {ms(max(idle))}",
            p50(during) / p50(idle),
            during_ms=[t * 1000 for t in during],
            idle_ms=[t * 1000 for t in idle],
            statuses={str(status): count for status, count in statuses.items()},
            upload_seconds=answer.seconds,
            results=answer.body["results"],
        )
        how = "VmHWM" if peak_reset else "VmRSS sampled every poll (VmHWM could not be reset)"
        self.row(
            "rss",
            f"peak {peak / 1024:,.0f} MiB, after {after / 1024:,.0f} MiB ({how})",
            f"idle before: {idle_rss / 1024:,.0f} MiB",
            peak / idle_rss,
            peak_kib=peak,
            after_kib=after,
            idle_kib=idle_rss,
            peak_from_vmhwm=peak_reset,
        )

    # --- reads -------------------------------------------------------------------------------

    def reads(self) -> None:
        trivial, failing, quarantined = [], [], []
        window = week()
        quarantine_page = {"page_query": {"page_size": 100}}
        for call in range(self.scale.reads + 1):  # the first of each warms up
            seconds, _settings = self.api.flaky("get-settings", "big")
            failing_seconds, failing_page = self.api.failing("big", window)
            quarantined_seconds, quarantined_page = self.api.flaky(
                "list-quarantined-tests", "fifty", **quarantine_page
            )
            if call:
                trivial.append(seconds)
                failing.append(failing_seconds)
                quarantined.append(quarantined_seconds)
        reference = f"p50 {ms(p50(trivial))} (get-settings)"
        self.row(
            "list_failing",
            f"p50 {ms(p50(failing))} ({failing_page['page']['total_rows']:,} failing tests of "
            f"{self.big_stored:,} results, page of 100)",
            reference,
            p50(failing) / p50(trivial),
            ms=[t * 1000 for t in failing],
            trivial_ms=[t * 1000 for t in trivial],
            total_rows=failing_page["page"]["total_rows"],
        )
        self.row(
            "list_quarantined",
            f"p50 {ms(p50(quarantined))} ({quarantined_page['page']['total_rows']:,} of "
            f"{self.scale.fifty:,} tests quarantined, page of 100)",
            reference,
            p50(quarantined) / p50(trivial),
            ms=[t * 1000 for t in quarantined],
            trivial_ms=[t * 1000 for t in trivial],
            total_rows=quarantined_page["page"]["total_rows"],
        )

    def explain(self) -> None:
        from keepgreen.core.model import RepoRef

        plans = listing_plans(
            database_url=self.url,
            scratch=self.workdir / "explain",
            token=self.api.token,
            failing_repo=RepoRef(HOST, OWNER, "big"),
            window=week(),
            quarantined_repo=RepoRef(HOST, OWNER, "fifty"),
        )
        self.plans = {
            name: [
                asdict(statement) | {"parameters": repr(statement.parameters)}
                for statement in statements
            ]
            for name, statements in plans.items()
        }

    def run(self) -> None:
        with self.phase(
            "upload at the start (reference of the stored-results row)", ("upload_stored",)
        ):
            self.stored_reference()
        with self.phase("ingest", ("ingest_rate", "ingest_vs_iterparse")):
            self.ingest()
        with self.phase(f"{self.scale.fifty:,}-test uploads", ("upload_fifty", "upload_fifty_cli")):
            self.fifty()
        with self.phase("quarantine overrides", ("list_quarantined",)):
            self.quarantine()
        with self.phase("10 shards", ("shards_10",)):
            self.shards("shards_10", 10, self.scale.shard_tests, retry=False)
        with self.phase("50 shards", ("shards_50",)):
            self.shards("shards_50", 50, self.scale.many_shard_tests, retry=True)
        with self.phase(f"{self.scale.huge:,}-test upload", ("getqueue", "rss")):
            self.huge()
        with self.phase(f"seeding {self.scale.stored:,} results", ("upload_stored",)):
            if "upload_stored" not in self.rows:
                self.seed_and_time()
        with self.phase("reads", ("list_failing", "list_quarantined")):
            self.reads()
        with self.phase("EXPLAIN", ()):
            self.explain()


def row_specs(scale: Scale, backend: str) -> dict[str, tuple[str, str]]:
    """Each row's label and target, in the order of the table."""
    sizes = f"{min(scale.ingest_sizes):,}-{max(scale.ingest_sizes):,}"
    # The issue asks this row of SQLite (one writer at a time); PostgreSQL is measured alike.
    getqueue = "SQLite: " if backend == "sqlite" else ""
    return {
        "ingest_rate": (f"ingest, {sizes}-test reports", "≥ 50,000 results/s"),
        "ingest_vs_iterparse": ("ingest vs raw lxml iterparse of the same bytes", "≤ 3x"),
        "upload_fifty": (f"{scale.fifty:,}-test upload (HTTP, gzip)", "≤ 2 s"),
        "upload_fifty_cli": (f"{scale.fifty:,}-test upload by `keepgreen upload`", "≤ 2 s"),
        "shards_10": ("10 shards of one run at once to one repository", "parallel, nothing lost"),
        "shards_50": (
            "50 shards at once to one repository",
            "all stored; a 503 carries Retry-After",
        ),
        "getqueue": (
            f"{getqueue}getQueue latency during a {scale.huge:,}-test upload",
            "unaffected",
        ),
        "rss": (f"{scale.huge:,}-test upload: server RSS", "-"),
        "upload_stored": (
            f"upload with {scale.stored:,} stored results vs an empty database",
            "≤ 1.1x",
        ),
        "list_failing": (
            f"list-failing-tests, 7-day window, {scale.stored:,} results",
            "≤ 30 ms",
        ),
        "list_quarantined": (f"list-quarantined-tests, {scale.fifty:,} tests", "≤ 20 ms"),
    }


@contextmanager
def database(backend: str, work: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{work / 'data' / 'keepgreen.db'}"
        return
    url = os.environ.get("KEEPGREEN_TEST_DATABASE_URL")
    if not url:
        raise SystemExit(
            "--backend postgresql needs KEEPGREEN_TEST_DATABASE_URL (a PostgreSQL URL)"
        )
    from backends import postgresql_schema

    with postgresql_schema(url) as schema_url:
        yield schema_url


def start(backend: str, url: str, work: Path, scale: Scale) -> tuple[Served, Api, dict[str, str]]:
    """keepgreen set up as an operator does (a token, the repositories), then served."""
    env = keepgreen_env(url, work / "data")
    token = keepgreen("token", "create", "--org", ORG, env=env, cwd=work).strip().splitlines()[-1]
    for name in REPOSITORIES:
        git = git_repository(work / "git" / name)
        keepgreen(
            "repo", "add", "--org", ORG, "--host", HOST, "--owner", OWNER, "--name", name,
            "--git-url", str(git), env=env, cwd=work,
        )  # fmt: skip
    served = Served(env=env, cwd=work, log=work / "serve.log")
    served.wait_until_answering(token)
    api = Api(served.url, token)
    api.post("createQueue", {"repo": ref_json("queue"), "targetBranch": "main"})
    del backend, scale
    return served, api, env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), required=True)
    parser.add_argument("--quick", action="store_true", help="a scale small enough for a test")
    parser.add_argument("--stored", type=int, help="results stored before the last rows")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    scale = QUICK if args.quick else Scale()
    if args.stored is not None:
        scale = Scale(**{**asdict(scale), "stored": args.stored})
    started = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kg-flaky-scale-") as tmp:
        work = Path(tmp)
        with database(args.backend, work) as url:
            found_versions = versions(args.backend, url)
            served, api, env = start(args.backend, url, work, scale)
            bench = Bench(
                scale=scale,
                backend=args.backend,
                url=url,
                workdir=work,
                served=served,
                api=api,
                env=env,
            )
            try:
                bench.run()
            finally:
                api.client.close()
                served.stop()
            log_lines = (work / "serve.log").read_text().splitlines()
    about = machine()
    print(f"flaky-test ingest at CI scale: {args.backend}{' (--quick)' if args.quick else ''}")
    print(
        f"machine: nproc {about['nproc']}, {about['cpu']}, {about['memory_gib']} GiB, "
        f"kernel {about['kernel']}; load average {' '.join(f'{x:.2f}' for x in load_before)} "
        f"at the start, {' '.join(f'{x:.2f}' for x in about['load_average'])} at the end"
    )
    print("versions: " + ", ".join(f"{name} {version}" for name, version in found_versions.items()))
    print(
        f"scale: {', '.join(f'{k}={v}' for k, v in asdict(scale).items())}; "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    print()
    rows = [bench.rows[key] for key in bench.specs if key in bench.rows]
    print_table(rows, args.backend)
    print()
    print(
        "phases: "
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in bench.phase_seconds.items())
    )
    answered_5xx = sum(1 for line in log_lines if re.search(r"\bstatus=5\d\d\b", line))
    warnings = sum(1 for line in log_lines if re.search(r"\[(warning|error|critical)\b", line))
    print(f"server log: {answered_5xx} requests answered 5xx; {warnings} warnings or errors")
    print_plans(bench.plans, args.backend)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "backend": args.backend,
                    "quick": args.quick,
                    "machine": about | {"load_average_before": load_before},
                    "versions": found_versions,
                    "scale": asdict(scale),
                    "rows": {row.key: asdict(row) for row in rows},
                    "phase_seconds": bench.phase_seconds,
                    "plans": bench.plans,
                },
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
