"""The remote code host against real git servers on loopback (`git daemon` and smart HTTP with a
token), every MergeHost method: reads through the mirror, test branches pushed to and deleted
from the server, landing by compare-and-swap on the server's branch.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.adapters.git.remote_host import CodeHosts, RemoteGitHost, is_remote, mirror_path
from keepgreen.app.ports import BuildConflict, CodeHostError, Landing, TestCommit
from keepgreen.app.telemetry import Telemetry
from keepgreen.bootstrap import CodeOwnersFiles
from keepgreen.core.enums import IncidentKind, Mergeability, MergeMethod
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import GitAuth, Repository
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import git_daemon, http_git_server, self_signed_certificate
from tests.support.processes import all_command_lines
from tests.support.wire import REPO

TOKEN = "ghs_RemoteHostTokenNeverShown77"
USER = "x-access-token"


@dataclass
class Served:
    """A developer's clone (`work`), the bare repository the server serves, and keepgreen's
    view of it.
    """

    work: GitRepo
    bare: Path
    repo: Repository
    host: RemoteGitHost

    def publish(self) -> None:
        """Push the work clone's main and PR refs straight into the served repository."""
        self.work.git(
            "push", "-q", "--force", str(self.bare), "main:main", "refs/pull/*:refs/pull/*"
        )

    def server(self, *args: str) -> str:
        result = subprocess.run(
            ["git", f"--git-dir={self.bare}", *args], capture_output=True, text=True, check=True
        )
        return result.stdout.strip()

    def server_tip(self, branch: str) -> str | None:
        result = subprocess.run(
            ["git", f"--git-dir={self.bare}", "rev-parse", "--verify", "--quiet", branch],
            capture_output=True,
            text=True,
            check=False,
        )
        return result.stdout.strip() or None

    def server_branches(self) -> list[str]:
        return self.server("for-each-ref", "--format=%(refname:short)", "refs/heads").split()


