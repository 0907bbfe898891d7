"""What one worker pass costs on repositories served by a git server: seconds, git processes,
bytes over the wire; for many repositories, and for a short against a long history.

    python bench/remote_pass.py [--repos 20] [--prs 20] [--big-commits 50000] [--passes 3]
                                [--no-auth] [--json] [--quick]

A git http-backend on loopback (basic auth with a token file, as a real server asks; in a
process of its own, which counts the bytes it serves) serves bare repositories, each with a
`main` and PRs `refs/pull/N/head` (one small commit each, on a file of its own, so all merge
cleanly). A keepgreen on SQLite in a temporary data dir registers them, makes a queue per
repository that requires a status `ci` no CI ever sends, and submits every PR. The submit asks
nothing of git: the first pass reads each PR submitted (its head, title, author, whether it
merges), admits it and starts the runs, so it carries the reads the submits used to. After it
one PR of each queue sits testing and the rest wait, which is the steady state measured.
Passes are `Worker.run_once()`, one second apart (the worker's poll interval); a pass's git
processes are every `git` the benchmark's process starts (by subcommand; `fetch`, `push` and
`ls-remote` are the network ones), its bytes what the server received and sent for it.

1. `--repos` x `--prs` with a 50-commit main, beside the same queues on local repositories
   (the built-in code host), measured in the same run.
2. One repository x `--prs` with 50 against `--big-commits` commits on main (made by
   `git fast-import`), also beside local, then what a change costs: a queued PR's head pushed
   to, main moved by a foreign push, and an unrelated 1 MiB branch pushed. A pass's cost should
   follow the change, not the history.

Figures depend on the machine: read the ratios (remote against local, long history against
short); the server shares the machine and its CPU time is in the wall seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from git_http import GitHttpServer, served  # bench/ is on sys.path when run as a script

from keepgreen.app.pull_requests import QueueTarget
from keepgreen.app.queues import QueueUpdate
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.core.model import GitAuth, RepoRef
from keepgreen.logs import configure_logging
from keepgreen.settings import Settings

SHORT_HISTORY = 50
NETWORK = frozenset({"fetch", "push", "ls-remote", "clone"})
REQUIRED_STATUS = "ci"  # required by every queue, and never reported: runs stay testing
USER = "x-access-token"
TOKEN = "bench-token-not-a-secret"  # noqa: S105 (the loopback server's made-up password)
UNRELATED_BRANCH_BYTES = 1024 * 1024
IDENTITY = "Bench <bench@example.test>"


# -- measuring -------------------------------------------------------------------------------


class GitProcesses:
    """Counts the git processes this process starts, by subcommand, by wrapping Popen (which
    `subprocess.run` uses too): every git keepgreen runs, whichever code path starts it.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def install(self) -> None:
        original = subprocess.Popen
        counts, lock = self.counts, self._lock

        class CountingPopen(original):  # type: ignore[valid-type,misc]
            def __init__(self, args: Any, *rest: Any, **options: Any) -> None:
                name = git_subcommand(args)
                if name is not None:
                    with lock:
                        counts[name] += 1
                super().__init__(args, *rest, **options)

        subprocess.Popen = CountingPopen  # type: ignore[misc]

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def git_subcommand(args: object) -> str | None:
    """`fetch` for `git --git-dir=x -c k=v fetch ...`; None when `args` does not run git."""
    if not isinstance(args, list | tuple) or not args or Path(str(args[0])).name != "git":
        return None
    words = [str(word) for word in args[1:]]
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-C", "-c"):
            index += 2
        elif word.startswith("-"):
            index += 1
        else:
            return word
    return "git"


