"""getSubmittedPullRequest naming the PR by its head branch (`"pr": {"branch": ...}`), as the
spec allows: the PR from that branch in the queue, else the one from it that left the queue
last, else 404; a real database and git repository, through the HTTP API.
"""

from __future__ import annotations

from typing import Any

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
)


def by_branch(api: Api, branch: object, **pr: object) -> Any:
    return api.post("getSubmittedPullRequest", targetBranch="main", pr={"branch": branch, **pr})


def test_a_pr_is_found_by_its_branch_with_the_same_answer_as_by_number(
    queue: Api, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 5)  # its branch is pr-5
    open_and_submit(queue, registered_repo, 6)
    response = by_branch(queue, "pr-6")
    assert response.status_code == 200, response.text
    assert response.json() == get_pr(queue, 6)
    assert response.json()["prNumber"] == 6


def test_a_reused_branch_names_the_pr_in_the_queue_then_the_last_to_leave(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    # A bot opens PR 5 from `bot/deps`; once it left the queue, PR 6 from the same branch.
    head5 = registered_repo.open_pr(5, {"a.txt": "5\n"})
    registered_repo.git("branch", "-f", "bot/deps", head5)
    submitted(queue, 5)
    assert by_branch(queue, "bot/deps").json()["prNumber"] == 5
    clock.advance(minutes=1)
    assert pr_verb(queue, "cancelPullRequest", 5).status_code == 200
    head6 = registered_repo.open_pr(6, {"b.txt": "6\n"})
    registered_repo.git("branch", "-f", "bot/deps", head6)
    clock.advance(minutes=1)
    submitted(queue, 6)
    assert by_branch(queue, "bot/deps").json()["prNumber"] == 6  # the one in the queue
    clock.advance(minutes=1)
    assert pr_verb(queue, "cancelPullRequest", 6).status_code == 200
    found = by_branch(queue, "bot/deps").json()  # both left: the last to leave
    assert (found["prNumber"], found["state"]) == (6, "cancelled")


def test_a_pr_in_the_queue_wins_over_one_that_left_later(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    head5 = registered_repo.open_pr(5, {"a.txt": "5\n"})
    registered_repo.git("branch", "-f", "bot/deps", head5)
    submitted(queue, 5)
    head6 = registered_repo.open_pr(6, {"b.txt": "6\n"})
    registered_repo.git("branch", "-f", "bot/deps", head6)
    submitted(queue, 6)
    clock.advance(minutes=1)
    assert pr_verb(queue, "cancelPullRequest", 6).status_code == 200
    assert by_branch(queue, "bot/deps").json()["prNumber"] == 5


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
    queue: Api, registered_repo: GitRepo, client: TestClient
) -> None:
    open_and_submit(queue, registered_repo, 5)
    first = by_branch(queue, "pr-5")
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