@pytest.fixture(params=["git-daemon", "http-token", "https-token"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Served]:
    work = GitRepo(tmp_path / "work")
    base = tmp_path / "served"
    base.mkdir()
    bare = base / "widgets.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    host = RemoteGitHost(data_dir=tmp_path / "data", fetch_interval=0.0, timeout=20)
    if request.param == "git-daemon":
        with git_daemon(base, writable=True) as url:
            repo = _repository(f"{url}/widgets.git", GitAuth())
            yield Served(work, bare, repo, host)
    else:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        tls = None
        if request.param == "https-token":
            # The server's self-signed certificate, trusted as an operator trusts a private CA.
            tls = self_signed_certificate(tmp_path / "tls")
            monkeypatch.setenv("GIT_SSL_CAINFO", str(tls.certificate))
        with http_git_server(base, user=USER, password=TOKEN, tls=tls) as server:
            repo = _repository(f"{server.url}/widgets.git", GitAuth(token_file=str(token_file)))
            yield Served(work, bare, repo, host)
            assert any(a is not None for a in server.authorizations)  # the token was sent
            assert not [line for line in server.processes if TOKEN in line]


def _repository(url: str, auth: GitAuth) -> Repository:
    return Repository(
        RepositoryId("r1"),
        OrgId("o"),
        REPO,
        url,
        None,
        datetime(2026, 1, 1, tzinfo=UTC),
        auth=auth,
    )


def _landing(
    served: Served, built: TestCommit, *, expected_tip: str, method: MergeMethod
) -> Landing:
    link = built.links[0]
    return Landing(
        target_branch="main",
        expected_tip=expected_tip,
        method=method,
        link=link,
        parent_commit=built.base_sha,
        parent_tree=served.host.tree_of(served.repo, built.base_sha),
        exact=True,
        title="Add a",
        author="Ada Author",
        token="token-1",
    )


def test_reads_come_from_the_server_through_the_mirror(served: Served, tmp_path: Path) -> None:
    head = served.work.open_pr(1, {"a.txt": "a\n"}, title="Add a", author="Grace Hopper")
    clash = served.work.open_pr(2, {"README.md": "theirs\n"})
    served.work.commit({"README.md": "ours\n"}, "main moves")
    served.publish()
    host, repo = served.host, served.repo

    info = host.pull_request(repo, 1)
    assert info is not None
    assert (info.head_sha, info.title, info.author) == (head, "Add a", "Grace Hopper")
    assert host.pull_request(repo, 9) is None
    assert host.pull_request_heads(repo, [1, 2, 9]) == {1: head, 2: clash, 9: None}
    assert host.branch_tip(repo, "main") == served.work.tip("main")
    assert host.branch_tip(repo, "nope") is None
    assert host.mergeability(repo, head_sha=head, target_branch="main") is Mergeability.MERGEABLE
    # A head is asked about by its PR first (as the worker and submitPullRequest do), which
    # brings its commits into the mirror.
    clashing = host.pull_request(repo, 2)
    assert clashing is not None
    assert clashing.head_sha == clash
    assert host.mergeability(repo, head_sha=clash, target_branch="main") is (
        Mergeability.NOT_MERGEABLE
    )
    assert host.is_up_to_date(repo, head_sha=served.work.tip("main"), target_branch="main")
    assert not host.is_up_to_date(repo, head_sha=head, target_branch="main")
    assert host.tree_of(repo, head) == served.work.tree(head)

    mirror = mirror_path(tmp_path / "data", "r1")
    assert (mirror / "HEAD").is_file()
    config = (mirror / "config").read_text()
    assert repo.git_url not in config  # no remote stored: every call names the URL
    assert TOKEN not in config

    # A PR ref deleted on the server is gone after the next fetch, in the mirror too.
    served.server("update-ref", "-d", "refs/pull/1/head")
    assert host.pull_request(repo, 1) is None


def test_a_test_branch_is_pushed_to_the_server_and_deleted_from_it(served: Served) -> None:
    head = served.work.open_pr(1, {"a.txt": "a\n"})
    clash_a = served.work.open_pr(2, {"c.txt": "one\n"})
    clash_b = served.work.open_pr(3, {"c.txt": "two\n"})
    served.publish()
    host, repo = served.host, served.repo
    base = served.work.tip("main")
    branch = "keepgreen-merge/pr-1/run1"

    built = host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch=branch)
    assert isinstance(built, TestCommit)
    assert served.server_tip(f"refs/heads/{branch}") == built.links[0].commit
    assert served.server_tip("refs/heads/main") == base  # untouched

    # Building again (another base) replaces the branch on the server.
    rebuilt = host.build_test_commit(repo, base_sha=base, prs=[(2, clash_a)], branch=branch)
    assert isinstance(rebuilt, TestCommit)
    assert served.server_tip(f"refs/heads/{branch}") == rebuilt.links[0].commit

    conflict = host.build_test_commit(
        repo, base_sha=base, prs=[(2, clash_a), (3, clash_b)], branch="keepgreen-merge/x"
    )
    assert conflict == BuildConflict(3)
    assert "keepgreen-merge/x" not in served.server_branches()

    host.delete_branch(repo, branch)
    assert branch not in served.server_branches()
    host.delete_branch(repo, branch)  # already gone: fine
    assert host.branch_tip(repo, branch) is None


def test_landing_moves_the_servers_main_by_compare_and_swap(served: Served) -> None:
    head = served.work.open_pr(1, {"a.txt": "a\n"})
    served.publish()
    host, repo = served.host, served.repo
    base = served.work.tip("main")
    built = host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch="kg/1")
    assert isinstance(built, TestCommit)

    landed = host.land(repo, _landing(served, built, expected_tip=base, method=MergeMethod.SQUASH))
    assert landed.problem is None
    assert landed.new_tip is not None
    assert served.server_tip("refs/heads/main") == landed.new_tip
    assert served.server("rev-parse", f"{landed.new_tip}^{{tree}}") == built.links[0].tree
    assert host.branch_tip(repo, "main") == landed.new_tip
    # Landing again (a retry after a lost answer) finds it done.
    again = host.land(repo, _landing(served, built, expected_tip=base, method=MergeMethod.SQUASH))
    assert again.new_tip == landed.new_tip


