"""The client commands against a real server: each command's effect, its --json, its errors."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import Result

from keepgreen.app.pull_requests import QueueTarget
from keepgreen.bootstrap import Container
from keepgreen.core.enums import IncidentKind, PrState
from tests.cli.conftest import REPO_ARG, Cli, free_port
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import OWN_QUEUE_KEYS, REPO

R = ("--repo", REPO_ARG)


@pytest.fixture
def queued(cli: Cli, registered_repo: GitRepo) -> GitRepo:
    """A registered repo whose `main` queue exists (made with `keepgreen queue create`)."""
    cli.ok("queue", "create", *R)
    return registered_repo


@pytest.fixture
def checked(cli: Cli, queued: GitRepo) -> GitRepo:
    """`queued`, its queue requiring the `ci` check: a run the worker starts stays `testing`
    until `ci` reports (a queue that requires no check fails its PRs: nothing tests them).
    """
    cli.ok("queue", "update", *R, "--required-status", "ci")
    return queued


def worker_pass(container: Container) -> None:
    """One pass of the worker, as `keepgreen serve` runs when a submit wakes it. The submit
    does not wait on git: until then a PR is `not_ready`, unread (no sha, title or author)
    and not in getQueue's list; the pass reads it, admits it (`pending`) and starts the runs
    the queue has room for.
    """
    container.worker.run_once()


def unread(pr: dict[str, object]) -> tuple[object, ...]:
    """What a getSubmittedPullRequest answer tells of a PR waiting for the worker to read it."""
    return (pr["state"], pr["prSha"], pr["prTitle"], pr["isCurrentlySubmittedToQueue"])


UNREAD = ("not_ready", "", "", True)


def states(cli: Cli) -> list[tuple[int, str]]:
    """(number, state) of the enqueued PRs, in queue order, as the API reports them."""
    queue = cli.api_json("getQueue")
    return [(pr["prNumber"], pr["state"]) for pr in queue["enqueuedPullRequests"]]


def submitted(cli: Cli, number: int) -> dict[str, object]:
    body: dict[str, object] = cli.api_json("getSubmittedPullRequest", pr={"number": number})
    return body


def put_in_testing(container: Container, token: str, number: int) -> None:
    """Move a queued PR to `testing`, as the worker does when its test run starts."""
    org_id = container.admin.authenticate(token)
    assert org_id is not None
    entry = container.pull_requests.get(QueueTarget(org_id, REPO, "main"), number)
    with container.unit_of_work() as uow:
        uow.entries.save(replace(entry, state=PrState.TESTING))
        uow.commit()


def assert_error(result: Result, code: int, message: str) -> None:
    """Exit `code`, `error: <message>` on stderr, nothing on stdout and no traceback."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == ""


# -- submit ---------------------------------------------------------------------------------------


def test_submit_puts_the_pr_in_the_queue(cli: Cli, checked: GitRepo, container: Container) -> None:
    """The submit takes the PR at once, unread; the worker's pass reads both PRs, admits them
    and starts testing the first (the queue tests one at a time).
    """
    checked.open_pr(1, {"a.txt": "a\n"})
    checked.open_pr(2, {"b.txt": "b\n"})

    first = cli.ok("submit", "1", *R)
    cli.ok("submit", "2", *R, "--branch", "main")

    assert first.stdout == "Submitted #1 to the main queue of github.com/acme/widgets.\n"
    assert [unread(submitted(cli, number)) for number in (1, 2)] == [UNREAD, UNREAD]
    assert states(cli) == []
    worker_pass(container)
    assert states(cli) == [(1, "testing"), (2, "pending")]


def test_submit_sends_priority_and_no_batch_and_resubmit_keeps_what_is_not_given(
    cli: Cli, queued: GitRepo
) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})

    cli.ok("submit", "1", *R, "--priority", "high", "--no-batch")
    pr = submitted(cli, 1)
    assert (pr["priorityName"], pr["priorityValue"], pr["noBatch"]) == ("high", 10, True)

    cli.ok("submit", "1", *R, "--batch")
    pr = submitted(cli, 1)
    assert (pr["priorityName"], pr["priorityValue"], pr["noBatch"]) == ("high", 10, False)


