"""A pull request from a fork, whose CI has no secrets: setImpactedTargets with
`x-forked-workflow-run-id` instead of a token, checked with GitHub (the fake) as the App; and
the headers keepgreen cannot take for a token refused with a reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.app.errors import Unauthenticated
from keepgreen.app.github.api import GithubWorkflowRun, Where
from keepgreen.app.github.fork_runs import ForkRuns
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.core.model import ImpactedTargets, RepoRef
from keepgreen.settings import Settings
from keepgreen.web.app import create_app
from keepgreen.web.credentials import FORK_RUN_ELSEWHERE, NO_GITHUB_APP, PUBLIC_REPO_REFUSED
from tests.conftest import FakeClock
from tests.support.fake_github import FakeGithub
from tests.support.github_app import app_files

HOST = "127.0.0.1"  # the fake GitHub's host: the `host` of the App's repositories
FORK = "x-forked-workflow-run-id"
PUBLIC_REPO = "x-trunk-public-repo-id"


@pytest.fixture
def extra_settings(fake_github: FakeGithub, tmp_path: Path) -> dict[str, Any]:
    return app_files(fake_github, tmp_path / "app").settings()


def install(fake: FakeGithub, container: Container, owner: str, name: str) -> None:
    """The App installed on `owner`'s `name`, linked to org `owner` (main gets a queue)."""
    installation = fake.add_installation(owner)
    fake.add_repository(installation, owner, name)
    assert container.github_installations is not None
    result = container.github_installations.link(installation, owner)
    assert result.added == (f"{owner}/{name}",), result


@pytest.fixture
def acme(fake_github: FakeGithub, container: Container) -> FakeGithub:
    install(fake_github, container, "acme", "widgets")
    return fake_github


def fork_pr(fake: FakeGithub, owner: str = "acme", name: str = "widgets") -> tuple[int, str]:
    """A PR (from a fork, as far as its runs say); its number and head sha."""
    number = fake.open_pull_request(owner, name, branch="patch-1", files={"a.txt": "a\n"})
    return number, fake.head_sha(owner, name, number)


def set_targets(
    client: TestClient,
    headers: dict[str, str],
    *,
    number: int,
    sha: str,
    owner: str = "acme",
    name: str = "widgets",
    targets: object = ("//app:a",),
) -> Any:
    return client.post(
        "/v1/setImpactedTargets",
        json={
            "repo": {"host": HOST, "owner": owner, "name": name},
            "targetBranch": "main",
            "pr": {"number": number, "sha": sha},
            "impactedTargets": list(targets) if isinstance(targets, tuple) else targets,
        },
        headers=headers,
    )


def stored(
    container: Container, number: int, sha: str, *, owner: str = "acme", name: str = "widgets"
) -> ImpactedTargets | None:
    [info] = [
        info
        for info in container.admin.list_repositories(org_slug=owner)
        if info.repository.ref.name == name
    ]
    repository = info.repository
    queue = container.queues.get(repository.org_id, repository.ref, "main").queue
    with container.unit_of_work() as uow:
        return uow.impacted_targets.find(queue.id, number, sha)


def refusal(response: Any) -> str:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "unauthorized"
    message: str = error["message"]
    return message


# -- accepted ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["queued", "in_progress", "waiting", "requested", "pending"])
def test_a_running_fork_run_on_the_head_stores_the_targets_for_the_repository_org(
    client: TestClient, container: Container, acme: FakeGithub, status: str
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha, fork_owner="mallory",
                                status=status)  # fmt: skip
    response = set_targets(client, {FORK: str(run)}, number=number, sha=sha)
    assert response.status_code == 200, response.text
    kept = stored(container, number, sha)
    assert kept is not None
    assert kept.targets == ("//app:a",)
    # GitHub was asked for the run with the installation's token.
    assert any(r.path.endswith(f"/actions/runs/{run}") for r in acme.requests)


def test_a_sha_in_upper_case_names_the_same_head(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha, fork_owner="mallory")
    response = set_targets(client, {FORK: str(run)}, number=number, sha=sha.upper(), targets="ALL")
    assert response.status_code == 200, response.text
    kept = stored(container, number, sha)
    assert kept is not None
    assert kept.targets is None


# -- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5", "", "1e3", "9" * 20])
def test_a_run_id_that_is_not_a_positive_integer_is_refused(
    client: TestClient, container: Container, acme: FakeGithub, value: str
) -> None:
    number, sha = fork_pr(acme)
    message = refusal(set_targets(client, {FORK: value}, number=number, sha=sha))
    assert "must be a positive integer" in message
    assert stored(container, number, sha) is None


