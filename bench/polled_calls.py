"""The calls CI polls all day, under a real load generator, next to a bare FastAPI app.

Run: python bench/polled_calls.py [--seconds 20] [--connections 8] [--workers 1] [--rounds 1]
     [--api-alone] [--backend sqlite|postgresql]
Needs `wrk` (Debian: apt-get install wrk). Set KEEPGREEN_TEST_DATABASE_URL to add PostgreSQL.

For each backend: a fresh database, a real `keepgreen serve` (API and queue worker) with one
repository (a real git repository with 50 PR refs) and a queue of concurrency 8 requiring a
status nobody reports, so that of its 50 PRs 8 are testing and 42 pending. Then, alternately,
`wrk` drives one keepgreen call and the same call on the bare app (bench/bare_app.py: FastAPI
and uvicorn started the same way, answering the bytes keepgreen answered), and the table gives
requests per second, the ratio to the bare app, keepgreen's p50 / p99 latency, and the
processor time a request took: keepgreen's processes (the worker's git processes included),
the bare app's, and PostgreSQL's server (all of it: run on a machine otherwise quiet). On a
shared machine the requests per second move with what else runs; the time a request takes
moves far less.

The last row is the merge button pressed on a PR not in the queue: every request submits
another PR (refs made for the run, one per request, on one commit; one connection per wrk
thread, each thread its own numbers), so each is a first submit, which the worker then reads
and admits while the load goes on. Its bare app answers `{}`, as keepgreen does. With
`--api-alone`, one more row: the same flood against `keepgreen serve --no-worker` started on
the same database afterwards (what the submit itself costs, without the worker beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from api_latency import make_git_repo  # bench/ is on sys.path when run as a script
from backends import backends
from serve_process import Served, free_port, keepgreen, keepgreen_env
from sqlalchemy import text

from keepgreen.adapters.db.engine import make_engine

REPO = {"host": "github.com", "owner": "bench", "name": "widgets"}
PRS = 50
TESTING = 8
CALLS = (
    ("getQueue", {"repo": REPO, "targetBranch": "main"}),
    ("getSubmittedPullRequest", {"repo": REPO, "targetBranch": "main", "pr": {"number": 17}}),
    # A resubmit of a pending PR: what a merge button pressed twice, or a bot, sends.
    ("submitPullRequest", {"repo": REPO, "targetBranch": "main", "pr": {"number": 42}}),
)
# What each wrk run prints at its end, for `drive` to read.
WRK_DONE = """
done = function(summary, latency, requests)
  io.write(string.format("BENCH %d %d %d %d %d %d\\n", summary.requests,
    summary.errors.status, summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout,
    summary.duration, latency:percentile(50), latency:percentile(99)))
end
"""
WRK_SCRIPT = (
    """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-api-token"] = os.getenv("BENCH_TOKEN")
wrk.body = os.getenv("BENCH_BODY")
"""
    + WRK_DONE
)


# First submits: thread k of wrk submits PRs FIRST_PR + offset + k * PER_THREAD + 1, + 2, ...
FIRST_PR = 1000
PER_THREAD = 20_000
FIRST_REFS_PER_THREAD = 5_000  # more than a thread sends in two rows
# Where --worker-apart's flood starts in each thread's numbers: past what the first flood
# reached, with refs for the worker to read.
APART_OFFSET = 2_000
FIRST_SUBMIT_SCRIPT = (
    """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-api-token"] = os.getenv("BENCH_TOKEN")
local made = 0
setup = function(thread)
  thread:set("id", made)
  made = made + 1
end
init = function(args)
  sent = 0
end
request = function()
  sent = sent + 1
  local number = FIRST_PR + tonumber(os.getenv("BENCH_OFFSET")) + id * PER_THREAD + sent
  return wrk.format(nil, nil, nil, string.format(os.getenv("BENCH_BODY"), number))
