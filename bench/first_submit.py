"""The merge button as a person presses it: one first submit at a time, against a real
`keepgreen serve` (API and queue worker), with the time the answer takes and the time until
the worker has read the PR and admitted it.

Run: python bench/first_submit.py [--prs 40] [--gap 0.3]
Set KEEPGREEN_TEST_DATABASE_URL to add PostgreSQL.

For each backend: a fresh database, one repository (a real git repository with the PRs'
refs) and a queue of concurrency 1 requiring a status nobody reports, so PR 1 tests and the
rest wait `pending`. Each PR is submitted alone, `--gap` seconds after the last was admitted
(a worker at rest, as between a team's merges); then getSubmittedPullRequest is polled until
it is admitted. The reference, in the same run, is a resubmit of an admitted PR that changes
nothing: one read, no write, the cheapest call on the same path.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from backends import backends  # bench/ is on sys.path when run as a script
from polled_calls import PRS, REPO, set_up
from serve_process import Served, keepgreen_env

ADMITTED = {"pending", "testing"}


def timed(client: httpx.Client, verb: str, **body: object) -> tuple[float, dict[str, object]]:
    """One call: its wall time in ms and its answer."""
    started = time.perf_counter()
    answer = client.post(f"/{verb}", json={"repo": REPO, "targetBranch": "main", **body})
    elapsed = (time.perf_counter() - started) * 1000
    answer.raise_for_status()
    result: dict[str, object] = answer.json()
    return elapsed, result


def run_backend(url: str, token: str, prs: int, gap: float) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"submit": [], "admitted": [], "resubmit": []}
    with httpx.Client(base_url=url, headers={"x-api-token": token}, timeout=60) as client:
        timed(client, "createQueue", concurrency=1)
        timed(client, "updateQueue", requiredStatuses=["bench/ci"], batch=False)
        for number in range(1, prs + 1):
            time.sleep(gap)
            started = time.perf_counter()
            answered, _ = timed(client, "submitPullRequest", pr={"number": number})
            while True:
                _, pr = timed(client, "getSubmittedPullRequest", pr={"number": number})
                if pr["state"] in ADMITTED:
                    break
                if time.perf_counter() - started > 30:
                    raise RuntimeError(f"PR {number} was not admitted: {pr['state']}")
                time.sleep(0.005)
            figures["submit"].append(answered)
            figures["admitted"].append((time.perf_counter() - started) * 1000)
            again, _ = timed(client, "submitPullRequest", pr={"number": number})
            figures["resubmit"].append(again)
    return figures


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):.1f} / {p95:.1f} / {ordered[-1]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between PRs")
    args = parser.parse_args()
    if not 1 <= args.prs <= PRS:
        parser.error(f"--prs must be 1-{PRS} (the PR refs the repository is made with)")
    print(f"{args.prs} PRs, one at a time, {args.gap} s apart; ms as median / p95 / max\n")
    print("| backend | first submit answered | read and admitted | resubmit (reference) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for backend, database_url, cwd in backends(Path(work)):
            env = keepgreen_env(database_url, cwd / "data")
            token = set_up(env, cwd, connections=0)
            served = Served(env=env, cwd=cwd, log=cwd / "serve.log")
            try:
                served.wait_until_answering(token)
                figures = run_backend(served.url, token, args.prs, args.gap)
            finally:
                served.stop()
            print(
                f"| {backend} | {summary(figures['submit'])} | {summary(figures['admitted'])} "
                f"| {summary(figures['resubmit'])} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
