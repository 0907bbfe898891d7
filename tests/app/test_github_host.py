"""Landing through GitHub: only the tested tree lands, and a landing repeated after a failure
between GitHub's merge and keepgreen's record of it never merges twice. Real parts: the fake
GitHub, its git over HTTP, the remote git host's mirror and the githubkit adapter.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from keepgreen.adapters.git.remote_host import RemoteGitHost
from keepgreen.adapters.github.client import GithubAppClient
from keepgreen.app.github.api import GithubCommit, GithubUnavailable, Where
from keepgreen.app.github.host import GithubHost
from keepgreen.app.ports import Landing
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import MergeMethod
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import DEFAULT_GIT_USERNAME, ChainLink, GitAuth, RepoRef, Repository
from tests.conftest import FakeClock
from tests.support.fake_github import FakeGithub

OWNER, NAME = "acme", "widgets"


class FailsOnceAfterMerging(GithubAppClient):
    """The adapter, but GitHub answers 502 to the first read of a commit after a merge: the
    moment between GitHub merging and keepgreen recording it.
    """

    failures_left = 1

    def commit(self, where: Where, sha: str) -> GithubCommit | None:
        if self.failures_left:
            self.failures_left -= 1
            raise GithubUnavailable("GitHub answered 502: Bad Gateway")
        return super().commit(where, sha)


class RecordingFeedback:
    """The PR feedback the host tells: merging, merged."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, str]] = []

    def merging(self, repo: Repository, number: int, head_sha: str) -> None:
        self.events.append(("merging", repo.ref.name, number, head_sha))

    def merged(self, repo: Repository, number: int, sha: str) -> None:
        self.events.append(("merged", repo.ref.name, number, sha))


@pytest.fixture
def fake(fake_github: FakeGithub) -> FakeGithub:
    return fake_github


@pytest.fixture
def setup(fake: FakeGithub, tmp_path: Path) -> tuple[GithubHost, Repository, RecordingFeedback]:
    installation = fake.add_installation(OWNER)
    served = fake.add_repository(installation, OWNER, NAME, files={"README.md": "w\n"})
    api = FailsOnceAfterMerging(
        app_id=fake.app_id,
        private_key=SecretStr(fake.private_key_pem.decode()),
        api_url=fake.api_url,
        data_dir=tmp_path / "data",
        clock=FakeClock(datetime.now(UTC)),
        telemetry=Telemetry(),
    )
    repository = Repository(
        id=RepositoryId("r1"),
        org_id=OrgId("o1"),
        ref=RepoRef("github.com", OWNER, NAME),
        git_url=served.clone_url,
        ci_command=None,
        created_at=datetime.now(UTC),
        auth=GitAuth(token_file=api.git_token_file(installation), username=DEFAULT_GIT_USERNAME),
        github_installation_id=installation,
    )
    feedback = RecordingFeedback()
    host = GithubHost(
        git=RemoteGitHost(data_dir=tmp_path / "data"),
        api=api,
        reconcile_seconds=60,
        feedback=feedback,
    )
    return host, repository, feedback


def landing_of(fake: FakeGithub, host: GithubHost, repo: Repository, number: int) -> Landing:
    """The landing a passed run of PR `number` on main's tip asks for."""
    tip = host.branch_tip(repo, "main")
    info = host.pull_request(repo, number)
    assert tip is not None
    assert info is not None
    tree = fake.repo(OWNER, NAME).bare.merge_tree(tip, info.head_sha)
    return Landing(
        target_branch="main",
        expected_tip=tip,
        method=MergeMethod.SQUASH,
        link=ChainLink(number=number, head_sha=info.head_sha, commit="0" * 40, tree=tree),
        parent_commit=tip,
        parent_tree=host.tree_of(repo, tip),
        exact=True,
        title="A change",
        author="ada",
        token="t1",
    )


