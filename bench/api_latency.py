"""API latency: median and p95 of the hot merge-queue calls, in process, on SQLite and PostgreSQL.

Run: python bench/api_latency.py [--requests 200]
Set KEEPGREEN_TEST_DATABASE_URL to add a PostgreSQL row. Each backend gets a fresh database,
one registered repository (a real git repository with PRs) and one queue.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from backends import backends  # bench/ is on sys.path when run as a script
from fastapi.testclient import TestClient

from keepgreen.bootstrap import bootstrap
from keepgreen.core.model import RepoRef
from keepgreen.settings import Settings
from keepgreen.web.app import create_app

REPO = {"host": "github.com", "owner": "bench", "name": "widgets"}


def make_git_repo(path: Path, prs: int) -> None:
    identity = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    env = {**os.environ, **identity, "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()

    path.mkdir()
    git("init", "-q", "-b", "main")
    (path / "README").write_text("r\n")
    git("add", "README")
    git("commit", "-qm", "init")
    for number in range(1, prs + 1):
        git("checkout", "-q", "-B", f"pr{number}", "main")
        (path / f"f{number}").write_text(f"{number}\n")
        git("add", f"f{number}")
        git("commit", "-qm", f"PR {number}")
        git("update-ref", f"refs/pull/{number}/head", "HEAD")
        git("checkout", "-q", "main")


def status_body() -> dict[str, object]:
    return {"repo": REPO, "sha": uuid.uuid4().hex, "context": "ci", "state": "success"}


def measure(
    client: TestClient, token: str, verb: str, bodies: list[dict[str, object]]
) -> list[float]:
    timings = []
    for body in bodies:
        start = time.perf_counter()
        response = client.post(f"/v1/{verb}", json=body, headers={"x-api-token": token})
        timings.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.text
    return timings


def run_backend(
    name: str, url: str, workdir: Path, requests: int
) -> list[tuple[str, str, float, float]]:
    make_git_repo(workdir / "repo", requests)
    container = bootstrap(Settings(database_url=url, data_dir=workdir / "data"))
    token = container.admin.create_token("bench")
    container.admin.add_repository(
        org_slug="bench", ref=RepoRef(**REPO), git_url=str(workdir / "repo"), ci_command=None
    )
    rows = []
    with TestClient(create_app(container=container)) as client:
        base = {"repo": REPO, "targetBranch": "main"}
        measure(client, token, "createQueue", [base])
        prs = [{**base, "pr": {"number": n}} for n in range(1, requests + 1)]
        for verb, bodies in (
            ("submitPullRequest", prs),
            ("getSubmittedPullRequest", prs),
            ("getQueue", [base] * requests),
            ("setCommitStatus", [status_body() for _ in range(requests)]),
        ):
            timings = measure(client, token, verb, bodies)
            p95 = statistics.quantiles(timings, n=20)[-1]
            rows.append((name, verb, statistics.median(timings), p95))
    container.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, url, workdir in backends(Path(tmp)):
            rows += run_backend(name, url, workdir, args.requests)
    print(f"{'backend':<11} {'call':<25} {'median ms':>10} {'p95 ms':>8}   (n={args.requests})")
    for backend, verb, median, p95 in rows:
        print(f"{backend:<11} {verb:<25} {median:>10.2f} {p95:>8.2f}")


if __name__ == "__main__":
    main()