def test_submit_takes_a_numeric_priority(cli: Cli, queued: GitRepo) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R, "--priority", "42")
    pr = submitted(cli, 1)
    assert (pr["priorityName"], pr["priorityValue"]) == ("custom", 42)


def test_submit_skip_the_line_is_urgent(cli: Cli, queued: GitRepo) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R, "--skip-the-line")
    pr = submitted(cli, 1)
    assert (pr["priorityValue"], pr["skipTheLine"]) == (0, True)


def test_submit_reports_the_servers_refusal_of_a_bad_priority(cli: Cli, queued: GitRepo) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})
    message = cli.api_error("submitPullRequest", 400, pr={"number": 1}, priority="soonish")

    result = cli("submit", "1", *R, "--priority", "soonish")

    assert_error(result, 1, message)
    assert "soonish" in result.stderr
    assert states(cli) == []


def test_submit_of_a_pr_the_repository_does_not_have_is_cancelled_as_not_found(
    cli: Cli, queued: GitRepo, container: Container
) -> None:
    """The submit does not read git, so it takes PR 7; the worker's pass finds no such PR and
    cancels it (`pr_not_found`), which `status` says.
    """
    result = cli.ok("submit", "7", *R)
    assert result.stdout == "Submitted #7 to the main queue of github.com/acme/widgets.\n"
    assert unread(submitted(cli, 7)) == UNREAD

    worker_pass(container)

    pr = submitted(cli, 7)
    assert (pr["state"], pr["isCurrentlySubmittedToQueue"]) == ("cancelled", False)
    assert pr["explanation"]["reasonCode"] == "pr_not_found"  # type: ignore[index]
    assert states(cli) == []
    lines = {" ".join(line.split()) for line in cli.ok("status", "7", *R).stdout.splitlines()}
    assert {
        "state cancelled",
        "Cancelled: the code host has no open pull request with this number",
        "reason code: pr_not_found",
    } <= lines


# -- cancel, restart ------------------------------------------------------------------------------


def test_cancel_takes_the_pr_out_of_the_queue(
    cli: Cli, checked: GitRepo, container: Container
) -> None:
    checked.open_pr(1, {"a.txt": "a\n"})
    checked.open_pr(2, {"b.txt": "b\n"})
    cli.ok("submit", "1", *R)
    cli.ok("submit", "2", *R)
    worker_pass(container)
    assert states(cli) == [(1, "testing"), (2, "pending")]

    result = cli.ok("cancel", "1", *R)

    assert result.stdout == "Cancelled #1 in the main queue of github.com/acme/widgets.\n"
    assert states(cli) == [(2, "testing")]  # the testing slot PR 1 left is PR 2's at once
    pr = submitted(cli, 1)
    assert (pr["state"], pr["isCurrentlySubmittedToQueue"]) == ("cancelled", False)


def test_cancel_of_a_pr_not_in_the_queue_prints_the_servers_message(
    cli: Cli, queued: GitRepo
) -> None:
    message = cli.api_error("cancelPullRequest", 404, pr={"number": 9})

    assert_error(cli("cancel", "9", *R), 1, message)


def test_restart_sends_a_testing_pr_back_to_pending(
    cli: Cli, queued: GitRepo, container: Container, token: str
) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R)
    put_in_testing(container, token, 1)
    assert states(cli) == [(1, "testing")]

    result = cli.ok("restart", "1", *R)

    assert result.stdout == (
        "Restarted the tests of #1 in the main queue of github.com/acme/widgets.\n"
    )
    assert states(cli) == [(1, "pending")]


