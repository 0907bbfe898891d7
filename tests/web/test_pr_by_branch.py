"""getSubmittedPullRequest naming the PR by its head branch (`"pr": {"branch": ...}`), as the
spec allows: the PR from that branch in the queue, else the one from it that left the queue
last, else 404; a real database and git repository, through the HTTP API. A PR's branch is
known once the worker has read the PR (the submit does not read git), so the tests run a
worker pass after submitting.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import (
    Api,
    assert_error,
    assert_invalid,
    get_pr,
    open_and_submit,
    pr_verb,
    submitted,
    worker_pass,
)


@pytest.fixture
def checked(queue: Api) -> Api:
    """The queue requiring the `ci` check: a PR the worker reads and starts testing stays in
    the queue (`testing`) until `ci` reports (a queue requiring no check fails its PRs).
    """
    answer = queue.post("updateQueue", targetBranch="main", requiredStatuses=["ci"])
    assert answer.status_code == 200, answer.text
    return queue


def by_branch(api: Api, branch: object, **pr: object) -> Any:
    return api.post("getSubmittedPullRequest", targetBranch="main", pr={"branch": branch, **pr})


def test_a_pr_is_found_by_its_branch_with_the_same_answer_as_by_number(
    checked: Api, registered_repo: GitRepo
) -> None:
    queue = checked
    open_and_submit(queue, registered_repo, 5)  # its branch is pr-5
    open_and_submit(queue, registered_repo, 6)
    # Unread, the PR's branch is not known yet.
    assert_error(by_branch(queue, "pr-6"), 404, "pull_request_not_found")
    worker_pass(queue)
    response = by_branch(queue, "pr-6")
    assert response.status_code == 200, response.text
    assert response.json() == get_pr(queue, 6)
    assert response.json()["prNumber"] == 6


def test_a_reused_branch_names_the_pr_in_the_queue_then_the_last_to_leave(
    checked: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    queue = checked
    # A bot opens PR 5 from `bot/deps`; once it left the queue, PR 6 from the same branch.
    head5 = registered_repo.open_pr(5, {"a.txt": "5\n"})
    registered_repo.git("branch", "-f", "bot/deps", head5)
    submitted(queue, 5)
    worker_pass(queue)
    found = by_branch(queue, "bot/deps").json()
    assert (found["prNumber"], found["state"]) == (5, "testing")
    clock.advance(minutes=1)
    assert pr_verb(queue, "cancelPullRequest", 5).status_code == 200
    head6 = registered_repo.open_pr(6, {"b.txt": "6\n"})
    registered_repo.git("branch", "-f", "bot/deps", head6)
    clock.advance(minutes=1)
    submitted(queue, 6)
    # PR 6 unread: its branch is not known yet, so the branch still names PR 5, which left.
    assert by_branch(queue, "bot/deps").json()["prNumber"] == 5
    worker_pass(queue)
    found = by_branch(queue, "bot/deps").json()  # the one in the queue
    assert (found["prNumber"], found["state"]) == (6, "testing")
    clock.advance(minutes=1)
    assert pr_verb(queue, "cancelPullRequest", 6).status_code == 200
    found = by_branch(queue, "bot/deps").json()  # both left: the last to leave
    assert (found["prNumber"], found["state"]) == (6, "cancelled")


def test_a_pr_in_the_queue_wins_over_one_that_left_later(
    checked: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    queue = checked
    head5 = registered_repo.open_pr(5, {"a.txt": "5\n"})
    registered_repo.git("branch", "-f", "bot/deps", head5)
    submitted(queue, 5)
    worker_pass(queue)  # read while `bot/deps` points at its head
    head6 = registered_repo.open_pr(6, {"b.txt": "6\n"})
    registered_repo.git("branch", "-f", "bot/deps", head6)
    submitted(queue, 6)
    worker_pass(queue)
    assert get_pr(queue, 6)["state"] == "pending"  # read, waiting behind PR 5
    clock.advance(minutes=1)
    assert pr_verb(queue, "cancelPullRequest", 6).status_code == 200
    found = by_branch(queue, "bot/deps").json()
    assert (found["prNumber"], found["state"]) == (5, "testing")


def test_a_branch_no_submitted_pr_came_from_is_404(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 5)
    registered_repo.open_pr(7, {"c.txt": "7\n"})  # opened, never submitted
    for branch in ("pr-7", "no-such-branch", "main"):
        message = assert_error(by_branch(queue, branch), 404, "pull_request_not_found")
        assert branch in message


def test_another_orgs_token_does_not_find_the_pr_by_branch(
    queue: Api, registered_repo: GitRepo, client: TestClient, other_token: str
) -> None:
    open_and_submit(queue, registered_repo, 5)
    response = client.post(
        "/v1/getSubmittedPullRequest",
        json={"repo": queue.repo, "targetBranch": "main", "pr": {"branch": "pr-5"}},
        headers={"x-api-token": other_token},
    )
    assert response.status_code == 404, response.text


def test_number_and_branch_together_or_neither_is_400(queue: Api, registered_repo: GitRepo) -> None:
    open_and_submit(queue, registered_repo, 5)
    get_pr(queue, 5)  # the door holds an answer for PR 5 now: it must still refuse both
    assert_invalid(by_branch(queue, "pr-5", number=5), "pr")
    assert_invalid(queue.post("getSubmittedPullRequest", targetBranch="main", pr={}), "pr")
    assert_invalid(by_branch(queue, ""), "branch")
    assert_invalid(by_branch(queue, 5), "branch")


def test_the_etag_of_an_answer_by_branch_gets_304_until_the_pr_changes(
    checked: Api, registered_repo: GitRepo, client: TestClient
) -> None:
    queue = checked
    open_and_submit(queue, registered_repo, 5)
    worker_pass(queue)  # reads PR 5, and so its branch
    first = by_branch(queue, "pr-5")
    assert first.status_code == 200, first.text
    etag = first.headers["etag"]
    body = {"repo": queue.repo, "targetBranch": "main", "pr": {"branch": "pr-5"}}
    headers = {"x-api-token": queue.token, "if-none-match": etag}
    assert client.post("/v1/getSubmittedPullRequest", json=body, headers=headers).status_code == 304
    submitted(queue, 5, priority="high")
    again = client.post("/v1/getSubmittedPullRequest", json=body, headers=headers)
    assert again.status_code == 200
    assert again.json()["priorityName"] == "high"


def test_a_branch_longer_than_a_stored_name_leaves_the_pr_found_by_number_only(
    queue: Api, registered_repo: GitRepo
) -> None:
    head = registered_repo.open_pr(8, {"h.txt": "8\n"})
    long_branch = "team/" * 60 + "x"  # 301 characters: git takes it, a stored name is 255
    registered_repo.git("branch", long_branch, head)
    registered_repo.git("branch", "-D", "pr-8")
    submitted(queue, 8)
    assert get_pr(queue, 8)["prNumber"] == 8
    assert by_branch(queue, long_branch).status_code == 400  # not a name the API takes
