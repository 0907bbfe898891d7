"""`keepgreen upload` and `keepgreen test` against the upload endpoint's contract.

The server here is `FakeServer` (tests/support/fake_upload_server.py): an `httpx.MockTransport`
handler that parses each multipart request as the server's form parser does, records it, and
answers the summary a test gives it. The CLI gets it through Click's context object
(`UploadHooks`), the way any embedding caller would; nothing of ours is patched. `keepgreen test`
runs real commands: a small script that writes a JUnit report and exits with the code it is told.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from keepgreen.cli.main import app
from keepgreen.cli.reports import MIB, Report, plan_batches
from keepgreen.cli.upload import UploadHooks
from keepgreen.core.ci_env import VARIABLES
from tests.cli.conftest import REPO_ARG, Cli, free_port
from tests.support.fake_upload_server import (
    TOKEN,
    URL,
    FakeServer,
    failure,
    refusal,
    summary,
)
from tests.support.gitrepo import GitRepo

SHA = "3f7a9c1e5b2d4f6a8c0e1b3d5f7a9c1e5b2d4f6a"
COMMIT = ("--repo", REPO_ARG, "--sha", SHA, "--branch", "main")
REPO_JSON = {"host": "github.com", "owner": "acme", "name": "widgets"}


# -- running the CLI ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No CI, keepgreen or terminal settings from the machine running the tests; the current
    directory is the test's own, outside any git checkout."""
    for name in (*VARIABLES, "KEEPGREEN_ORG", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


def keepgreen(
    *args: str,
    server: FakeServer | None = None,
    hooks: UploadHooks | None = None,
    env: Mapping[str, str | None] | None = None,
) -> Result:
    """`keepgreen ARGS` in-process, talking to `server` (or through `hooks`)."""
    if hooks is None:
        hooks = server.hooks() if server else UploadHooks()
    base_env: dict[str, str | None] = {"KEEPGREEN_URL": URL, "KEEPGREEN_TOKEN": TOKEN}
    # catch_exceptions=False: a crash fails the test instead of passing for "exit code 1".
    return CliRunner().invoke(
        app, list(args), env={**base_env, **(env or {})}, obj=hooks, catch_exceptions=False
    )


def junit(*cases: tuple[str, str]) -> str:
    """A pytest-style JUnit report: (name, "passed" | "failed" | "skipped") per test case."""
    bodies = {"passed": "", "failed": '<failure message="assert 1 == 2"/>', "skipped": "<skipped/>"}
    testcases = "".join(
        f'<testcase classname="tests.test_auth" name="{name}" file="tests/test_auth.py" '
        f'time="0.012">{bodies[outcome]}</testcase>'
        for name, outcome in cases
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" tests="{len(cases)}">{testcases}</testsuite></testsuites>\n'
    )


def write(path: str, text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


# -- upload: what is sent -------------------------------------------------------------------------


def test_upload_sends_the_metadata_and_each_report_gzipped(server: FakeServer) -> None:
    unit = junit(("test_login", "passed"), ("test_logout", "failed"))
    write("reports/unit.xml", unit)
    write("reports/api.xml", junit(("test_health", "passed")))
    write(".github/CODEOWNERS", "*.py @acme/backend\n")

    result = keepgreen(
        "upload",
        *("--org", "acme", "--repo", REPO_ARG, "--sha", SHA, "--branch", "feature/login"),
        *("--pr", "42", "--variant", "linux", "--job-url", "https://ci.acme.dev/jobs/7"),
        *("--run-id", "run-7", "--codeowners", ".github/CODEOWNERS"),
        *("reports/unit.xml", "reports/api.xml"),
        server=server,
    )

    assert result.exit_code == 0, result.stderr
    assert server.only.metadata == {
        "repo": REPO_JSON,
        "org_url_slug": "acme",
        "commit_sha": SHA,
        "branch": "feature/login",
        "pr_number": 42,
        "job_url": "https://ci.acme.dev/jobs/7",
        "variant": "linux",
        "run_id": "run-7",
        "codeowners": "*.py @acme/backend\n",
    }
    assert [part.name for part in server.only.parts] == ["metadata", "file", "file"]
    assert server.only.reports == {
        "reports/unit.xml": unit.encode(),
        "reports/api.xml": junit(("test_health", "passed")).encode(),
    }
    assert result.stdout == (
        "Uploaded 2 report files: 10 tests, 10 results (10 passed, 0 failed, 0 skipped); "
        "upload upload-1.\n"
    )


def test_metadata_defaults_when_no_option_is_given(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))

    result = keepgreen("upload", *COMMIT, "junit.xml", server=server)

    assert result.exit_code == 0, result.stderr
    assert server.only.metadata == {
        "repo": REPO_JSON,
        "org_url_slug": None,
        "commit_sha": SHA,
        "branch": "main",
        "pr_number": None,
        "job_url": None,
        "variant": "",
        "run_id": None,
        "codeowners": None,
    }


def test_the_org_defaults_to_keepgreen_org(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    keepgreen("upload", *COMMIT, "junit.xml", server=server, env={"KEEPGREEN_ORG": "acme"})
    assert server.only.metadata["org_url_slug"] == "acme"


def test_quoted_globs_are_expanded_recursively_and_each_file_is_sent_once(
    server: FakeServer,
) -> None:
    for path in ("out/unit/a.xml", "out/integration/db/b.xml", "out/c.xml", "top.xml"):
        write(path, junit((path, "passed")))
    write("out/notes.txt", "not a report\n")
    Path("out/dir.xml").mkdir()  # a directory matching the glob is no report

    result = keepgreen("upload", *COMMIT, "out/**/*.xml", "out/c.xml", "top.xml", server=server)

    assert result.exit_code == 0, result.stderr
    assert list(server.only.reports) == [
        "out/c.xml",
        "out/integration/db/b.xml",
        "out/unit/a.xml",
        "top.xml",
    ]


def test_a_file_whose_name_looks_like_a_glob_is_taken_as_it_is(server: FakeServer) -> None:
    write("results[linux].xml", junit(("test_login", "passed")))
    result = keepgreen("upload", *COMMIT, "results[linux].xml", server=server)
    assert result.exit_code == 0, result.stderr
    assert list(server.only.reports) == ["results[linux].xml"]


def test_paths_and_globs_that_match_nothing_are_all_named_and_nothing_is_sent(
    server: FakeServer,
) -> None:
    write("reports/unit.xml", junit(("test_login", "passed")))
    Path("build").mkdir()

    result = keepgreen(
        "upload", *COMMIT, "reports/unit.xml", "missing.xml", "out/**/*.xml", "build", server=server
    )

    assert result.exit_code == 2
    assert result.stderr == (
        "error: no report file matches 'missing.xml', 'out/**/*.xml', 'build'\n"
    )
    assert server.received == []


def test_a_report_already_gzipped_is_sent_as_it_is(server: FakeServer) -> None:
    report = junit(("test_login", "passed")).encode()
    Path("junit.xml.gz").write_bytes(gzip.compress(report))

    keepgreen("upload", *COMMIT, "junit.xml.gz", server=server)

    assert server.only.reports == {"junit.xml.gz": report}  # gunzipped once, not twice


# -- upload: where commit, branch, PR and job come from -------------------------------------------

GITHUB_PULL_REQUEST = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": "b4e2d9f0c1a3b5d7e9f1a3c5e7b9d1f3a5c7e9b1",
    "GITHUB_REF": "refs/pull/42/merge",
    "GITHUB_HEAD_REF": "feature/login",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/widgets",
    "GITHUB_RUN_ID": "9876543210",
    "GITHUB_RUN_ATTEMPT": "1",
}


def test_the_ci_environment_fills_in_the_metadata(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))

    result = keepgreen(
        "upload", "--repo", REPO_ARG, "junit.xml", server=server, env=GITHUB_PULL_REQUEST
    )

    assert result.exit_code == 0, result.stderr
    metadata = server.only.metadata
    assert metadata["commit_sha"] == "b4e2d9f0c1a3b5d7e9f1a3c5e7b9d1f3a5c7e9b1"
    assert metadata["branch"] == "feature/login"
    assert metadata["pr_number"] == 42
    assert metadata["job_url"] == "https://github.com/acme/widgets/actions/runs/9876543210"
    assert metadata["run_id"] == "9876543210-1"