def test_landing_refuses_when_someone_pushed_to_main_meanwhile(served: Served) -> None:
    head = served.work.open_pr(1, {"a.txt": "a\n"})
    served.publish()
    host, repo = served.host, served.repo
    base = served.work.tip("main")
    built = host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch="kg/1")
    assert isinstance(built, TestCommit)
    assert host.branch_tip(repo, "main") == base  # the mirror has seen main at base

    foreign = served.work.commit({"f.txt": "foreign\n"}, "a foreign push")
    served.publish()

    result = host.land(
        repo, _landing(served, built, expected_tip=base, method=MergeMethod.MERGE_COMMIT)
    )
    assert (result.new_tip, result.problem) == (None, "target_moved")
    assert served.server_tip("refs/heads/main") == foreign  # never clobbered
    assert host.branch_tip(repo, "main") == foreign


def test_a_push_refused_because_main_moved_on_the_way_is_target_moved(served: Served) -> None:
    """The server's main moves after the mirror's fetch, while the landing push is in flight
    (a pre-receive hook moves it): the server refuses the swap, keepgreen reads main again
    and answers target_moved; the mirror's main follows the server, not the unpushed commit.
    """
    head = served.work.open_pr(1, {"a.txt": "a\n"})
    served.publish()
    base = served.work.tip("main")
    foreign = served.work.commit({"f.txt": "foreign\n"}, "a foreign push")
    served.work.git("push", "-q", str(served.bare), f"{foreign}:refs/keep/foreign")
    host, repo = served.host, served.repo
    built = host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch="kg/1")
    assert isinstance(built, TestCommit)
    hook = served.bare / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\nunset GIT_QUARANTINE_PATH\n"
        f'git update-ref refs/heads/main {foreign} {base}\nrm -f "$0"\nexit 0\n'
    )
    hook.chmod(0o755)

    result = host.land(repo, _landing(served, built, expected_tip=base, method=MergeMethod.SQUASH))
    assert (result.new_tip, result.problem) == (None, "target_moved")
    assert not hook.exists()  # the hook ran: main moved during the push
    assert served.server_tip("refs/heads/main") == foreign
    assert host.branch_tip(repo, "main") == foreign


def test_a_push_the_server_refuses_is_an_error_without_the_token(served: Served) -> None:
    head = served.work.open_pr(1, {"a.txt": "a\n"})
    served.publish()
    base = served.work.tip("main")
    hook = served.bare / "hooks" / "pre-receive"
    # The hook colours its words and says too much: only the readable text comes through.
    hook.write_text(
        "#!/bin/sh\nprintf '\\033[31mrefusing everything\\033[0m %0500d\\n' 0 >&2\nexit 1\n"
    )
    hook.chmod(0o755)
    host, repo = served.host, served.repo
    with pytest.raises(CodeHostError) as raised:
        host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch="kg/1")
    assert TOKEN not in str(raised.value)
    assert raised.value.kind is IncidentKind.PUSH_REJECTED
    assert "refused a push" in str(raised.value)
    assert "the server said: refusing everything" in str(raised.value)  # the hook's words
    assert "git-token-file" not in str(raised.value)  # not a credentials problem
    assert "\x1b" not in str(raised.value)
    assert len(str(raised.value)) < 500
    hook.unlink()
    built = host.build_test_commit(repo, base_sha=base, prs=[(1, head)], branch="kg/1")
    assert isinstance(built, TestCommit)
    # A hook that echoes what it was given: the token (over http) must not come back out.
    said = TOKEN if repo.auth.token_file is not None else "nothing secret"
    hook.write_text(f"#!/bin/sh\necho 'main is frozen; {said}' >&2\nexit 1\n")
    hook.chmod(0o755)
    result = host.land(repo, _landing(served, built, expected_tip=base, method=MergeMethod.SQUASH))
    # The server's own refusal (not the lease): a problem of its own, with what the server said.
    assert (result.new_tip, result.problem) == (None, "push_rejected")
    assert result.detail is not None
    assert "refs/heads/main" in result.detail
    assert "pre-receive hook declined" in result.detail
    assert "main is frozen" in result.detail
    assert TOKEN not in result.detail
    assert served.server_tip("refs/heads/main") == base
    assert host.branch_tip(repo, "main") == base  # the mirror did not move either
    assert not [line for line in all_command_lines() if TOKEN in line]