@dataclass
class Cost:
    """What one measured stretch (a pass, or all submits) cost."""

    seconds: float = 0.0
    processes: dict[str, int] = field(default_factory=dict)  # git processes by subcommand
    fetch_bytes: int = 0  # upload-pack requests and answers (ref advertisements included)
    push_bytes: int = 0  # receive-pack requests and answers
    requests: int = 0  # HTTP requests to the server
    challenges: int = 0  # of which 401s (git asks its credential helper after each)
    server_seconds: float = 0.0  # in git http-backend on the server's side
    child_cpu: float = 0.0  # CPU seconds of the git processes and their own children
    counted_by_telemetry: int = 0  # git processes keepgreen_git_calls saw

    @property
    def git(self) -> int:
        return sum(self.processes.values())

    @property
    def network(self) -> int:
        return sum(n for name, n in self.processes.items() if name in NETWORK)


class Meter:
    """Measures stretches of work: wall time, git processes, the server's counters."""

    def __init__(self, processes: GitProcesses) -> None:
        self._processes = processes

    @contextmanager
    def measure(self, server: GitHttpServer | None, container: Container) -> Iterator[Cost]:
        cost = Cost()
        stats_before = server.stats() if server else None
        telemetry_before = telemetry_git_calls(container)
        processes_before = self._processes.snapshot()
        cpu_before = children_cpu()
        started = time.perf_counter()
        yield cost
        cost.seconds = time.perf_counter() - started
        cost.child_cpu = children_cpu() - cpu_before
        cost.processes = dict(self._processes.snapshot() - processes_before)
        cost.counted_by_telemetry = round(telemetry_git_calls(container) - telemetry_before)
        if server is not None and stats_before is not None:
            after = server.stats()

            def grew(kind: str, name: str) -> float:
                return after[kind][name] - stats_before[kind][name]

            cost.fetch_bytes = round(grew("fetch", "bytes_in") + grew("fetch", "bytes_out"))
            cost.push_bytes = round(grew("push", "bytes_in") + grew("push", "bytes_out"))
            kinds = ("fetch", "push", "other")
            cost.requests = round(sum(grew(kind, "requests") for kind in kinds))
            cost.challenges = round(sum(grew(kind, "challenges") for kind in kinds))
            cost.server_seconds = sum(grew(kind, "backend_seconds") for kind in kinds)


def credential_helper_seconds(runs: int = 3) -> float:
    """How long keepgreen's credential helper takes to answer once (median of `runs`): git
    runs it twice per authenticated HTTP call (`get` after the 401, `store` after success).
    """
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "keepgreen.adapters.git.credential_helper", "get"],
            input=b"",
            capture_output=True,
            check=True,
        )
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def telemetry_git_calls(container: Container) -> float:
    """The sum of keepgreen_git_calls_total over its labels."""
    total = 0.0
    for metric in container.telemetry.registry.collect():
        if metric.name == "keepgreen_git_calls":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


# -- repositories ----------------------------------------------------------------------------


def git(git_dir: Path, *args: str, data: bytes | None = None) -> str:
    result = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], input=data, capture_output=True, check=True
    )
    return result.stdout.decode().strip()


class FastImport:
    """A `git fast-import` stream, written in memory, of commits a minute apart from `start`
    (seconds since the epoch). Dates matter: git walks history by date, and a commit older
    than its parents (clock skew) makes every ancestry question walk all of it.
    """

    def __init__(self, *, start: int) -> None:
        self._parts: list[bytes] = []
        self._time = start

    def commit(
        self,
        ref: str,
        message: str,
        files: dict[str, bytes],
        *,
        mark: int | None = None,
        parent: str | None = None,
    ) -> None:
        self._time += 60
        self._parts.append(f"commit {ref}\n".encode())
        if mark is not None:
            self._parts.append(f"mark :{mark}\n".encode())
        self._parts.append(f"committer {IDENTITY} {self._time} +0000\n".encode())
        self._data(message.encode())
        if parent is not None:
            self._parts.append(f"from {parent}\n".encode())
        for path, content in files.items():
            self._parts.append(f"M 100644 inline {path}\n".encode())
            self._data(content)

    def _data(self, content: bytes) -> None:
        self._parts += [f"data {len(content)}\n".encode(), content, b"\n"]

    def run(self, git_dir: Path) -> None:
        git(git_dir, "fast-import", "--quiet", data=b"".join(self._parts))