def test_restart_of_a_pending_pr_is_refused(
    cli: Cli, checked: GitRepo, container: Container
) -> None:
    checked.open_pr(1, {"a.txt": "a\n"})
    checked.open_pr(2, {"b.txt": "b\n"})
    cli.ok("submit", "1", *R)
    cli.ok("submit", "2", *R)
    worker_pass(container)  # PR 1 testing, PR 2 pending behind it
    message = cli.api_error("restartTestsOnPullRequest", 409, pr={"number": 2})

    assert_error(cli("restart", "2", *R), 1, message)
    assert "pending" in message
    assert states(cli) == [(1, "testing"), (2, "pending")]


# -- status ---------------------------------------------------------------------------------------


def test_status_shows_state_priority_readiness_sha_title_and_author(
    cli: Cli, checked: GitRepo, container: Container
) -> None:
    checked.open_pr(1, {"a.txt": "a\n"})
    sha = checked.open_pr(3, {"c.txt": "c\n"}, title="Add c", author="Grace Hopper")
    cli.ok("submit", "1", *R)
    cli.ok("submit", "3", *R, "--priority", "low")
    worker_pass(container)  # read and admitted: PR 1 testing, PR 3 pending behind it

    output = cli.ok("status", "3", *R).stdout

    assert output.startswith("#3 in the main queue of github.com/acme/widgets\n")
    lines = {" ".join(line.split()) for line in output.splitlines()}
    assert {
        "title Add c",
        "author Grace Hopper",
        "state pending",
        "priority low (200)",
        f"sha {sha}",
        "mergeability mergeable",
        "base branch matches yes",
        "Queued: position 2 of 2",  # what it waits on, in words
        "Waiting for a testing slot on `main`.",
    } <= lines


def test_status_json_is_the_api_answer(cli: Cli, checked: GitRepo, container: Container) -> None:
    checked.open_pr(1, {"a.txt": "a\n"})
    checked.open_pr(2, {"b.txt": "b\n"})
    cli.ok("submit", "1", *R)
    cli.ok("submit", "2", *R)

    printed = json.loads(cli.ok("status", "2", *R, "--json").stdout)
    assert printed == submitted(cli, 2)
    assert unread(printed) == UNREAD
    assert printed["explanation"]["title"] == "Waiting to enter the queue"

    worker_pass(container)
    printed = json.loads(cli.ok("status", "2", *R, "--json").stdout)

    assert printed == submitted(cli, 2)
    assert printed["state"] == "pending"
    assert printed["explanation"]["title"] == "Queued: position 2 of 2"


def test_status_of_a_failed_pr_prints_its_reason_code_and_evidence_and_json_has_them(
    cli: Cli, queued: GitRepo, container: Container
) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})
    cli.ok("queue", "update", *R, "--required-status", "ci")
    cli.ok("submit", "1", *R)
    container.worker.run_once()  # the run starts: its test commit is built
    run = submitted(cli, 1)["explanation"]["evidence"]["testRun"]  # type: ignore[index]
    cli.api_json(
        "setCommitStatus",
        sha=run["sha"],
        context="ci",
        state="failure",
        description="2 tests failed",
        targetUrl="https://ci.example.com/7",
    )
    container.worker.run_once()

    output = cli.ok("status", "1", *R).stdout
    lines = {" ".join(line.split()) for line in output.splitlines()}
    assert {
        "Failed: its tests failed",
        "reason code: tests_failed",
        "evidence:",
        f"run {run['id']}: main, failed",
        f"commit {run['sha'][:12]}, testing #1",
        "failed: ci failure (2 tests failed) https://ci.example.com/7",
    } <= lines
    printed = json.loads(cli.ok("status", "1", *R, "--json").stdout)
    assert printed == submitted(cli, 1)
    assert printed["explanation"]["reasonCode"] == "tests_failed"
    assert printed["explanation"]["evidence"]["failedStatuses"][0]["targetUrl"] == (
        "https://ci.example.com/7"
    )


def test_status_shows_titles_as_written_not_as_markup(
    cli: Cli, queued: GitRepo, container: Container
) -> None:
    queued.open_pr(1, {"a.txt": "a\n"}, title="Fix [red]everything[/red]", author="[b]Eve[/b]")
    cli.ok("submit", "1", *R)
    worker_pass(container)  # reads the title and author

    output = cli.ok("status", "1", *R).stdout

    assert "Fix [red]everything[/red]" in output
    assert "[b]Eve[/b]" in output


