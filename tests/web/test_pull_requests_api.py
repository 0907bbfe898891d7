"""Pull requests through the HTTP API (trunk-v1-api.md §2.1-§2.6, §2.12, §3.1): submit, cancel,
restart, read, list, impacted targets and testing details, on a real database and git repository.

A submit answers at once and leaves the PR unread (`not_ready`, no head): tests that need it read
and admitted run one worker pass (`worker_pass`), which also starts the run its queue has room for
(concurrency 1: the first PR is then `testing`). Other states the engine would set (merged,
failed, ...) and test runs are written directly through the unit of work.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState, StateReason, TestRunStatus
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueEntry, TestRun
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.store import add_run, find_entry, move_entry
from tests.support.wire import (
    ENQUEUED_KEYS,
    OWN_SUBMITTED_KEYS,
    READINESS_KEYS,
    SUBMITTED_KEYS,
    Api,
    assert_error,
    assert_invalid,
    get_pr,
    open_and_submit,
    parse_iso,
    pr_verb,
    queue_body,
    submit,
    submitted,
    update_queue,
    worker_pass,
)

# -- helpers ------------------------------------------------------------------------------------


def set_targets(api: Api, number: int | str, sha: str, targets: object) -> Any:
    return api.post(
        "setImpactedTargets",
        targetBranch="main",
        pr={"number": number, "sha": sha},
        impactedTargets=targets,
    )


def list_prs(api: Api, **fields: object) -> Any:
    return api.post("listPullRequests", targetBranch="main", **fields)


def move(
    container: Container,
    clock: FakeClock,
    number: int,
    state: PrState,
    reason: StateReason = StateReason.TESTS_STARTED,
) -> QueueEntry:
    """Set a PR's state now, as the engine would, with its history line."""
    return move_entry(container, number, state, clock(), reason)


def add_test_run(
    container: Container,
    clock: FakeClock,
    *,
    tested: tuple[int, ...],
    dependent: tuple[int, ...] = (),
    status: TestRunStatus = TestRunStatus.IN_PROGRESS,
) -> TestRun:
    """A main run with a known head and two required statuses, made now."""
    return add_run(
        container,
        tested=tested,
        dependent=dependent,
        at=clock(),
        status=status,
        sha="c0ffee" * 6 + "abcd",
        required_statuses=("ci/build", "ci/lint"),
    )


def details(api: Api, run_id: str) -> Any:
    return api.post("getMergeQueueTestingDetails", targetBranch="main", testRunId=run_id)


# The queues here require a status check, so that a run the worker starts stays `testing` until
# one is reported (a queue requiring none fails the PRs it would test: nothing tests them).
REQUIRED = ["ci/build"]


@pytest.fixture
def queue(api: Api) -> Api:
    """The API with a queue for `main` created, requiring a status check."""
    response = api.post("createQueue", targetBranch="main")
    assert response.status_code == 200, response.text
    update_queue(api, requiredStatuses=REQUIRED)
    return api


@pytest.fixture
def parallel(api: Api) -> Api:
    """The API with a parallel-mode queue for `main`, requiring a status check."""
    response = api.post("createQueue", targetBranch="main", mode="parallel")
    assert response.status_code == 200, response.text
    update_queue(api, requiredStatuses=REQUIRED)
    return api


# -- submitPullRequest --------------------------------------------------------------------------


def test_submit_answers_empty_object_and_defaults_to_medium(
    queue: Api, registered_repo: GitRepo
) -> None:
    """The submit answers at once: the PR is unread, `not_ready`, until the worker reads it."""
    sha = open_and_submit(queue, registered_repo, 1)
    pr = get_pr(queue, 1)
    assert (pr["state"], pr["prSha"], pr["prTitle"], pr["prAuthor"]) == ("not_ready", "", "", "")
    assert pr["explanation"]["reasonCode"] == "submitted"
    assert pr["readiness"]["gitHubMergeability"] == "unspecified"
    worker_pass(queue)
    pr = get_pr(queue, 1)
    assert (pr["state"], pr["prSha"]) == ("testing", sha)  # concurrency 1: its run started
    assert (pr["priorityValue"], pr["priorityName"]) == (100, "medium")
    assert pr["usedDefaultPriorityName"] == "medium"
    assert pr["skipTheLine"] is False
    assert pr["noBatch"] is False