def test_a_pull_request_tells_its_head_branch_as_github_has_it(
    fake: FakeGithub, setup: tuple[GithubHost, Repository, RecordingFeedback]
) -> None:
    host, repo, _ = setup
    number = fake.open_pull_request(OWNER, NAME, branch="bot/deps", files={"f.txt": "1\n"})
    info = host.pull_request(repo, number)
    assert info is not None
    assert info.head_branch == "bot/deps"


def test_a_landing_repeated_after_github_failed_mid_way_merges_once(
    fake: FakeGithub, setup: tuple[GithubHost, Repository, RecordingFeedback]
) -> None:
    host, repo, feedback = setup
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"f.txt": "1\n"})
    landing = landing_of(fake, host, repo, number)

    with pytest.raises(GithubUnavailable):
        host.land(repo, landing)  # merged on GitHub, then the read after it failed
    again = host.land(repo, landing)  # the worker retries the effect

    [merge] = fake.merges
    assert again.new_tip == merge.sha == fake.branch_sha(OWNER, NAME, "main")
    assert merge.tree == landing.link.tree
    assert feedback.events == [
        ("merging", NAME, number, landing.link.head_sha),
        ("merged", NAME, number, merge.sha),
    ]


def test_a_moved_branch_or_a_pushed_pr_is_not_merged(
    fake: FakeGithub, setup: tuple[GithubHost, Repository, RecordingFeedback]
) -> None:
    host, repo, feedback = setup
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"f.txt": "1\n"})
    landing = landing_of(fake, host, repo, number)

    fake.push_to_branch(OWNER, NAME, "main", files={"other.txt": "x\n"})
    assert host.land(repo, landing).problem == "target_moved"

    landing = landing_of(fake, host, repo, number)
    fake.push_to_pull_request(OWNER, NAME, number, files={"f.txt": "2\n"})
    assert host.land(repo, landing).problem == "tree_mismatch"
    assert fake.merges == []
    assert feedback.events == []


def test_github_refusing_the_merge_fails_with_its_words(
    fake: FakeGithub, setup: tuple[GithubHost, Repository, RecordingFeedback]
) -> None:
    host, repo, _ = setup
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"f.txt": "1\n"})
    landing = landing_of(fake, host, repo, number)
    fake.close_pull_request(OWNER, NAME, number)
    result = host.land(repo, landing)
    assert (result.new_tip, result.problem) == (None, "push_rejected")
    assert result.detail == f"pull request #{number} is closed on GitHub"


def test_a_rebase_that_would_not_land_the_tested_tree_is_refused_before_github_merges(
    fake: FakeGithub, setup: tuple[GithubHost, Repository, RecordingFeedback]
) -> None:
    host, repo, feedback = setup
    fake.push_to_branch(OWNER, NAME, "main", files={"a.txt": "1\n"})
    # The PR changes a.txt and changes it back: merged, it only adds b.txt; replayed commit by
    # commit onto a main that changed a.txt too, its first commit conflicts.
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"a.txt": "2\n", "b.txt": "b\n"})
    fake.push_to_pull_request(OWNER, NAME, number, files={"a.txt": "1\n"})
    fake.push_to_branch(OWNER, NAME, "main", files={"a.txt": "3\n"})
    landing = replace(landing_of(fake, host, repo, number), method=MergeMethod.REBASE)

    result = host.land(repo, landing)

    assert (result.new_tip, result.problem) == (None, "push_rejected")
    assert result.detail is not None
    assert "would not land the tested tree" in result.detail
    assert fake.merges == []
    assert feedback.events == []


def test_a_squash_is_titled_as_github_titles_it(
    fake: FakeGithub, setup: tuple[GithubHost, Repository, RecordingFeedback]
) -> None:
    host, repo, _ = setup
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"f.txt": "1\n"})
    with pytest.raises(GithubUnavailable):  # the injected failure after the merge
        host.land(repo, landing_of(fake, host, repo, number))
    subject = fake.repo(OWNER, NAME).bare.git("log", "-1", "--format=%s", "main").strip()
    assert subject == f"A change (#{number})"
