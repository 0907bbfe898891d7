from tests.conftest import Api
from tests.support.gitrepo import GitRepo


def test_submit_then_get_queue(queue: Api, registered_repo: GitRepo) -> None:
    sha = registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a", author="Grace")
    response = queue.post("submitPullRequest", targetBranch="main", pr={"number": 1})
    assert response.status_code == 200, response.text
    assert response.json() == {}
    body = queue.post("getQueue", targetBranch="main").json()
    assert [
        (p["prNumber"], p["state"], p["prSha"], p["prTitle"], p["prAuthor"])
        for p in body["enqueuedPullRequests"]
    ] == [(1, "pending", sha, "Add a", "Grace")]