def test_an_unreachable_server_is_a_code_host_error(tmp_path: Path) -> None:
    host = RemoteGitHost(data_dir=tmp_path / "data", fetch_interval=0.0, timeout=5)
    repo = _repository("http://127.0.0.1:9/widgets.git", GitAuth())
    with pytest.raises(CodeHostError, match=r"127\.0\.0\.1:9"):
        host.branch_tip(repo, "main")


def test_reads_within_the_fetch_interval_fetch_once(tmp_path: Path) -> None:
    work = GitRepo(tmp_path / "work")
    base = tmp_path / "served"
    base.mkdir()
    bare = base / "widgets.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work.path), str(bare)], check=True)
    now = [100.0]
    host = RemoteGitHost(data_dir=tmp_path / "data", fetch_interval=1.0, monotonic=lambda: now[0])
    with git_daemon(base) as url:
        repo = _repository(f"{url}/widgets.git", GitAuth())
        first = host.branch_tip(repo, "main")
        moved = work.commit({"x": "x\n"}, "moves")
        work.git("push", "-q", str(bare), "main:main")
        assert host.branch_tip(repo, "main") == first  # cached: no second fetch yet
        now[0] += 1.5
        assert host.branch_tip(repo, "main") == moved


@pytest.mark.parametrize(
    ("url", "remote"),
    [
        ("https://git.example.com/acme/widgets.git", True),
        ("http://127.0.0.1:8080/widgets.git", True),
        ("git://127.0.0.1/widgets.git", True),
        ("ssh://git@git.example.com/acme/widgets.git", True),
        ("git@git.example.com:acme/widgets.git", True),
        ("/srv/git/widgets.git", False),
        ("file:///srv/git/widgets.git", False),
        ("./widgets", False),
    ],
)
def test_the_code_hosts_send_each_url_to_its_host(url: str, remote: bool) -> None:
    assert is_remote(_repository(url, GitAuth())) is remote


def test_the_code_hosts_serve_local_and_remote_repositories_side_by_side(
    served: Served, tmp_path: Path
) -> None:
    local = GitRepo(tmp_path / "local")
    served.publish()
    hosts = CodeHosts(local=LocalGitHost(), remote=served.host)
    assert hosts.branch_tip(_repository(str(local.path), GitAuth()), "main") == local.tip()
    assert hosts.branch_tip(served.repo, "main") == served.work.tip("main")


# -- what a fetch asks for ------------------------------------------------------------------------


@dataclass
class Counted:
    """A remote host on a clock the test moves, counting its `git fetch` processes."""

    host: RemoteGitHost
    telemetry: Telemetry
    now: list[float]

    def fetches(self) -> int:
        return int(
            sum(
                self.telemetry.registry.get_sample_value(
                    "keepgreen_git_calls_total", {"operation": "fetch", "result": result}
                )
                or 0
                for result in ("ok", "exit_nonzero", "timeout", "error")
            )
        )

    def later(self, seconds: float = 1.5) -> None:
        self.now[0] += seconds


