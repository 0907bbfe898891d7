"""Flaky-test detection quality on labelled synthetic weeks, through the real ingest path.

Run: python bench/flaky_detection.py [--seeds 3] [--days 7]
Each seed is a week of CI (24 main and 24 PR runs a day, failed tests retried once in the job,
10% of failed jobs rerun) over 150 healthy, 40 flaky (2-30%) and 6 broken tests with a two-hour
infrastructure outage on day 3, stored upload by upload with the clock at each upload's time
(SQLite). Prints flaky precision/recall at the end of the week (by flake-rate band), how many
main runs each broken test took to be flagged, and whether anything was flagged by the outage.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from backends import empty_repository  # bench/ is on sys.path when run as a script

from keepgreen.app.flaky.ingest import ReportFile, UploadMetadata
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef
from keepgreen.settings import Settings
from keepgreen.simulation.flaky_history import (
    HistoryConfig,
    Outage,
    default_population,
    generate,
)

REPO = RepoRef("github.com", "bench", "widgets")
BANDS = ((0.02, 0.05), (0.05, 0.10), (0.10, 0.31))


def flagged(container: Container, org: OrgId, status: TestStatus) -> set[tuple[str, str, str]]:
    keys = set()
    token = ""
    while True:
        page = container.flaky.list_unhealthy(org, REPO, status, size=100, token=token)
        keys |= {(v.test.file or "", v.test.classname or "", v.test.name) for v in page.tests}
        token = page.page.next_page_token
        if not token:
            return keys


def run(seed: int, days: int, work: Path) -> dict[str, object]:
    start = datetime(2026, 11, 2, tzinfo=UTC)
    now = [start]
    container = bootstrap(
        Settings(database_url=f"sqlite:///{work / f'kg{seed}.db'}", data_dir=work),
        clock=lambda: now[0],
    )
    org = container.admin.authenticate(container.admin.create_token("bench"))
    container.admin.add_repository(
        org_slug="bench", ref=REPO, git_url=str(empty_repository(work / "none")), ci_command=None
    )
    assert org is not None
    rng = random.Random(seed)  # noqa: S311 (benchmark data, not secrets)
    tests = default_population(start, rng, days=days)
    outage = Outage(start + timedelta(days=3, hours=2), start + timedelta(days=3, hours=4))
    history = generate(HistoryConfig(start=start, tests=tests, days=days, outages=(outage,)), rng)
    broken = {test.key: test for test in tests if test.broken_from is not None}
    committed = {u.commit_sha: u.at for u in history.uploads if u.rerun_of is None}
    runs_to_flag: dict[tuple[str, str, str], int] = {}
    main_runs: Counter[tuple[str, str, str]] = Counter()
    healthy = {test.key for test in tests if test.kind == "healthy"}
    false_alarms: set[tuple[str, str, str]] = set()
    began = time.perf_counter()
    for upload in history.uploads:
        now[0] = max(now[0], upload.at)
        container.ingest.upload(
            org,
            "bench",
            UploadMetadata(
                repo=REPO,
                org_url_slug="bench",
                commit_sha=upload.commit_sha,
                branch=upload.branch,
                pr_number=upload.pr_number,
                run_id=upload.run_id,
            ),
            [ReportFile(name, data) for name, data in upload.files],
        )
        if upload.branch != "main" or history.is_in_outage(upload.at):
            continue
        now_broken = flagged(container, org, TestStatus.BROKEN)
        false_alarms |= (now_broken | flagged(container, org, TestStatus.FLAKY)) & healthy
        for key, test in broken.items():
            assert test.broken_from is not None
            if committed[upload.commit_sha] >= test.broken_from and key not in runs_to_flag:
                main_runs[key] += 1
                if key in now_broken:
                    runs_to_flag[key] = main_runs[key]
    seconds = time.perf_counter() - began
    reported = flagged(container, org, TestStatus.FLAKY)
    flaky = [test for test in tests if test.kind == "flaky"]
    true_positive = sum(test.key in reported for test in flaky)
    bands = {
        f"{low:.0%}-{high:.0%}": (
            sum(t.key in reported for t in flaky if low <= t.flake_rate < high),
            sum(1 for t in flaky if low <= t.flake_rate < high),
        )
        for low, high in BANDS
    }
    container.close()
    return {
        "uploads": len(history.uploads),
        "seconds": seconds,
        "precision": true_positive / len(reported) if reported else 0.0,
        "recall": true_positive / len(flaky),
        "bands": bands,
        "runs_to_flag_broken": sorted(runs_to_flag.values()),
        "broken_missed": len(broken) - len(runs_to_flag),
        "false_alarms": len(false_alarms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args()
    header = f"{'seed':>4} {'uploads':>7} {'s':>6} {'precision':>9} {'recall':>6}"
    print(f"{header}  recall by flake rate  main runs to flag broken  missed  healthy flagged")
    precisions, recalls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(1, args.seeds + 1):
            row = run(seed, args.days, Path(tmp))
            precisions.append(float(row["precision"]))  # type: ignore[arg-type]
            recalls.append(float(row["recall"]))  # type: ignore[arg-type]
            bands = "  ".join(f"{band} {hit}/{n}" for band, (hit, n) in row["bands"].items())  # type: ignore[attr-defined]
            print(
                f"{seed:>4} {row['uploads']:>7} {row['seconds']:>6.0f} {row['precision']:>9.3f}"
                f" {row['recall']:>6.3f}  {bands}  {row['runs_to_flag_broken']!s:<24}"
                f" {row['broken_missed']:>6} {row['false_alarms']:>8}"
            )
    print(
        f"mean precision {statistics.mean(precisions):.3f}, recall {statistics.mean(recalls):.3f}"
    )


if __name__ == "__main__":
    main()