def test_flags_win_over_the_ci_environment(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    env = {**GITHUB_PULL_REQUEST, "KEEPGREEN_BRANCH": "from-override"}

    keepgreen(
        "upload",
        *COMMIT,
        *("--pr", "7", "--job-url", "https://ci/7", "--run-id", "r7", "junit.xml"),
        server=server,
        env=env,
    )

    metadata = server.only.metadata
    assert (metadata["commit_sha"], metadata["branch"], metadata["pr_number"]) == (SHA, "main", 7)
    assert (metadata["job_url"], metadata["run_id"]) == ("https://ci/7", "r7")


def test_git_tells_the_commit_and_branch_when_nothing_else_does(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = GitRepo(tmp_path / "checkout", branch="trunk")
    monkeypatch.chdir(checkout.path)
    write("junit.xml", junit(("test_login", "passed")))

    result = keepgreen("upload", "--repo", REPO_ARG, "junit.xml", server=server)

    assert result.exit_code == 0, result.stderr
    assert (server.only.metadata["commit_sha"], server.only.metadata["branch"]) == (
        checkout.tip(),
        "trunk",
    )


def test_no_commit_anywhere_is_a_usage_error(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))

    result = keepgreen("upload", "--repo", REPO_ARG, "--branch", "main", "junit.xml", server=server)

    assert result.exit_code == 2
    assert result.stderr == (
        "error: cannot tell which commit the results are for: pass --sha, set "
        "KEEPGREEN_COMMIT_SHA, or run inside the repository's git checkout\n"
    )
    assert server.received == []


def test_a_detached_head_tells_no_branch(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = GitRepo(tmp_path / "checkout")
    checkout.git("checkout", "-q", "--detach")
    monkeypatch.chdir(checkout.path)
    write("junit.xml", junit(("test_login", "passed")))

    result = keepgreen("upload", "--repo", REPO_ARG, "junit.xml", server=server)

    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot tell which branch the results are for")
    assert server.received == []


# -- upload: batches ------------------------------------------------------------------------------


def incompressible_report(name: str, size: int) -> str:
    """A valid JUnit report that gzip barely shrinks: its test output is random hex."""
    output = os.urandom(size // 2).hex()
    return (
        f'<testsuites><testsuite name="{name}"><testcase classname="c" name="{name}">'
        f"<system-out>{output}</system-out></testcase></testsuite></testsuites>\n"
    )


def test_reports_over_the_size_limit_go_in_several_requests_and_the_summaries_add_up(
    server: FakeServer,
) -> None:
    # Random hex compresses to about half its size: three ~50 KiB payloads, a 120 KiB limit.
    names = ["a.xml", "b.xml", "c.xml"]
    for name in names:
        write(name, incompressible_report(name, 100 * 1024))
    sizes = [len(gzip.compress(Path(name).read_bytes())) for name in names]
    limit = 120 * 1024
    assert sum(sizes[:2]) <= limit < sum(sizes)  # two fit in one request, three do not
    server.answers = [
        summary(failure("a", quarantined=True), upload_id="u1", files=2, tests=2),
        summary(failure("c"), upload_id="u2", files=1, tests=1),
    ]

    result = keepgreen(
        "upload", *COMMIT, "--json", *names, hooks=server.hooks(max_batch_bytes=limit)
    )

    assert result.exit_code == 0, result.stderr
    assert [list(upload.reports) for upload in server.received] == [["a.xml", "b.xml"], ["c.xml"]]
    assert all(upload.compressed_bytes <= limit for upload in server.received)
    assert server.received[0].metadata == server.received[1].metadata
    assert json.loads(result.stdout) == {
        "upload_id": "u1",
        "upload_ids": ["u1", "u2"],
        "files": 3,
        "tests": 3,
        "results": 3,
        "passed": 1,
        "failed": 2,
        "skipped": 0,
        "excluded_as_infrastructure_failure": False,
        "quarantine_enabled": True,
        "failures": [failure("a", quarantined=True), failure("c")],
    }


def test_a_refusal_of_a_later_batch_says_the_earlier_ones_were_stored(server: FakeServer) -> None:
    for name in ("a.xml", "b.xml"):
        write(name, incompressible_report(name, 40 * 1024))
    server.answers = [summary(), refusal(413, "the request body is over 20 MiB", "too_large")]

    result = keepgreen(
        "upload", *COMMIT, "a.xml", "b.xml", hooks=server.hooks(max_batch_bytes=30 * 1024)
    )

    assert result.exit_code == 1
    assert result.stderr == (
        "error: the request body is over 20 MiB "
        "(upload request 2 of 2; the 1 before it were stored)\n"
    )


def test_a_single_report_over_the_limit_is_refused_before_anything_is_sent(
    server: FakeServer,
) -> None:
    write("small.xml", junit(("test_login", "passed")))
    write("huge.xml", incompressible_report("huge", 64 * 1024))

    result = keepgreen(
        "upload", *COMMIT, "small.xml", "huge.xml", hooks=server.hooks(max_batch_bytes=16 * 1024)
    )

    assert result.exit_code == 1
    assert result.stderr.startswith("error: huge.xml is ")
    assert "KiB compressed, over the 16 KiB one upload request may carry" in result.stderr
    assert server.received == []


def test_batches_hold_at_most_the_servers_file_count() -> None:
    reports = [Report(f"r{index}.xml", b"x") for index in range(2001)]

    batches = plan_batches(reports, max_bytes=16 * MIB)

    assert [len(batch) for batch in batches] == [1000, 1000, 1]
    assert [report for batch in batches for report in batch] == reports


# -- upload: what is shown ------------------------------------------------------------------------


def test_the_summary_line_and_the_failures_with_quarantined_ones_marked(
    server: FakeServer,
) -> None:
    write("junit.xml", junit(("test_login", "failed")))
    server.answers = [
        summary(
            failure("test_login", quarantined=True),
            failure("test_[b]logout[/b]"),
            tests=12,
            skipped=1,
        )
    ]

    result = keepgreen("upload", *COMMIT, "junit.xml", server=server)

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "Uploaded 1 report file: 12 tests, 12 results (9 passed, 2 failed, 1 skipped); "
        "upload upload-1."
    )
    assert lines[1].rstrip() == "Failed tests: 2, 1 quarantined"
    [login] = [line for line in lines if "test_login" in line]
    [logout] = [line for line in lines if "logout" in line]
    assert "quarantined" in login
    assert "quarantined" not in logout
    assert "test_[b]logout[/b]" in logout  # a test's name is shown, never read as markup


def test_json_prints_the_servers_answer_as_it_came(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "failed")))
    answer = {**summary(failure("test_login")), "a_field_from_a_newer_server": [1, 2]}
    server.answers = [answer]

    result = keepgreen("upload", *COMMIT, "--json", "junit.xml", server=server)

    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == answer