@pytest.mark.parametrize(
    ("given", "value", "name"),
    [
        ("URGENT", 0, "urgent"),
        ("High", 10, "high"),
        ("medium", 100, "medium"),
        ("LoW", 200, "low"),
    ],
)
def test_submit_accepts_priority_names_in_any_case(
    queue: Api, registered_repo: GitRepo, given: str, value: int, name: str
) -> None:
    open_and_submit(queue, registered_repo, 1, priority=given)
    pr = get_pr(queue, 1)
    assert (pr["priorityValue"], pr["priorityName"]) == (value, name)
    assert pr["skipTheLine"] is (value == 0)
    assert pr["usedDefaultPriorityName"] == "medium"


@pytest.mark.parametrize(
    ("given", "name"),
    [(0, "urgent"), (10, "high"), (100, "medium"), (200, "low"), (1, "custom"), (255, "custom")],
)
def test_submit_accepts_numeric_priorities(
    queue: Api, registered_repo: GitRepo, given: int, name: str
) -> None:
    open_and_submit(queue, registered_repo, 1, priority=given)
    pr = get_pr(queue, 1)
    assert (pr["priorityValue"], pr["priorityName"]) == (given, name)
    assert pr["skipTheLine"] is (given == 0)


@pytest.mark.parametrize("given", [256, 1000, 4_294_967_295, "4294967295"])
def test_submit_takes_priorities_above_255_as_the_lowest(
    queue: Api, registered_repo: GitRepo, given: object
) -> None:
    """The interface allows any uint32 priority; keepgreen's levels end at 255, the lowest."""
    open_and_submit(queue, registered_repo, 1, priority=given)
    pr = get_pr(queue, 1)
    assert (pr["priorityValue"], pr["priorityName"], pr["skipTheLine"]) == (255, "custom", False)


@pytest.mark.parametrize("bad", [4_294_967_296, -1, "bogus", "", True, 1.5])
def test_submit_refuses_bad_priorities(queue: Api, registered_repo: GitRepo, bad: object) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    response = submit(queue, 1, priority=bad)
    assert_invalid(response, "priority")
    assert pr_verb(queue, "getSubmittedPullRequest", 1).status_code == 404


def test_skip_the_line_gives_priority_zero(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1, skipTheLine=True)
    pr = get_pr(queue, 1)
    assert (pr["priorityValue"], pr["priorityName"], pr["skipTheLine"]) == (0, "urgent", True)


def test_skip_the_line_wins_over_a_given_priority(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1, skipTheLine=True, priority="low")
    assert get_pr(queue, 1)["priorityValue"] == 0


def test_no_batch_is_recorded(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1, noBatch=True)
    open_and_submit(queue, registered_repo, 2, noBatch=False)
    assert get_pr(queue, 1)["noBatch"] is True
    assert get_pr(queue, 2)["noBatch"] is False


