"""The built-in code host: pull request N of a repository is the ref its PR refspec names
(`refs/pull/N/head` unless the repository sets another).

Reads and writes go straight to the repository at `git_url` (a local path or file:// URL, bare
or not). Merges never need a work tree: `git merge-tree --write-tree` (git >= 2.38) and
`git commit-tree` do them, and the target branch only moves by `git update-ref` compare-and-swap.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, TypeVar
from urllib.parse import urlparse

from keepgreen.adapters.git import merging
from keepgreen.adapters.git.merging import Git
from keepgreen.app.ports import (
    BuildConflict,
    CodeHostError,
    Landing,
    LandResult,
    TestCommit,
)
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import Mergeability
from keepgreen.core.git_urls import redact_url
from keepgreen.core.model import PullRequestInfo, Repository

_FIELD_SEPARATOR = "\x1f"
_BRANCHES = "refs/heads/"
K = TypeVar("K")
V = TypeVar("V")


def local_path(git_url: str) -> Path | None:
    """The filesystem path of a local repository URL, or None for a network remote."""
    parsed = urlparse(git_url)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if "://" in git_url:
        return None
    # git's own rule: a colon before the first slash makes `host:path` an scp-like remote.
    colon, slash = git_url.find(":"), git_url.find("/")
    if colon != -1 and (slash == -1 or colon < slash):
        return None
    return Path(git_url)


def locate_repository(git_url: str, *, telemetry: Telemetry | None = None) -> str:
    """The RepositoryLocator port: a local repository's absolute path (links resolved), once
    git confirms a repository is there; a network remote's URL as it is (the remote host
    checks those when it first fetches).
    """
    path = local_path(git_url)
    if path is None:
        return git_url
    resolved = path.expanduser().resolve()
    if not resolved.is_dir():
        raise CodeHostError(f"{git_url} is not a directory on this machine")
    git_dir = resolved / ".git" if (resolved / ".git").exists() else resolved
    if not (git_dir / "HEAD").is_file() or not (git_dir / "objects").is_dir():
        raise CodeHostError(f"{git_url} is not a git repository")
    # A repository git itself refuses (a broken HEAD, an unreadable config) is refused too.
    result = Git(git_dir, telemetry=telemetry).run("rev-parse", "--git-dir")
    if result.returncode != 0:
        raise CodeHostError(f"{git_url} is not a git repository git can read")
    return str(resolved)


class _Memo(Generic[K, V]):
    """A bounded, thread-safe memo of answers that cannot change: those about commits named by
    their ids (a commit's subject; whether one merges cleanly onto another), which every pass
    would otherwise ask git again for each queued PR.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._answers: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            answer = self._answers.get(key)
            if answer is not None:
                self._answers.move_to_end(key)
            return answer

    def put(self, key: K, answer: V) -> V:
        with self._lock:
            self._answers[key] = answer
            if len(self._answers) > self._size:
                self._answers.popitem(last=False)
        return answer


def _first_branch(decorations: str) -> str | None:
    """The first branch in name order of `git show --decorate-refs=refs/heads/ --format=%D`'s
    list (`HEAD -> main, feature-6`); None when it names none.
    """
    names = [name.removeprefix("HEAD -> ") for name in decorations.split(", ") if name]
    branches = sorted(name for name in names if name != "HEAD")
    return branches[0] if branches else None


class LocalGitHost:
    """The MergeHost port over repositories on this machine."""

    def __init__(self, *, telemetry: Telemetry | None = None) -> None:
        self._telemetry = telemetry
        self._subjects: _Memo[str, tuple[str, str, str | None]] = _Memo()
        self._merges: _Memo[tuple[str, str], bool] = _Memo()
        self._ancestry: _Memo[tuple[str, str], bool] = _Memo()

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        """The PR's head, title and author, and its branch (the first in name order of the
        branches whose tip is the head, when its ref is not a branch itself; none when no
        branch points there); None when its ref (`repo.pull_request_ref`) is missing.
        """
        ref = repo.pull_request_ref(number)
        git = self._open(repo)
        sha = git.resolve(ref)
        if sha is None:
            return None
        subject = self._subjects.get(sha)
        if subject is None:
            shown = git.run(
                "show",
                "-s",
                "--decorate-refs=refs/heads/",
                f"--format=%s{_FIELD_SEPARATOR}%an{_FIELD_SEPARATOR}%D",
                sha,
                check=True,
            )
            title, author, decorations = shown.stdout.rstrip("\n").split(_FIELD_SEPARATOR, 2)
            subject = self._subjects.put(sha, (title, author, _first_branch(decorations)))
        title, author, branch = subject
        if ref.startswith(_BRANCHES):
            branch = ref.removeprefix(_BRANCHES)
        return PullRequestInfo(
            number=number, head_sha=sha, title=title, author=author, head_branch=branch
        )

    def pull_request_heads(
        self,
        repo: Repository,
        numbers: Sequence[int],
        *,
        fresh: bool = False,  # noqa: ARG002 (the repository itself is read: always fresh)
    ) -> dict[int, str | None]:
        """Each PR's head commit (None: its ref is missing), read by one git process."""
        refs = {number: repo.pull_request_ref(number) for number in numbers}
        heads = self._open(repo).resolve_many(list(refs.values()))
        return {number: heads[ref] for number, ref in refs.items()}

    def mergeability(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> Mergeability:
        """Whether `head_sha` merges cleanly onto the target tip (`target_sha`, else resolved
        now); a missing target does not.
        """
        git = self._open(repo)
        target = target_sha or git.resolve(f"refs/heads/{target_branch}")
        if target is None:
            return Mergeability.NOT_MERGEABLE
        clean = self._merges.get((target, head_sha))
        if clean is None:
            clean = self._merges.put((target, head_sha), git.merge(target, head_sha) is not None)
        return Mergeability.MERGEABLE if clean else Mergeability.NOT_MERGEABLE  # or conflicts

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        """The commit `refs/heads/<branch>` points at; None when the branch does not exist."""
        return self._open(repo).resolve(f"refs/heads/{branch}")

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        """Merge each `(number, head_sha)` in order onto `base_sha` (merge commits by keepgreen,
        "Merging <head> into <branch>") and point `refs/heads/<branch>` at the last one, or at
        `base_sha` when there are no PRs. On a conflict no ref changes.
        """
        return merging.build_test_commit(
            self._open(repo), base_sha=base_sha, prs=prs, branch=branch
        )

    def delete_branch(self, repo: Repository, branch: str) -> None:
        """Delete `refs/heads/<branch>`; a branch already gone is fine."""
        # `update-ref -d` of a missing ref succeeds, so any failure here is a real one.
        self._open(repo).run("update-ref", "-d", f"refs/heads/{branch}", check=True)

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        """Move the target branch by compare-and-swap from `landing.expected_tip` to a commit
        whose tree is the tested one (merged onto foreign changes when `exact` is off), made by
        `landing.method`; repeating a landing that already happened returns the branch tip.
        """
        return merging.land(self._open(repo), landing)

    def is_up_to_date(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> bool:
        """Whether the target branch's tip (`target_sha`, else resolved now) is an ancestor of
        (or equal to) `head_sha`; False when the target branch does not exist.
        """
        git = self._open(repo)
        tip = target_sha or git.resolve(f"refs/heads/{target_branch}")
        if tip is None:
            return False
        contained = self._ancestry.get((tip, head_sha))
        if contained is None:
            contained = self._ancestry.put((tip, head_sha), git.is_ancestor(tip, head_sha))
        return contained

    def tree_of(self, repo: Repository, commit: str) -> str:
        """The tree id of `commit`; a commit missing from the repository is a CodeHostError."""
        return (
            self._open(repo)
            .run("rev-parse", "--verify", f"{commit}^{{tree}}", check=True)
            .stdout.strip()
        )

    def _open(self, repo: Repository) -> Git:
        return Git(self._git_dir(repo), telemetry=self._telemetry)

    @staticmethod
    def _git_dir(repo: Repository) -> Path:
        path = local_path(repo.git_url)
        if path is None:
            raise CodeHostError(
                f"repository {repo.ref} lives at {redact_url(repo.git_url)!r}; the built-in "
                "code host reads local repositories only"
            )
        if (path / ".git").exists():
            path = path / ".git"
        if not (path / "HEAD").exists():
            raise CodeHostError(f"repository {repo.ref}: no git repository at {path}")
        return path