def make_template(path: Path, *, commits: int, prs: int) -> Path:
    """A bare repository: `main` with `commits` commits (each changing one of 100 files),
    and PR n (1..prs) one commit on main's tip adding `pr/<n>.txt`.
    """
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    # The last commit a minute before now: foreign pushes made later come after it.
    stream = FastImport(start=int(time.time()) - (commits + prs + 1) * 60)
    for number in range(1, commits + 1):
        files = {f"history/f{number % 100}": f"{number}\n".encode()}
        if number == 1:
            files["README"] = b"bench\n"
        stream.commit("refs/heads/main", f"history {number}", files, mark=number)
    for number in range(1, prs + 1):
        stream.commit(
            f"refs/pull/{number}/head",
            f"PR {number}",
            {f"pr/{number}.txt": f"pr {number}\n".encode()},
            parent=f":{commits}",
        )
    stream.run(path)
    # One pack with a bitmap, as a server keeps its repositories after gc.
    git(path, "repack", "-adq", "--write-bitmap-index")
    return path


def add_commit(git_dir: Path, ref: str, *, start: str, files: dict[str, bytes]) -> None:
    """A foreign push: one commit on `start` with `files`, written to `ref` on the server."""
    stream = FastImport(start=int(time.time()))
    stream.commit(ref, f"foreign change of {ref}", files, parent=git(git_dir, "rev-parse", start))
    stream.run(git_dir)


def pr_head_pushed(git_dir: Path, prs: int) -> None:
    add_commit(
        git_dir, f"refs/pull/{prs}/head", start=f"refs/pull/{prs}/head", files={"pr/more": b"1\n"}
    )


def main_moved(git_dir: Path, _prs: int) -> None:
    add_commit(git_dir, "refs/heads/main", start="main", files={"foreign.txt": b"foreign\n"})


def unrelated_branch_pushed(git_dir: Path, _prs: int) -> None:
    noise = random.Random(1).randbytes(UNRELATED_BRANCH_BYTES)  # noqa: S311 (not a secret)
    add_commit(git_dir, "refs/heads/unrelated", start="main", files={"blob.bin": noise})


# What happens between two passes, in the order tried.
CHANGES: tuple[tuple[str, Callable[[Path, int], None]], ...] = (
    ("a queued PR's head pushed to", pr_head_pushed),
    ("main moved (foreign push)", main_moved),
    ("an unrelated 1 MiB branch pushed", unrelated_branch_pushed),
)


# -- one keepgreen, one set of queues --------------------------------------------------------


@dataclass
class Result:
    """One configuration's measurements."""

    name: str
    remote: bool
    repos: int
    prs: int
    commits: int
    register: Cost
    submit: Cost
    first: Cost
    steady: list[Cost]
    changes: dict[str, Cost] = field(default_factory=dict)
    after_changes: Cost | None = None
    states: dict[str, int] = field(default_factory=dict)  # PR states after the steady passes


@dataclass(frozen=True)
class Plan:
    repos: int
    prs: int
    commits: int
    passes: int
    pause: float
    remote: bool
    changes: bool
    auth: bool = True  # the server asks for basic auth; keepgreen answers from a token file


