"""API client commands (submit, cancel, status, queue ...): thin wrappers over HTTP API v1.

Each command sends one request and shows the answer: readable Rich output, or with `--json` the
answer's JSON as it came. The URL and token come from `--url`/`--token`, else KEEPGREEN_URL and
KEEPGREEN_TOKEN. Exit codes: 0 done, 1 the API refused or could not be reached, 2 a usage
problem (bad option, no token). Errors print `error: <message>` on stderr, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated

import typer

from keepgreen.cli import render
from keepgreen.cli.api import ClientError, connect, reported
from keepgreen.core.enums import (
    DirectMergeMode,
    FlakyFailures,
    MergeMethod,
    OptimizationMode,
    QueueMode,
)
from keepgreen.core.limits import MAX_RETRIES
from keepgreen.core.model import RepoRef


def parse_repo(value: str) -> RepoRef:
    """`HOST/OWNER/NAME` as a RepoRef."""
    parts = value.strip().split("/")
    if len(parts) != 3 or not all(parts):
        raise typer.BadParameter(f"{value!r} is not HOST/OWNER/NAME, e.g. github.com/acme/widgets")
    host, owner, name = parts
    return RepoRef(host, owner, name)


# -- options shared by the commands ---------------------------------------------------------------

RepoOption = Annotated[
    RepoRef,
    typer.Option(
        "--repo",
        parser=parse_repo,
        metavar="HOST/OWNER/NAME",
        help="The repository, e.g. github.com/acme/widgets.",
    ),
]
BranchOption = Annotated[str, typer.Option("--branch", help="The queue's target branch.")]
PrArgument = Annotated[
    int, typer.Argument(metavar="PR_NUMBER", min=0, help="The pull request number.")
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="API base URL (default: $KEEPGREEN_URL, else http://127.0.0.1:8080/v1).",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option("--token", help="API token (default: $KEEPGREEN_TOKEN).", show_default=False),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON answer instead of text.")
]


def queue_body(repo: RepoRef, branch: str, **fields: object) -> dict[str, object]:
    """A request body naming the queue of `repo` for `branch`, plus `fields`."""
    repo_json = {"host": repo.host, "owner": repo.owner, "name": repo.name}
    return {"repo": repo_json, "targetBranch": branch, **fields}


# -- pull requests --------------------------------------------------------------------------------


def submit(
    number: PrArgument,
    repo: RepoOption,
    branch: BranchOption = "main",
    priority: Annotated[
        str | None,
        typer.Option(
            metavar="urgent|high|medium|low|0-255",
            help="Priority by name or number, 0 the highest (default: medium; kept on resubmit).",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[
        bool | None,
        typer.Option(
            "--batch/--no-batch",
            help="--no-batch tests the PR alone, never in a batch; --batch undoes that.",
            show_default=False,
        ),
    ] = None,
    skip_the_line: Annotated[
        bool,
        typer.Option("--skip-the-line", help="Submit as urgent (priority 0), ahead of the rest."),
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Submit a pull request to a merge queue; resubmitting updates its priority and batching."""
    fields: dict[str, object] = {"pr": {"number": number}}
    if priority is not None:
        # A number goes as a JSON number; a name as given (the server checks both).
        fields["priority"] = int(priority) if priority.strip().isdigit() else priority
    if batch is not None:
        fields["noBatch"] = not batch
    if skip_the_line:
        fields["skipTheLine"] = True
    with reported():
        data = connect(url, token).post("submitPullRequest", queue_body(repo, branch, **fields))
    render.done(
        data, f"Submitted #{number} to the {branch} queue of {repo}.", json_output=json_output
    )


