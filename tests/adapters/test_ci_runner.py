"""The built-in CI runner on real git repositories and real processes."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest

from keepgreen.adapters.ci.runner import BuiltInRunner
from keepgreen.adapters.ci.sandbox import Unboxed
from keepgreen.app.ports import StatusReporter
from keepgreen.core.enums import CommitState
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import Repository
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO

DEADLINE_SECONDS = 10.0
FINAL_STATES = {CommitState.SUCCESS, CommitState.FAILURE, CommitState.ERROR}


@dataclass(frozen=True)
class Reported:
    repo: Repository
    sha: str
    context: str
    state: CommitState
    target_url: str | None
    description: str | None


class RecordingReporter:
    """A StatusReporter that keeps every call; the first `failures` calls raise instead, as
    they would while the database is briefly unavailable.
    """

    def __init__(self, *, failures: int = 0) -> None:
        self.calls: list[Reported] = []
        self.failures = failures

    def __call__(
        self,
        repo: Repository,
        *,
        sha: str,
        context: str,
        state: CommitState,
        target_url: str | None,
        description: str | None,
    ) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("database is locked")
        self.calls.append(Reported(repo, sha, context, state, target_url, description))

    def final(self, sha: str) -> Reported:
        """The first final status for `sha`, waiting for it up to the deadline."""
        found: list[Reported] = []

        def arrived() -> bool:
            found[:] = [c for c in self.calls if c.sha == sha and c.state in FINAL_STATES]
            return bool(found)

        eventually(arrived, f"a final status for {sha}")
        return found[0]


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE_SECONDS} s"
        time.sleep(0.02)


def repository_at(url: str, command: str | None) -> Repository:
    return Repository(
        RepositoryId("r"), OrgId("o"), REPO, url, command, datetime(2026, 1, 1, tzinfo=UTC)
    )


def log_text(status: Reported) -> str:
    assert status.target_url is not None
    assert status.target_url.startswith("file://")
    return Path(url2pathname(urlparse(status.target_url).path)).read_text()


def commit_only_on(repo: GitRepo, ref: str, files: dict[str, str]) -> str:
    """A commit on the target branch's tip reachable from `ref` alone."""
    repo.git("checkout", "-q", "-b", "scratch")
    sha = repo.commit(files, "only on " + ref)
    repo.git("update-ref", ref, sha)
    repo.git("checkout", "-q", repo.branch)
    repo.git("branch", "-q", "-D", "scratch")
    return sha


def process_gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie waiting for a reaper counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc").is_dir():
        try:
            return stat.read_text().rpartition(")")[2].split()[0] == "Z"
        except FileNotFoundError:
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# A command that runs until killed, leaving a child's pid where the test can see it.
def sleeper(pid_file: Path) -> str:
    return f"sleep 30 & echo $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; wait"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def reporter() -> RecordingReporter:
    return RecordingReporter()


@pytest.fixture
def make_runner(
    data_dir: Path, reporter: RecordingReporter
) -> Iterator[Callable[..., BuiltInRunner]]:
    made: list[BuiltInRunner] = []

    def make(*, max_parallel: int = 4, report: StatusReporter | None = None) -> BuiltInRunner:
        # Unboxed: these tests watch the runner's own mechanics (its pid files and markers
        # live outside any box); tests/adapters/test_ci_sandbox.py covers the box.
        runner = BuiltInRunner(
            data_dir=data_dir,
            report=report or reporter,
            sandbox=Unboxed(),
            max_parallel=max_parallel,
        )
        made.append(runner)
        return runner

    yield make
    for runner in made:
        # Kill what is still running, then wait for the workers to clean up after it.
        runner.close(wait=False)
        runner.close(wait=True)


@pytest.fixture
def runner(make_runner: Callable[..., BuiltInRunner]) -> BuiltInRunner:
    return make_runner()