def run(plan: Plan, *, template: Path, work: Path, meter: Meter) -> Result:
    """Serve copies of `template`, queue every PR, and measure passes."""
    where = "remote" if plan.remote else "local"
    root = work / f"{where}-{plan.repos}x{plan.prs}-{plan.commits}"
    (root / "served").mkdir(parents=True)
    bare = [root / "served" / f"r{i}.git" for i in range(plan.repos)]
    for path in bare:
        shutil.copytree(template, path, symlinks=True)
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    asks = plan.remote and plan.auth
    auth = GitAuth(token_file=str(token_file)) if asks else GitAuth()
    with (
        served(root / "served", user=USER if asks else None, password_file=token_file)
        if plan.remote
        else _nothing() as server
    ):
        container = bootstrap(
            Settings(database_url=f"sqlite:///{root / 'kg.db'}", data_dir=root / "data")
        )
        try:
            return _measure(plan, container, server, bare, auth, meter)
        finally:
            container.close()


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _measure(
    plan: Plan,
    container: Container,
    server: GitHttpServer | None,
    bare: Sequence[Path],
    auth: GitAuth,
    meter: Meter,
) -> Result:
    token = container.admin.create_token("bench")
    org_id = container.admin.authenticate(token)
    assert org_id is not None
    refs = [RepoRef("git.bench.test", "bench", path.stem) for path in bare]
    with meter.measure(server, container) as register:
        for ref, path in zip(refs, bare, strict=True):
            container.admin.add_repository(
                org_slug="bench",
                ref=ref,
                git_url=f"{server.url}/{path.name}" if server else str(path),
                ci_command=None,
                auth=auth,
            )
    for ref in refs:
        container.queues.create(org_id, ref, "main")
        container.queues.update(
            org_id, ref, "main", QueueUpdate(required_statuses=(REQUIRED_STATUS,))
        )
    with meter.measure(server, container) as submit:
        for ref in refs:
            for number in range(1, plan.prs + 1):
                container.pull_requests.submit(QueueTarget(org_id, ref, "main"), number)

    def one_pass() -> Cost:
        time.sleep(plan.pause)  # the worker's poll interval: a long-running worker's rhythm
        with meter.measure(server, container) as cost:
            container.worker.run_once()
        return cost

    first = one_pass()
    steady = [one_pass() for _ in range(plan.passes)]
    states: Counter[str] = Counter()
    for ref in refs:
        snapshot = container.queues.get(org_id, ref, "main")
        states.update(entry.state.value for entry in snapshot.entries)
    result = Result(
        name=f"{'remote' if server else 'local'} {plan.repos}x{plan.prs} @{plan.commits}",
        remote=server is not None,
        repos=plan.repos,
        prs=plan.prs,
        commits=plan.commits,
        register=register,
        submit=submit,
        first=first,
        steady=steady,
        states=dict(states),
    )
    if plan.changes:
        for name, change in CHANGES:
            for path in bare:
                change(path, plan.prs)
            result.changes[name] = one_pass()
        result.after_changes = one_pass()
    return result


# -- the report ------------------------------------------------------------------------------


def median_cost(costs: Sequence[Cost]) -> Cost:
    """Each figure's median over `costs` (subcommand by subcommand)."""
    names = {name for cost in costs for name in cost.processes}
    return Cost(
        seconds=statistics.median(c.seconds for c in costs),
        processes={
            name: round(statistics.median(c.processes.get(name, 0) for c in costs))
            for name in sorted(names)
        },
        fetch_bytes=round(statistics.median(c.fetch_bytes for c in costs)),
        push_bytes=round(statistics.median(c.push_bytes for c in costs)),
        requests=round(statistics.median(c.requests for c in costs)),
        challenges=round(statistics.median(c.challenges for c in costs)),
        server_seconds=statistics.median(c.server_seconds for c in costs),
        child_cpu=statistics.median(c.child_cpu for c in costs),
        counted_by_telemetry=round(statistics.median(c.counted_by_telemetry for c in costs)),
    )


def slowest(costs: Sequence[Cost]) -> Cost:
    return max(costs, key=lambda cost: cost.seconds)


def ratio(new: float, old: float) -> str:
    if old == 0:
        return "-" if new == 0 else "inf"
    return f"{new / old:.2f}"


def rows_of(result: Result) -> list[tuple[str, Cost]]:
    rows = [
        ("register (all repositories)", result.register),
        (f"submit ({result.repos * result.prs} PRs)", result.submit),
        ("first pass", result.first),
        ("steady pass (median)", median_cost(result.steady)),
        ("steady pass (slowest)", slowest(result.steady)),
    ]
    rows += [(f"pass after {name}", cost) for name, cost in result.changes.items()]
    if result.after_changes is not None:
        rows.append(("pass after that", result.after_changes))
    return rows


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def net(cost: Cost) -> str:
    """Network git processes as fetch/push/ls-remote."""
    return "/".join(str(cost.processes.get(name, 0)) for name in ("fetch", "push", "ls-remote"))