end
""".replace("FIRST_PR", str(FIRST_PR)).replace("PER_THREAD", str(PER_THREAD))
    + WRK_DONE
)


@dataclass
class Load:
    requests_per_second: float
    errors: int  # answers that were not 2xx
    unanswered: int  # wrk gave up on them (its 2 s timeout) or the connection failed
    p50_ms: float
    p99_ms: float
    cpu_ms: float  # processor time per request of the server's processes
    database_cpu_ms: float  # of PostgreSQL's (0 on SQLite, which runs in the server)


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(root: int) -> float:
    """Processor time of process `root` and its live descendants, with what their children
    that have ended took (a worker's git processes, a server's exited backends).
    """
    times: dict[int, tuple[int, float]] = {}  # pid: (parent, seconds)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        # Fields 4 and 14-17 of proc(5), counted here from field 3 (state).
        ticks = sum(int(value) for value in fields[11:15])
        times[int(entry.name)] = (int(fields[1]), ticks / _TICKS)
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in times.items():
        children.setdefault(parent, []).append(pid)
    total, tree = 0.0, [root]
    while tree:
        pid = tree.pop()
        total += times.get(pid, (0, 0.0))[1]
        tree += children.get(pid, [])
    return total


def postgres_root() -> int | None:
    """The PostgreSQL server's first process on this machine, when there is one."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "postgres":
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if (Path("/proc") / str(parent) / "comm").read_text().strip() != "postgres":
                    return int(entry.name)
        except OSError:
            continue
    return None


def drive(
    url: str,
    *,
    servers: tuple[int, ...],
    token: str,
    body: dict[str, object] | str,
    args: argparse.Namespace,
    first_submits: bool = False,
) -> Load:
    """`wrk` against one call for `args.seconds`; its figures (wrk counts non-2xx as errors),
    and the processor time per request of `servers` (pids) and of the database.
    `first_submits`: `body` is a template with `%d` for the PR number, one thread per
    connection, each sending its own numbers.
    """
    script = Path(args.work) / "post.lua"
    script.write_text(FIRST_SUBMIT_SCRIPT if first_submits else WRK_SCRIPT)
    threads = args.connections if first_submits else min(2, args.connections)
    database = postgres_root() if args.database == "postgresql" else None
    cpu_before = sum(cpu_seconds(pid) for pid in servers)
    database_before = 0.0 if database is None else cpu_seconds(database)
    result = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{args.connections}",
            f"-d{args.seconds}s",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={
            "BENCH_TOKEN": token,
            "BENCH_BODY": body if isinstance(body, str) else json.dumps(body),
            "BENCH_OFFSET": str(getattr(args, "first_pr_offset", 0)),
            "PATH": "/usr/bin:/bin",
        },
    )
    match = re.search(r"^BENCH (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$", result.stdout, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"wrk said: {result.stdout}{result.stderr}")
    cpu = sum(cpu_seconds(pid) for pid in servers) - cpu_before
    database_cpu = 0.0 if database is None else cpu_seconds(database) - database_before
    requests, errors, broken, micros, p50, p99 = (int(group) for group in match.groups())
    per_request = 1000 / max(requests, 1)
    return Load(
        requests / (micros / 1e6),
        errors,
        broken,
        p50 / 1000,
        p99 / 1000,
        cpu * per_request,
        database_cpu * per_request,
    )


def flood(
    url: str, servers: tuple[int, ...], token: str, template: str, args: argparse.Namespace
) -> Load:
    """The merge button's flood: first submits of PR numbers from `template`."""
    return drive(
        f"{url}/submitPullRequest",
        servers=servers,
        token=token,
        body=template,
        args=args,
        first_submits=True,
    )


class Admitted:
    """How many of the PRs a flood submitted the worker read meanwhile (each is read once,
    at most READS_PER_PASS a pass, before the scheduler admits it).
    """

    def __init__(self, database_url: str) -> None:
        self._engine = make_engine(database_url)
        self._before = self._count()

    def _count(self) -> tuple[int, int]:
        with self._engine.connect() as connection:
            total, unread = connection.execute(
                text("SELECT count(*), count(*) FILTER (WHERE head_sha = '') FROM queue_entries")
            ).one()
        return int(total), int(unread)

    def label(self, call: str) -> str:
        """`call`, and what the worker read of the PRs submitted since this was made."""
        (total, unread), (total_before, unread_before) = self._count(), self._before
        self._engine.dispose()
        submitted = total - total_before
        read = submitted - (unread - unread_before)
        return f"{call} ({read:,} of {submitted:,} read meanwhile)"