def cancel(
    number: PrArgument,
    repo: RepoOption,
    branch: BranchOption = "main",
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Cancel a pull request: take it out of its merge queue."""
    with reported():
        body = queue_body(repo, branch, pr={"number": number})
        data = connect(url, token).post("cancelPullRequest", body)
    render.done(
        data, f"Cancelled #{number} in the {branch} queue of {repo}.", json_output=json_output
    )


def restart(
    number: PrArgument,
    repo: RepoOption,
    branch: BranchOption = "main",
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Restart the tests of a pull request that is testing, passed or pending failure."""
    with reported():
        body = queue_body(repo, branch, pr={"number": number})
        data = connect(url, token).post("restartTestsOnPullRequest", body)
    message = f"Restarted the tests of #{number} in the {branch} queue of {repo}."
    render.done(data, message, json_output=json_output)


def status(
    number: PrArgument,
    repo: RepoOption,
    branch: BranchOption = "main",
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a submitted pull request: state, priority, readiness, sha, title and author, what it
    waits on or why it left (its reason code and the evidence); --json for scripts and agents.
    """
    with reported():
        body = queue_body(repo, branch, pr={"number": number})
        data = connect(url, token).post("getSubmittedPullRequest", body)
    if json_output:
        render.print_json(data)
        return
    title = f"#{number} in the {branch} queue of {repo}"
    render.console().print(render.pull_request_view(data, title=title))


# -- queues ---------------------------------------------------------------------------------------

queue_app = typer.Typer(help="Merge queues: show, create, configure, delete.", no_args_is_help=True)


class SettableState(StrEnum):
    """The queue states a client may ask for (`switching_modes` is keepgreen's own)."""

    RUNNING = "running"  # admits, tests and merges
    PAUSED = "paused"  # starts no test run and merges nothing
    DRAINING = "draining"  # refuses new PRs, finishes the queued ones


@queue_app.command("show")
def queue_show(
    repo: RepoOption,
    branch: BranchOption = "main",
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a queue's configuration and its enqueued pull requests in queue order."""
    with reported():
        data = connect(url, token).post("getQueue", queue_body(repo, branch))
    if json_output:
        render.print_json(data)
        return
    title = f"Queue {branch} of {repo}"
    render.console().print(render.queue_view(data, title=title))


@queue_app.command("create")
def queue_create(
    repo: RepoOption,
    branch: BranchOption = "main",
    mode: Annotated[
        QueueMode | None,
        typer.Option(help="single: one line; parallel: lanes by impacted targets."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="PRs or batches tested at once.")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create the merge queue of a branch (configure it with `queue update`)."""
    fields: dict[str, object] = {}
    if mode is not None:
        fields["mode"] = mode.value
    if concurrency is not None:
        fields["concurrency"] = concurrency
    with reported():
        data = connect(url, token).post("createQueue", queue_body(repo, branch, **fields))
    render.done(data, f"Created the {branch} queue of {repo}.", json_output=json_output)


@queue_app.command("delete")
def queue_delete(
    repo: RepoOption,
    branch: BranchOption = "main",
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Delete the merge queue of a branch; it must hold no submitted pull request."""
    with reported():
        data = connect(url, token).post("deleteQueue", queue_body(repo, branch))
    render.done(data, f"Deleted the {branch} queue of {repo}.", json_output=json_output)


@queue_app.command("update")
def queue_update(
    repo: RepoOption,
    branch: BranchOption = "main",
    state: Annotated[SettableState | None, typer.Option(help="Run, pause or drain.")] = None,
    mode: Annotated[QueueMode | None, typer.Option(help="single or parallel.")] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="PRs or batches tested at once.")
    ] = None,
    bisection_concurrency: Annotated[
        int | None, typer.Option(min=1, help="Test runs at once while bisecting a batch.")
    ] = None,
    testing_timeout_minutes: Annotated[
        int | None, typer.Option(min=0, help="A run without a result fails after this long.")
    ] = None,
    pending_failure_depth: Annotated[
        int | None, typer.Option(min=0, help="PRs behind a failure to wait for before failing.")
    ] = None,
    optimistic_merge: Annotated[
        bool | None,
        typer.Option(
            "--optimistic-merge/--no-optimistic-merge",
            help="Merge a failed PR's predecessors when a PR behind them passes.",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[
        bool | None,
        typer.Option("--batch/--no-batch", help="Test PRs in batches.", show_default=False),
    ] = None,
    batching_max_wait_minutes: Annotated[
        int | None, typer.Option(min=0, help="Longest wait to fill a batch.")
    ] = None,
    batching_min_size: Annotated[
        int | None, typer.Option(min=1, help="PRs a batch waits for.")
    ] = None,
    direct_merge: Annotated[
        DirectMergeMode | None, typer.Option(help="always: merge an up-to-date PR at once.")
    ] = None,
    merge_method: Annotated[MergeMethod | None, typer.Option(help="How PRs land.")] = None,
    optimization_mode: Annotated[
        OptimizationMode | None, typer.Option(help="Test-saving strategy.")
    ] = None,
    required_status: Annotated[
        list[str] | None,
        typer.Option(
            "--required-status",
            metavar="CONTEXT",
            help="A status that must succeed; repeat for several (replaces the list).",
            show_default=False,
        ),
    ] = None,
    clear_required_statuses: Annotated[
        bool,
        typer.Option("--clear-required-statuses", help="Drop the queue's required statuses."),
    ] = False,
    check_start_timeout_minutes: Annotated[
        int | None,
        typer.Option(min=0, help="A required check not started this long after its run: 0 off."),
    ] = None,
    adaptive_testing_timeout: Annotated[
        bool | None,
        typer.Option(
            "--adaptive-testing-timeout/--fixed-testing-timeout",
            help="Time runs out at the queue's p95 CI time plus a margin.",
            show_default=False,
        ),
    ] = None,
    stall_minutes: Annotated[
        int | None,
        typer.Option(min=0, help="Report a stall after this long without progress: 0 off."),
    ] = None,
    accept_skipped_checks: Annotated[
        bool | None,
        typer.Option(
            "--accept-skipped-checks/--refuse-skipped-checks",
            help="Whether a skipped or neutral required check counts as passed.",
            show_default=False,
        ),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option(min=0, max=MAX_RETRIES, help="Retries of a failed run before it counts."),
    ] = None,
    flaky_failures: Annotated[
        FlakyFailures | None,
        typer.Option(help="A run where only known flaky tests failed: off, retry or pass."),
    ] = None,
    bisect_beside_queue: Annotated[
        bool | None,
        typer.Option(
            "--bisect-beside-queue/--bisect-in-line",
            help="Test a failed batch's PRs alone beside the queue while the line goes on.",
            show_default=False,
        ),
    ] = None,
    adaptive_batch_size: Annotated[
        bool | None,
        typer.Option(
            "--adaptive-batch-size/--fixed-batch-size",
            help="Batch size near 1/sqrt(failure rate), at most --batching-min-size.",
            show_default=False,
        ),
    ] = None,
    adaptive_depth: Annotated[
        bool | None,
        typer.Option(
            "--adaptive-depth/--fixed-depth",
            help="Runs in flight: +1 per pass, halved per failure, at most --concurrency.",
            show_default=False,
        ),
    ] = None,
    not_ready_timeout_hours: Annotated[
        int | None,
        typer.Option(min=0, help="Cancel a PR not ready for this many hours: 0 never."),
    ] = None,
    enqueueing_label: Annotated[
        str | None,
        typer.Option(help='The GitHub label that submits a PR ("" for the instance\'s).'),
    ] = None,
    label_commands: Annotated[
        bool | None,
        typer.Option(
            "--label-commands/--no-label-commands",
            help="Whether the enqueueing label submits (and its removal cancels) on GitHub.",
            show_default=False,
        ),
    ] = None,
    comment_commands: Annotated[
        bool | None,
        typer.Option(
            "--comment-commands/--no-comment-commands",
            help="Whether /keepgreen merge and /keepgreen cancel comments act on GitHub.",
            show_default=False,
        ),
    ] = None,
    state_labels: Annotated[
        bool | None,
        typer.Option(
            "--state-labels/--no-state-labels",
            help="Whether PRs on GitHub carry a label of their state (keepgreen:testing, ...).",
            show_default=False,
        ),
    ] = None,
    allowed_bot: Annotated[
        list[str] | None,
        typer.Option(help="A bot (name[bot]) that may submit by comment or label; repeat."),
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
    json_output: JsonOption = False,
) -> None:
    """Change a queue's state or settings; only the options given are sent."""
    # (wire name, value) for each option; None means "not given" and is not sent.
    given: list[tuple[str, object]] = [
        ("state", None if state is None else state.value),
        ("mode", None if mode is None else mode.value),
        ("concurrency", concurrency),
        ("bisectionConcurrency", bisection_concurrency),
        ("testingTimeoutMinutes", testing_timeout_minutes),
        ("pendingFailureDepth", pending_failure_depth),
        ("canOptimisticallyMerge", optimistic_merge),
        ("batch", batch),
        ("batchingMaxWaitTimeMinutes", batching_max_wait_minutes),
        ("batchingMinSize", batching_min_size),
        ("directMergeMode", None if direct_merge is None else direct_merge.value),
        ("mergeMethod", None if merge_method is None else merge_method.value),
        ("optimizationMode", None if optimization_mode is None else optimization_mode.value),
        ("requiredStatuses", required_status or None),
        ("deleteRequiredStatuses", True if clear_required_statuses else None),
        ("checkStartTimeoutMinutes", check_start_timeout_minutes),
        ("adaptiveTestingTimeout", adaptive_testing_timeout),
        ("stallMinutes", stall_minutes),
        ("acceptSkippedChecks", accept_skipped_checks),
        ("maxRetries", max_retries),
        ("flakyFailures", None if flaky_failures is None else flaky_failures.value),
        ("bisectBesideQueue", bisect_beside_queue),
        ("adaptiveBatchSize", adaptive_batch_size),
        ("adaptiveDepth", adaptive_depth),
        ("notReadyTimeoutHours", not_ready_timeout_hours),
        ("enqueueingLabel", enqueueing_label),
        ("labelCommandsEnabled", label_commands),
        ("commandsEnabled", comment_commands),
        ("stateLabelsEnabled", state_labels),
        ("allowedBotSubmitters", allowed_bot or None),
    ]
    fields = {name: value for name, value in given if value is not None}
    with reported():
        if not fields:
            raise ClientError(
                "nothing to update: give at least one option (see `keepgreen queue update --help`)",
                exit_code=2,
            )
        data = connect(url, token).post("updateQueue", queue_body(repo, branch, **fields))
    if json_output:
        render.print_json(data)
        return
    title = f"Updated the {branch} queue of {repo}"
    render.console().print(render.config_view(data, title=title))


def _state_command(state: SettableState, doc: str) -> Callable[..., None]:
    """A `queue pause|resume|drain` command: updateQueue with only `state`."""

    def command(
        repo: RepoOption,
        branch: BranchOption = "main",
        url: UrlOption = None,
        token: TokenOption = None,
        json_output: JsonOption = False,
    ) -> None:
        with reported():
            body = queue_body(repo, branch, state=state.value)
            data = connect(url, token).post("updateQueue", body)
        message = f"The {branch} queue of {repo} is now {data.get('state', state.value)}."
        render.done(data, message, json_output=json_output)

    command.__doc__ = doc
    return command


for _name, _state, _doc in (
    ("pause", SettableState.PAUSED, "Pause a queue: no new test runs, no merges; runs finish."),
    ("resume", SettableState.RUNNING, "Resume a queue: admit, test and merge again."),
    ("drain", SettableState.DRAINING, "Drain a queue: refuse new PRs and finish the queued ones."),
):
    queue_app.command(_name)(_state_command(_state, _doc))


def register(app: typer.Typer) -> None:
    """Add the client commands to the `keepgreen` app."""
    app.command()(submit)
    app.command()(cancel)
    app.command()(restart)
    app.command()(status)
    app.add_typer(queue_app, name="queue")