def test_a_passing_command_reports_pending_then_success_with_its_log(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, data_dir: Path
) -> None:
    sha = git_repo.tip()
    runner.start(
        repository_at(str(git_repo.path), "echo hello from ci"),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    pending = reporter.calls[0]  # reported by start() itself, before the job runs
    assert (pending.sha, pending.context, pending.state, pending.description) == (
        sha,
        "keepgreen/ci",
        CommitState.PENDING,
        "running echo hello from ci",
    )
    final = reporter.final(sha)
    assert (final.context, final.state) == ("keepgreen/ci", CommitState.SUCCESS)
    assert final.target_url == pending.target_url == (data_dir / "ci/logs/run-1.log").as_uri()
    assert "hello from ci\n" in log_text(final)
    runner.close()
    assert [c.state for c in reporter.calls] == [CommitState.PENDING, CommitState.SUCCESS]
    assert list((data_dir / "ci/work").iterdir()) == []  # the checkout is gone, the log stays
    assert (data_dir / "ci/logs/run-1.log").is_file()


def test_a_failing_command_reports_failure_with_its_exit_code(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo
) -> None:
    sha = git_repo.tip()
    runner.start(
        repository_at(str(git_repo.path), "echo broken >&2; exit 3"),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    final = reporter.final(sha)
    assert (final.state, final.description) == (CommitState.FAILURE, "exit code 3")
    assert "broken\n" in log_text(final)  # stderr goes to the log too


@pytest.mark.parametrize("ref", ["refs/heads/keepgreen-merge/pr-1/x", "refs/pull/1/head"])
def test_the_command_runs_on_exactly_the_sha_without_touching_the_source_work_tree(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, ref: str
) -> None:
    sha = commit_only_on(git_repo, ref, {"only-in-pr.txt": "pr\n"})
    head_before = git_repo.tip("HEAD")
    runner.start(
        # The checkout borrows the repository's objects (an alternates file) instead of copying.
        repository_at(
            str(git_repo.path),
            "test -f only-in-pr.txt && test -s .git/objects/info/alternates && git rev-parse HEAD",
        ),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    final = reporter.final(sha)
    assert final.state is CommitState.SUCCESS, log_text(final)
    assert f"\n{sha}\n" in log_text(final)
    assert git_repo.git("symbolic-ref", "HEAD") == "refs/heads/main"
    assert git_repo.tip("HEAD") == head_before
    assert git_repo.git("status", "--porcelain") == ""
    assert not (git_repo.path / "only-in-pr.txt").exists()


def test_bare_repositories_behind_file_urls_work(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, tmp_path: Path
) -> None:
    bare = tmp_path / "bare.git"
    git_repo.git("clone", "-q", "--bare", str(git_repo.path), str(bare))
    sha = git_repo.tip()
    runner.start(
        repository_at(bare.as_uri(), "git rev-parse HEAD"),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    final = reporter.final(sha)
    assert final.state is CommitState.SUCCESS, log_text(final)
    assert f"\n{sha}\n" in log_text(final)


def test_the_command_sees_the_sha_and_run_id_in_its_environment(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo
) -> None:
    sha = git_repo.tip()
    runner.start(
        repository_at(str(git_repo.path), 'echo "sha=$KEEPGREEN_SHA run=$KEEPGREEN_RUN_ID"'),
        run_id="run-7",
        sha=sha,
        timeout_seconds=30,
    )
    assert f"sha={sha} run=run-7\n" in log_text(reporter.final(sha))


def test_a_command_over_its_timeout_is_killed_and_fails(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, tmp_path: Path
) -> None:
    sha = git_repo.tip()
    pid_file = tmp_path / "sleep.pid"
    began = time.monotonic()
    runner.start(
        repository_at(str(git_repo.path), sleeper(pid_file)),
        run_id="run-1",
        sha=sha,
        timeout_seconds=0.5,
    )
    final = reporter.final(sha)
    assert time.monotonic() - began < 5
    assert (final.state, final.description) == (CommitState.FAILURE, "timed out after 0.5 s")
    assert "timed out after 0.5 s" in log_text(final)
    pid = int(pid_file.read_text())
    eventually(lambda: process_gone(pid), f"end of the command's child {pid}")


def test_cancelling_a_running_command_kills_it_and_reports_nothing_more(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, tmp_path: Path
) -> None:
    sha = git_repo.tip()
    pid_file = tmp_path / "sleep.pid"
    runner.start(
        repository_at(str(git_repo.path), sleeper(pid_file)),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    eventually(pid_file.exists, "start of the command")
    began = time.monotonic()
    runner.cancel("run-1")
    runner.close()  # waits for the job to end
    assert time.monotonic() - began < 5
    assert [c.state for c in reporter.calls] == [CommitState.PENDING]
    pid = int(pid_file.read_text())
    eventually(lambda: process_gone(pid), f"end of the command's child {pid}")


def test_a_cancelled_run_that_has_not_started_never_starts(
    make_runner: Callable[..., BuiltInRunner],
    reporter: RecordingReporter,
    git_repo: GitRepo,
    tmp_path: Path,
) -> None:
    runner = make_runner(max_parallel=1)
    pid_file = tmp_path / "sleep.pid"
    marker = tmp_path / "second-ran"
    sha = git_repo.tip()
    runner.start(
        repository_at(str(git_repo.path), sleeper(pid_file)),
        run_id="first",
        sha=sha,
        timeout_seconds=30,
    )
    runner.start(
        repository_at(str(git_repo.path), f"touch {marker}"),
        run_id="second",
        sha=sha,
        timeout_seconds=30,
    )
    eventually(pid_file.exists, "start of the first command")
    runner.cancel("second")  # still queued behind the first
    runner.cancel("first")
    runner.close()
    assert not marker.exists()
    assert [c.state for c in reporter.calls] == [CommitState.PENDING, CommitState.PENDING]


def test_cancelling_unknown_or_finished_runs_is_fine(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo
) -> None:
    runner.cancel("never-started")
    sha = git_repo.tip()
    runner.start(repository_at(str(git_repo.path), "true"), run_id="r", sha=sha, timeout_seconds=30)
    assert reporter.final(sha).state is CommitState.SUCCESS
    runner.cancel("r")


def test_starting_a_run_id_twice_runs_it_once(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    repository = repository_at(str(git_repo.path), f"echo ran >> {counter}")
    sha = git_repo.tip()
    runner.start(repository, run_id="run-1", sha=sha, timeout_seconds=30)
    runner.start(repository, run_id="run-1", sha=sha, timeout_seconds=30)
    reporter.final(sha)
    runner.start(repository, run_id="run-1", sha=sha, timeout_seconds=30)  # also once finished
    runner.close()
    assert counter.read_text() == "ran\n"
    assert [c.state for c in reporter.calls] == [CommitState.PENDING, CommitState.SUCCESS]


def test_a_repository_without_a_ci_command_runs_nothing(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, data_dir: Path
) -> None:
    runner.start(
        repository_at(str(git_repo.path), None),
        run_id="run-1",
        sha=git_repo.tip(),
        timeout_seconds=30,
    )
    runner.close()
    assert reporter.calls == []
    assert not (data_dir / "ci").exists()


def test_a_sha_that_cannot_be_checked_out_is_an_error_with_gits_words_in_the_log(
    runner: BuiltInRunner, reporter: RecordingReporter, git_repo: GitRepo, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    sha = "0" * 40
    runner.start(
        repository_at(str(git_repo.path), f"touch {marker}"),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    final = reporter.final(sha)
    assert final.state is CommitState.ERROR
    assert final.description is not None
    assert final.description.startswith(f"git checkout of {sha} failed")
    assert "fatal:" in log_text(final)
    assert not marker.exists()


def test_a_remote_repository_without_a_mirror_yet_is_an_error(
    runner: BuiltInRunner, reporter: RecordingReporter
) -> None:
    sha = "a" * 40
    runner.start(
        repository_at("https://example.com/acme/widgets.git", "true"),
        run_id="run-1",
        sha=sha,
        timeout_seconds=30,
    )
    final = reporter.final(sha)
    assert final.state is CommitState.ERROR
    # A remote repository is cloned from keepgreen's mirror, made by the code host's first read.
    assert "has no mirror of https://example.com/acme/widgets.git" in (final.description or "")


def test_a_failure_inside_the_runner_is_logged_and_reported_as_an_error(
    runner: BuiltInRunner,
    reporter: RecordingReporter,
    git_repo: GitRepo,
    data_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    data_dir.mkdir()
    (data_dir / "ci").write_text("a file where the runner's directory belongs\n")
    sha = git_repo.tip()
    with caplog.at_level(logging.ERROR, logger="keepgreen.adapters.ci.runner"):
        runner.start(
            repository_at(str(git_repo.path), "true"), run_id="run-1", sha=sha, timeout_seconds=30
        )
        final = reporter.final(sha)
    assert final.state is CommitState.ERROR
    assert (final.description or "").startswith("the runner failed:")
    assert any("run-1" in record.getMessage() for record in caplog.records)


def test_a_reporter_that_raises_does_not_break_later_runs(
    make_runner: Callable[..., BuiltInRunner],
    git_repo: GitRepo,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = RecordingReporter(failures=2)  # the first run's pending and final statuses
    runner = make_runner(report=flaky)
    repository = repository_at(str(git_repo.path), f"echo ran >> {tmp_path / 'runs'}")
    first = git_repo.tip()
    with caplog.at_level(logging.ERROR, logger="keepgreen.adapters.ci.runner"):
        runner.start(repository, run_id="run-1", sha=first, timeout_seconds=30)
        eventually(lambda: flaky.failures == 0, "the second failed report")
    second = git_repo.commit({"next.txt": "next\n"}, "next")
    runner.start(repository, run_id="run-2", sha=second, timeout_seconds=30)
    assert flaky.final(second).state is CommitState.SUCCESS
    assert [c.sha for c in flaky.calls] == [second, second]
    assert (tmp_path / "runs").read_text() == "ran\nran\n"  # the first run still ran
    assert len([r for r in caplog.records if "ci status not stored" in r.getMessage()]) == 2


def test_max_parallel_bounds_how_many_commands_run_at_once(
    make_runner: Callable[..., BuiltInRunner],
    reporter: RecordingReporter,
    git_repo: GitRepo,
    tmp_path: Path,
) -> None:
    runner = make_runner(max_parallel=1)
    marks = tmp_path / "marks"
    repository = repository_at(
        str(git_repo.path),
        f"echo start $KEEPGREEN_RUN_ID >> {marks}; sleep 0.2; "
        f"echo end $KEEPGREEN_RUN_ID >> {marks}",
    )
    sha = git_repo.tip()
    runner.start(repository, run_id="a", sha=sha, timeout_seconds=30)
    runner.start(repository, run_id="b", sha=sha, timeout_seconds=30)
    runner.close()
    lines = marks.read_text().splitlines()
    assert sorted(lines) == ["end a", "end b", "start a", "start b"]
    for first, second in zip(lines[::2], lines[1::2], strict=True):
        assert (first.split()[0], second.split()[0]) == ("start", "end")
        assert first.split()[1] == second.split()[1]


def test_closing_without_waiting_kills_running_commands(
    make_runner: Callable[..., BuiltInRunner],
    reporter: RecordingReporter,
    git_repo: GitRepo,
    tmp_path: Path,
) -> None:
    runner = make_runner()
    pid_file = tmp_path / "sleep.pid"
    runner.start(
        repository_at(str(git_repo.path), sleeper(pid_file)),
        run_id="run-1",
        sha=git_repo.tip(),
        timeout_seconds=30,
    )
    eventually(pid_file.exists, "start of the command")
    runner.close(wait=False)
    pid = int(pid_file.read_text())
    eventually(lambda: process_gone(pid), f"end of the command's child {pid}")
    with pytest.raises(RuntimeError):
        runner.start(
            repository_at(str(git_repo.path), "true"),
            run_id="run-2",
            sha=git_repo.tip(),
            timeout_seconds=30,
        )
    runner.close(wait=True)  # the workers finish
    assert [c.state for c in reporter.calls] == [CommitState.PENDING]