def add_pr_refs(path: Path, first: int, count: int) -> None:
    """PR refs `first` .. `first + count - 1`, all on the head of PR 1 (packed: one file)."""
    head = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "refs/pull/1/head"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    lines = "".join(f"create refs/pull/{n}/head {head}\n" for n in range(first, first + count))
    subprocess.run(
        ["git", "-C", str(path), "update-ref", "--stdin"], input=lines, text=True, check=True
    )
    subprocess.run(["git", "-C", str(path), "pack-refs", "--all"], check=True)


def set_up(env: dict[str, str], cwd: Path, *, connections: int) -> str:
    """An org, its token, and the repository registered; the token."""
    make_git_repo(cwd / "widgets", PRS)
    for thread in range(connections):
        add_pr_refs(cwd / "widgets", FIRST_PR + thread * PER_THREAD + 1, FIRST_REFS_PER_THREAD)
    token = keepgreen("token", "create", "--org", "bench", env=env, cwd=cwd).splitlines()[-1]
    keepgreen(
        "repo", "add", "--org", "bench", "--host", REPO["host"], "--owner", REPO["owner"],
        "--name", REPO["name"], "--git-url", str(cwd / "widgets"), env=env, cwd=cwd,
    )  # fmt: skip
    return token


def fill_queue(url: str, token: str) -> None:
    """The queue of 50 PRs, 8 of them testing (their runs wait on a status never reported)."""
    with httpx.Client(base_url=url, headers={"x-api-token": token}, timeout=60) as client:

        def post(verb: str, **body: object) -> dict[str, object]:
            answer = client.post(f"/{verb}", json={"repo": REPO, "targetBranch": "main", **body})
            answer.raise_for_status()
            result: dict[str, object] = answer.json()
            return result

        post("createQueue", concurrency=TESTING)
        post("updateQueue", requiredStatuses=["bench/ci"], batch=False)
        for number in range(1, PRS + 1):
            post("submitPullRequest", pr={"number": number})
        deadline = time.monotonic() + 120
        while True:
            states = [pr["state"] for pr in post("getQueue")["enqueuedPullRequests"]]  # type: ignore[index]
            if states.count("testing") == TESTING and states.count("pending") == PRS - TESTING:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the queue did not fill: {states}")
            time.sleep(0.5)


class Bare:
    """bench/bare_app.py under uvicorn, answering what keepgreen answered."""

    def __init__(self, answers: Path, *, workers: int, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        command = [
            sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(self.port),
            "--no-access-log", "--log-level", "warning",
        ]  # fmt: skip
        if workers > 1:
            command += ["--workers", str(workers)]
        env = {"BARE_APP_ANSWERS": str(answers), "PATH": "/usr/bin:/bin"}
        with log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=Path(__file__).parent, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(f"{self.url}/getQueue", timeout=2)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"the bare app did not start: {log.read_text()}") from None
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def run(args: argparse.Namespace) -> list[tuple[str, str, Load, Load]]:
    rows = []
    for backend, database_url, cwd in backends(Path(args.work)):
        if args.backend not in (None, backend):
            continue
        args.database = backend
        env = keepgreen_env(database_url, cwd / "data")
        token = set_up(env, cwd, connections=args.connections)
        served = Served(env=env, cwd=cwd, log=cwd / "serve.log", workers=args.workers)
        bare = None
        try:
            served.wait_until_answering(token)
            fill_queue(served.url, token)
            answers = cwd / "answers"
            answers.mkdir()
            for verb, body in CALLS:
                answer = httpx.post(
                    f"{served.url}/{verb}", json=body, headers={"x-api-token": token}
                )
                answer.raise_for_status()
                (answers / f"{verb}.json").write_bytes(answer.content)
            bare = Bare(answers, workers=args.workers, log=cwd / "bare.log")
            for _ in range(0 if args.first_only else args.rounds):
                for verb, body in CALLS:
                    ours = drive(
                        f"{served.url}/{verb}",
                        servers=(served.pid,),
                        token=token,
                        body=body,
                        args=args,
                    )
                    theirs = drive(
                        f"{bare.url}/{verb}", servers=(bare.pid,), token=token, body=body, args=args
                    )
                    size = len((answers / f"{verb}.json").read_bytes())
                    rows.append((backend, f"{verb} ({size / 1024:.1f} KB)", ours, theirs))
                    print_row(*rows[-1])
            # Last: the worker reads and admits the PRs submitted for a while after it.
            template = json.dumps(
                {"repo": REPO, "targetBranch": "main", "pr": {"number": 0}}
            ).replace('"number": 0', '"number": %d')
            admitted = Admitted(database_url)
            ours = flood(served.url, (served.pid,), token, template, args)
            call = admitted.label("first submit, beside the worker")
            theirs = flood(bare.url, (bare.pid,), token, template, args)
            rows.append((backend, call, ours, theirs))
            print_row(*rows[-1])
            if args.api_alone:
                served.stop()
                served = Served(
                    env=env, cwd=cwd, log=cwd / "api.log", workers=args.workers, queue_worker=False
                )
                served.wait_until_answering(token)
                # Numbers the first flood did not reach (they need no refs: nothing reads them).
                args.first_pr_offset = FIRST_REFS_PER_THREAD
                ours = flood(served.url, (served.pid,), token, template, args)
                rows.append((backend, "first submit, the API alone", ours, theirs))
                print_row(*rows[-1])
            if args.worker_apart:
                if not args.api_alone:
                    served.stop()
                    served = Served(env=env, cwd=cwd, log=cwd / "api.log", queue_worker=False)
                    served.wait_until_answering(token)
                rows.append(
                    apart(args, served, env, cwd, token, template, theirs, backend, database_url)
                )
                print_row(*rows[-1])
        finally:
            served.stop()
            if bare is not None:
                bare.stop()
    return rows