def test_status_of_a_pr_never_submitted_prints_the_servers_message(
    cli: Cli, queued: GitRepo
) -> None:
    message = cli.api_error("getSubmittedPullRequest", 404, pr={"number": 5})

    assert_error(cli("status", "5", *R), 1, message)


# -- queue show, create, delete -------------------------------------------------------------------


def test_queue_show_lists_the_config_and_the_prs_in_queue_order(
    cli: Cli, checked: GitRepo, container: Container
) -> None:
    sha_1 = checked.open_pr(1, {"a.txt": "a\n"}, title="First change", author="Ada")
    sha_2 = checked.open_pr(2, {"b.txt": "b\n"}, title="Second change", author="Grace")
    cli.ok("submit", "1", *R)
    cli.ok("submit", "2", *R, "--priority", "high")
    worker_pass(container)  # reads both: the high-priority PR takes the testing slot
    assert states(cli) == [(2, "testing"), (1, "pending")]

    output = cli.ok("queue", "show", *R).stdout

    assert output.startswith("Queue main of github.com/acme/widgets\n")
    assert "running" in output
    assert "squash" in output
    # The high-priority PR is ahead of the one submitted first.
    assert output.index(sha_2[:12]) < output.index(sha_1[:12])
    assert output.index("Second change") < output.index("First change")
    assert "high (10)" in output
    assert "medium (100)" in output


def test_queue_show_json_is_the_api_answer(
    cli: Cli, checked: GitRepo, container: Container
) -> None:
    checked.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R)
    worker_pass(container)

    printed = json.loads(cli.ok("queue", "show", *R, "--json").stdout)

    assert printed == cli.api_json("getQueue")
    assert [pr["prNumber"] for pr in printed["enqueuedPullRequests"]] == [1]


def test_queue_show_says_what_the_queue_runs_by(cli: Cli, queued: GitRepo) -> None:
    cli.ok("queue", "update", *R, "--batch", "--batching-min-size", "3", "--concurrency", "5")
    cli.ok("queue", "update", *R, "--adaptive-batch-size")

    output = cli.ok("queue", "show", *R).stdout

    assert "Runs by now: batches of 3, up to 5 runs in flight, testing timeout 300" in output
    assert "until 20 PRs were tested" in output


def test_queue_show_of_an_empty_queue(cli: Cli, queued: GitRepo) -> None:
    output = cli.ok("queue", "show", *R).stdout
    assert output.endswith("No pull requests in the queue.\n")


def test_queue_show_and_status_say_what_the_git_server_did(
    cli: Cli, queued: GitRepo, container: Container, token: str, clock: FakeClock
) -> None:
    """An ongoing incident of the queue's server is what the queue waits on; an ended one of
    PR 1 (a refused landing) is in the PR's status; both print their sentence whole.
    """
    queued.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R)
    org_id = container.admin.authenticate(token)
    assert org_id is not None
    queue_id = container.pull_requests.get(QueueTarget(org_id, REPO, "main"), 1).queue_id
    now = clock.now
    unreachable = (
        "git-url https://git.example.com/acme/widgets.git cannot be read: [nothing answers]"
    )
    refused = "git-url https://git.example.com/acme/widgets.git refused the push to refs/heads/main"
    with container.unit_of_work() as uow:
        uow.incidents.record(queue_id, IncidentKind.UNREACHABLE, unreachable, now=now)
        uow.incidents.record(queue_id, IncidentKind.PUSH_REJECTED, refused, now=now, pr_number=1)
        uow.incidents.close(queue_id, now=now, kinds=[IncidentKind.PUSH_REJECTED], pr_number=1)
        uow.commit()

    shown = cli.ok("queue", "show", *R).stdout
    flat = " ".join(shown.split())
    assert f"Waiting on: {unreachable}" in flat  # as written, not read as markup
    assert "unreachable 1 failure(s) ongoing" in flat
    assert "push_rejected #1 1 failure(s) ended" in flat
    status = " ".join(cli.ok("status", "1", *R).stdout.split())
    assert "unreachable 1 failure(s) ongoing" in status  # the queue's server concerns PR 1
    assert refused in status
    assert cli.api_json("getQueue")["waitingOn"] == unreachable