def scale_table(remote: Result, local: Result) -> str:
    header = [
        "stretch",
        "remote s",
        "local s",
        "remote/local",
        "git procs remote",
        "local",
        "fetch/push/ls-remote",
        "HTTP requests (401s)",
        "bytes fetched",
        "bytes pushed",
    ]
    rows = []
    for (name, far), (_, near) in zip(rows_of(remote), rows_of(local), strict=True):
        rows.append(
            [
                name,
                f"{far.seconds:.2f}",
                f"{near.seconds:.2f}",
                ratio(far.seconds, near.seconds),
                str(far.git),
                str(near.git),
                net(far),
                f"{far.requests} ({far.challenges})",
                f"{far.fetch_bytes:,}",
                f"{far.push_bytes:,}",
            ]
        )
    return table(header, rows)


def history_table(short: Result, long: Result, short_local: Result, long_local: Result) -> str:
    s, b = f"@{short.commits:,}", f"@{long.commits:,}"
    header = [
        "stretch",
        f"s {s}",
        f"s {b}",
        "x",
        f"local s {s}",
        f"local s {b}",
        f"git procs {s}",
        f"{b}",
        f"fetch/push/ls-remote {s}",
        f"{b}",
        f"bytes fetched {s}",
        f"{b}",
        "x",
        f"bytes pushed {s}",
        f"{b}",
    ]
    rows = []
    for (name, a), (_, z), (_, la), (_, lz) in zip(
        rows_of(short), rows_of(long), rows_of(short_local), rows_of(long_local), strict=True
    ):
        rows.append(
            [
                name,
                f"{a.seconds:.2f}",
                f"{z.seconds:.2f}",
                ratio(z.seconds, a.seconds),
                f"{la.seconds:.2f}",
                f"{lz.seconds:.2f}",
                str(a.git),
                str(z.git),
                net(a),
                net(z),
                f"{a.fetch_bytes:,}",
                f"{z.fetch_bytes:,}",
                ratio(z.fetch_bytes, a.fetch_bytes),
                f"{a.push_bytes:,}",
                f"{z.push_bytes:,}",
            ]
        )
    return table(header, rows)


def subcommand_table(results: Sequence[Result]) -> str:
    medians = [median_cost(result.steady) for result in results]
    names = sorted({name for cost in medians for name in cost.processes})
    rows = [[name, *(str(cost.processes.get(name, 0)) for cost in medians)] for name in names]
    rows.append(["all", *(str(cost.git) for cost in medians)])
    rows.append(
        ["of which keepgreen_git_calls saw", *(str(c.counted_by_telemetry) for c in medians)]
    )
    return table(["git subcommand", *(result.name for result in results)], rows)


def report(results: dict[str, Result], plan: argparse.Namespace, *, helper: float) -> str:
    intro = (
        f"One worker pass (Worker.run_once), passes {plan.pause:g} s apart; steady: "
        f"{plan.passes} passes after the first. The submits run no git: the first pass reads "
        "the PRs submitted. Each queue requires status "
        f"'{REQUIRED_STATUS}', never sent: one PR tests, the others wait."
    )
    scale = (
        f"## {plan.repos} repositories x {plan.prs} PRs, main of {SHORT_HISTORY} commits: "
        f"git http-backend ({'basic auth' if plan.auth else 'no auth'}) against local "
        "repositories"
    )
    repositories = "repository" if plan.history_repos == 1 else "repositories"
    history = (
        f"## {plan.history_repos} {repositories} x {plan.prs} PRs on the server: main of "
        f"{SHORT_HISTORY:,} against {plan.big_commits:,} commits (local beside it)"
    )
    helper_line = (
        f"keepgreen's git credential helper takes {helper:.3f} s a run (python -m "
        "keepgreen.adapters.git.credential_helper, measured now); git runs it twice per "
        "authenticated HTTP call (`get` after the server's 401, `store` after success), "
        "so each 401 above stands for two of them."
    )
    states = "; ".join(
        f"{r.name}: " + ", ".join(f"{n} {state}" for state, n in sorted(r.states.items()))
        for r in results.values()
    )
    return "\n\n".join(
        [
            intro,
            scale,
            scale_table(results["remote"], results["local"]),
            history,
            history_table(
                results["remote short"],
                results["remote long"],
                results["local short"],
                results["local long"],
            ),
            "## git processes in a steady pass (median), by subcommand",
            subcommand_table(list(results.values())),
            helper_line,
            f"PR states after the steady passes: {states}",
        ]
    )


