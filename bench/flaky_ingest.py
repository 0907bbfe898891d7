"""Flaky-test ingest and read latency, in process, on SQLite and PostgreSQL.

Run: python bench/flaky_ingest.py [--uploads 40] [--tests 2000]
Each upload is one JUnit report of `--tests` test cases (3% failing, half of those passing on
a retry in the same job) on its own commit of main, through the real HTTP upload path; then
the read API is timed over what was stored. Set KEEPGREEN_TEST_DATABASE_URL to add PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from backends import backends, empty_repository  # bench/ is on sys.path when run as a script
from fastapi.testclient import TestClient

from keepgreen.bootstrap import bootstrap
from keepgreen.core.model import RepoRef
from keepgreen.settings import Settings
from keepgreen.web.app import create_app

REPO = {"host": "github.com", "owner": "bench", "name": "widgets"}


def junit(tests: int, rng: random.Random) -> bytes:
    cases = []
    for i in range(tests):
        roll = rng.random()
        head = f'<testcase classname="pkg.mod{i % 50}.TestX" name="test_{i}" time="0.01"'
        if roll < 0.015:
            cases.append(
                f'{head}><failure message="boom {rng.randint(1, 9999)}">t</failure></testcase>'
            )
        elif roll < 0.03:
            cases.append(
                f'{head}><flakyFailure message="timeout {rng.randint(1, 9999)} ms"/></testcase>'
            )
        else:
            cases.append(f"{head}/>")
    return f'<testsuite name="bench">{"".join(cases)}</testsuite>'.encode()


def run_backend(name: str, url: str, workdir: Path, uploads: int, tests: int) -> list[str]:
    container = bootstrap(Settings(database_url=url, data_dir=workdir / "data"))
    token = container.admin.create_token("bench")
    container.admin.add_repository(
        org_slug="bench",
        ref=RepoRef(**REPO),
        git_url=str(empty_repository(workdir / "none")),
        ci_command=None,
    )
    headers = {"x-api-token": token}
    rng = random.Random(7)  # noqa: S311 (benchmark data, not secrets)
    reports = [junit(tests, rng) for _ in range(uploads)]
    timings = []
    with TestClient(create_app(container=container)) as client:
        for index, report in enumerate(reports):
            metadata = {"repo": REPO, "commit_sha": f"{index:040x}", "branch": "main"}
            start = time.perf_counter()
            response = client.post(
                "/v1/flaky-tests/upload",
                headers=headers,
                data={"metadata": json.dumps(metadata)},
                files=[("file", ("r.xml", report, "application/xml"))],
            )
            timings.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, response.text
        end = datetime.now(UTC) + timedelta(minutes=1)
        page = {"page_size": 100}
        reads = {
            "list-failing-tests": {
                "start_time": (end - timedelta(days=7)).isoformat(),
                "end_time": end.isoformat(),
                "page_query": page,
            },
            "list-unhealthy-tests": {"status": "FLAKY", "page_query": page},
        }
        rows = [
            (
                f"{name:<11} upload of {tests} tests   median {statistics.median(timings):8.1f} ms"
                f"   p95 {statistics.quantiles(timings, n=20)[-1]:8.1f} ms"
                f"   ({tests * uploads / (sum(timings) / 1000):,.0f} results/s)"
            )
        ]
        for verb, fields in reads.items():
            read_timings = []
            for _ in range(20):
                body = {"repo": REPO, "org_url_slug": "bench", **fields}
                start = time.perf_counter()
                response = client.post(f"/v1/flaky-tests/{verb}", headers=headers, json=body)
                read_timings.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.text
            total = response.json()["page"]["total_rows"]
            rows.append(
                f"{name:<11} {verb:<24} median {statistics.median(read_timings):8.1f} ms"
                f"   ({total} rows, page of 100)"
            )
    container.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uploads", type=int, default=40)
    parser.add_argument("--tests", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, url, workdir in backends(Path(tmp)):
            rows += run_backend(name, url, workdir, args.uploads, args.tests)
    print(f"flaky ingest: {args.uploads} uploads x {args.tests} tests")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