def test_a_progress_bar_over_several_files_on_a_terminal_only(server: FakeServer) -> None:
    write("a.xml", junit(("test_a", "passed")))
    write("b.xml", junit(("test_b", "passed")))

    def screen(*args: str) -> str:
        terminal = io.StringIO()
        console = Console(file=terminal, force_terminal=True, width=100)
        result = keepgreen("upload", *COMMIT, *args, hooks=server.hooks(console=console))
        assert result.exit_code == 0, result.stderr
        return terminal.getvalue()

    assert "Uploading" in screen("a.xml", "b.xml")
    assert "2/2" in screen("a.xml", "b.xml")
    assert "Uploading" not in screen("a.xml")
    assert screen("--json", "a.xml", "b.xml") == ""  # JSON goes to stdout, and alone


# -- upload: errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (400, "invalid_field", "metadata.commit_sha: must be 7 to 64 hexadecimal characters"),
        (401, "unauthorized", "missing or invalid API token"),
        (404, "not_found", "no repository github.com/acme/widgets"),
        (413, "too_large", "the request body is over 20 MiB"),
    ],
)
def test_the_servers_refusal_is_printed_and_exits_1(
    server: FakeServer, status: int, code: str, message: str
) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    server.answers = [refusal(status, message, code)]

    result = keepgreen("upload", *COMMIT, "junit.xml", server=server)

    assert (result.exit_code, result.stderr, result.stdout) == (1, f"error: {message}\n", "")


