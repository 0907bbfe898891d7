from tests.support.gitrepo import GitRepo
from tests.support.wire import Api, get_pr, get_queue, submitted, worker_pass


def test_submit_then_get_queue(queue: Api, registered_repo: GitRepo) -> None:
    """The submit takes the PR unread (not listed yet); the worker's pass reads it from git,
    admits it and starts testing it (the queue requires `ci`, so the run waits on it).
    """
    assert (
        queue.post("updateQueue", targetBranch="main", requiredStatuses=["ci"]).status_code == 200
    )
    sha = registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a", author="Grace")
    submitted(queue, 1)
    pr = get_pr(queue, 1)
    assert (pr["state"], pr["prSha"], pr["prTitle"], pr["prAuthor"]) == ("not_ready", "", "", "")
    assert get_queue(queue)["enqueuedPullRequests"] == []

    worker_pass(queue)

    body = get_queue(queue)
    assert [
        (p["prNumber"], p["state"], p["prSha"], p["prTitle"], p["prAuthor"])
        for p in body["enqueuedPullRequests"]
    ] == [(1, "testing", sha, "Add a", "Grace")]
