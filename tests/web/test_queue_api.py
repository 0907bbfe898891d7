"""createQueue, updateQueue, getQueue and deleteQueue through the HTTP API (trunk-v1-api.md
§2.7-§2.10 and §5), on a real database and a real git repository.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from keepgreen.bootstrap import Container
from keepgreen.web.schemas import UpdateQueueRequest
from tests.support.gitrepo import GitRepo
from tests.support.wire import (
    CONFIG_KEYS,
    ENQUEUED_KEYS,
    ISO_MILLIS_Z,
    OWN_CONFIG_KEYS,
    OWN_QUEUE_KEYS,
    REPO,
    REPO_JSON,
    Api,
    assert_error,
    assert_invalid,
    enqueued_numbers,
    get_pr,
    get_queue,
    open_and_submit,
    pr_verb,
    submitted,
    update_queue,
    worker_pass,
)

# -- createQueue ---------------------------------------------------------------------------------


def test_create_queue_answers_empty_object(api: Api) -> None:
    response = api.post("createQueue", targetBranch="main")
    assert response.status_code == 200
    assert response.json() == {}


def test_create_queue_defaults_to_running_single_with_concurrency_one(queue: Api) -> None:
    body = get_queue(queue)
    assert (body["state"], body["mode"], body["concurrency"]) == ("running", "single", 1)
    assert body["branch"] == "main"
    assert body["enqueuedPullRequests"] == []
    assert body["commandsEnabled"] is True  # comment commands act, as on the hosted service


def test_create_queue_takes_mode_and_concurrency(api: Api) -> None:
    response = api.post("createQueue", targetBranch="main", mode="parallel", concurrency=7)
    assert response.status_code == 200, response.text
    body = get_queue(api)
    assert (body["state"], body["mode"], body["concurrency"]) == ("running", "parallel", 7)


def test_create_queue_takes_mode_in_any_case(api: Api) -> None:
    assert api.post("createQueue", targetBranch="main", mode="PaRaLLeL").status_code == 200
    assert get_queue(api)["mode"] == "parallel"


def test_create_queue_twice_is_409_queue_exists(queue: Api) -> None:
    response = queue.post("createQueue", targetBranch="main", concurrency=3)
    message = assert_error(response, 409, "queue_exists")
    assert '"main"' in message
    assert get_queue(queue)["concurrency"] == 1  # the first queue is untouched


def test_queues_of_two_branches_are_independent(queue: Api) -> None:
    assert queue.post("createQueue", targetBranch="release/1.0", concurrency=2).status_code == 200
    update_queue(queue, concurrency=5)
    assert get_queue(queue, "release/1.0")["concurrency"] == 2
    assert get_queue(queue, "release/1.0")["branch"] == "release/1.0"
    assert get_queue(queue)["concurrency"] == 5


def test_create_queue_for_unknown_repo_is_404(api: Api) -> None:
    response = api.post(
        "createQueue", targetBranch="main", repo={**REPO_JSON, "name": "no-such-repo"}
    )
    assert_error(response, 404, "repository_not_found")


@pytest.mark.parametrize(
    "branch", ["a..b", "", "-main", "main.lock", "with space", "ends/", "x~1", "a//b", "@", ".hid"]
)
def test_create_queue_refuses_a_bad_target_branch(api: Api, branch: str) -> None:
    response = api.post("createQueue", targetBranch=branch)
    assert_invalid(response, "targetBranch")
    assert api.post("getQueue", targetBranch=branch).status_code in (400, 404)


def test_create_queue_ignores_settings_it_does_not_take(api: Api) -> None:
    response = api.post("createQueue", targetBranch="main", batch=True, state="paused")
    assert response.status_code == 200, response.text
    body = get_queue(api)
    assert (body["batch"], body["state"]) == (False, "running")


# -- updateQueue ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("state", "paused"),
        ("state", "draining"),
        ("mode", "parallel"),
        ("concurrency", 12),
        ("bisectionConcurrency", 3),
        ("testingTimeoutMinutes", 45),
        ("testingTimeoutMinutes", 0),
        ("pendingFailureDepth", 2),
        ("canOptimisticallyMerge", True),
        ("batch", True),
        ("batchingMaxWaitTimeMinutes", 15),
        ("batchingMinSize", 6),
        ("createPrsForTestingBranches", True),
        ("commentsEnabled", True),
        ("commandsEnabled", False),
        ("statusCheckEnabled", True),
        ("directMergeMode", "always"),
        ("optimizationMode", "bisection_skip_redundant_tests"),
        ("mergeMethod", "merge_commit"),
        ("mergeMethod", "rebase"),
        ("requiredStatuses", ["ci/build", "ci/test"]),
        ("checkStartTimeoutMinutes", 0),
        ("checkStartTimeoutMinutes", 12),
        ("adaptiveTestingTimeout", True),
        ("stallMinutes", 15),
        ("acceptSkippedChecks", True),
        ("maxRetries", 2),
        ("flakyFailures", "pass"),
        ("flakyFailures", "off"),
        ("bisectBesideQueue", False),
        ("adaptiveBatchSize", True),
        ("adaptiveDepth", True),
        ("notReadyTimeoutHours", 24),
        ("enqueueingLabel", "ready-to-merge"),
        ("labelCommandsEnabled", False),
        ("allowedBotSubmitters", ["renovate[bot]", "dependabot[bot]"]),
        ("stateLabelsEnabled", True),
        ("extensionEnabled", True),
        ("testBranchConstructionMode", "push_new_branch_from_temp"),
        ("batchingRules", [{"label": "deps", "maxBatchSize": 3}, {"path": "docs/**"}]),
    ],
)
def test_update_queue_sets_a_field_and_changes_nothing_else(
    queue: Api, field: str, value: object
) -> None:
    before = get_queue(queue)
    assert before[field] != value  # the update is a real change
    answered = update_queue(queue, **{field: value})
    assert answered == {**{k: before[k] for k in CONFIG_KEYS | OWN_CONFIG_KEYS}, field: value}
    after = get_queue(queue)
    # What the queue runs by now follows some settings (batch, concurrency): not compared here.
    after.pop("chosen"), before.pop("chosen")
    assert after == {**before, field: value}


def test_update_queue_answers_the_whole_config_without_pull_requests(queue: Api) -> None:
    answered = update_queue(queue, concurrency=2)
    assert set(answered) == CONFIG_KEYS | OWN_CONFIG_KEYS
    assert "enqueuedPullRequests" not in answered


def test_update_queue_with_no_fields_changes_nothing(queue: Api) -> None:
    before = get_queue(queue)
    assert update_queue(queue) == {k: before[k] for k in CONFIG_KEYS | OWN_CONFIG_KEYS}
    assert get_queue(queue) == before


def test_update_queue_sets_several_fields_at_once(queue: Api) -> None:
    answered = update_queue(
        queue, concurrency=4, batch=True, batchingMinSize=2, mergeMethod="merge_commit"
    )
    assert (answered["concurrency"], answered["batch"]) == (4, True)
    assert (answered["batchingMinSize"], answered["mergeMethod"]) == (2, "merge_commit")


def test_update_queue_omitted_fields_keep_earlier_updates(queue: Api) -> None:
    update_queue(queue, concurrency=3, requiredStatuses=["ci"], canOptimisticallyMerge=True)
    answered = update_queue(queue, batch=True)
    assert answered["concurrency"] == 3
    assert answered["requiredStatuses"] == ["ci"]
    assert answered["canOptimisticallyMerge"] is True
    assert answered["batch"] is True


def test_update_queue_can_turn_flags_back_off(queue: Api) -> None:
    update_queue(queue, batch=True, commentsEnabled=True)
    answered = update_queue(queue, batch=False, commentsEnabled=False)
    assert (answered["batch"], answered["commentsEnabled"]) == (False, False)


def test_update_queue_accepts_pending_failure_depth_zero(queue: Api) -> None:
    update_queue(queue, pendingFailureDepth=3)
    assert update_queue(queue, pendingFailureDepth=0)["pendingFailureDepth"] == 0
    assert get_queue(queue)["pendingFailureDepth"] == 0


def test_update_queue_state_back_to_running(queue: Api) -> None:
    update_queue(queue, state="paused")
    assert update_queue(queue, state="running")["state"] == "running"


@pytest.mark.parametrize("value", ["switching_modes", "SWITCHING_MODES"])
def test_update_queue_cannot_set_switching_modes(queue: Api, value: str) -> None:
    response = queue.post("updateQueue", targetBranch="main", state=value)
    assert_invalid(response, "state")
    assert get_queue(queue)["state"] == "running"


def test_required_statuses_default_to_an_empty_list(queue: Api) -> None:
    assert get_queue(queue)["requiredStatuses"] == []


def test_update_queue_empty_required_statuses_require_none_of_the_queues_own(
    queue: Api, container: Container, token: str
) -> None:
    """Trunk's Terraform provider sends `[]` (with `deleteRequiredStatuses: true`) for a queue
    that sets none, and reads the answer back: it must be `[]`, and the queue then falls back
    to the branch's protection as with `deleteRequiredStatuses` (its stored list is unset).
    """
    update_queue(queue, requiredStatuses=["ci/build"])
    assert update_queue(queue, requiredStatuses=[])["requiredStatuses"] == []
    assert get_queue(queue)["requiredStatuses"] == []
    update_queue(queue, requiredStatuses=["ci/build"])
    sent = update_queue(queue, requiredStatuses=[], deleteRequiredStatuses=True)
    assert sent["requiredStatuses"] == []
    org = container.admin.authenticate(token)
    assert org is not None
    assert container.queues.get(org, REPO, "main").queue.config.required_statuses is None


def test_update_queue_required_statuses_replace_the_previous_list(queue: Api) -> None:
    update_queue(queue, requiredStatuses=["a", "b"])
    assert update_queue(queue, requiredStatuses=["c"])["requiredStatuses"] == ["c"]


def test_update_queue_delete_required_statuses_clears_them(queue: Api) -> None:
    update_queue(queue, requiredStatuses=["ci/build", "ci/test"])
    assert update_queue(queue, deleteRequiredStatuses=True)["requiredStatuses"] == []
    assert get_queue(queue)["requiredStatuses"] == []


def test_update_queue_delete_required_statuses_false_keeps_them(queue: Api) -> None:
    update_queue(queue, requiredStatuses=["ci/build"])
    assert update_queue(queue, deleteRequiredStatuses=False)["requiredStatuses"] == ["ci/build"]


@pytest.mark.parametrize(
    ("field", "sent", "answered"),
    [
        ("state", "PAUSED", "paused"),
        ("state", "Draining", "draining"),
        ("mode", "PARALLEL", "parallel"),
        ("directMergeMode", "ALWAYS", "always"),
        ("optimizationMode", "Bisection_Skip_Redundant_Tests", "bisection_skip_redundant_tests"),
        ("mergeMethod", "MERGE_COMMIT", "merge_commit"),
        ("mergeMethod", "Rebase", "rebase"),
    ],
)
def test_update_queue_takes_enums_in_any_case_and_answers_lowercase(
    queue: Api, field: str, sent: str, answered: str
) -> None:
    assert update_queue(queue, **{field: sent})[field] == answered
    assert get_queue(queue)[field] == answered


def test_update_queue_of_unknown_queue_is_404(queue: Api) -> None:
    response = queue.post("updateQueue", targetBranch="develop", concurrency=2)
    assert_error(response, 404, "queue_not_found")


def test_update_queue_of_unknown_repo_is_404(queue: Api) -> None:
    response = queue.post(
        "updateQueue", targetBranch="main", concurrency=2, repo={**REPO_JSON, "owner": "nobody"}
    )
    assert_error(response, 404, "repository_not_found")


def test_mode_change_on_an_empty_queue_is_immediate(queue: Api) -> None:
    answered = update_queue(queue, mode="parallel")
    assert (answered["state"], answered["mode"]) == ("running", "parallel")
    assert update_queue(queue, mode="single")["mode"] == "single"


def require_ci(queue: Api) -> None:
    """`main` requires the `ci` check, which nothing here reports: a run the worker starts stays
    open and its PRs `testing` (with no check required, the queue would fail the PR at once).
    """
    update_queue(queue, requiredStatuses=["ci"])


def pending_prs(queue: Api, repo: GitRepo, *numbers: int) -> None:
    """PRs `numbers` submitted, read and admitted by the worker's pass, and left `pending`: the
    queue batches and waits for a batch of more PRs than these before it starts a run.
    """
    require_ci(queue)
    update_queue(queue, batch=True, batchingMinSize=len(numbers) + 1, batchingMaxWaitTimeMinutes=60)
    for number in numbers:
        open_and_submit(queue, repo, number)
    worker_pass(queue)
    assert [get_pr(queue, number)["state"] for number in numbers] == ["pending"] * len(numbers)


def test_mode_change_with_a_pending_pr_switches_modes(queue: Api, registered_repo: GitRepo) -> None:
    pending_prs(queue, registered_repo, 1)
    answered = update_queue(queue, mode="parallel")
    assert answered["state"] == "switching_modes"
    assert answered["mode"] == "single"  # the new mode applies once the queue has emptied
    assert get_queue(queue)["state"] == "switching_modes"


def test_same_mode_with_a_pending_pr_does_not_switch(queue: Api, registered_repo: GitRepo) -> None:
    pending_prs(queue, registered_repo, 1)
    assert update_queue(queue, mode="SINGLE")["state"] == "running"


@pytest.mark.parametrize(
    "fields",
    [{"concurrency": 4}, {"mode": "single"}, {"state": "paused"}, {"requiredStatuses": ["ci"]}],
)
def test_update_queue_while_switching_modes_is_409(
    queue: Api, registered_repo: GitRepo, fields: dict[str, object]
) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    assert get_pr(queue, 1)["state"] == "testing"
    before = update_queue(queue, mode="parallel")
    assert before["state"] == "switching_modes"
    response = queue.post("updateQueue", targetBranch="main", **fields)
    assert_error(response, 409, "mode_change_in_progress")
    assert {
        k: v for k, v in get_queue(queue).items() if k in CONFIG_KEYS | OWN_CONFIG_KEYS
    } == before


def test_mode_change_with_only_a_not_ready_pr_is_immediate(
    queue: Api, registered_repo: GitRepo
) -> None:
    update_queue(queue, state="paused")
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)  # reads PR 1, but a paused queue does not admit it
    assert get_pr(queue, 1)["state"] == "not_ready"
    answered = update_queue(queue, mode="parallel")
    assert (answered["state"], answered["mode"]) == ("paused", "parallel")


def test_mode_change_after_the_pr_was_cancelled_is_immediate(
    queue: Api, registered_repo: GitRepo
) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    assert get_pr(queue, 1)["state"] == "testing"
    cancel = pr_verb(queue, "cancelPullRequest", 1)
    assert cancel.status_code == 200, cancel.text
    answered = update_queue(queue, mode="parallel")
    assert (answered["state"], answered["mode"]) == ("running", "parallel")


# -- getQueue ------------------------------------------------------------------------------------


def listed(queue: Api) -> list[tuple[int, str]]:
    """The PRs getQueue lists for `main`, in queue order: (number, state)."""
    return [(pr["prNumber"], pr["state"]) for pr in get_queue(queue)["enqueuedPullRequests"]]


def test_get_queue_has_exactly_the_config_and_the_pull_requests(queue: Api) -> None:
    got = get_queue(queue)
    assert set(got) == CONFIG_KEYS | OWN_CONFIG_KEYS | {"enqueuedPullRequests"} | OWN_QUEUE_KEYS
    assert (got["waitingOn"], got["incidents"]) == (None, [])


def test_get_queue_default_config(queue: Api) -> None:
    body = get_queue(queue)
    assert body["bisectionConcurrency"] >= 1
    assert body["testingTimeoutMinutes"] >= 1
    assert body["pendingFailureDepth"] == 0
    assert body["canOptimisticallyMerge"] is False
    assert body["batch"] is False
    assert body["directMergeMode"] == "off"
    assert body["optimizationMode"] == "off"
    assert body["mergeMethod"] in {"squash", "merge_commit", "rebase"}


def test_get_queue_describes_an_enqueued_pull_request(queue: Api, registered_repo: GitRepo) -> None:
    require_ci(queue)
    sha = registered_repo.open_pr(4, {"x.txt": "x\n"}, title="Add x", author="Grace Hopper")
    submitted(queue, 4)
    assert get_queue(queue)["enqueuedPullRequests"] == []  # not read yet: not_ready
    worker_pass(queue)  # reads it, admits it and starts its run
    [pr] = get_queue(queue)["enqueuedPullRequests"]
    assert set(pr) == ENQUEUED_KEYS
    assert pr["prNumber"] == 4
    assert pr["prSha"] == sha
    assert pr["prTitle"] == "Add x"
    assert pr["prAuthor"] == "Grace Hopper"
    assert pr["prBaseBranch"] == "main"
    assert pr["state"] == "testing"
    assert (pr["priorityName"], pr["priorityValue"]) == ("medium", 100)
    assert pr["usedDefaultPriorityName"] == "medium"
    assert (pr["skipTheLine"], pr["noBatch"]) == (False, False)
    assert ISO_MILLIS_Z.match(pr["stateChangedAt"])
    assert pr["id"]


def test_get_queue_lists_pull_requests_in_submission_order(
    queue: Api, registered_repo: GitRepo
) -> None:
    require_ci(queue)
    for number in (7, 3, 5):
        open_and_submit(queue, registered_repo, number)
    worker_pass(queue)
    assert listed(queue) == [(7, "testing"), (3, "pending"), (5, "pending")]


def test_get_queue_orders_pending_pull_requests_by_priority(
    queue: Api, registered_repo: GitRepo
) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)  # medium (100)
    open_and_submit(queue, registered_repo, 2, priority="low")  # 200
    open_and_submit(queue, registered_repo, 3, priority="high")  # 10
    open_and_submit(queue, registered_repo, 4, priority=150)
    open_and_submit(queue, registered_repo, 5, priority="urgent")  # 0
    open_and_submit(queue, registered_repo, 6)  # medium, after 1
    worker_pass(queue)
    assert listed(queue) == [(5, "testing")] + [(n, "pending") for n in (3, 1, 6, 4, 2)]


def test_get_queue_priority_ties_keep_submission_order(
    queue: Api, registered_repo: GitRepo
) -> None:
    require_ci(queue)
    for number in (9, 2, 8):
        open_and_submit(queue, registered_repo, number, priority="high")
    open_and_submit(queue, registered_repo, 1, priority=10)
    worker_pass(queue)
    assert listed(queue) == [(9, "testing"), (2, "pending"), (8, "pending"), (1, "pending")]


def test_resubmitting_with_a_higher_priority_moves_a_pull_request_up(
    queue: Api, registered_repo: GitRepo
) -> None:
    """PR 3 moves ahead of PR 2, which waits; PR 1, testing, keeps its place in front (only
    `urgent` interrupts a run).
    """
    require_ci(queue)
    for number in (1, 2, 3):
        open_and_submit(queue, registered_repo, number)
    worker_pass(queue)
    assert listed(queue) == [(1, "testing"), (2, "pending"), (3, "pending")]
    submitted(queue, 3, priority="high")
    assert listed(queue) == [(1, "testing"), (3, "pending"), (2, "pending")]
    [_, moved, _] = get_queue(queue)["enqueuedPullRequests"]
    assert (moved["priorityName"], moved["priorityValue"]) == ("high", 10)


def test_get_queue_leaves_out_a_pull_request_that_conflicts_with_main(
    queue: Api, registered_repo: GitRepo
) -> None:
    require_ci(queue)
    registered_repo.open_pr(1, {"README.md": "from the PR\n"})
    registered_repo.commit({"README.md": "from main\n"}, "change README on main")
    open_and_submit(queue, registered_repo, 2)
    submitted(queue, 1)
    worker_pass(queue)  # reads both: PR 2 is admitted (and tested), PR 1 conflicts
    conflicting = get_pr(queue, 1)
    assert conflicting["state"] == "not_ready"
    assert conflicting["prSha"]
    assert conflicting["readiness"]["gitHubMergeability"] == "not_mergeable"
    assert listed(queue) == [(2, "testing")]


def test_get_queue_leaves_out_pull_requests_submitted_while_paused(
    queue: Api, registered_repo: GitRepo
) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    update_queue(queue, state="paused")
    open_and_submit(queue, registered_repo, 2)
    worker_pass(queue)  # reads PR 2, but a paused queue does not admit it
    assert get_pr(queue, 2)["state"] == "not_ready"
    assert get_pr(queue, 2)["prSha"]
    body = get_queue(queue)
    assert body["state"] == "paused"
    assert [pr["prNumber"] for pr in body["enqueuedPullRequests"]] == [1]


def test_get_queue_leaves_out_cancelled_pull_requests(queue: Api, registered_repo: GitRepo) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    open_and_submit(queue, registered_repo, 2)
    worker_pass(queue)
    assert listed(queue) == [(1, "testing"), (2, "pending")]
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    assert enqueued_numbers(queue) == [2]


def test_get_queue_only_lists_its_own_branch(queue: Api, registered_repo: GitRepo) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    assert enqueued_numbers(queue) == [1]
    assert queue.post("createQueue", targetBranch="release").status_code == 200
    assert get_queue(queue, "release")["enqueuedPullRequests"] == []


def test_get_queue_of_unknown_queue_is_404(queue: Api) -> None:
    assert_error(queue.post("getQueue", targetBranch="develop"), 404, "queue_not_found")


def test_get_queue_of_unknown_repo_is_404(queue: Api) -> None:
    response = queue.post("getQueue", targetBranch="main", repo={**REPO_JSON, "host": "gitlab.com"})
    assert_error(response, 404, "repository_not_found")


# -- deleteQueue ---------------------------------------------------------------------------------


def test_delete_an_empty_queue(queue: Api) -> None:
    response = queue.post("deleteQueue", targetBranch="main")
    assert response.status_code == 200, response.text
    assert response.json() == {}
    assert_error(queue.post("getQueue", targetBranch="main"), 404, "queue_not_found")


def test_a_deleted_queue_can_be_created_again_with_defaults(queue: Api) -> None:
    update_queue(queue, concurrency=9, batch=True)
    assert queue.post("deleteQueue", targetBranch="main").status_code == 200
    assert queue.post("createQueue", targetBranch="main").status_code == 200
    body = get_queue(queue)
    assert (body["concurrency"], body["batch"]) == (1, False)


def test_delete_queue_with_a_pending_pr_is_400(queue: Api, registered_repo: GitRepo) -> None:
    """400, as the hosted service answers (its Terraform provider shows its guidance on it)."""
    pending_prs(queue, registered_repo, 1)
    message = assert_error(queue.post("deleteQueue", targetBranch="main"), 400, "queue_not_empty")
    assert "#1" in message
    assert listed(queue) == [(1, "pending")]


def test_delete_queue_with_a_not_ready_pr_is_400(queue: Api, registered_repo: GitRepo) -> None:
    update_queue(queue, state="paused")
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)  # reads PR 1, but a paused queue does not admit it
    assert get_pr(queue, 1)["state"] == "not_ready"
    assert_error(queue.post("deleteQueue", targetBranch="main"), 400, "queue_not_empty")
    assert get_queue(queue)["state"] == "paused"


def test_delete_queue_once_its_pr_is_cancelled(queue: Api, registered_repo: GitRepo) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    assert get_pr(queue, 1)["state"] == "testing"
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    response = queue.post("deleteQueue", targetBranch="main")
    assert response.status_code == 200, response.text
    assert response.json() == {}
    assert queue.post("getQueue", targetBranch="main").status_code == 404


def test_deleting_a_queue_forgets_its_pull_requests(queue: Api, registered_repo: GitRepo) -> None:
    require_ci(queue)
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    assert get_pr(queue, 1)["state"] == "testing"
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    assert queue.post("deleteQueue", targetBranch="main").status_code == 200
    assert queue.post("createQueue", targetBranch="main").status_code == 200
    response = pr_verb(queue, "getSubmittedPullRequest", 1)
    assert_error(response, 404, "pull_request_not_found")
    require_ci(queue)  # the new queue has the default settings
    submitted(queue, 1)
    worker_pass(queue)
    assert listed(queue) == [(1, "testing")]


def test_delete_queue_leaves_other_branches(queue: Api) -> None:
    assert queue.post("createQueue", targetBranch="release").status_code == 200
    assert queue.post("deleteQueue", targetBranch="release").status_code == 200
    assert get_queue(queue)["branch"] == "main"


def test_delete_unknown_queue_is_404(queue: Api) -> None:
    assert_error(queue.post("deleteQueue", targetBranch="develop"), 404, "queue_not_found")


def test_delete_queue_twice_is_404_the_second_time(queue: Api) -> None:
    assert queue.post("deleteQueue", targetBranch="main").status_code == 200
    assert_error(queue.post("deleteQueue", targetBranch="main"), 404, "queue_not_found")


# -- bounds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["concurrency", "bisectionConcurrency", "pendingFailureDepth", "batchingMinSize"]
)
def test_update_queue_takes_a_thousand_but_not_more(queue: Api, field: str) -> None:
    assert update_queue(queue, **{field: 1000})[field] == 1000
    response = queue.post("updateQueue", targetBranch="main", **{field: 1001})
    assert_invalid(response, field)
    assert get_queue(queue)[field] == 1000


def test_update_queue_takes_up_to_100_required_statuses(queue: Api) -> None:
    names = [f"ci/{i}" for i in range(101)]
    assert update_queue(queue, requiredStatuses=names[:100])["requiredStatuses"] == names[:100]
    response = queue.post("updateQueue", targetBranch="main", requiredStatuses=names)
    assert_invalid(response, "requiredStatuses")


def test_create_queue_takes_concurrency_up_to_a_thousand(api: Api) -> None:
    response = api.post("createQueue", targetBranch="main", concurrency=1001)
    assert response.status_code == 400, response.text
    assert api.post("createQueue", targetBranch="main", concurrency=1000).status_code == 200
    assert get_queue(api)["concurrency"] == 1000


# -- concurrent requests -------------------------------------------------------------------------


def test_concurrent_creates_of_one_queue_make_one_queue(api: Api) -> None:
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: api.post("createQueue", targetBranch="main"), range(8)))
    assert sorted(r.status_code for r in responses) == [200] + [409] * 7
    codes = {r.json()["error"]["code"] for r in responses if r.status_code == 409}
    assert codes <= {"queue_exists", "concurrent_write"}
    assert get_queue(api)["enqueuedPullRequests"] == []


def test_concurrent_updates_all_apply(queue: Api) -> None:
    with ThreadPoolExecutor(8) as pool:
        responses = list(
            pool.map(
                lambda n: queue.post("updateQueue", targetBranch="main", concurrency=n), range(1, 9)
            )
        )
    assert [r.status_code for r in responses] == [200] * 8
    assert get_queue(queue)["concurrency"] in range(1, 9)


def test_minutes_take_the_hosted_services_values_up_to_a_hundred_years(queue: Api) -> None:
    """Two weeks of batching wait (Trunk accepts it; its Terraform provider sends it), and
    any number of minutes up to 100 years; beyond, a deadline would leave the calendar.
    """
    assert update_queue(queue, batchingMaxWaitTimeMinutes=20160)["batchingMaxWaitTimeMinutes"] == (
        20160
    )
    century = 100 * 365 * 24 * 60
    assert update_queue(queue, testingTimeoutMinutes=century)["testingTimeoutMinutes"] == century
    too_far = queue.post("updateQueue", targetBranch="main", stallMinutes=century + 1)
    assert_invalid(too_far, "stallMinutes")
    assert get_queue(queue)["testingTimeoutMinutes"] == century


def test_concurrent_deletes_delete_once(queue: Api) -> None:
    with ThreadPoolExecutor(8) as pool:
        responses = list(
            pool.map(lambda _: queue.post("deleteQueue", targetBranch="main"), range(8))
        )
    assert sorted(r.status_code for r in responses) == [200] + [404] * 7


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("maxRetries", 6),
        ("maxRetries", -1),
        ("stallMinutes", -1),
        ("checkStartTimeoutMinutes", 52_560_001),
        ("flakyFailures", "sometimes"),
        ("acceptSkippedChecks", "yes"),
    ],
)
def test_update_queue_refuses_own_settings_out_of_bounds(
    queue: Api, field: str, value: object
) -> None:
    before = get_queue(queue)
    assert_invalid(queue.post("updateQueue", targetBranch="main", **{field: value}), field)
    assert get_queue(queue) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("notReadyTimeoutHours", -1),
        ("notReadyTimeoutHours", 876_001),
        ("enqueueingLabel", "x" * 51),
        ("enqueueingLabel", "merge\nnow"),
        ("enqueueingLabel", 3),
        ("labelCommandsEnabled", "yes"),
        ("allowedBotSubmitters", ["not a login"]),
        ("allowedBotSubmitters", "renovate[bot]"),
        ("allowedBotSubmitters", ["bot"] * 101),
        ("testBranchConstructionMode", "copy"),
        ("batchingRules", ["a string"]),
        ("batchingRules", [{"k": "v" * 5000}]),
        ("batchingRules", [{}] * 51),
    ],
)
def test_update_queue_refuses_hosted_fields_out_of_bounds(
    queue: Api, field: str, value: object
) -> None:
    before = get_queue(queue)
    assert_invalid(queue.post("updateQueue", targetBranch="main", **{field: value}), field)
    assert get_queue(queue) == before


def test_hosted_fields_have_their_defaults_and_an_empty_label_is_the_instances(
    queue: Api,
) -> None:
    got = get_queue(queue)
    assert {k: got[k] for k in HOSTED_DEFAULTS} == HOSTED_DEFAULTS
    update_queue(
        queue, enqueueingLabel="ready", testBranchConstructionMode="PUSH_NEW_BRANCH_FROM_TEMP"
    )
    got = get_queue(queue)
    assert (got["enqueueingLabel"], got["testBranchConstructionMode"]) == (
        "ready",
        "push_new_branch_from_temp",
    )
    assert update_queue(queue, enqueueingLabel="")["enqueueingLabel"] == "keepgreen-merge"


HOSTED_DEFAULTS = {
    "notReadyTimeoutHours": 0,
    "enqueueingLabel": "keepgreen-merge",  # KEEPGREEN_GITHUB_MERGE_LABEL's default
    "labelCommandsEnabled": True,
    "allowedBotSubmitters": [],
    "stateLabelsEnabled": False,
    "extensionEnabled": False,
    "testBranchConstructionMode": "rename_temp_branch",
    "batchingRules": [],
}


def test_update_queue_own_settings_have_documented_defaults(queue: Api) -> None:
    got = get_queue(queue)
    assert {k: got[k] for k in OWN_CONFIG_KEYS} == {
        "checkStartTimeoutMinutes": 30,
        "adaptiveTestingTimeout": False,
        "stallMinutes": 60,
        "acceptSkippedChecks": False,
        "maxRetries": 0,
        "flakyFailures": "retry",
        "bisectBesideQueue": True,
        "adaptiveBatchSize": False,
        "adaptiveDepth": False,
    }


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from(" \t\n\x00\x12\x1f\x7f\x85\xa0a-é"), max_size=6))
@example("")
@example("  ")
@example("\x12\xe6")
def test_the_schema_of_enqueueing_label_says_what_the_model_accepts(label: str) -> None:
    """A client generated from the OpenAPI document (and schemathesis) must know which labels
    updateQueue accepts: the pattern in the model's schema, which the document serves, and the
    model's validation agree.
    """
    schema = UpdateQueueRequest.model_json_schema()["properties"]["enqueueingLabel"]
    (string,) = (one for one in schema["anyOf"] if one.get("type") == "string")
    body = {"repo": {"host": "h", "owner": "o", "name": "n"}, "targetBranch": "main"}
    try:
        UpdateQueueRequest.model_validate({**body, "enqueueingLabel": label})
        accepted = True
    except ValidationError:
        accepted = False
    assert (re.fullmatch(string["pattern"], label) is not None) == accepted