def test_an_answer_that_is_not_keepgreens_is_described(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))
    server.answers = [httpx.Response(500, text="<html><h1>500 Internal Error</h1></html>")]

    result = keepgreen("upload", *COMMIT, "junit.xml", server=server)

    assert result.exit_code == 1
    assert result.stderr == "error: HTTP 500: <html><h1>500 Internal Error</h1></html>\n"


def test_an_unreachable_server_is_named() -> None:
    write("junit.xml", junit(("test_login", "passed")))
    url = f"http://127.0.0.1:{free_port()}/v1"

    result = keepgreen("upload", *COMMIT, "junit.xml", env={"KEEPGREEN_URL": url})

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot connect to keepgreen at {url} ")


def test_a_missing_token_is_a_usage_error(server: FakeServer) -> None:
    write("junit.xml", junit(("test_login", "passed")))

    result = keepgreen("upload", *COMMIT, "junit.xml", server=server, env={"KEEPGREEN_TOKEN": None})

    assert result.exit_code == 2
    assert result.stderr.startswith("error: no API token: set KEEPGREEN_TOKEN or pass --token")
    assert server.received == []


# -- keepgreen test -------------------------------------------------------------------------------

RUNNER = '''\
"""A test command: writes a JUnit report of the outcomes it is given, exits as it is told."""
import argparse
import pathlib
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--junitxml")
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("outcomes", nargs="*", metavar="NAME=passed|failed")
args = parser.parse_args()
cases = []
for outcome in args.outcomes:
    name, result = outcome.split("=")
    body = '<failure message="assert 1 == 2"/>' if result == "failed" else ""
    attributes = f'classname="tests.test_auth" name="{name}" file="tests/test_auth.py"'
    cases.append(f"<testcase {attributes}>{body}</testcase>")
if args.junitxml:
    path = pathlib.Path(args.junitxml)
    path.parent.mkdir(parents=True, exist_ok=True)
    suite = f'<testsuite name="pytest" tests="{len(cases)}">{"".join(cases)}</testsuite>'
    path.write_text(f"<testsuites>{suite}</testsuites>\\n")
print(f"runner: {sys.argv[1:]}", flush=True)
sys.exit(args.exit_code)
'''