def _counted(tmp_path: Path) -> Counted:
    telemetry = Telemetry()
    now = [1000.0]
    host = RemoteGitHost(
        data_dir=tmp_path / "counted",
        telemetry=telemetry,
        fetch_interval=1.0,
        wanted_seconds=600.0,
        timeout=20,
        monotonic=lambda: now[0],
    )
    return Counted(host, telemetry, now)


def _mirror_refs(mirror: Path) -> list[str]:
    result = subprocess.run(
        ["git", f"--git-dir={mirror}", "for-each-ref", "--format=%(refname)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(result.stdout.split())


def _pass(counted: Counted, repo: Repository, numbers: Sequence[int]) -> dict[int, str | None]:
    """What a worker pass reads of a queue on main: the tip, each PR, their mergeability."""
    host = counted.host
    host.branch_tip(repo, "main")
    heads: dict[int, str | None] = {}
    for number in numbers:
        info = host.pull_request(repo, number)
        heads[number] = None if info is None else info.head_sha
        if info is not None:
            host.mergeability(repo, head_sha=info.head_sha, target_branch="main")
            host.is_up_to_date(repo, head_sha=info.head_sha, target_branch="main")
    return heads


def test_a_pass_fetches_once_and_only_the_wanted_refs(served: Served, tmp_path: Path) -> None:
    """Once the host knows what a queue reads (the target and three PRs), a pass costs one
    fetch however many PRs it reads; a branch, a PR and a tag nobody asked about never reach
    the mirror.
    """
    for number in (1, 2, 3, 4):
        served.work.open_pr(number, {f"{number}.txt": f"{number}\n"})
    served.work.git("tag", "v1")
    served.publish()
    served.work.git("push", "-q", str(served.bare), "pr-4:refs/heads/other", "v1")
    counted = _counted(tmp_path)
    repo = served.repo

    _pass(counted, repo, [1, 2, 3])
    # Learning what is wanted: the first read of each ref fetched it at once (alone).
    assert counted.fetches() == 4
    mirror = mirror_path(tmp_path / "counted", "r1")
    assert _mirror_refs(mirror) == [
        "refs/heads/main",
        "refs/pull/1/head",
        "refs/pull/2/head",
        "refs/pull/3/head",
    ]

    moved = served.work.add_to_pr(2, {"2b.txt": "more\n"}, "more")
    served.publish()
    counted.later()
    before = counted.fetches()
    heads = _pass(counted, repo, [1, 2, 3])
    assert counted.fetches() == before + 1  # one fetch served the whole pass
    assert heads[2] == moved
    _pass(counted, repo, [1, 2, 3])  # within the interval: no fetch at all
    assert counted.fetches() == before + 1
    assert "refs/heads/other" not in _mirror_refs(mirror)
    assert "refs/pull/4/head" not in _mirror_refs(mirror)
    assert "refs/tags/v1" not in _mirror_refs(mirror)

    # A read of something new within the interval fetches it at once, and it is wanted then.
    assert counted.host.branch_tip(repo, "other") == served.work.tip("pr-4")
    assert counted.fetches() == before + 2
    assert "refs/heads/other" in _mirror_refs(mirror)


def test_a_pr_ref_deleted_on_the_server_is_gone_and_the_rest_is_still_fetched(
    served: Served, tmp_path: Path
) -> None:
    for number in (1, 2, 3):
        served.work.open_pr(number, {f"{number}.txt": f"{number}\n"})
    served.publish()
    counted = _counted(tmp_path)
    repo = served.repo
    _pass(counted, repo, [1, 2, 3])

    served.server("update-ref", "-d", "refs/pull/2/head")
    moved = served.work.add_to_pr(3, {"3b.txt": "more\n"}, "more")
    served.work.git("push", "-q", "--force", str(served.bare), "refs/pull/3/head")
    counted.later()
    before = counted.fetches()
    heads = _pass(counted, repo, [1, 2, 3])
    assert heads == {1: served.work.tip("refs/pull/1/head"), 2: None, 3: moved}
    # The fetch git refused for the missing ref, then the same fetch without it.
    assert counted.fetches() == before + 2
    mirror = mirror_path(tmp_path / "counted", "r1")
    assert "refs/pull/2/head" not in _mirror_refs(mirror)

    # The gone PR is no longer wanted: the next pass over the others fetches once again.
    counted.later()
    before = counted.fetches()
    assert _pass(counted, repo, [1, 3]) == {1: served.work.tip("refs/pull/1/head"), 3: moved}
    assert counted.fetches() == before + 1


def test_a_target_branch_deleted_on_the_server_has_no_tip(served: Served, tmp_path: Path) -> None:
    served.work.git("branch", "release")
    served.publish()
    served.work.git("push", "-q", str(served.bare), "release")
    counted = _counted(tmp_path)
    repo = served.repo
    assert counted.host.branch_tip(repo, "release") == served.work.tip()
    assert counted.host.branch_tip(repo, "main") == served.work.tip()

    served.server("update-ref", "-d", "refs/heads/release")
    counted.later()
    assert counted.host.branch_tip(repo, "release") is None
    assert counted.host.branch_tip(repo, "main") == served.work.tip()


def test_a_ref_nobody_asks_about_any_more_is_no_longer_fetched(
    served: Served, tmp_path: Path
) -> None:
    served.work.open_pr(1, {"1.txt": "1\n"})
    first = served.work.open_pr(2, {"2.txt": "2\n"})
    served.publish()
    counted = _counted(tmp_path)
    repo = served.repo
    _pass(counted, repo, [1, 2])
    served.work.add_to_pr(2, {"2b.txt": "more\n"}, "more")
    served.publish()

    counted.later(601.0)  # PR 2 left the queue: only main and PR 1 are read from now on
    _pass(counted, repo, [1])
    mirror = mirror_path(tmp_path / "counted", "r1")
    assert counted.host.mirror(repo).resolve("refs/pull/2/head") == first  # not fetched
    # Asked again, it is fetched again at once.
    info = counted.host.pull_request(repo, 2)
    assert info is not None
    assert info.head_sha == served.work.tip("refs/pull/2/head")
    assert "refs/pull/2/head" in _mirror_refs(mirror)


def test_test_branches_stay_in_the_mirror_across_fetches(served: Served, tmp_path: Path) -> None:
    head = served.work.open_pr(1, {"a.txt": "a\n"})
    served.publish()
    counted = _counted(tmp_path)
    repo = served.repo
    base = counted.host.branch_tip(repo, "main")
    assert base is not None
    before = counted.fetches()
    built = counted.host.build_test_commit(
        repo, base_sha=base, prs=[(1, head)], branch="trunk-merge/pr-1/run1"
    )
    assert isinstance(built, TestCommit)
    # Its commits had been read through the mirror (main) or were fetched by their PR.
    assert counted.fetches() == before + 1
    for _ in range(2):
        counted.later()
        _pass(counted, repo, [1])
    mirror = mirror_path(tmp_path / "counted", "r1")
    assert "refs/heads/trunk-merge/pr-1/run1" in _mirror_refs(mirror)
    assert served.server_tip("refs/heads/trunk-merge/pr-1/run1") == built.links[0].commit


def test_a_gitlab_style_refspec_reads_merge_requests(served: Served, tmp_path: Path) -> None:
    head = served.work.open_pr(7, {"a.txt": "a\n"}, title="Add a")
    served.work.git(
        "push", "-q", str(served.bare), "main", "refs/pull/7/head:refs/merge-requests/7/head"
    )
    gitlab = replace(served.repo, pr_refspec="refs/merge-requests/{number}/head")
    counted = _counted(tmp_path)
    info = counted.host.pull_request(gitlab, 7)
    assert info is not None
    assert (info.head_sha, info.title) == (head, "Add a")
    assert counted.host.pull_request(served.repo, 7) is None  # nothing at refs/pull/7/head
    mirror = mirror_path(tmp_path / "counted", "r1")
    assert _mirror_refs(mirror) == ["refs/merge-requests/7/head"]


def test_codeowners_of_a_served_repository_come_from_its_mirrors_main(
    served: Served, tmp_path: Path
) -> None:
    owners = CodeOwnersFiles(telemetry=Telemetry(), data_dir=tmp_path / "data")
    assert owners.from_repository(served.repo) is None  # nothing fetched yet: no owners
    served.work.commit({".github/CODEOWNERS": "*.py @acme/python\n"}, "Add owners")
    served.publish()
    assert served.host.branch_tip(served.repo, "main") is not None  # the queue's pass fetches
    found = owners.from_repository(served.repo)
    assert found is not None
    assert found.owners_of("widgets/core.py") == ["@acme/python"]
    assert found.owners_of("README.md") == []


def test_a_server_whose_tls_certificate_is_not_trusted_is_a_tls_incident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GIT_SSL_CAINFO", raising=False)
    base = tmp_path / "served"
    base.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(base / "widgets.git")], check=True)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    tls = self_signed_certificate(tmp_path / "tls")
    host = RemoteGitHost(data_dir=tmp_path / "data", fetch_interval=0.0, timeout=20)
    with http_git_server(base, user=USER, password=TOKEN, tls=tls) as server:
        repo = _repository(f"{server.url}/widgets.git", GitAuth(token_file=str(token_file)))
        with pytest.raises(CodeHostError) as raised:
            host.branch_tip(repo, "main")
        assert server.authorizations == []  # the token never went to an untrusted server
    assert raised.value.kind is IncidentKind.TLS_UNTRUSTED
    assert "TLS certificate is not trusted" in str(raised.value)
    assert TOKEN not in str(raised.value)