def apart(
    args: argparse.Namespace,
    served: Served,
    env: dict[str, str],
    cwd: Path,
    token: str,
    template: str,
    theirs: Load,
    backend: str,
    database_url: str,
) -> tuple[str, str, Load, Load]:
    """The first-submit flood against `served` (`serve --no-worker`) with `keepgreen worker`
    beside it, in a process of its own, reading and admitting the PRs (a production layout).
    """
    with (cwd / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "keepgreen", "worker"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
        )  # fmt: skip
    try:
        time.sleep(2)  # the worker takes the queue's lease
        args.first_pr_offset = APART_OFFSET
        admitted = Admitted(database_url)
        ours = flood(served.url, (served.pid, worker.pid), token, template, args)
        call = admitted.label("first submit, the worker in a process of its own")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    return backend, call, ours, theirs


def print_row(backend: str, call: str, ours: Load, theirs: Load) -> None:
    errors = f" ({ours.errors} non-2xx)" if ours.errors else ""
    if ours.unanswered:
        errors += f" ({ours.unanswered} unanswered in 2 s)"
    print(
        f"| {backend} | {call} | {ours.requests_per_second:,.0f}{errors} | "
        f"{theirs.requests_per_second:,.0f} | "
        f"{ours.requests_per_second / theirs.requests_per_second:.1%} | "
        f"{ours.p50_ms:.1f} / {ours.p99_ms:.1f} | "
        f"{ours.cpu_ms:.2f} / {theirs.cpu_ms:.2f} / "
        f"{'-' if ours.database_cpu_ms == 0 else f'{ours.database_cpu_ms:.2f}'} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1, help="HTTP processes of each server")
    parser.add_argument("--rounds", type=int, default=1, help="times each pair is driven")
    parser.add_argument(
        "--api-alone", action="store_true", help="add the first-submit row without the worker"
    )
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql"), help="run on this database only"
    )
    parser.add_argument(
        "--first-only", action="store_true", help="only the first-submit rows (no polled calls)"
    )
    parser.add_argument(
        "--worker-apart",
        action="store_true",
        help="add the first-submit row with `keepgreen worker` in a process of its own",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")
    print(
        f"wrk, {args.connections} connections, {args.seconds} s per row; "
        f"{args.workers} HTTP process(es) each; a queue of {PRS} PRs, {TESTING} testing\n"
    )
    print("| backend | call | keepgreen req/s | bare req/s | keepgreen / bare | "
          "keepgreen p50 / p99 ms | CPU ms a request: keepgreen / bare / PostgreSQL |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        args.work = work
        run(args)


if __name__ == "__main__":
    main()