@pytest.fixture
def runner(tmp_path: Path) -> list[str]:
    """The command line of the test command above."""
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    return [sys.executable, str(script)]


def run_tests(
    server: FakeServer | None,
    command: list[str],
    *options: str,
    junit_paths: str = "reports/*.xml",
    env: Mapping[str, str | None] | None = None,
) -> Result:
    """`keepgreen test --repo ... --junit-paths JUNIT_PATHS OPTIONS -- COMMAND`."""
    return keepgreen(
        "test",
        *COMMIT,
        *("--junit-paths", junit_paths),
        *options,
        "--",
        *command,
        server=server,
        env=env,
    )


def test_a_passing_command_exits_0_and_its_report_is_uploaded(
    server: FakeServer, runner: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    # A failure the server reports does not matter when the command itself passed.
    server.answers = [summary(failure("test_logout"))]

    result = run_tests(server, [*runner, "--junitxml", "reports/unit.xml", "test_login=passed"])

    assert result.exit_code == 0, result.stderr
    assert b'name="test_login"' in server.only.reports["reports/unit.xml"]
    assert server.only.metadata["commit_sha"] == SHA
    # The command wrote to our stdout itself, and got the arguments after `--` untouched.
    assert (
        "runner: ['--junitxml', 'reports/unit.xml', 'test_login=passed']" in capfd.readouterr().out
    )
    assert result.stdout.startswith("Uploaded 1 report file: ")


TWO_FAILURES = ("test_login=failed", "test_logout=failed")


def test_a_failing_command_exits_0_when_every_failure_is_quarantined(
    server: FakeServer, runner: list[str]
) -> None:
    server.answers = [
        summary(failure("test_login", quarantined=True), failure("test_logout", quarantined=True))
    ]

    result = run_tests(
        server,
        [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", *TWO_FAILURES],
    )

    assert result.exit_code == 0
    assert "every failed test is quarantined; exiting 0 instead of 1" in result.stderr


def test_one_failure_not_quarantined_keeps_the_commands_exit_code(
    server: FakeServer, runner: list[str]
) -> None:
    server.answers = [summary(failure("test_login", quarantined=True), failure("test_logout"))]

    result = run_tests(
        server,
        [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", *TWO_FAILURES],
    )

    assert result.exit_code == 1
    assert "quarantined; exiting 0" not in result.stderr


def test_with_quarantine_off_failures_keep_the_commands_exit_code(
    server: FakeServer, runner: list[str]
) -> None:
    server.answers = [summary(failure("test_login", quarantined=True), quarantine_enabled=False)]

    result = run_tests(
        server, [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", "test_login=failed"]
    )

    assert result.exit_code == 1


def test_a_failing_command_without_failed_tests_keeps_its_exit_code(
    server: FakeServer, runner: list[str]
) -> None:
    # Every test passed, yet the command failed (a coverage gate, a crash at exit): no
    # quarantine can explain that.
    server.answers = [summary()]

    result = run_tests(
        server, [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "2", "test_login=passed"]
    )

    assert result.exit_code == 2


def test_a_refused_upload_warns_and_keeps_the_commands_exit_code(
    server: FakeServer, runner: list[str]
) -> None:
    server.answers = [refusal(404, "no repository github.com/acme/widgets", "not_found")]

    result = run_tests(
        server, [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", "test_login=failed"]
    )

    assert result.exit_code == 1
    assert result.stderr == (
        "warning: test results not uploaded: no repository github.com/acme/widgets; "
        "keeping the command's exit code 1\n"
    )


def test_an_unreachable_keepgreen_keeps_the_commands_exit_code(runner: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"

    result = run_tests(
        None,
        [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "3", "test_login=failed"],
        env={"KEEPGREEN_URL": url},
    )

    assert result.exit_code == 3
    assert result.stderr.startswith(
        f"warning: test results not uploaded: cannot connect to keepgreen at {url} "
    )
    assert result.stderr.endswith("; keeping the command's exit code 3\n")


def test_an_unreachable_keepgreen_after_a_passing_command_still_exits_0(runner: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"

    result = run_tests(
        None, [*runner, "--junitxml", "reports/unit.xml"], env={"KEEPGREEN_URL": url}
    )

    assert result.exit_code == 0
    assert result.stderr.startswith("warning: test results not uploaded: cannot connect")


def test_no_token_warns_and_keeps_the_commands_exit_code(
    server: FakeServer, runner: list[str]
) -> None:
    result = run_tests(
        server,
        [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", "test_login=failed"],
        env={"KEEPGREEN_TOKEN": None},
    )

    assert result.exit_code == 1
    assert result.stderr.startswith("warning: test results not uploaded: no API token")
    assert server.received == []


def test_reports_missing_after_the_command_warn_and_keep_its_exit_code(
    server: FakeServer,
) -> None:
    # A build error: the command failed before any test wrote a report.
    result = run_tests(server, [sys.executable, "-c", "import sys; sys.exit(3)"])

    assert result.exit_code == 3
    assert result.stderr == (
        "warning: no report file matches 'reports/*.xml' after the command ran\n"
        "warning: nothing to upload; exiting with the command's exit code 3\n"
    )
    assert server.received == []


def test_reports_missing_after_a_passing_command_warn_and_exit_0(server: FakeServer) -> None:
    result = run_tests(server, [sys.executable, "-c", "pass"])
    assert result.exit_code == 0
    assert result.stderr.startswith("warning: no report file matches 'reports/*.xml'")


def test_a_missing_report_keeps_a_failure_red_even_when_the_rest_is_quarantined(
    server: FakeServer, runner: list[str]
) -> None:
    # The integration suite never wrote its report (it crashed); the unit failures are all
    # quarantined, but nothing says the crash was one of them.
    server.answers = [summary(failure("test_login", quarantined=True))]

    result = keepgreen(
        "test",
        *COMMIT,
        *("--junit-paths", "reports/unit.xml", "--junit-paths", "reports/integration.xml"),
        "--",
        *[*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", "test_login=failed"],
        server=server,
    )

    assert result.exit_code == 1
    assert list(server.only.reports) == ["reports/unit.xml"]  # what exists is still uploaded
    assert "no report file matches 'reports/integration.xml'" in result.stderr


def test_junit_paths_may_be_separated_by_commas_as_trunk_takes_them(
    server: FakeServer, runner: list[str]
) -> None:
    write("reports/integration.xml", junit(("test_db", "passed")))

    result = run_tests(
        server,
        [*runner, "--junitxml", "reports/unit.xml"],
        junit_paths="reports/unit.xml, reports/integration.xml",
    )

    assert result.exit_code == 0, result.stderr
    assert list(server.only.reports) == ["reports/unit.xml", "reports/integration.xml"]


def test_a_command_that_does_not_exist_exits_127(server: FakeServer) -> None:
    result = run_tests(server, ["keepgreen-no-such-command", "--verbose"])

    assert result.exit_code == 127
    assert result.stderr == "error: cannot run 'keepgreen-no-such-command': command not found\n"
    assert server.received == []


def test_a_command_that_is_not_executable_exits_126(server: FakeServer) -> None:
    write("run-tests.sh", "#!/bin/sh\nexit 0\n").chmod(0o644)

    result = run_tests(server, ["./run-tests.sh"])

    assert result.exit_code == 126
    assert result.stderr == "error: cannot run './run-tests.sh': permission denied\n"


def test_a_command_killed_by_a_signal_exits_128_plus_its_number(server: FakeServer) -> None:
    suicide = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    result = run_tests(server, [sys.executable, "-c", suicide])
    assert result.exit_code == 128 + signal.SIGTERM


def test_without_double_dash_everything_from_the_command_on_is_the_commands(
    server: FakeServer, runner: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    # Options after the command's name are the command's: we would refuse `--junitxml`.
    result = keepgreen(
        "test",
        *COMMIT,
        *("--junit-paths", "reports/*.xml"),
        *[*runner, "--junitxml", "reports/unit.xml", "test_login=passed"],
        server=server,
    )

    assert result.exit_code == 0, result.stderr
    assert (
        "runner: ['--junitxml', 'reports/unit.xml', 'test_login=passed']" in capfd.readouterr().out
    )


def test_json_prints_the_summary(server: FakeServer, runner: list[str]) -> None:
    answer = summary(failure("test_login", quarantined=True))
    server.answers = [answer]

    result = run_tests(
        server,
        [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "1", "test_login=failed"],
        "--json",
    )

    assert result.exit_code == 0
    assert json.loads(result.stdout) == answer


@pytest.mark.slow
def test_keepgreen_test_as_a_process_passes_stdio_through_and_survives_no_server(
    runner: list[str], tmp_path: Path
) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("KEEPGREEN_") and name not in VARIABLES
    }
    env.update(KEEPGREEN_URL=f"http://127.0.0.1:{free_port()}/v1", KEEPGREEN_TOKEN=TOKEN)
    command = [*runner, "--junitxml", "reports/unit.xml", "--exit-code", "3", "test_a=failed"]

    ours = ["test", *COMMIT, "--junit-paths", "reports/*.xml"]
    process = subprocess.run(
        [sys.executable, "-m", "keepgreen", *ours, "--", *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )

    assert process.returncode == 3, process.stderr
    assert "runner: ['--junitxml', 'reports/unit.xml', '--exit-code', '3', 'test_a=failed']" in (
        process.stdout
    )
    assert "warning: test results not uploaded: cannot connect to keepgreen" in process.stderr
    assert "Traceback" not in process.stderr


# -- against the real server ----------------------------------------------------------------------


def test_upload_and_test_against_the_real_server(
    cli: Cli, registered_repo: GitRepo, runner: list[str]
) -> None:
    # test_racy fails, then passes on a retry of the same commit: flaky.
    write("reports/first.xml", junit(("test_racy", "failed"), ("test_ok", "passed")))
    write("reports/retry.xml", junit(("test_racy", "passed"), ("test_ok", "passed")))

    first = cli("upload", *COMMIT, "--org", "acme", "--json", "reports/first.xml")
    cli.ok("upload", *COMMIT, "--run-id", "retry", "reports/retry.xml")

    assert first.exit_code == 0, first.stderr
    stored = json.loads(first.stdout)
    assert (stored["files"], stored["tests"], stored["passed"], stored["failed"]) == (1, 2, 1, 1)
    assert [(f["name"], f["quarantined"]) for f in stored["failures"]] == [("test_racy", False)]
    assert stored["quarantine_enabled"] is False

    quarantine_on = {"quarantine": {"enabled": True}}
    settings = {"repo": REPO_JSON, "org_url_slug": "acme", "settings": quarantine_on}
    enabled = httpx.post(
        f"{cli.url}/flaky-tests/update-settings", json=settings, headers={"x-api-token": cli.token}
    )
    assert enabled.status_code == 200, enabled.text
    ci_run = [*runner, "--junitxml", "reports/ci.xml", "--exit-code", "1", "test_racy=failed"]

    only_flaky = cli("test", *COMMIT, "--junit-paths", "reports/ci.xml", "--", *ci_run)
    also_new = cli(
        "test", *COMMIT, "--junit-paths", "reports/ci.xml", "--", *ci_run, "test_new=failed"
    )

    assert only_flaky.exit_code == 0, only_flaky.stderr
    assert "every failed test is quarantined; exiting 0 instead of 1" in only_flaky.stderr
    assert also_new.exit_code == 1, also_new.stderr