def test_queue_show_says_the_queue_is_stalled_and_on_what(
    cli: Cli, queued: GitRepo, container: Container, clock: FakeClock
) -> None:
    """PR 1 tested in a run whose required check never reports: once stallMinutes passed,
    `queue show` prints the stall and what the queue waits on.
    """
    cli.ok("queue", "update", *R, "--required-status", "ci/build", "--stall-minutes", "30",
           "--check-start-timeout-minutes", "0")  # fmt: skip
    queued.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R)
    container.worker.run_once()
    assert states(cli) == [(1, "testing")]
    assert "Stalled" not in cli.ok("queue", "show", *R).stdout

    clock.advance(minutes=31)
    shown = " ".join(cli.ok("queue", "show", *R).stdout.split())

    queue = cli.api_json("getQueue")
    assert queue["stateReason"] == "stalled"
    assert f"Stalled since {queue['stalledSince']}: no test run started and no PR merged" in shown
    assert "for 30 minutes or more" in shown
    assert f"Waiting on: {queue['waitingOn']}" in shown
    assert "PR #1 is testing in run" in shown
    assert "waiting on ci/build, which has not reported" in shown


def test_queue_create_with_mode_and_concurrency(cli: Cli, registered_repo: GitRepo) -> None:
    result = cli.ok("queue", "create", *R, "--branch", "release", "--mode", "parallel",
                    "--concurrency", "3")  # fmt: skip

    assert result.stdout == "Created the release queue of github.com/acme/widgets.\n"
    config = cli.api_json("getQueue", targetBranch="release")
    assert (config["mode"], config["concurrency"], config["branch"]) == ("parallel", 3, "release")


def test_queue_create_twice_is_a_conflict(cli: Cli, queued: GitRepo) -> None:
    message = cli.api_error("createQueue", 409)

    assert_error(cli("queue", "create", *R), 1, message)


def test_queue_delete_removes_the_queue(cli: Cli, queued: GitRepo) -> None:
    result = cli.ok("queue", "delete", *R)

    assert result.stdout == "Deleted the main queue of github.com/acme/widgets.\n"
    assert cli.api("getQueue").status_code == 404


def test_queue_delete_refuses_a_queue_with_prs(
    cli: Cli, checked: GitRepo, container: Container
) -> None:
    """A PR submitted and not yet read is in the queue already: the queue is not deleted."""
    checked.open_pr(1, {"a.txt": "a\n"})
    cli.ok("submit", "1", *R)
    message = cli.api_error("deleteQueue", 400)

    assert_error(cli("queue", "delete", *R), 1, message)
    assert unread(submitted(cli, 1)) == UNREAD
    worker_pass(container)
    assert states(cli) == [(1, "testing")]


# -- queue update and its shortcuts ---------------------------------------------------------------

EVERY_OPTION = (
    "--state", "paused", "--mode", "parallel", "--concurrency", "4",
    "--bisection-concurrency", "2", "--testing-timeout-minutes", "30",
    "--pending-failure-depth", "2", "--optimistic-merge", "--batch",
    "--batching-max-wait-minutes", "7", "--batching-min-size", "3", "--direct-merge", "always",
    "--merge-method", "rebase", "--optimization-mode", "bisection_skip_redundant_tests",
    "--required-status", "ci/build", "--required-status", "lint",
    "--check-start-timeout-minutes", "12", "--adaptive-testing-timeout", "--stall-minutes", "20",
    "--accept-skipped-checks", "--max-retries", "2", "--flaky-failures", "pass",
    "--bisect-in-line", "--adaptive-batch-size", "--adaptive-depth",
    "--not-ready-timeout-hours", "24", "--enqueueing-label", "ready", "--no-label-commands",
    "--no-comment-commands", "--state-labels", "--allowed-bot", "renovate[bot]",
)  # fmt: skip


