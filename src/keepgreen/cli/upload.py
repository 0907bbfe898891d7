"""`keepgreen upload` and `keepgreen test`: send JUnit reports to the flaky-test service.

`upload` sends reports that exist. `test` runs a test command, uploads the reports it wrote and
decides its exit code as Trunk's CLI does (field notes §1.7): a failed command exits 0 only when
the upload worked and every failed test is quarantined. `test` is fail-safe: when keepgreen
cannot be reached, refuses the upload or finds no reports, a warning goes to stderr and the
command's own exit code stands.

Reports go as `POST {KEEPGREEN_URL}/flaky-tests/upload`, multipart: a `metadata` JSON part and
one gzip-compressed `file` part per report. At most `MAX_BATCH_BYTES` of compressed reports go in
one request (the server stores each request atomically and refuses bodies over 20 MiB); more are
sent in several requests whose summaries are added up.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from keepgreen.cli import render
from keepgreen.cli.api import (
    CONNECT_TIMEOUT_SECONDS,
    TOKEN_HEADER,
    ClientError,
    Patience,
    connect,
    exchange_patiently,
    reported,
)
from keepgreen.cli.client import JsonOption, RepoOption, TokenOption, UrlOption
from keepgreen.cli.reports import (
    COUNTS,
    MAX_BATCH_BYTES,
    Report,
    compress,
    count_of,
    decide_exit_code,
    expand_reports,
    failures_of,
    is_quarantined,
    merge_summaries,
    plan_batches,
    unmatched_message,
)
from keepgreen.core.ci_env import CiInfo, detect_ci
from keepgreen.core.model import RepoRef

if TYPE_CHECKING:
    import httpx
    from rich.console import Console, RenderableType

UPLOAD_VERB = "flaky-tests/upload"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# An upload is safe to send again (its key makes the server store it once), so the CLI waits
# for a busy server this long before it gives up: long enough for a queue of shards.
UPLOAD_PATIENCE_SECONDS = 900.0
# A big upload is stored in seconds, but a server busy with many may take longer to answer.
UPLOAD_READ_TIMEOUT_SECONDS = 300.0
_GIT_TIMEOUT_SECONDS = 30
# Multipart parts as httpx takes them: (part name, (filename or None, bytes, content type)).
_Parts = list[tuple[str, tuple[str | None, bytes, str]]]


@dataclass(frozen=True, slots=True)
class UploadHooks:
    """What an embedding caller may swap, given to the app as Click's context object (`obj=`).

    The CLI runs without one and gets these defaults. Tests pass one to send the requests
    through an `httpx.MockTransport`, to split batches at a smaller size, or to read the console.
    """

    transport: httpx.BaseTransport | None = None
    max_batch_bytes: int = MAX_BATCH_BYTES
    console: Console | None = None  # default: stdout (progress bar and summary)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True, slots=True)
class UploadOptions:
    """The options `upload` and `test` share; None wherever the user gave nothing."""

    repo: RepoRef
    org: str | None
    sha: str | None
    branch: str | None
    pr: int | None
    variant: str
    job_url: str | None
    run_id: str | None
    codeowners: Path | None
    url: str | None
    token: str | None


# -- what to send ---------------------------------------------------------------------------------


def metadata(options: UploadOptions, ci: CiInfo, *, sha: str, branch: str) -> dict[str, object]:
    """The `metadata` part: what the results are of (flags win; the CI environment fills in)."""
    codeowners = None
    if options.codeowners is not None:
        codeowners = options.codeowners.read_text(encoding="utf-8", errors="replace")
    repo = options.repo
    return {
        "repo": {"host": repo.host, "owner": repo.owner, "name": repo.name},
        "org_url_slug": options.org,
        "commit_sha": sha,
        "branch": branch,
        "pr_number": options.pr if options.pr is not None else ci.pr_number,
        "job_url": options.job_url or ci.job_url,
        "variant": options.variant,
        "run_id": options.run_id or ci.run_id,
        "codeowners": codeowners,
    }


def resolve_commit(options: UploadOptions, ci: CiInfo) -> tuple[str, str]:
    """The commit sha and branch: flags, else the CI environment, else git in the current
    directory; ClientError (a usage problem) when none of them tells."""
    sha = options.sha or ci.commit_sha or _git("rev-parse", "HEAD")
    if not sha:
        raise ClientError(
            "cannot tell which commit the results are for: pass --sha, set "
            "KEEPGREEN_COMMIT_SHA, or run inside the repository's git checkout",
            exit_code=2,
        )
    branch = options.branch or ci.branch
    if not branch:
        head = _git("rev-parse", "--abbrev-ref", "HEAD")
        branch = head if head != "HEAD" else None  # "HEAD" means a detached HEAD
    if not branch:
        raise ClientError(
            "cannot tell which branch the results are for: pass --branch or set "
            "KEEPGREEN_BRANCH (git's HEAD is detached or this is not a git checkout)",
            exit_code=2,
        )
    return sha, branch


def _git(*args: str) -> str | None:
    """git's answer in the current directory, or None when git cannot say."""
    import subprocess

    try:
        result = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=_GIT_TIMEOUT_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = result.stdout.strip()
    return answer if result.returncode == 0 and answer else None