def test_a_run_github_does_not_know_is_refused(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    message = refusal(set_targets(client, {FORK: "987654321"}, number=number, sha=sha))
    assert "GitHub shows no workflow run 987654321 in acme/widgets" in message
    assert stored(container, number, sha) is None


def test_a_run_not_from_a_fork_is_refused(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha)  # a branch of the repository
    message = refusal(set_targets(client, {FORK: str(run)}, number=number, sha=sha))
    assert f"workflow run {run} is not from a fork of acme/widgets" in message
    assert stored(container, number, sha) is None


def test_a_run_that_has_ended_is_refused(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha, fork_owner="mallory")
    assert set_targets(client, {FORK: str(run)}, number=number, sha=sha).status_code == 200
    acme.set_workflow_run_status("acme", "widgets", run, "completed")
    message = refusal(
        set_targets(client, {FORK: str(run)}, number=number, sha=sha, targets=("//other",))
    )
    assert f"workflow run {run} is not running (its status is completed)" in message
    kept = stored(container, number, sha)
    assert kept is not None
    assert kept.targets == ("//app:a",)  # what the running run set, not the replay


def test_a_run_on_another_commit_is_refused(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha="ab" * 20, fork_owner="mallory")
    message = refusal(set_targets(client, {FORK: str(run)}, number=number, sha=sha))
    assert f"is on commit {'ab' * 20}, not on pr.sha {sha}" in message
    assert stored(container, number, sha) is None


def test_a_run_of_another_org_repository_reaches_nothing_through_another_body_repo(
    client: TestClient, container: Container, fake_github: FakeGithub
) -> None:
    install(fake_github, container, "acme", "widgets")
    install(fake_github, container, "globex", "gadgets")
    number, sha = fork_pr(fake_github, "acme", "widgets")
    theirs = fake_github.add_workflow_run("globex", "gadgets", head_sha=sha, fork_owner="mallory")
    message = refusal(set_targets(client, {FORK: str(theirs)}, number=number, sha=sha))
    assert f"GitHub shows no workflow run {theirs} in acme/widgets" in message
    assert stored(container, number, sha) is None
    # And the other way: acme's running run names nothing in globex's repository.
    other, other_sha = fork_pr(fake_github, "globex", "gadgets")
    ours = fake_github.add_workflow_run("acme", "widgets", head_sha=other_sha, fork_owner="m")
    answer = set_targets(
        client, {FORK: str(ours)}, number=other, sha=other_sha, owner="globex", name="gadgets"
    )
    assert f"GitHub shows no workflow run {ours} in globex/gadgets" in refusal(answer)
    assert stored(container, other, other_sha, owner="globex", name="gadgets") is None


def test_an_unknown_repository_and_one_registered_by_hand_in_an_org_read_the_same(
    client: TestClient, container: Container, acme: FakeGithub, tmp_path: Path
) -> None:
    container.admin.add_repository(
        org_slug="globex",
        ref=RepoRef(HOST, "globex", "manual"),
        git_url=str(acme.repo("acme", "widgets").bare.path),
        ci_command=None,
    )
    _number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha, fork_owner="mallory")
    registered = refusal(
        set_targets(client, {FORK: str(run)}, number=1, sha=sha, owner="globex", name="manual")
    )
    unknown = refusal(
        set_targets(client, {FORK: str(run)}, number=1, sha=sha, owner="globex", name="nothing")
    )
    assert "is not a repository keepgreen reaches through its GitHub App" in registered
    assert registered.replace("manual", "NAME") == unknown.replace("nothing", "NAME")
    assert "globex" not in registered.replace(f"{HOST}/globex/manual", "")


def test_github_unavailable_is_a_503(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha, fork_owner="mallory")
    acme.fail(502, times=2)
    response = set_targets(client, {FORK: str(run)}, number=number, sha=sha)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "github_unavailable"
    assert stored(container, number, sha) is None


class OneRun:
    """GitHub answering one run for whatever is asked (as it follows a renamed repository)."""

    def __init__(self, run: GithubWorkflowRun) -> None:
        self.run = run
        self.asked: list[tuple[Where, int]] = []

    def workflow_run(self, where: Where, run_id: int) -> GithubWorkflowRun | None:
        self.asked.append((where, run_id))
        return self.run


def test_a_run_of_another_repository_is_refused(container: Container, acme: FakeGithub) -> None:
    del acme
    sha = "cd" * 20
    run = GithubWorkflowRun(7, "acme/renamed", "mallory/renamed", sha, "in_progress")
    github = OneRun(run)
    runs = ForkRuns(container.unit_of_work, api=github)
    with pytest.raises(Unauthenticated, match="workflow run 7 does not belong to acme/widgets"):
        runs.org_of_run("7", repo=RepoRef(HOST, "acme", "widgets"), sha=sha)
    [(where, asked)] = github.asked
    assert (where.owner, where.name, asked) == ("acme", "widgets", 7)
    # The same run under its own name passes every other check.
    good = OneRun(GithubWorkflowRun(7, "acme/widgets", "mallory/widgets", sha, "in_progress"))
    org = ForkRuns(container.unit_of_work, api=good).org_of_run(
        "7", repo=RepoRef(HOST, "acme", "widgets"), sha=sha
    )
    assert org == container.admin.list_repositories(org_slug="acme")[0].repository.org_id


