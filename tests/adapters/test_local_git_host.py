"""The built-in code host on real git repositories."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost, local_path
from keepgreen.app.ports import CodeHostError
from keepgreen.core.enums import Mergeability
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import Repository
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO


def repository_at(url: str) -> Repository:
    return Repository(
        RepositoryId("r"), OrgId("o"), REPO, url, None, datetime(2026, 1, 1, tzinfo=UTC)
    )


def test_a_pull_request_is_its_ref_with_title_and_author(git_repo: GitRepo) -> None:
    sha = git_repo.open_pr(7, {"x.txt": "x\n"}, title="Add x\n\nLong body", author="Grace Hopper")
    info = LocalGitHost().pull_request(repository_at(str(git_repo.path)), 7)
    assert info is not None
    assert (info.number, info.head_sha, info.title, info.author) == (
        7,
        sha,
        "Add x",
        "Grace Hopper",
    )


def test_a_pull_request_is_read_at_the_repositorys_pr_refspec(git_repo: GitRepo) -> None:
    """GitLab's layout: merge request 4 is `refs/merge-requests/4/head`, and `refs/pull/4/head`
    is then nothing to keepgreen.
    """
    sha = git_repo.open_pr(4, {"m.txt": "m\n"}, title="Add m")
    git_repo.git("update-ref", "refs/merge-requests/4/head", sha)
    other = git_repo.open_pr(5, {"n.txt": "n\n"})  # only at refs/pull/5/head
    gitlab = replace(
        repository_at(str(git_repo.path)), pr_refspec="refs/merge-requests/{number}/head"
    )
    info = LocalGitHost().pull_request(gitlab, 4)
    assert info is not None
    assert (info.head_sha, info.title) == (sha, "Add m")
    assert LocalGitHost().pull_request(gitlab, 5) is None
    default = LocalGitHost().pull_request(repository_at(str(git_repo.path)), 5)
    assert default is not None
    assert default.head_sha == other


def test_a_pull_requests_branch_is_the_first_branch_at_its_head(git_repo: GitRepo) -> None:
    sha = git_repo.open_pr(7, {"x.txt": "x\n"})  # branch pr-7
    repo = repository_at(str(git_repo.path))
    info = LocalGitHost().pull_request(repo, 7)
    assert info is not None
    assert info.head_branch == "pr-7"
    git_repo.git("branch", "bot/deps", sha)  # two branches there: the first by name
    info = LocalGitHost().pull_request(repo, 7)
    assert info is not None
    assert info.head_branch == "bot/deps"
    git_repo.git("branch", "-D", "bot/deps", "pr-7")  # none: only refs/pull/7/head is there
    info = LocalGitHost().pull_request(repo, 7)
    assert info is not None
    assert (info.head_sha, info.head_branch) == (sha, None)


def test_a_pr_refspec_under_refs_heads_is_the_pull_requests_branch(git_repo: GitRepo) -> None:
    sha = git_repo.open_pr(3, {"y.txt": "y\n"})
    git_repo.git("branch", "review/3", sha)
    branches = replace(repository_at(str(git_repo.path)), pr_refspec="refs/heads/review/{number}")
    info = LocalGitHost().pull_request(branches, 3)
    assert info is not None
    assert (info.head_sha, info.head_branch) == (sha, "review/3")  # not pr-3, first by name


def test_a_missing_pull_request_is_none(git_repo: GitRepo) -> None:
    assert LocalGitHost().pull_request(repository_at(str(git_repo.path)), 8) is None


def test_bare_repositories_and_file_urls_work(git_repo: GitRepo, tmp_path: Path) -> None:
    sha = git_repo.open_pr(3, {"y.txt": "y\n"})
    bare = tmp_path / "bare.git"
    git_repo.git("clone", "-q", "--bare", str(git_repo.path), str(bare))
    git_repo.git("--git-dir", str(bare), "update-ref", "refs/pull/3/head", sha)
    info = LocalGitHost().pull_request(repository_at(f"file://{bare}"), 3)
    assert info is not None
    assert info.head_sha == sha


def test_mergeability_follows_the_target_branch(git_repo: GitRepo) -> None:
    host = LocalGitHost()
    repository = repository_at(str(git_repo.path))
    clean = git_repo.open_pr(1, {"new.txt": "new\n"})
    clashing = git_repo.open_pr(2, {"README.md": "theirs\n"})
    git_repo.commit({"README.md": "ours\n"}, "change README on main")
    assert host.mergeability(repository, head_sha=clean, target_branch="main") is (
        Mergeability.MERGEABLE
    )
    assert host.mergeability(repository, head_sha=clashing, target_branch="main") is (
        Mergeability.NOT_MERGEABLE
    )
    assert host.mergeability(repository, head_sha=clean, target_branch="nope") is (
        Mergeability.NOT_MERGEABLE
    )


def test_an_unreadable_repository_is_a_code_host_error(tmp_path: Path) -> None:
    with pytest.raises(CodeHostError):
        LocalGitHost().pull_request(repository_at(str(tmp_path / "missing")), 1)
    with pytest.raises(CodeHostError):
        LocalGitHost().pull_request(repository_at("https://example.com/acme/widgets.git"), 1)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/srv/git/widgets", Path("/srv/git/widgets")),
        ("file:///srv/git/widgets.git", Path("/srv/git/widgets.git")),
        ("relative/repo", Path("relative/repo")),
        ("https://example.com/acme/widgets.git", None),
        ("git@example.com:acme/widgets.git", None),
    ],
)
def test_local_paths_are_told_from_remotes(url: str, expected: Path | None) -> None:
    assert local_path(url) == expected


def test_pull_request_heads_are_read_at_once_as_pull_request_reads_them(
    git_repo: GitRepo,
) -> None:
    first = git_repo.open_pr(1, {"a.txt": "a\n"})
    second = git_repo.open_pr(2, {"b.txt": "b\n"})
    # A PR ref that points at an annotated tag of the head is peeled to the commit.
    git_repo.git("tag", "-a", "-m", "tagged", "t2", second)
    git_repo.git("update-ref", "refs/pull/3/head", git_repo.git("rev-parse", "t2"))
    host, repo = LocalGitHost(), repository_at(str(git_repo.path))
    heads = host.pull_request_heads(repo, [3, 1, 9, 2])
    assert heads == {3: second, 1: first, 9: None, 2: second}
    for number, head in heads.items():
        info = host.pull_request(repo, number)
        assert (None if info is None else info.head_sha) == head
    assert host.pull_request_heads(repo, []) == {}


def test_pull_request_heads_of_a_missing_repository_is_a_code_host_error(tmp_path: Path) -> None:
    with pytest.raises(CodeHostError):
        LocalGitHost().pull_request_heads(repository_at(str(tmp_path / "nowhere")), [1])


def test_the_target_tip_a_caller_read_is_the_one_asked_about(git_repo: GitRepo) -> None:
    """A pass reads the branch's tip once and asks about each PR against it: the answers are
    of that tip, even once the branch has moved on.
    """
    host = LocalGitHost()
    repository = repository_at(str(git_repo.path))
    clashing = git_repo.open_pr(2, {"README.md": "theirs\n"})
    read = git_repo.tip("main")
    git_repo.commit({"README.md": "ours\n"}, "change README on main")
    assert host.mergeability(
        repository, head_sha=clashing, target_branch="main", target_sha=read
    ) is (Mergeability.MERGEABLE)
    assert host.mergeability(repository, head_sha=clashing, target_branch="main") is (
        Mergeability.NOT_MERGEABLE
    )
    assert host.is_up_to_date(repository, head_sha=clashing, target_branch="main", target_sha=read)
    assert not host.is_up_to_date(repository, head_sha=clashing, target_branch="main")
