"""Registering a repository: the git data must be there, belong to no other registration, and
its CI variables must not be keepgreen's own; what goes wrong later is not told with server paths.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from keepgreen.app.errors import Conflict, InvalidInput
from keepgreen.bootstrap import Container
from keepgreen.core.model import RepoRef
from tests.support.gitrepo import GitRepo
from tests.support.wire import Api, pr_verb, queue_body, submitted

GADGETS = RepoRef("github.com", "acme", "gadgets")
THEIRS = RepoRef("github.com", "globex", "tools")


def add(container: Container, *, org: str, ref: RepoRef, url: str, env: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return container.admin.add_repository(
        org_slug=org, ref=ref, git_url=url, ci_command=None, ci_env=env
    )


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("/etc", "/etc is not a git repository"),
        ("/nonexistent/repo", "/nonexistent/repo is not a directory on this machine"),
        ("file:///nonexistent/repo", "is not a directory on this machine"),
    ],
)
def test_a_path_without_a_git_repository_is_refused(
    container: Container, url: str, words: str
) -> None:
    with pytest.raises(InvalidInput, match=words) as refused:
        add(container, org="acme", ref=GADGETS, url=url)
    assert refused.value.code == "invalid_git_url"
    with container.unit_of_work() as uow:
        org = uow.orgs.get_by_slug("acme")
        assert org is None or uow.repositories.find(org.id, GADGETS) is None


def test_a_local_repository_is_stored_as_its_absolute_path(
    container: Container, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = GitRepo(tmp_path / "gadgets")
    monkeypatch.chdir(tmp_path)
    added = add(container, org="acme", ref=GADGETS, url="./gadgets")
    assert added.git_url == str(repo.path.resolve())


def test_another_orgs_repository_cannot_be_registered_again_under_any_spelling(
    container: Container, tmp_path: Path
) -> None:
    """globex registered its repository; acme names the same git data by its path, by a
    link to it and by a file:// URL: each is refused, and the answer names no one.
    """
    repo = GitRepo(tmp_path / "tools")
    add(container, org="globex", ref=THEIRS, url=str(repo.path))
    link = tmp_path / "innocent-looking"
    link.symlink_to(repo.path)
    for url in (str(repo.path), str(link), repo.path.as_uri()):
        with pytest.raises(Conflict) as refused:
            add(container, org="acme", ref=GADGETS, url=url)
        assert refused.value.code == "git_url_in_use"
        assert refused.value.message == f"{url} is already registered by another organization"
    with container.unit_of_work() as uow:
        assert uow.orgs.get_by_slug("acme") is None  # a refused registration keeps nothing


def test_one_orgs_second_name_for_the_same_repository_is_refused_with_the_first(
    container: Container, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "gadgets")
    add(container, org="acme", ref=GADGETS, url=str(repo.path))
    with pytest.raises(Conflict, match=r"already registered as github\.com/acme/gadgets"):
        add(container, org="acme", ref=RepoRef("github.com", "acme", "alias"), url=str(repo.path))


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("KEEPGREEN_DATABASE_URL", "keepgreen's own settings"),
        ("keepgreen_token", "keepgreen's own settings"),
        ("1PASSWORD", "is not a variable name"),
        ("A=B", "is not a variable name"),
        ("", "is not a variable name"),
    ],
)
def test_ci_variables_must_be_plain_names_and_never_keepgreens(
    container: Container, git_repo: GitRepo, name: str, words: str
) -> None:
    with pytest.raises(InvalidInput, match=words):
        add(container, org="acme", ref=GADGETS, url=str(git_repo.path), env=("NPM_TOKEN", name))


def test_ci_variables_round_trip_in_order_without_duplicates(
    container: Container, git_repo: GitRepo
) -> None:
    add(container, org="acme", ref=GADGETS, url=str(git_repo.path), env=("B", "A", "B"))
    with container.unit_of_work() as uow:
        org = uow.orgs.get_by_slug("acme")
        assert org is not None
        stored = uow.repositories.find(org.id, GADGETS)
    assert stored is not None
    assert stored.ci_env == ("B", "A")


def test_a_repository_gone_from_disk_is_an_incident_of_the_pr_submitted(
    api: Api, registered_repo: GitRepo, container: Container
) -> None:
    """The submit does not read git, so it is taken; the worker's read fails, the PR waits
    to be read, and its answer tells of the incident.
    """
    assert api.post("createQueue", queue_body()).status_code == 200
    registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a")
    shutil.rmtree(registered_repo.path)
    submitted(api, 1)
    container.worker.run_once()
    response = pr_verb(api, "getSubmittedPullRequest", 1)
    assert response.status_code == 200, response.text
    pr = response.json()
    assert (pr["state"], pr["prSha"]) == ("not_ready", "")  # still waiting to be read
    (incident,) = pr["incidents"]
    assert (incident["kind"], incident["endedAt"]) == ("git_error", None)
