from tests.support.gitrepo import GitRepo
from tests.support.wire import Api, get_queue, submitted


def test_submit_then_get_queue(queue: Api, registered_repo: GitRepo) -> None:
    sha = registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a", author="Grace")
    submitted(queue, 1)
    body = get_queue(queue)
    assert [
        (p["prNumber"], p["state"], p["prSha"], p["prTitle"], p["prAuthor"])
        for p in body["enqueuedPullRequests"]
    ] == [(1, "pending", sha, "Add a", "Grace")]
