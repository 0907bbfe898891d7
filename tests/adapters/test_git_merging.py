"""The built-in code host's write side on real git repositories: test commits and landings."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.adapters.git.merging import Git
from keepgreen.app.ports import (
    BuildConflict,
    CodeHostError,
    Landing,
    LandResult,
    MergeHost,
    TestCommit,
)
from keepgreen.core.enums import MergeMethod
from keepgreen.core.model import Repository
from tests.adapters.test_local_git_host import repository_at
from tests.support.gitrepo import GitRepo

KEEPGREEN = "keepgreen <keepgreen@localhost>"


@pytest.fixture
def host() -> MergeHost:
    return LocalGitHost()


@pytest.fixture
def repository(git_repo: GitRepo) -> Repository:
    return repository_at(str(git_repo.path))


def build(
    host: MergeHost,
    repository: Repository,
    base: str,
    prs: list[tuple[int, str]],
    branch: str = "keepgreen/test",
) -> TestCommit:
    built = host.build_test_commit(repository, base_sha=base, prs=prs, branch=branch)
    assert isinstance(built, TestCommit)
    return built


def landing(
    repo: GitRepo,
    chain: TestCommit,
    index: int,
    *,
    method: MergeMethod,
    expected_tip: str | None = None,
    exact: bool = True,
    token: str | None = None,
) -> Landing:
    """The landing of link `index` of `chain`, expecting the branch where it is now."""
    link = chain.links[index]
    parent = chain.links[index - 1].commit if index else chain.base_sha
    return Landing(
        target_branch=repo.branch,
        expected_tip=expected_tip or repo.tip(),
        method=method,
        link=link,
        parent_commit=parent,
        parent_tree=repo.tree(parent),
        exact=exact,
        title=f"Title of {link.number}",
        author="Somebody Else",
        token=token or f"token-{link.number}",
    )


def land(host: MergeHost, repository: Repository, to_land: Landing) -> str:
    result = host.land(repository, to_land)
    assert result.problem is None, result
    assert result.new_tip is not None
    return result.new_tip


# --- test commits ------------------------------------------------------------------------


def test_a_chain_merges_each_pr_onto_the_step_before(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    heads = [git_repo.open_pr(n, {f"pr{n}.txt": f"{n}\n"}) for n in (1, 2, 3)]
    chain = build(host, repository, base, list(zip((1, 2, 3), heads, strict=True)))

    assert chain.base_sha == base
    assert [(link.number, link.head_sha) for link in chain.links] == [
        (1, heads[0]),
        (2, heads[1]),
        (3, heads[2]),
    ]
    previous = base
    for link in chain.links:
        assert git_repo.parents(link.commit) == [previous, link.head_sha]
        assert git_repo.tree(link.commit) == link.tree
        assert git_repo.log("-1", link.commit, fmt="%an <%ae>|%cn <%ce>|%s") == [
            f"{KEEPGREEN}|{KEEPGREEN}|Merging {link.head_sha} into keepgreen/test"
        ]
        previous = link.commit
    assert git_repo.files(chain.sha) == {
        "README.md": "hello",
        "pr1.txt": "1",
        "pr2.txt": "2",
        "pr3.txt": "3",
    }
    assert set(git_repo.files(chain.links[0].commit)) == {"README.md", "pr1.txt"}
    assert host.branch_tip(repository, "keepgreen/test") == chain.sha


def test_building_again_rewrites_the_branch(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    prs = [(1, git_repo.open_pr(1, {"a.txt": "a\n"})), (2, git_repo.open_pr(2, {"b.txt": "b\n"}))]
    first = build(host, repository, base, prs)
    again = build(host, repository, base, prs)
    assert [link.tree for link in again.links] == [link.tree for link in first.links]
    assert host.branch_tip(repository, "keepgreen/test") == again.sha

    shorter = build(host, repository, base, prs[:1])
    assert host.branch_tip(repository, "keepgreen/test") == shorter.sha
    assert "b.txt" not in git_repo.files("keepgreen/test")


def test_no_prs_points_the_branch_at_the_base(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    chain = build(host, repository, base, [])
    assert (chain.links, chain.sha) == ((), base)
    assert host.branch_tip(repository, "keepgreen/test") == base


def test_a_conflict_names_the_pr_and_moves_no_branch(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    fine = git_repo.open_pr(3, {"fine.txt": "fine\n"})
    ours = git_repo.open_pr(1, {"README.md": "ours\n"})
    theirs = git_repo.open_pr(2, {"README.md": "theirs\n"})
    prs = [(3, fine), (1, ours), (2, theirs)]

    result = host.build_test_commit(repository, base_sha=base, prs=prs, branch="kg/new")
    assert result == BuildConflict(2)
    assert host.branch_tip(repository, "kg/new") is None

    earlier = build(host, repository, base, prs[:2], branch="kg/old")
    assert host.build_test_commit(repository, base_sha=base, prs=prs, branch="kg/old") == (
        BuildConflict(2)
    )
    assert host.branch_tip(repository, "kg/old") == earlier.sha


def test_deleting_a_branch_also_when_it_is_gone(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    host.delete_branch(repository, "keepgreen/test")
    assert host.branch_tip(repository, "keepgreen/test") is None
    host.delete_branch(repository, "keepgreen/test")
    assert host.branch_tip(repository, "main") == git_repo.tip()


def test_up_to_date_means_the_tip_is_in_the_head(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    head = git_repo.open_pr(1, {"a.txt": "a\n"})
    tip = git_repo.tip()
    assert host.is_up_to_date(repository, head_sha=head, target_branch="main")
    assert host.is_up_to_date(repository, head_sha=tip, target_branch="main")
    assert not host.is_up_to_date(repository, head_sha=head, target_branch="missing")
    git_repo.commit({"other.txt": "other\n"}, "main moves on")
    assert not host.is_up_to_date(repository, head_sha=head, target_branch="main")


def test_the_tree_of_a_commit(host: MergeHost, repository: Repository, git_repo: GitRepo) -> None:
    tip = git_repo.tip()
    assert host.tree_of(repository, tip) == git_repo.tree(tip)
    with pytest.raises(CodeHostError):
        host.tree_of(repository, "0" * 40)


def test_the_write_side_works_in_a_bare_repository(
    host: MergeHost, git_repo: GitRepo, tmp_path: Path
) -> None:
    head = git_repo.open_pr(1, {"a.txt": "a\n"})
    bare = tmp_path / "bare.git"
    git_repo.git("clone", "-q", "--bare", str(git_repo.path), str(bare))
    repository = repository_at(f"file://{bare}")
    base = git_repo.tip()

    chain = build(host, repository, base, [(1, head)])
    assert host.is_up_to_date(repository, head_sha=head, target_branch="main")
    result = host.land(repository, landing(git_repo, chain, 0, method=MergeMethod.SQUASH))
    assert result.new_tip is not None
    assert host.branch_tip(repository, "main") == result.new_tip
    assert git_repo.git("--git-dir", str(bare), "rev-parse", "main^{tree}") == chain.links[0].tree
    host.delete_branch(repository, "keepgreen/test")
    assert host.branch_tip(repository, "keepgreen/test") is None


def test_commits_ignore_the_callers_git_identity(
    host: MergeHost,
    repository: Repository,
    git_repo: GitRepo,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no user.name anywhere
    for variable in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{variable}_NAME", "Mallory")
        monkeypatch.setenv(f"GIT_{variable}_EMAIL", "mallory@example.com")
        monkeypatch.setenv(f"GIT_{variable}_DATE", "2001-01-01T00:00:00Z")
    chain = build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    assert git_repo.log("-1", chain.sha, fmt="%an <%ae>|%cn <%ce>") == [f"{KEEPGREEN}|{KEEPGREEN}"]
    years = git_repo.log("-1", "--date=format:%Y", chain.sha, fmt="%ad %cd")[0].split()
    assert "2001" not in years


# --- landing by method -------------------------------------------------------------------


def test_merge_commit_fast_forwards_to_the_tested_commits(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    heads = [git_repo.open_pr(n, {f"pr{n}.txt": f"{n}\n"}) for n in (1, 2)]
    chain = build(host, repository, base, [(1, heads[0]), (2, heads[1])])

    first = land(host, repository, landing(git_repo, chain, 0, method=MergeMethod.MERGE_COMMIT))
    assert first == chain.links[0].commit
    second = land(host, repository, landing(git_repo, chain, 1, method=MergeMethod.MERGE_COMMIT))
    assert second == chain.links[1].commit == git_repo.tip()
    assert git_repo.tree("main") == chain.links[1].tree
    assert git_repo.log(f"{base}..main", "--first-parent") == [
        f"Merging {heads[1]} into keepgreen/test",
        f"Merging {heads[0]} into keepgreen/test",
    ]


def test_squash_lands_one_commit_by_the_pr_author(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    git_repo.open_pr(1, {"a.txt": "a\n"}, author="Grace Hopper")
    head = git_repo.add_to_pr(1, {"b.txt": "b\n"}, "more", author="Grace Hopper")
    chain = build(host, repository, base, [(1, head)])

    new_tip = land(host, repository, landing(git_repo, chain, 0, method=MergeMethod.SQUASH))
    assert new_tip == git_repo.tip()
    assert git_repo.parents(new_tip) == [base]
    assert git_repo.tree(new_tip) == chain.links[0].tree
    assert git_repo.log("-1", new_tip, fmt="%an <%ae>|%cn <%ce>") == [
        f"Grace Hopper <ada@example.com>|{KEEPGREEN}"
    ]
    assert git_repo.message(new_tip) == "Title of 1 (#1)\n\nKeepgreen-Land: token-1"


def test_rebase_replays_the_pr_commits_with_their_authors(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    git_repo.open_pr(1, {"a.txt": "a\n"}, title="first", author="Grace Hopper")
    git_repo.add_to_pr(1, {"b.txt": "b\n"}, "second\n\nwhy it matters", author="Alan Turing")
    head = git_repo.add_to_pr(
        1,
        {"a.txt": "a2\n"},
        "third\n\nSigned-off-by: Grace <g@x>",
        author="Grace Hopper",
        date="2001-02-03T04:05:06+01:00",
    )
    git_repo.commit({"main.txt": "main\n"}, "main moves on")  # the PR is tested on a newer base
    tested_base = git_repo.tip()
    chain = build(host, repository, tested_base, [(1, head)])

    new_tip = land(host, repository, landing(git_repo, chain, 0, method=MergeMethod.REBASE))
    assert git_repo.tree(new_tip) == chain.links[0].tree
    replayed = git_repo.log(f"{tested_base}..{new_tip}", fmt="%s|%an|%ae|%cn|%P")
    assert [line.split("|")[:4] for line in replayed] == [
        ["third", "Grace Hopper", "ada@example.com", "keepgreen"],
        ["second", "Alan Turing", "ada@example.com", "keepgreen"],
        ["first", "Grace Hopper", "ada@example.com", "keepgreen"],
    ]
    assert all(len(line.split("|")[4].split()) == 1 for line in replayed)  # no merges
    assert git_repo.parents(f"{new_tip}~2") == [tested_base]
    assert git_repo.log("-1", new_tip, fmt="%aI") == ["2001-02-03T04:05:06+01:00"]
    # The trailer joins the trailer block already there; earlier messages are copied exactly.
    assert git_repo.message(new_tip) == (
        "third\n\nSigned-off-by: Grace <g@x>\nKeepgreen-Land: token-1"
    )
    assert git_repo.message(f"{new_tip}~1") == "second\n\nwhy it matters"
    assert git_repo.message(f"{new_tip}~2") == "first"


def test_rebase_of_a_pr_with_nothing_of_its_own_is_a_tree_mismatch(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    head = git_repo.open_pr(1, {"a.txt": "a\n"})
    git_repo.git("update-ref", "refs/pull/2/head", head)  # PR 2 is PR 1 again
    chain = build(host, repository, git_repo.tip(), [(1, head), (2, head)])
    land(host, repository, landing(git_repo, chain, 0, method=MergeMethod.REBASE))
    tip = git_repo.tip()
    result = host.land(repository, landing(git_repo, chain, 1, method=MergeMethod.REBASE))
    assert result == LandResult(None, "tree_mismatch")
    assert git_repo.tip() == tip


def test_rebase_refuses_when_the_replay_would_not_land_the_tested_tree(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    git_repo.open_pr(1, {"a.txt": "a\n"})
    # A merge in the PR that adds a file of its own: replaying the PR's plain commits drops it.
    git_repo.commit({"main.txt": "main\n"}, "main moves on")
    git_repo.git("checkout", "-q", "pr-1")
    git_repo.git("merge", "-q", "--no-ff", "--no-commit", "main")
    (git_repo.path / "evil.txt").write_text("evil\n")
    git_repo.git("add", "evil.txt")
    git_repo.git("commit", "-q", "-m", "merge main")
    head = git_repo.git("rev-parse", "HEAD")
    git_repo.git("checkout", "-q", "main")
    tip = git_repo.tip()
    chain = build(host, repository, tip, [(1, head)])
    assert "evil.txt" in git_repo.files(chain.sha)

    result = host.land(repository, landing(git_repo, chain, 0, method=MergeMethod.REBASE))
    assert result == LandResult(None, "tree_mismatch")
    assert git_repo.tip() == tip


# --- compare-and-swap and idempotency ----------------------------------------------------


@pytest.mark.parametrize("method", list(MergeMethod))
def test_a_branch_elsewhere_than_expected_is_not_touched(
    host: MergeHost, repository: Repository, git_repo: GitRepo, method: MergeMethod
) -> None:
    base = git_repo.tip()
    chain = build(host, repository, base, [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    foreign = git_repo.commit({"x.txt": "x\n"}, "pushed by hand")
    result = host.land(repository, landing(git_repo, chain, 0, method=method, expected_tip=base))
    assert result == LandResult(None, "target_moved")
    assert git_repo.tip() == foreign


def test_a_missing_target_branch_has_moved(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    chain = build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    to_land = landing(git_repo, chain, 0, method=MergeMethod.SQUASH)
    git_repo.git("checkout", "-q", "--detach")
    git_repo.git("branch", "-D", "main")
    assert host.land(repository, to_land) == LandResult(None, "target_moved")


@pytest.mark.parametrize("method", list(MergeMethod))
def test_repeating_a_landing_returns_the_tip_it_made(
    host: MergeHost, repository: Repository, git_repo: GitRepo, method: MergeMethod
) -> None:
    base = git_repo.tip()
    chain = build(host, repository, base, [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    to_land = landing(git_repo, chain, 0, method=method)
    new_tip = land(host, repository, to_land)
    commits = git_repo.log("main")

    assert host.land(repository, to_land) == LandResult(new_tip)
    assert git_repo.tip() == new_tip
    assert git_repo.log("main") == commits
    # Another landing's token is not this one.
    other = landing(git_repo, chain, 0, method=method, expected_tip=base, token="other")
    if method is not MergeMethod.MERGE_COMMIT:  # a fast-forward is recognised by its commit
        assert host.land(repository, other) == LandResult(None, "target_moved")


def test_a_swap_that_loses_the_race_reports_the_move(
    host: MergeHost, repository: Repository, git_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    to_land = landing(git_repo, chain, 0, method=MergeMethod.SQUASH)
    racer = git_repo.git("commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "raced")
    swap = Git.update_ref

    def racing_swap(self: Git, ref: str, new: str, *, old: str | None = None, reason: str) -> bool:
        git_repo.git("update-ref", "refs/heads/main", racer)
        return swap(self, ref, new, old=old, reason=reason)

    monkeypatch.setattr(Git, "update_ref", racing_swap)
    assert host.land(repository, to_land) == LandResult(None, "target_moved")
    assert git_repo.tip() == racer


def test_a_swap_that_lost_to_the_same_landing_reports_it_landed(
    host: MergeHost, repository: Repository, git_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    to_land = landing(git_repo, chain, 0, method=MergeMethod.SQUASH)
    twin = git_repo.git(
        "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "twin\n\nKeepgreen-Land: token-1"
    )
    swap = Git.update_ref

    def racing_swap(self: Git, ref: str, new: str, *, old: str | None = None, reason: str) -> bool:
        git_repo.git("update-ref", "refs/heads/main", twin)
        return swap(self, ref, new, old=old, reason=reason)

    monkeypatch.setattr(Git, "update_ref", racing_swap)
    assert host.land(repository, to_land) == LandResult(twin)
    assert git_repo.tip() == twin


# --- what the branch holds before landing ------------------------------------------------


@pytest.mark.parametrize("method", list(MergeMethod))
def test_exact_refuses_a_branch_with_foreign_changes(
    host: MergeHost, repository: Repository, git_repo: GitRepo, method: MergeMethod
) -> None:
    chain = build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    foreign = git_repo.commit({"x.txt": "x\n"}, "another lane")
    result = host.land(repository, landing(git_repo, chain, 0, method=method, exact=True))
    assert result == LandResult(None, "tree_mismatch")
    assert git_repo.tip() == foreign


@pytest.mark.parametrize("method", list(MergeMethod))
def test_a_lane_lands_onto_a_disjoint_foreign_change(
    host: MergeHost, repository: Repository, git_repo: GitRepo, method: MergeMethod
) -> None:
    chain = build(host, repository, git_repo.tip(), [(1, git_repo.open_pr(1, {"a.txt": "a\n"}))])
    foreign = git_repo.commit({"x.txt": "x\n"}, "another lane")
    new_tip = land(host, repository, landing(git_repo, chain, 0, method=method, exact=False))
    assert git_repo.files(new_tip) == {"README.md": "hello", "a.txt": "a", "x.txt": "x"}
    assert git_repo.parents(new_tip)[0] == foreign
    assert git_repo.log("-1", new_tip, fmt="%B")[-1] == "Keepgreen-Land: token-1"


def test_a_lane_refuses_a_conflicting_foreign_change(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    head = git_repo.open_pr(1, {"README.md": "from the pr\n"})
    chain = build(host, repository, git_repo.tip(), [(1, head)])
    foreign = git_repo.commit({"README.md": "from another lane\n"}, "another lane")
    result = host.land(
        repository, landing(git_repo, chain, 0, method=MergeMethod.MERGE_COMMIT, exact=False)
    )
    assert result == LandResult(None, "conflict")
    assert git_repo.tip() == foreign


def test_a_pr_after_one_landed_from_another_chain_gets_a_merge_commit(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    base = git_repo.tip()
    heads = [git_repo.open_pr(n, {f"pr{n}.txt": f"{n}\n"}) for n in (1, 2)]
    ours = build(host, repository, base, [(1, heads[0]), (2, heads[1])], branch="kg/ours")
    theirs = build(host, repository, base, [(1, heads[0])], branch="kg/theirs")
    landed = land(host, repository, landing(git_repo, theirs, 0, method=MergeMethod.MERGE_COMMIT))
    assert landed != ours.links[0].commit
    assert git_repo.tree(landed) == ours.links[0].tree

    new_tip = land(host, repository, landing(git_repo, ours, 1, method=MergeMethod.MERGE_COMMIT))
    assert new_tip != ours.links[1].commit
    assert git_repo.parents(new_tip) == [landed, heads[1]]
    assert git_repo.tree(new_tip) == ours.links[1].tree
    assert (
        git_repo.message(new_tip) == "Merge pull request #2: Title of 2\n\nKeepgreen-Land: token-2"
    )
    assert git_repo.log("-1", new_tip, fmt="%an <%ae>|%cn <%ce>") == [f"{KEEPGREEN}|{KEEPGREEN}"]
    git_repo.git("merge-base", "--is-ancestor", landed, new_tip)  # raises if commits were lost


def test_a_lane_lands_only_the_change_its_pr_made_in_the_chain(
    host: MergeHost, repository: Repository, git_repo: GitRepo
) -> None:
    heads = [git_repo.open_pr(n, {f"pr{n}.txt": f"{n}\n"}) for n in (1, 2)]
    chain = build(host, repository, git_repo.tip(), [(1, heads[0]), (2, heads[1])])
    git_repo.commit({"x.txt": "x\n"}, "another lane")
    new_tip = land(
        host, repository, landing(git_repo, chain, 1, method=MergeMethod.SQUASH, exact=False)
    )
    # PR 1 is in the chain before PR 2 but has not landed: it must not ride along.
    assert set(git_repo.files(new_tip)) == {"README.md", "pr2.txt", "x.txt"}