def test_resubmitting_a_queued_pr_updates_priority_and_no_batch_only(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    before = get_pr(queue, 1)
    clock.advance(minutes=5)
    submitted(queue, 1, priority="high", noBatch=True)
    after = get_pr(queue, 1)
    assert (after["priorityValue"], after["priorityName"], after["noBatch"]) == (10, "high", True)
    for key in ("id", "state", "stateChangedAt", "prSha", "isCurrentlySubmittedToQueue"):
        assert after[key] == before[key], key


def test_resubmitting_without_fields_keeps_priority_and_no_batch(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1, priority=42, noBatch=True)
    submitted(queue, 1)
    pr = get_pr(queue, 1)
    assert (pr["priorityValue"], pr["priorityName"], pr["noBatch"]) == (42, "custom", True)


def test_resubmitting_a_testing_pr_keeps_it_testing(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    move(container, clock, 1, PrState.TESTING)
    submitted(queue, 1, priority="urgent")
    pr = get_pr(queue, 1)
    assert (pr["state"], pr["priorityValue"]) == ("testing", 0)


def test_resubmitting_after_cancel_starts_a_new_episode_on_the_same_id(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    sha = open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    cancelled = get_pr(queue, 1)
    clock.advance(minutes=5)
    submitted(queue, 1)
    again = get_pr(queue, 1)
    assert again["id"] == cancelled["id"]
    assert (again["state"], again["prSha"]) == ("not_ready", "")  # unread again
    assert again["explanation"]["reasonCode"] == "submitted"
    assert again["isCurrentlySubmittedToQueue"] is True
    assert parse_iso(again["stateChangedAt"]) >= parse_iso(cancelled["stateChangedAt"]) + (
        timedelta(minutes=5)
    )
    worker_pass(queue)
    read = get_pr(queue, 1)
    assert (read["id"], read["state"], read["prSha"]) == (cancelled["id"], "testing", sha)


def test_submit_accepts_the_pr_number_as_a_string(queue: Api, registered_repo: GitRepo) -> None:
    sha = registered_repo.open_pr(12, {"a.txt": "a\n"})
    assert submit(queue, "12").status_code == 200
    worker_pass(queue)
    assert get_pr(queue, 12)["prSha"] == sha


def test_submit_of_an_unknown_pr_is_accepted_then_cancelled_as_not_found(queue: Api) -> None:
    """The submit does not ask git: a PR git does not have is accepted, unread, and the
    worker's pass takes it out as `pr_not_found`.
    """
    submitted(queue, 77)
    pr = get_pr(queue, 77)
    assert (pr["state"], pr["prSha"]) == ("not_ready", "")
    assert pr["explanation"]["reasonCode"] == "submitted"
    worker_pass(queue)
    pr = get_pr(queue, 77)
    assert pr["state"] == "cancelled"
    assert pr["explanation"]["reasonCode"] == "pr_not_found"
    assert pr["isCurrentlySubmittedToQueue"] is False


def test_submit_to_a_branch_without_queue_is_404(queue: Api, registered_repo: GitRepo) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    response = queue.post("submitPullRequest", targetBranch="develop", pr={"number": 1})
    assert_error(response, 404, "queue_not_found")


def test_submit_to_a_draining_queue_is_409(queue: Api, registered_repo: GitRepo) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    update_queue(queue, state="draining")
    response = submit(queue, 1)
    assert_error(response, 409, "queue_draining")
    assert pr_verb(queue, "getSubmittedPullRequest", 1).status_code == 404


def test_a_draining_queue_still_updates_prs_already_in_it(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1)
    update_queue(queue, state="draining")
    submitted(queue, 1, priority="low")
    assert get_pr(queue, 1)["priorityValue"] == 200


def test_submit_to_a_paused_queue_stays_not_ready(queue: Api, registered_repo: GitRepo) -> None:
    update_queue(queue, state="paused")
    sha = open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    pr = get_pr(queue, 1)
    assert (pr["state"], pr["prSha"]) == ("not_ready", sha)  # read, but not admitted
    assert pr["isCurrentlySubmittedToQueue"] is True
    assert pr["readiness"]["gitHubMergeability"] == "mergeable"


def test_a_pr_conflicting_with_main_is_not_ready(queue: Api, registered_repo: GitRepo) -> None:
    registered_repo.open_pr(1, {"README.md": "from the PR\n"})
    registered_repo.commit({"README.md": "from main\n"}, "main moves on")
    submitted(queue, 1)
    worker_pass(queue)
    pr = get_pr(queue, 1)
    assert pr["state"] == "not_ready"
    assert pr["readiness"]["gitHubMergeability"] == "not_mergeable"
    assert pr["readiness"]["doesBaseBranchMatch"] is True


def test_parallel_mode_waits_for_impacted_targets_of_the_head(
    parallel: Api, registered_repo: GitRepo
) -> None:
    sha = open_and_submit(parallel, registered_repo, 1)
    worker_pass(parallel)
    pr = get_pr(parallel, 1)
    assert (pr["state"], pr["prSha"]) == ("not_ready", sha)
    assert pr["readiness"]["gitHubMergeability"] == "mergeable"
    assert pr["readiness"]["requiresImpactedTargets"] is True
    assert pr["readiness"]["hasImpactedTargets"] is False
    assert set_targets(parallel, 1, sha, ["//app:lib"]).status_code == 200
    pr = get_pr(parallel, 1)
    assert pr["state"] == "testing"  # admitted, and its run started in the same decision
    assert pr["readiness"]["hasImpactedTargets"] is True


def test_a_queue_switching_to_parallel_requires_targets_of_new_prs(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1)
    update_queue(queue, mode="parallel")  # PR 1 is queued: the queue enters switching_modes
    open_and_submit(queue, registered_repo, 2)
    pr = get_pr(queue, 2)
    assert pr["state"] == "not_ready"
    assert pr["readiness"]["requiresImpactedTargets"] is True


def test_single_mode_does_not_require_impacted_targets(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1)
    readiness = get_pr(queue, 1)["readiness"]
    assert readiness["requiresImpactedTargets"] is False
    assert readiness["hasImpactedTargets"] is False


def test_targets_uploaded_before_submit_admit_at_once(
    parallel: Api, registered_repo: GitRepo
) -> None:
    sha = registered_repo.open_pr(1, {"a.txt": "a\n"})
    assert set_targets(parallel, 1, sha, "ALL").status_code == 200
    submitted(parallel, 1)
    assert get_pr(parallel, 1)["state"] == "not_ready"  # unread: its head is not known yet
    worker_pass(parallel)  # reads the head, finds its targets and admits it in the one pass
    pr = get_pr(parallel, 1)
    assert (pr["state"], pr["prSha"]) == ("testing", sha)
    assert pr["readiness"]["hasImpactedTargets"] is True


def test_resubmitting_a_merged_pr_with_the_same_head_is_409(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    move(container, clock, 1, PrState.MERGED, StateReason.MERGED_BY_QUEUE)
    response = submit(queue, 1)
    assert_error(response, 409, "already_merged")
    assert get_pr(queue, 1)["state"] == "merged"


def test_a_merged_pr_with_a_new_head_may_be_submitted_again(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    first_id = get_pr(queue, 1)["id"]
    move(container, clock, 1, PrState.MERGED, StateReason.MERGED_BY_QUEUE)
    new_sha = registered_repo.open_pr(1, {"b.txt": "b\n"})
    submitted(queue, 1)
    worker_pass(queue)
    pr = get_pr(queue, 1)
    assert (pr["state"], pr["prSha"], pr["id"]) == ("testing", new_sha, first_id)


def test_a_failed_pr_may_be_resubmitted(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    move(container, clock, 1, PrState.FAILED, StateReason.TESTS_FAILED)
    submitted(queue, 1)
    assert get_pr(queue, 1)["state"] == "not_ready"
    worker_pass(queue)
    assert get_pr(queue, 1)["state"] == "testing"


# -- cancelPullRequest --------------------------------------------------------------------------


def test_cancel_answers_empty_object_and_takes_the_pr_out(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1)
    response = pr_verb(queue, "cancelPullRequest", 1)
    assert response.status_code == 200
    assert response.json() == {}
    pr = get_pr(queue, 1)
    assert pr["state"] == "cancelled"
    assert pr["isCurrentlySubmittedToQueue"] is False


def test_cancelling_twice_is_404(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1)
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 404


def test_cancelling_a_never_submitted_pr_is_404(queue: Api, registered_repo: GitRepo) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 404


def test_a_not_ready_pr_can_be_cancelled(queue: Api, registered_repo: GitRepo) -> None:
    update_queue(queue, state="paused")
    open_and_submit(queue, registered_repo, 1)
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    assert get_pr(queue, 1)["state"] == "cancelled"


def test_a_merged_pr_cannot_be_cancelled(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    move(container, clock, 1, PrState.MERGED, StateReason.MERGED_BY_QUEUE)
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 404
    assert get_pr(queue, 1)["state"] == "merged"


# -- restartTestsOnPullRequest ------------------------------------------------------------------


def test_restarting_a_pending_pr_is_409(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1)
    open_and_submit(queue, registered_repo, 2)
    worker_pass(queue)  # concurrency 1: PR 1 testing, PR 2 pending behind it
    assert get_pr(queue, 2)["state"] == "pending"
    response = pr_verb(queue, "restartTestsOnPullRequest", 2)
    assert_error(response, 409, "not_restartable")
    assert get_pr(queue, 2)["state"] == "pending"


@pytest.mark.parametrize("state", [PrState.TESTING, PrState.PENDING_FAILURE])
def test_restarting_a_tested_pr_puts_it_back_to_pending(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock, state: PrState
) -> None:
    open_and_submit(queue, registered_repo, 1)
    moved = move(container, clock, 1, state)
    clock.advance(minutes=1)
    response = pr_verb(queue, "restartTestsOnPullRequest", 1)
    assert response.status_code == 200
    assert response.json() == {}
    pr = get_pr(queue, 1)
    assert pr["state"] == "pending"
    assert parse_iso(pr["stateChangedAt"]) > moved.state_changed_at


def test_restarting_an_unknown_pr_is_404(queue: Api) -> None:
    assert pr_verb(queue, "restartTestsOnPullRequest", 9).status_code == 404


def test_restarting_a_cancelled_pr_is_404(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1)
    pr_verb(queue, "cancelPullRequest", 1)
    assert pr_verb(queue, "restartTestsOnPullRequest", 1).status_code == 404


# -- getSubmittedPullRequest --------------------------------------------------------------------


def test_get_submitted_pull_request_has_the_documented_shape(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    sha = registered_repo.open_pr(
        7, {"x.txt": "x\n"}, title="Teach the widget to sing", author="Grace Hopper"
    )
    before = clock.now
    submitted(queue, 7)
    after = clock.now
    unread = get_pr(queue, 7)
    assert set(unread) == SUBMITTED_KEYS | OWN_SUBMITTED_KEYS
    assert before < parse_iso(unread["stateChangedAt"]) <= after
    assert (unread["state"], unread["prSha"], unread["prTitle"], unread["prAuthor"]) == (
        "not_ready",
        "",
        "",
        "",
    )
    assert unread["readiness"]["gitHubMergeability"] == "unspecified"
    assert unread["explanation"]["reasonCode"] == "submitted"
    before = clock.now
    worker_pass(queue)
    after = clock.now
    pr = get_pr(queue, 7)
    assert set(pr) == SUBMITTED_KEYS | OWN_SUBMITTED_KEYS
    assert (pr["id"], pr["state"]) == (unread["id"], "testing")
    assert pr["incidents"] == []  # nothing went wrong with the git server
    assert set(pr["readiness"]) == READINESS_KEYS
    uuid.UUID(pr["id"])
    assert before < parse_iso(pr["stateChangedAt"]) <= after
    assert (pr["prNumber"], pr["prSha"], pr["prBaseBranch"]) == (7, sha, "main")
    assert (pr["prTitle"], pr["prAuthor"]) == ("Teach the widget to sing", "Grace Hopper")
    assert pr["readiness"] == {
        "hasImpactedTargets": False,
        "requiresImpactedTargets": False,
        "doesBaseBranchMatch": True,
        "gitHubMergeability": "mergeable",
    }
    assert (pr["forceEnqueued"], pr["isCurrentlySubmittedToQueue"]) == (False, True)
    assert pr["verifiedByTestRun"] is None


def test_get_of_a_never_submitted_pr_is_404(queue: Api, registered_repo: GitRepo) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    response = pr_verb(queue, "getSubmittedPullRequest", 1)
    assert_error(response, 404, "pull_request_not_found")


def test_get_is_scoped_to_the_queue(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 1)
    assert queue.post("createQueue", targetBranch="release").status_code == 200
    response = queue.post("getSubmittedPullRequest", targetBranch="release", pr={"number": 1})
    assert_error(response, 404, "pull_request_not_found")


def test_another_org_cannot_read_the_pr(
    queue: Api, registered_repo: GitRepo, client: TestClient, other_token: str
) -> None:
    open_and_submit(queue, registered_repo, 1)
    response = client.post(
        "/v1/getSubmittedPullRequest",
        json=queue_body(pr={"number": 1}),
        headers={"x-api-token": other_token},
    )
    assert response.status_code == 404


# -- listPullRequests ---------------------------------------------------------------------------


def numbers_of(body: dict[str, Any]) -> list[int]:
    return [pr["prNumber"] for pr in body["pullRequests"]]


def listed(api: Api, **fields: object) -> dict[str, Any]:
    response = list_prs(api, **fields)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def four_states(api: Api, repo: GitRepo) -> None:
    """PR 1 testing, PR 2 not_ready (conflicts with main), PR 3 cancelled, PR 4 pending
    (the queue tests one PR at a time).
    """
    open_and_submit(api, repo, 1)
    repo.open_pr(2, {"README.md": "from the PR\n"})
    repo.commit({"README.md": "from main\n"}, "main moves on")
    submitted(api, 2)
    open_and_submit(api, repo, 3)
    open_and_submit(api, repo, 4)
    worker_pass(api)
    assert pr_verb(api, "cancelPullRequest", 3).status_code == 200


def test_list_shows_every_state_in_submission_order(queue: Api, registered_repo: GitRepo) -> None:
    four_states(queue, registered_repo)
    body = listed(queue)
    assert [(pr["prNumber"], pr["state"]) for pr in body["pullRequests"]] == [
        (1, "testing"),
        (2, "not_ready"),
        (3, "cancelled"),
        (4, "pending"),
    ]
    assert not body.get("nextCursor")
    assert set(body["pullRequests"][0]) == ENQUEUED_KEYS


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("Testing", [1]),
        ("PENDING", [4]),
        ("Not_Ready", [2]),
        ("cancelled", [3]),
        ("merged", []),
    ],
)
def test_list_filters_by_state_in_any_case(
    queue: Api, registered_repo: GitRepo, state: str, expected: list[int]
) -> None:
    four_states(queue, registered_repo)
    assert numbers_of(listed(queue, state=state)) == expected


def test_list_refuses_an_unknown_state(queue: Api) -> None:
    assert list_prs(queue, state="waiting").status_code == 400


def test_list_pages_walk_to_the_end_without_gaps_or_duplicates(
    queue: Api, registered_repo: GitRepo
) -> None:
    for number in range(1, 8):
        open_and_submit(queue, registered_repo, number)
    seen: list[int] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(10):
        body = listed(queue, take=3, **({} if cursor is None else {"cursor": cursor}))
        seen += numbers_of(body)
        sizes.append(len(body["pullRequests"]))
        cursor = body.get("nextCursor")
        if not cursor:
            break
    assert seen == list(range(1, 8))
    assert sizes == [3, 3, 1]


def test_list_pages_combine_with_a_state_filter(queue: Api, registered_repo: GitRepo) -> None:
    for number in range(1, 7):
        open_and_submit(queue, registered_repo, number)
    for number in (2, 4, 5):
        pr_verb(queue, "cancelPullRequest", number)
    first = listed(queue, state="cancelled", take=2)
    assert numbers_of(first) == [2, 4]
    rest = listed(queue, state="cancelled", take=2, cursor=first["nextCursor"])
    assert numbers_of(rest) == [5]
    assert not rest.get("nextCursor")


def test_list_takes_50_by_default(
    queue: Api, registered_repo: GitRepo, container: Container
) -> None:
    open_and_submit(queue, registered_repo, 1)
    with container.unit_of_work() as uow:  # 50 more entries, without 50 git round trips
        source = find_entry(uow, 1)
        for number in range(2, 52):
            position = uow.queues.next_position(source.queue_id)
            uow.entries.add(
                replace(
                    source, id=PullRequestId(str(uuid.uuid4())), number=number, position=position
                )
            )
        uow.commit()
    first = listed(queue)
    assert numbers_of(first) == list(range(1, 51))
    assert first["nextCursor"]
    rest = listed(queue, cursor=first["nextCursor"])
    assert numbers_of(rest) == [51]
    assert not rest.get("nextCursor")


def test_list_take_equal_to_total_has_no_next_page(queue: Api, registered_repo: GitRepo) -> None:
    for number in (1, 2):
        open_and_submit(queue, registered_repo, number)
    body = listed(queue, take=2)
    assert numbers_of(body) == [1, 2]
    assert not body.get("nextCursor")


def test_list_since_returns_prs_concluded_at_or_after_it(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    for number in range(1, 5):
        open_and_submit(queue, registered_repo, number)
    pr_verb(queue, "cancelPullRequest", 1)  # concluded before `since`
    clock.advance(minutes=10)
    pr_verb(queue, "cancelPullRequest", 2)
    move(container, clock, 3, PrState.MERGED, StateReason.MERGED_BY_QUEUE)
    # PR 4 stays pending: not concluded.
    since = get_pr(queue, 2)["stateChangedAt"]
    assert numbers_of(listed(queue, since=since)) == [2, 3]
    later = parse_iso(since) + timedelta(milliseconds=1)
    assert numbers_of(listed(queue, since=later.isoformat())) == [3]
    earlier = parse_iso(since) - timedelta(hours=1)
    assert numbers_of(listed(queue, since=earlier.isoformat())) == [1, 2, 3]


def test_list_since_includes_failed_prs(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    start = clock.now
    move(container, clock, 1, PrState.FAILED, StateReason.TESTS_FAILED)
    assert numbers_of(listed(queue, since=start.isoformat())) == [1]


def test_list_with_a_malformed_cursor_is_400(queue: Api) -> None:
    assert list_prs(queue, cursor="x" * 65).status_code == 400
    assert list_prs(queue, cursor=5).status_code == 400


def test_list_with_a_cursor_naming_no_pr_of_the_queue_is_refused(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1)
    response = list_prs(queue, cursor=str(uuid.uuid4()))
    assert response.status_code in (400, 404), response.text
    assert "cursor" in response.json()["error"]["message"]


def test_list_with_a_nul_in_the_cursor_is_refused_not_a_crash(queue: Api) -> None:
    # PostgreSQL text cannot hold NUL: the cursor must be refused before it reaches the db.
    response = list_prs(queue, cursor="abc\x00def")
    assert response.status_code in (400, 404), response.text


@pytest.mark.parametrize("take", [0, 101, -1, "10"])
def test_list_refuses_take_out_of_1_to_100(queue: Api, take: object) -> None:
    response = list_prs(queue, take=take)
    assert_invalid(response, "take")


def test_list_refuses_a_malformed_since(queue: Api) -> None:
    assert list_prs(queue, since="yesterday").status_code == 400


# -- setImpactedTargets -------------------------------------------------------------------------


@pytest.mark.parametrize("targets", [["//a:b", "//c:d"], "ALL", "IMPACTS_ALL", []])
def test_set_impacted_targets_accepts_lists_and_all(
    queue: Api, registered_repo: GitRepo, targets: object
) -> None:
    sha = registered_repo.open_pr(5, {"a.txt": "a\n"})
    response = set_targets(queue, 5, sha, targets)
    assert response.status_code == 200, response.text
    assert response.json() == {}


def test_targets_for_an_old_head_do_not_make_the_current_head_ready(
    parallel: Api, registered_repo: GitRepo
) -> None:
    old = registered_repo.open_pr(5, {"a.txt": "a\n"})
    new = registered_repo.open_pr(5, {"a.txt": "a, pushed again\n"})
    submitted(parallel, 5)
    worker_pass(parallel)
    assert get_pr(parallel, 5)["prSha"] == new
    assert set_targets(parallel, 5, old, ["//a"]).status_code == 200
    pr = get_pr(parallel, 5)
    assert (pr["state"], pr["readiness"]["hasImpactedTargets"]) == ("not_ready", False)
    assert set_targets(parallel, 5, new, ["//a"]).status_code == 200
    pr = get_pr(parallel, 5)
    assert (pr["state"], pr["readiness"]["hasImpactedTargets"]) == ("testing", True)


def test_a_sha_in_upper_case_names_the_same_head(parallel: Api, registered_repo: GitRepo) -> None:
    sha = open_and_submit(parallel, registered_repo, 5)
    worker_pass(parallel)
    assert get_pr(parallel, 5)["state"] == "not_ready"  # read; waits for its targets
    assert set_targets(parallel, 5, sha.upper(), []).status_code == 200
    assert get_pr(parallel, 5)["state"] == "testing"  # admitted and its run started


def test_pr_number_as_a_string_is_accepted(parallel: Api, registered_repo: GitRepo) -> None:
    sha = open_and_submit(parallel, registered_repo, 5)
    worker_pass(parallel)
    assert get_pr(parallel, 5)["state"] == "not_ready"  # read; waits for its targets
    assert set_targets(parallel, "5", sha, "ALL").status_code == 200
    assert get_pr(parallel, 5)["state"] == "testing"  # admitted and its run started


def test_the_last_upload_wins(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    sha = open_and_submit(queue, registered_repo, 5)
    worker_pass(queue)
    assert set_targets(queue, 5, sha, ["//a", "//b"]).status_code == 200
    assert set_targets(queue, 5, sha, ["//c"]).status_code == 200
    run = add_test_run(container, clock, tested=(5,))
    body = details(queue, run.id).json()
    assert body["impactedTargets"] == ["//c"]
    assert set_targets(queue, 5, sha, "ALL").status_code == 200
    assert details(queue, run.id).json()["impactedTargets"] == ["ALL"]


@pytest.mark.parametrize("sha", ["not-a-sha", "xyz123", "12 34", "abc", ""])
def test_set_impacted_targets_refuses_a_non_hex_sha(
    queue: Api, registered_repo: GitRepo, sha: str
) -> None:
    response = set_targets(queue, 5, sha, "ALL")
    assert_invalid(response, "sha")


@pytest.mark.parametrize("targets", [5, ["a", 1], "SOME", None, {"a": 1}])
def test_set_impacted_targets_refuses_bad_targets(
    queue: Api, registered_repo: GitRepo, targets: object
) -> None:
    sha = registered_repo.open_pr(5, {"a.txt": "a\n"})
    response = set_targets(queue, 5, sha, targets)
    assert_invalid(response, "impactedTargets")


def test_set_impacted_targets_refuses_pr_number_zero(queue: Api, registered_repo: GitRepo) -> None:
    sha = registered_repo.open_pr(5, {"a.txt": "a\n"})
    assert set_targets(queue, 0, sha, "ALL").status_code == 400


def test_the_largest_pr_number_is_stored(queue: Api, registered_repo: GitRepo) -> None:
    largest = 4_294_967_295
    assert set_targets(queue, largest, "ab" * 20, ["//a"]).status_code == 200
    assert set_targets(queue, str(largest), "ab" * 20, "ALL").status_code == 200
    assert pr_verb(queue, "getSubmittedPullRequest", largest).status_code == 404
    assert set_targets(queue, largest + 1, "ab" * 20, "ALL").status_code == 400


def test_set_impacted_targets_on_an_unknown_queue_is_404(
    api: Api, registered_repo: GitRepo
) -> None:
    sha = registered_repo.open_pr(5, {"a.txt": "a\n"})
    response = set_targets(api, 5, sha, "ALL")
    assert_error(response, 404, "queue_not_found")


# -- getMergeQueueTestingDetails ----------------------------------------------------------------


def set_status(api: Api, sha: str, context: str, state: str, url: str | None = None) -> None:
    body: dict[str, object] = {"sha": sha, "context": context, "state": state}
    if url is not None:
        body["targetUrl"] = url
    response = api.post("setCommitStatus", body)
    assert response.status_code == 200, response.text


def test_testing_details_describe_the_run(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    open_and_submit(queue, registered_repo, 2)
    open_and_submit(queue, registered_repo, 3)
    worker_pass(queue)  # reads their titles
    move(container, clock, 2, PrState.TESTING)
    move(container, clock, 3, PrState.TESTING)
    run = add_test_run(container, clock, tested=(2, 3), dependent=(1,))
    assert run.sha is not None
    set_status(queue, run.sha, "ci/build", "success", url="https://ci.example/1")
    set_status(queue, run.sha, "ci/lint", "PENDING")
    set_status(queue, "ab" * 20, "ci/other-commit", "failure")

    response = details(queue, run.id)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["testBranch"] == f"trunk-merge/pr-2/{run.id}"
    assert body["testBranchSha"] == run.sha
    assert parse_iso(body["createdAt"]) == run.created_at
    assert body["status"] == "in_progress"
    assert body["requiredStatuses"] == ["ci/build", "ci/lint"]
    # `url` is always there, a string (strict clients require it): "" for a status without.
    assert sorted((s["context"], s["state"], s["url"]) for s in body["statusChecks"]) == [
        ("ci/build", "SUCCESS", "https://ci.example/1"),
        ("ci/lint", "PENDING", ""),
    ]
    assert body["testedPullRequests"] == [
        {"prNumber": 2, "prUrl": "https://github.com/acme/widgets/pull/2", "title": "Change 2"},
        {"prNumber": 3, "prUrl": "https://github.com/acme/widgets/pull/3", "title": "Change 3"},
    ]
    assert body["dependentPrs"] == [1]
    assert "impactedTargets" not in body
    assert "impactedTargetsForTestedPrs" not in body
    assert body["checkSuites"] == []


@pytest.mark.parametrize(
    ("status", "answered"),
    [
        (TestRunStatus.QUEUED, "in_progress"),  # a bisection run waiting for its slot
        (TestRunStatus.IN_PROGRESS, "in_progress"),
        (TestRunStatus.SUCCEEDED, "succeeded"),
        (TestRunStatus.FAILED, "failed"),
        (TestRunStatus.CANCELLED, "cancelled"),
    ],
)
def test_testing_details_status_is_one_of_the_interfaces(
    queue: Api,
    registered_repo: GitRepo,
    container: Container,
    clock: FakeClock,
    status: TestRunStatus,
    answered: str,
) -> None:
    open_and_submit(queue, registered_repo, 1)
    run = add_test_run(container, clock, tested=(1,), status=status)
    assert details(queue, run.id).json()["status"] == answered


def test_testing_details_follow_status_updates(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    run = add_test_run(container, clock, tested=(1,))
    assert run.sha is not None
    assert details(queue, run.id).json()["statusChecks"] == []
    set_status(queue, run.sha, "ci/build", "pending")
    set_status(queue, run.sha.upper(), "ci/build", "error")
    checks = details(queue, run.id).json()["statusChecks"]
    assert [(c["context"], c["state"]) for c in checks] == [("ci/build", "ERROR")]


def test_testing_details_report_impacted_targets_once_uploaded(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    dependent_sha = open_and_submit(queue, registered_repo, 1)
    tested_sha = open_and_submit(queue, registered_repo, 2)
    worker_pass(queue)
    run = add_test_run(container, clock, tested=(2,), dependent=(1,))
    set_targets(queue, 1, dependent_sha, ["//lib:a", "//lib:b"])
    set_targets(queue, 2, tested_sha, ["//app:c", "//lib:b"])
    body = details(queue, run.id).json()
    assert body["impactedTargets"] == ["//app:c", "//lib:a", "//lib:b"]
    assert body["impactedTargetsForTestedPrs"] == ["//app:c", "//lib:b"]


def test_testing_details_name_a_finished_run_status(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    run = add_test_run(container, clock, tested=(1,), status=TestRunStatus.FAILED)
    assert details(queue, run.id).json()["status"] == "failed"


def test_testing_details_of_an_unknown_run_are_404(queue: Api) -> None:
    response = details(queue, str(uuid.uuid4()))
    assert_error(response, 404, "test_run_not_found")


def test_a_run_id_with_a_nul_is_refused_not_a_crash(queue: Api) -> None:
    # PostgreSQL text cannot hold NUL: the id must be refused before it reaches the db.
    response = details(queue, "run\x00id")
    assert response.status_code in (400, 404), response.text