# -- sending --------------------------------------------------------------------------------------


def upload(
    options: UploadOptions, files: Sequence[str], hooks: UploadHooks, *, show_progress: bool
) -> dict[str, Any]:
    """Upload the report `files`; the summary of what the server stored (added up over the
    requests when there were several). ClientError when anything fails; nothing is sent when
    the commit, the token or a report is wrong."""
    import httpx
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    ci = detect_ci(os.environ)
    sha, branch = resolve_commit(options, ci)
    meta = json.dumps(metadata(options, ci, sha=sha, branch=branch)).encode()
    api = connect(options.url, options.token)
    endpoint = f"{api.url.rstrip('/')}/{UPLOAD_VERB}"
    out = hooks.console or render.console()
    # A bar for several files, on a terminal only: a CI log or a pipe gets the summary alone.
    shown = show_progress and len(files) > 1 and out.is_terminal
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=out, transient=True, disable=not shown) as progress:
        reports = [compress(name) for name in progress.track(files, description="Compressing")]
        batches = plan_batches(reports, max_bytes=hooks.max_batch_bytes)
        sending = progress.add_task("Uploading", total=len(files))
        summaries = []
        timeout = httpx.Timeout(UPLOAD_READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        headers = {TOKEN_HEADER: api.token}
        patience = Patience(
            UPLOAD_PATIENCE_SECONDS,
            sleep=hooks.sleep,
            clock=hooks.clock,
            waiting=_warn,
        )
        # One client for every batch, so the requests share a connection.
        with httpx.Client(transport=hooks.transport, headers=headers, timeout=timeout) as client:
            for index, batch in enumerate(batches):
                parts: _Parts = [("metadata", (None, meta, "application/json"))]
                parts += [("file", (r.name, r.gzipped, "application/gzip")) for r in batch]
                key = {IDEMPOTENCY_HEADER: batch_key(meta, batch)}
                try:
                    send = partial(client.post, endpoint, files=parts, headers=key)
                    summaries.append(
                        exchange_patiently(
                            send, base_url=api.url, endpoint=endpoint, patience=patience
                        )
                    )
                except ClientError as error:
                    if index == 0:
                        raise
                    # The earlier requests are stored: uploading all again would repeat them.
                    raise ClientError(
                        f"{error.message} (upload request {index + 1} of {len(batches)}; "
                        f"the {index} before it were stored)",
                        exit_code=error.exit_code,
                    ) from error
                progress.advance(sending, len(batch))
    return merge_summaries(summaries)


def batch_key(meta: bytes, batch: Sequence[Report]) -> str:
    """The upload's idempotency key: its metadata and reports, so that sending the same again
    (a retry here, or the CI step run again) is stored once.
    """
    digest = hashlib.sha256(meta)
    for report in batch:
        digest.update(b"\0" + hashlib.sha256(report.gzipped).digest())
    return digest.hexdigest()


# -- showing --------------------------------------------------------------------------------------


def summary_line(summary: Mapping[str, Any]) -> str:
    """One line: what was stored, and the upload's id."""
    counts = {name: count_of(summary, name) for name in COUNTS}
    files = counts["files"]
    line = (
        f"Uploaded {files} report {'file' if files == 1 else 'files'}: "
        f"{counts['tests']} tests, {counts['results']} results "
        f"({counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped); "
        f"upload {summary.get('upload_id', '-')}."
    )
    if summary.get("excluded_as_infrastructure_failure") is True:
        line += " Excluded from flakiness detection as an infrastructure failure."
    return line


def failures_view(summary: Mapping[str, Any]) -> RenderableType | None:
    """The failed tests, quarantined ones marked; None when there are none."""
    from rich.table import Table
    from rich.text import Text

    failures = failures_of(summary)
    if not failures:
        return None
    quarantined = sum(is_quarantined(failure) for failure in failures)
    title = f"Failed tests: {len(failures)}, {quarantined} quarantined"
    if summary.get("quarantine_enabled") is not True:
        title = f"Failed tests: {len(failures)} (quarantine is off for this repository)"
    table = Table(title=title, title_justify="left", title_style="bold")
    table.add_column("test", overflow="fold")
    table.add_column("class or suite", overflow="fold")
    table.add_column("file", overflow="fold")
    table.add_column("quarantined")
    for failure in failures:
        suite = failure.get("classname") or failure.get("parent") or "-"
        table.add_row(
            Text(str(failure.get("name", "-"))),
            Text(str(suite)),
            Text(str(failure.get("file") or "-")),
            Text("quarantined", style="yellow") if is_quarantined(failure) else Text("no"),
        )
    return table


def show(summary: Mapping[str, Any], *, json_output: bool, hooks: UploadHooks) -> None:
    """The summary as JSON, or as a line and the failures table."""
    if json_output:
        render.print_json(summary)
        return
    out = hooks.console or render.console()
    out.print(summary_line(summary), markup=False, soft_wrap=True)  # one line, never wrapped
    view = failures_view(summary)
    if view is not None:
        out.print(view)


# -- the commands ---------------------------------------------------------------------------------

OrgOption = Annotated[
    str | None,
    typer.Option(
        "--org",
        envvar="KEEPGREEN_ORG",
        help="Org slug (default: $KEEPGREEN_ORG).",
        show_default=False,
    ),
]
ShaOption = Annotated[
    str | None,
    typer.Option(
        "--sha",
        help="Commit tested (default: from the CI environment, else git HEAD).",
        show_default=False,
    ),
]
BranchOption = Annotated[
    str | None,
    typer.Option(
        "--branch",
        help="Branch tested (default: from the CI environment, else git).",
        show_default=False,
    ),
]
PrOption = Annotated[
    int | None,
    typer.Option(
        "--pr",
        min=1,
        help="Pull request number (default: from the CI environment).",
        show_default=False,
    ),
]
VariantOption = Annotated[
    str,
    typer.Option("--variant", help="Environment the tests ran in, e.g. linux; splits test ids."),
]
JobUrlOption = Annotated[
    str | None,
    typer.Option(
        "--job-url",
        help="Link to the CI job (default: from the CI environment).",
        show_default=False,
    ),
]
RunIdOption = Annotated[
    str | None,
    typer.Option(
        "--run-id", help="The CI run's id (default: from the CI environment).", show_default=False
    ),
]
CodeownersOption = Annotated[
    Path | None,
    typer.Option(
        "--codeowners",
        exists=True,
        dir_okay=False,
        readable=True,
        help="A CODEOWNERS file to send with the results.",
        show_default=False,
    ),
]


def upload_reports(
    ctx: typer.Context,
    paths: Annotated[
        list[str], typer.Argument(metavar="PATHS_OR_GLOBS", help="JUnit XML reports or globs.")
    ],
    repo: RepoOption,
    org: OrgOption = None,
    sha: ShaOption = None,
    branch: BranchOption = None,
    pr: PrOption = None,
    variant: VariantOption = "",
    job_url: JobUrlOption = None,
    run_id: RunIdOption = None,
    codeowners: CodeownersOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Upload JUnit XML test results for flaky-test detection."""
    hooks = ctx.find_object(UploadHooks) or UploadHooks()
    options = UploadOptions(
        repo, org, sha, branch, pr, variant, job_url, run_id, codeowners, url, token
    )
    with reported():
        expansion = expand_reports(paths)
        if expansion.unmatched:
            raise ClientError(unmatched_message(expansion.unmatched), exit_code=2)
        summary = upload(options, expansion.files, hooks, show_progress=not json_output)
    show(summary, json_output=json_output, hooks=hooks)


def run_tests(
    ctx: typer.Context,
    command: Annotated[
        list[str],
        typer.Argument(metavar="COMMAND", help="The test command and its arguments, after --."),
    ],
    junit_paths: Annotated[
        list[str],
        typer.Option(
            "--junit-paths",
            metavar="GLOB",
            help="Where the command writes JUnit XML (repeat, or separate with commas).",
        ),
    ],
    repo: RepoOption,
    org: OrgOption = None,
    sha: ShaOption = None,
    branch: BranchOption = None,
    pr: PrOption = None,
    variant: VariantOption = "",
    job_url: JobUrlOption = None,
    run_id: RunIdOption = None,
    codeowners: CodeownersOption = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Run a test command, upload its JUnit reports, and exit 0 if every failure is quarantined.

    Otherwise the command's own exit code stands, also when keepgreen cannot be reached.
    """
    hooks = ctx.find_object(UploadHooks) or UploadHooks()
    options = UploadOptions(
        repo, org, sha, branch, pr, variant, job_url, run_id, codeowners, url, token
    )
    code = _run_command(command)
    # Trunk's --junit-paths takes comma-separated globs; accept that as well as repeating it.
    patterns = [part.strip() for value in junit_paths for part in value.split(",") if part.strip()]
    expansion = expand_reports(patterns)
    if expansion.unmatched:
        _warn(f"{unmatched_message(expansion.unmatched)} after the command ran")
    if not expansion.files:
        _warn(f"nothing to upload; exiting with the command's exit code {code}")
        raise typer.Exit(code)
    try:
        summary = upload(options, expansion.files, hooks, show_progress=not json_output)
    except ClientError as error:
        _warn(f"test results not uploaded: {error.message}; keeping the command's exit code {code}")
        raise typer.Exit(code) from None
    show(summary, json_output=json_output, hooks=hooks)
    final = decide_exit_code(code, summary, all_reports_found=not expansion.unmatched)
    if final != code:
        typer.echo(
            f"keepgreen: every failed test is quarantined; exiting 0 instead of {code}", err=True
        )
    raise typer.Exit(final)


def _run_command(command: Sequence[str]) -> int:
    """Run `command` (no shell, our stdin/stdout/stderr) to its end; its exit code, as a shell
    reports it. A command that cannot start ends `keepgreen test` with 127 (not found) or 126."""
    import subprocess

    # Our buffered output first, so the command's lines come after what we printed before it.
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        completed = subprocess.run(list(command), check=False)
    except FileNotFoundError:
        typer.echo(f"error: cannot run {command[0]!r}: command not found", err=True)
        raise typer.Exit(127) from None
    except PermissionError:
        typer.echo(f"error: cannot run {command[0]!r}: permission denied", err=True)
        raise typer.Exit(126) from None
    # A command killed by signal N has returncode -N; shells report 128 + N.
    return 128 - completed.returncode if completed.returncode < 0 else completed.returncode


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def register(app: typer.Typer) -> None:
    """Add `upload` and `test` to the `keepgreen` app."""
    app.command("upload")(upload_reports)
    # Everything after the first argument (or after `--`) belongs to the test command.
    app.command("test", context_settings={"allow_interspersed_args": False})(run_tests)