def as_json(
    results: dict[str, Result], plan: argparse.Namespace, *, helper: float
) -> dict[str, Any]:
    def cost(c: Cost) -> dict[str, Any]:
        return {**asdict(c), "git": c.git, "network": c.network}

    runs: dict[str, Any] = {}
    answer = {
        "settings": {
            name: getattr(plan, name)
            for name in ("repos", "prs", "big_commits", "history_repos", "passes", "pause", "auth")
        },
        "credential_helper_seconds": helper,
        "runs": runs,
    }
    for key, result in results.items():
        runs[key] = {
            "name": result.name,
            "remote": result.remote,
            "repos": result.repos,
            "prs": result.prs,
            "commits": result.commits,
            "states": result.states,
            "rows": {name: cost(c) for name, c in rows_of(result)},
            "steady": [cost(c) for c in result.steady],
        }
    return answer


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=20)
    parser.add_argument("--prs", type=int, default=20)
    parser.add_argument("--big-commits", type=int, default=50_000)
    parser.add_argument("--history-repos", type=int, default=1)
    parser.add_argument("--passes", type=int, default=3, help="steady passes after the first")
    parser.add_argument(
        "--no-auth",
        dest="auth",
        action="store_false",
        help="the server asks for no credentials (isolates the credential helper's cost)",
    )
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between passes (the poll interval)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 2 x 3 PRs, 500 commits, 2 passes"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repos, args.prs, args.big_commits, args.passes = 2, 3, 500, 2
        args.history_repos = 1
    # Warnings only, on stderr: stdout is the report (or its JSON).
    configure_logging(level="warning", stream=sys.stderr)
    processes = GitProcesses()
    processes.install()
    meter = Meter(processes)
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="kg-remote-pass-") as tmp:
        work = Path(tmp)
        short = make_template(work / "short.git", commits=SHORT_HISTORY, prs=args.prs)
        started = time.perf_counter()
        long = make_template(work / "long.git", commits=args.big_commits, prs=args.prs)
        made_in = time.perf_counter() - started
        print(f"# main of {args.big_commits:,} commits made in {made_in:.1f} s", file=sys.stderr)

        def plan(repos: int, commits: int, *, remote: bool, changes: bool) -> Plan:
            return Plan(
                repos, args.prs, commits, args.passes, args.pause, remote, changes, args.auth
            )

        scale, history = args.repos, args.history_repos
        runs = {
            "remote": (plan(scale, SHORT_HISTORY, remote=True, changes=False), short),
            "local": (plan(scale, SHORT_HISTORY, remote=False, changes=False), short),
            "remote short": (plan(history, SHORT_HISTORY, remote=True, changes=True), short),
            "remote long": (plan(history, args.big_commits, remote=True, changes=True), long),
            "local short": (plan(history, SHORT_HISTORY, remote=False, changes=True), short),
            "local long": (plan(history, args.big_commits, remote=False, changes=True), long),
        }
        for key, (config, template) in runs.items():
            started = time.perf_counter()
            results[key] = run(config, template=template, work=work, meter=meter)
            print(f"# {results[key].name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    helper = credential_helper_seconds()
    if args.json:
        print(json.dumps(as_json(results, args, helper=helper), indent=2))
    else:
        print(report(results, args, helper=helper))


if __name__ == "__main__":
    main()
