"""The box around PR code: a hostile PR script on real bubblewrap, against the same script unboxed.

Every probe below is run twice: boxed, where it must be denied, and unboxed (the control),
where it must succeed. The control proves each probe really tries what it says, so a probe
that is denied for some unrelated reason (a typo, a missing tool) cannot pass as the box.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from keepgreen.adapters.ci.runner import BuiltInRunner
from keepgreen.adapters.ci.sandbox import (
    Bubblewrap,
    Sandbox,
    SandboxUnavailable,
    Unboxed,
    command_environment,
)
from keepgreen.core.enums import CommitState
from tests.adapters.test_ci_runner import RecordingReporter, log_text, repository_at
from tests.support.gitrepo import GitRepo
from tests.support.processes import processes_running

CANARY = "canary-5f0c1e"  # a secret in keepgreen's environment the PR must never see
SHARED = "SHARED_VALUE"  # a variable the repository names in its ci_env
# Debian's PostgreSQL socket: probed when this machine has one (CI's does).
POSTGRESQL_SOCKET = Path("/var/run/postgresql/.s.PGSQL.5432")

# The PR's script: each probe prints `PROBE <name> reached` when it got what it wanted.
HOSTILE_SCRIPT = """\
probe() {{ name=$1; shift; if "$@" >/dev/null 2>&1; then echo "PROBE $name reached"; \
else echo "PROBE $name denied"; fi; }}
env
probe environment sh -c 'env | grep -q {canary}'
probe passed_variable sh -c 'env | grep -q ^SHARED_VALUE=shared-7d2a90$'
probe database_file test -r {database}
probe data_dir ls {data_dir}
probe other_repository git -C {other} log -1
probe write_source git -C {source} update-ref refs/heads/evil HEAD
probe keepgreen_process_environment cat /proc/{pid}/environ
probe database_tcp bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'
probe database_socket test -S {socket}
probe root_home ls /root/.bashrc
probe own_history git log -1 --format=%s
probe write_workspace sh -c 'echo built > artifact.txt'
probe write_tmp sh -c 'echo scratch > /tmp/scratch.txt'
exit 0
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on loopback that accepts connections, standing for the database's."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def hostile(
    tmp_path: Path, git_repo: GitRepo, listener: int, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Sandbox], dict[str, str]]:
    """Run the hostile script under a sandbox; the probes' outcomes by name."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    database = data_dir / "keepgreen.db"
    database.write_text("every org's rows\n")
    other = GitRepo(tmp_path / "other-org-repo")
    monkeypatch.setenv("KEEPGREEN_DATABASE_URL", f"postgresql://keepgreen:{CANARY}@db/keepgreen")
    monkeypatch.setenv("UNRELATED_SECRET", CANARY)
    monkeypatch.setenv(SHARED, "shared-7d2a90")
    script = HOSTILE_SCRIPT.format(
        canary=CANARY,
        database=database,
        data_dir=data_dir,
        other=other.path,
        source=git_repo.path,
        pid=os.getpid(),
        port=listener,
        socket=POSTGRESQL_SOCKET,
    )
    sha = git_repo.commit({"check.sh": script}, "Add a hostile check")

    def run(sandbox: Sandbox) -> dict[str, str]:
        reporter = RecordingReporter()
        runner = BuiltInRunner(data_dir=data_dir, report=reporter, sandbox=sandbox)
        try:
            runner.start(
                replace(repository_at(str(git_repo.path), "sh check.sh"), ci_env=(SHARED,)),
                run_id=f"run-{sandbox.kind}",
                sha=sha,
                timeout_seconds=60,
            )
            final = reporter.final(sha)
        finally:
            runner.close()
        text = log_text(final)
        assert final.state is CommitState.SUCCESS, text
        return dict(re.findall(r"^PROBE (\w+) (reached|denied)$", text, re.MULTILINE))

    return run


def test_a_hostile_pr_reaches_nothing_of_keepgreen_in_the_box(
    hostile: Callable[[Sandbox], dict[str, str]], git_repo: GitRepo
) -> None:
    """The PR's script tries to read keepgreen's environment, the database file, the data
    dir, another org's repository, keepgreen's own process, the database's TCP port and root's
    home, and to write a ref into its own source repository. Unboxed, each of those works
    (that is why the box exists); boxed, each is denied, while the PR's own work (its
    history, its checkout, /tmp) still works. keepgreen's environment is never given, boxed
    or not; the variable the repository names is, both ways.
    """
    unboxed = hostile(Unboxed())
    boxed = hostile(Bubblewrap())
    for outcomes in (unboxed, boxed):
        assert (outcomes["environment"], outcomes["passed_variable"]) == ("denied", "reached")
    attacks = [
        "database_file",
        "data_dir",
        "other_repository",
        "write_source",
        "keepgreen_process_environment",
        "database_tcp",
    ]
    if POSTGRESQL_SOCKET.is_socket():
        attacks.append("database_socket")
    own_work = ["own_history", "write_workspace", "write_tmp"]
    assert {name: unboxed[name] for name in attacks + own_work} == dict.fromkeys(
        attacks + own_work, "reached"
    )
    assert {name: boxed[name] for name in attacks} == dict.fromkeys(attacks, "denied")
    assert {name: boxed[name] for name in own_work} == dict.fromkeys(own_work, "reached")
    assert boxed["root_home"] == "denied"
    git_repo.git("update-ref", "-d", "refs/heads/evil")  # the unboxed control's write


def test_the_box_log_shows_no_secret_and_a_clean_environment(
    hostile: Callable[[Sandbox], dict[str, str]], tmp_path: Path
) -> None:
    hostile(Bubblewrap())
    text = (tmp_path / "data/ci/logs/run-bwrap.log").read_text()
    assert f"postgresql://keepgreen:{CANARY}" not in text
    printed = dict(re.findall(r"^([A-Z_][A-Z0-9_]*)=(.*)$", text, re.MULTILINE))
    assert set(printed) >= {"PATH", "HOME", "TMPDIR", "CI", "KEEPGREEN_SHA", "KEEPGREEN_RUN_ID"}
    assert {name for name in printed if name.startswith("KEEPGREEN_")} == {
        "KEEPGREEN_SHA",
        "KEEPGREEN_RUN_ID",
    }
    assert "UNRELATED_SECRET" not in printed
    assert printed[SHARED] == "shared-7d2a90"  # named by the repository, so passed


def test_a_repository_passes_the_variables_it_names_and_never_keepgreens_own() -> None:
    source = {
        "NPM_TOKEN": "npm-1",
        "KEEPGREEN_DATABASE_URL": "postgresql://secret",
        "keepgreen_token": "kg_secret",
        "HOME": "/root",
    }
    env = command_environment(
        extra={"KEEPGREEN_SHA": "abc"},
        passed=["NPM_TOKEN", "KEEPGREEN_DATABASE_URL", "keepgreen_token", "MISSING"],
        source=source,
    )
    assert env["NPM_TOKEN"] == "npm-1"
    assert "KEEPGREEN_DATABASE_URL" not in env
    assert "keepgreen_token" not in env
    assert "MISSING" not in env
    assert env["HOME"] == "/tmp"  # noqa: S108 - the box's own /tmp, not keepgreen's HOME
    assert env["KEEPGREEN_SHA"] == "abc"


def test_killing_the_runner_side_of_a_box_leaves_no_process_behind(
    tmp_path: Path, git_repo: GitRepo
) -> None:
    """A boxed command that forks a background sleeper is cancelled: every process of the
    box is gone (the box is its own pid namespace, which dies with its first process).
    """
    marker = f"sleep {os.getpid() % 1000 + 1000}.25"
    reporter = RecordingReporter()
    runner = BuiltInRunner(data_dir=tmp_path / "data", report=reporter, sandbox=Bubblewrap())
    sha = git_repo.tip()
    runner.start(
        repository_at(str(git_repo.path), f"({marker} &) ; {marker}"),
        run_id="run-kill",
        sha=sha,
        timeout_seconds=60,
    )
    _wait_for(lambda: len(processes_running(marker)) == 2, "both sleepers")
    runner.cancel("run-kill")
    _wait_for(lambda: not processes_running(marker), "no sleeper left")
    runner.close()
    assert list((tmp_path / "data/ci/work").iterdir()) == []


def test_a_machine_without_bubblewrap_is_told_so_in_the_status(
    tmp_path: Path, git_repo: GitRepo
) -> None:
    reporter = RecordingReporter()
    sandbox = Bubblewrap(program="bwrap-not-installed")
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.check(tmp_path)
    runner = BuiltInRunner(data_dir=tmp_path / "data", report=reporter, sandbox=sandbox)
    assert "apt-get install bubblewrap" in (runner.sandbox_problem() or "")  # said at start
    sha = git_repo.tip()
    runner.start(
        repository_at(str(git_repo.path), "true"), run_id="run-1", sha=sha, timeout_seconds=10
    )
    final = reporter.final(sha)
    runner.close()
    assert final.state is CommitState.ERROR
    assert final.description is not None
    assert "bubblewrap (bwrap) is not installed" in final.description


def test_the_probe_run_directory_is_removed(tmp_path: Path) -> None:
    Bubblewrap().check(tmp_path / "work")
    assert list((tmp_path / "work").iterdir()) == []
    runner = BuiltInRunner(data_dir=tmp_path, report=RecordingReporter(), sandbox=Bubblewrap())
    assert runner.sandbox_problem() is None
    runner.close()


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within 10 s"
        time.sleep(0.05)


def test_a_passed_secret_never_shows_in_a_process_listing(
    tmp_path: Path, git_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository passes NPM_TOKEN; while its boxed command runs, the value is in the
    command's environment but in no process's argv on the machine (what `ps` shows).
    """
    secret = "npm-secret-3b9e71"
    monkeypatch.setenv("NPM_TOKEN", secret)
    marker = f"sleep 1.{os.getpid()}"
    reporter = RecordingReporter()
    runner = BuiltInRunner(data_dir=tmp_path / "data", report=reporter, sandbox=Bubblewrap())
    sha = git_repo.tip()
    repo = replace(repository_at(str(git_repo.path), f"{marker}; env"), ci_env=("NPM_TOKEN",))
    runner.start(repo, run_id="run-ps", sha=sha, timeout_seconds=60)
    try:
        _wait_for(lambda: len(processes_running(marker)) == 1, "the boxed sleeper")
        listing = [
            (entry / "cmdline").read_bytes()
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and (entry / "cmdline").exists()
        ]
        assert not [argv for argv in listing if secret.encode() in argv]
        final = reporter.final(sha)
    finally:
        runner.close()
    assert f"NPM_TOKEN={secret}" in log_text(final)