def test_queue_update_sets_every_option_given(cli: Cli, queued: GitRepo) -> None:
    printed = json.loads(cli.ok("queue", "update", *R, *EVERY_OPTION, "--json").stdout)

    config = cli.api_json("getQueue")
    not_config = {"enqueuedPullRequests", *OWN_QUEUE_KEYS}
    assert printed == {key: value for key, value in config.items() if key not in not_config}
    assert {key: config[key] for key in printed if key not in ("branch",)} == {
        "state": "paused",
        "mode": "parallel",
        "concurrency": 4,
        "bisectionConcurrency": 2,
        "testingTimeoutMinutes": 30,
        "pendingFailureDepth": 2,
        "canOptimisticallyMerge": True,
        "batch": True,
        "batchingMaxWaitTimeMinutes": 7,
        "batchingMinSize": 3,
        "directMergeMode": "always",
        "mergeMethod": "rebase",
        "optimizationMode": "bisection_skip_redundant_tests",
        "requiredStatuses": ["ci/build", "lint"],
        "checkStartTimeoutMinutes": 12,
        "adaptiveTestingTimeout": True,
        "stallMinutes": 20,
        "acceptSkippedChecks": True,
        "maxRetries": 2,
        "flakyFailures": "pass",
        "bisectBesideQueue": False,
        "adaptiveBatchSize": True,
        "adaptiveDepth": True,
        "notReadyTimeoutHours": 24,
        "enqueueingLabel": "ready",
        "labelCommandsEnabled": False,
        "commandsEnabled": False,
        "stateLabelsEnabled": True,
        "allowedBotSubmitters": ["renovate[bot]"],
        # Not settable from the CLI; they keep their defaults.
        "createPrsForTestingBranches": False,
        "commentsEnabled": False,
        "statusCheckEnabled": False,
        "extensionEnabled": False,
        "testBranchConstructionMode": "rename_temp_branch",
        "batchingRules": [],
    }


def test_queue_update_sends_only_the_options_given(cli: Cli, queued: GitRepo) -> None:
    cli.ok("queue", "update", *R, *EVERY_OPTION)
    before = cli.api_json("getQueue")

    output = cli.ok("queue", "update", *R, "--no-batch", "--no-optimistic-merge").stdout

    after = cli.api_json("getQueue")
    changed = {key for key in after if after[key] != before[key]}
    # Without batching the queue runs one PR per run: `chosen` follows.
    assert changed == {"batch", "canOptimisticallyMerge", "chosen"}
    assert (before["chosen"]["batchSize"], after["chosen"]["batchSize"]) == (3, 1)
    assert output.startswith("Updated the main queue of github.com/acme/widgets\n")
    assert " ".join(next(line for line in output.splitlines() if "batching" in line).split()) == (
        "batching off"
    )


def test_queue_update_clears_required_statuses(cli: Cli, queued: GitRepo) -> None:
    cli.ok("queue", "update", *R, "--required-status", "ci")
    assert cli.api_json("getQueue")["requiredStatuses"] == ["ci"]

    cli.ok("queue", "update", *R, "--clear-required-statuses")

    assert cli.api_json("getQueue")["requiredStatuses"] == []


def test_queue_update_without_options_is_a_usage_error(cli: Cli, queued: GitRepo) -> None:
    result = cli("queue", "update", *R)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: nothing to update")


def test_queue_update_refuses_a_state_clients_cannot_set(cli: Cli, queued: GitRepo) -> None:
    result = cli("queue", "update", *R, "--state", "switching_modes")
    assert result.exit_code == 2
    assert "switching_modes" in result.stderr
    assert cli.api_json("getQueue")["state"] == "running"