def test_reads_between_fetches_resolve_refs_from_the_snapshot_until_a_write(
    served: Served, tmp_path: Path
) -> None:
    """After a fetch, a pass's reads of PR heads and the target resolve from the snapshot the
    fetch took (no git process per ref); a write to the mirror's refs drops it, so the next
    read asks git again, and sees what the write did.
    """
    one = served.work.open_pr(1, {"a.txt": "a\n"})
    two = served.work.open_pr(2, {"b.txt": "b\n"})
    served.publish()
    telemetry = Telemetry()
    host = RemoteGitHost(data_dir=tmp_path / "own", telemetry=telemetry, fetch_interval=600)
    repo = served.repo

    def calls(operation: str) -> float:
        value = telemetry.registry.get_sample_value(
            "keepgreen_git_calls_total", {"operation": operation, "result": "ok"}
        )
        return value or 0.0

    main = host.branch_tip(repo, "main")
    assert main is not None
    first = [host.pull_request(repo, n) for n in (1, 2)]  # new refs: fetched at once
    assert [pr.head_sha for pr in first if pr is not None] == [one, two]
    fetches, lookups = calls("fetch"), calls("rev-parse")

    for _ in range(3):  # three passes within the fetch interval
        assert host.branch_tip(repo, "main") == main
        heads = [host.pull_request(repo, n) for n in (1, 2)]
        assert [pr.head_sha for pr in heads if pr is not None] == [one, two]
    assert calls("fetch") == fetches  # nothing new was asked for
    assert calls("rev-parse") == lookups  # every ref came from the snapshot

    built = host.build_test_commit(repo, base_sha=main, prs=[(1, one)], branch="kg/1")
    assert isinstance(built, TestCommit)
    before = calls("rev-parse")
    assert host.branch_tip(repo, "main") == main
    assert calls("rev-parse") == before + 1  # the write dropped the snapshot: git answers