def test_without_a_github_app_a_fork_run_is_refused_saying_so(
    database_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    settings = Settings(database_url=database_url, data_dir=tmp_path / "plain")
    plain = bootstrap(settings, clock=clock, run_migrations=False)
    try:
        with TestClient(create_app(container=plain)) as client:
            response = set_targets(client, {FORK: "12345"}, number=1, sha="ab" * 20)
    finally:
        plain.close()
    assert refusal(response) == NO_GITHUB_APP
    assert "not connected as a GitHub App" in NO_GITHUB_APP


# -- tokens, and the headers that do not stand for one --------------------------------------


def test_a_valid_token_decides_whatever_else_is_sent(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    token = container.admin.create_token("acme")
    number, sha = fork_pr(acme)
    headers = {"x-api-token": token, FORK: "not-a-run", PUBLIC_REPO: "public-id"}
    assert set_targets(client, headers, number=number, sha=sha).status_code == 200
    assert stored(container, number, sha) is not None
    queue = client.post(
        "/v1/getQueue",
        json={"repo": {"host": HOST, "owner": "acme", "name": "widgets"}, "targetBranch": "main"},
        headers=headers,
    )
    assert queue.status_code == 200, queue.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (  # a polled call: the door in front of the app must leave it to the app
            "/v1/getQueue",
            {"repo": {"host": HOST, "owner": "acme", "name": "widgets"}, "targetBranch": "main"},
        ),
        (
            "/v1/submitPullRequest",
            {
                "repo": {"host": HOST, "owner": "acme", "name": "widgets"},
                "targetBranch": "main",
                "pr": {"number": 1},
            },
        ),
        ("/v1/metrics/createBundleUpload", {}),
    ],
)
def test_a_fork_run_elsewhere_is_refused_saying_where_it_counts(
    client: TestClient, acme: FakeGithub, path: str, body: dict[str, Any]
) -> None:
    del acme
    message = refusal(client.post(path, json=body, headers={FORK: "12345"}))
    assert message == FORK_RUN_ELSEWHERE
    assert "only on the setImpactedTargets call" in message
    assert "x-api-token" in message


@pytest.mark.parametrize(
    "path", ["/v1/metrics/createBundleUpload", "/v1/flakytests-cli/upload-metrics", "/v1/getQueue"]
)
def test_the_public_repo_id_is_refused_as_unverifiable(
    client: TestClient, acme: FakeGithub, path: str
) -> None:
    del acme
    message = refusal(client.post(path, json={}, headers={PUBLIC_REPO: "0123-abcd"}))
    assert message == PUBLIC_REPO_REFUSED
    assert "cannot verify x-trunk-public-repo-id" in message
    assert "x-api-token" in message
    assert FORK in message


def test_the_public_repo_id_does_not_open_set_impacted_targets_even_with_a_run(
    client: TestClient, container: Container, acme: FakeGithub
) -> None:
    number, sha = fork_pr(acme)
    run = acme.add_workflow_run("acme", "widgets", head_sha=sha, fork_owner="mallory")
    headers = {FORK: str(run), PUBLIC_REPO: "0123-abcd"}
    assert refusal(set_targets(client, headers, number=number, sha=sha)) == PUBLIC_REPO_REFUSED
    assert stored(container, number, sha) is None


def test_a_fork_run_with_a_body_that_is_not_valid_is_refused_saying_so(
    client: TestClient, acme: FakeGithub
) -> None:
    del acme
    response = client.post("/v1/setImpactedTargets", json={"repo": 1}, headers={FORK: "12345"})
    assert "checked against the body's repo and pr.sha" in refusal(response)


# -- the OpenAPI document -------------------------------------------------------------------


def test_the_openapi_document_has_the_header_on_set_impacted_targets_only(
    client: TestClient,
) -> None:
    document = client.get("/v1/openapi.json").json()
    declared = {
        (path, method): parameter
        for path, item in document["paths"].items()
        for method, operation in item.items()
        for parameter in operation.get("parameters", [])
        if parameter["name"].lower() == FORK
    }
    [((path, method), parameter)] = declared.items()
    assert (path, method) == ("/setImpactedTargets", "post")
    # Optional (a token does instead), a plain string as a header is, and said what it is for.
    assert parameter["in"] == "header"
    assert parameter["required"] is False
    assert parameter["schema"]["type"] == "string"
    for words in ("github.run_id", "from a fork", "GitHub App", "x-api-token"):
        assert words in parameter["description"]
    # The token stays the operation's security scheme.
    operation = document["paths"]["/setImpactedTargets"]["post"]
    assert operation["security"] == [{"APIKeyHeader": []}]