@pytest.mark.parametrize(
    ("command", "state"), [("pause", "paused"), ("drain", "draining"), ("resume", "running")]
)
def test_queue_state_shortcuts(cli: Cli, queued: GitRepo, command: str, state: str) -> None:
    if command == "resume":
        cli.ok("queue", "pause", *R)

    result = cli.ok("queue", command, *R)

    assert result.stdout == f"The main queue of github.com/acme/widgets is now {state}.\n"
    assert cli.api_json("getQueue")["state"] == state


# -- --json of the write commands -----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "1"),
        ("cancel", "1"),
        ("queue", "create", "--branch", "release"),
        ("queue", "delete", "--branch", "release"),
    ],
    ids=["submit", "cancel", "queue-create", "queue-delete"],
)
def test_write_commands_print_the_empty_answer_with_json(
    cli: Cli, queued: GitRepo, args: tuple[str, ...]
) -> None:
    queued.open_pr(1, {"a.txt": "a\n"})
    if args[0] == "cancel":
        cli.ok("submit", "1", *R)
    if args[:2] == ("queue", "delete"):
        cli.ok("queue", "create", *R, "--branch", "release")

    result = cli.ok(*args, *R, "--json")

    assert json.loads(result.stdout) == {}


def test_state_shortcut_json_is_the_updated_config(cli: Cli, queued: GitRepo) -> None:
    printed = json.loads(cli.ok("queue", "pause", *R, "--json").stdout)
    config = cli.api_json("getQueue")
    for key in ("enqueuedPullRequests", *OWN_QUEUE_KEYS):
        del config[key]
    assert printed == config
    assert printed["state"] == "paused"


# -- connection and usage errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [("submit", "1"), ("status", "1"), ("queue", "show"), ("queue", "pause")]
)
def test_a_missing_token_is_a_usage_error(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args, *R, env={"KEEPGREEN_TOKEN": None})

    assert result.exit_code == 2
    assert result.stderr == (
        "error: no API token: set KEEPGREEN_TOKEN or pass --token "
        "(`keepgreen token create --org SLUG` makes one)\n"
    )


def test_a_wrong_token_prints_the_servers_message(cli: Cli, queued: GitRepo) -> None:
    message = replace(cli, token="not-a-token").api_error("getQueue", 401)

    result = cli("queue", "show", *R, env={"KEEPGREEN_TOKEN": "not-a-token"})

    assert_error(result, 1, message)


def test_an_unreachable_server_is_named(cli: Cli) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"

    result = cli("status", "1", *R, env={"KEEPGREEN_URL": url})

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot connect to keepgreen at {url} ")
    assert "Traceback" not in result.stderr


def test_a_url_that_is_not_the_api_base_gets_a_hint(cli: Cli, queued: GitRepo) -> None:
    result = cli("queue", "show", *R, env={"KEEPGREEN_URL": cli.url.removesuffix("/v1")})
    assert_error(
        result, 1, "no such endpoint (KEEPGREEN_URL should be the API base, ending in /v1)"
    )


def test_url_and_token_options_override_the_environment(cli: Cli, queued: GitRepo) -> None:
    elsewhere = f"http://127.0.0.1:{free_port()}/v1"
    env = {"KEEPGREEN_URL": elsewhere, "KEEPGREEN_TOKEN": None}

    result = cli("queue", "show", *R, "--url", cli.url, "--token", cli.token, "--json", env=env)

    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["branch"] == "main"


@pytest.mark.parametrize("repo", ["acme/widgets", "github.com/acme/", "a/b/c/d"])
def test_a_repo_not_host_owner_name_is_a_usage_error(cli: Cli, repo: str) -> None:
    result = cli("status", "1", "--repo", repo)
    assert result.exit_code == 2
    assert "HOST/OWNER/NAME" in result.stderr


def test_an_invalid_url_is_a_usage_error(cli: Cli) -> None:
    result = cli("status", "1", *R, env={"KEEPGREEN_URL": "ftp://example.invalid/v1"})
    assert result.exit_code == 2
    assert result.stderr.startswith("error: invalid API URL 'ftp://example.invalid/v1'")
