"""The MergeHost of repositories that come through the GitHub App.

Git goes over HTTPS through the remote git host, with the installation's token (its file is
renewed before each call that needs it). Whether a PR is open comes from the API, re-read at
most every `reconcile_seconds` (a `pull_request` webhook acts at once; this is the slow path
that makes a lost webhook harmless). Landing goes through GitHub's merge endpoint, so that
GitHub shows the PR as merged, and only when the tree GitHub will make is the tested tree:

- the branch must still be at the tip the run was tested on (else `target_moved`), with the
  tree the test commit was built on (else `tree_mismatch`: test again);
- the merge names the tested head (`sha`), so a PR pushed to meanwhile is refused (409), not
  merged untested;
- GitHub's merge and squash of one head onto that tip give the tree the test merge gave
  (git's own merge, which GitHub runs too); a rebase replays the PR's commits one by one, so
  keepgreen replays them first in its mirror and refuses (the PR fails, with the reason) when
  they would end on another tree; after the merge keepgreen reads the commit
  GitHub made and compares its tree with the tested one. A difference (someone pushed to the
  branch in the moment between the check and the merge, which a rule letting only the App
  push rules out) is logged as an error and recorded on the PR's feedback.

A PR that GitHub shows as merged already (keepgreen merged it, then stopped before recording
it) answers as landed: a landing repeated after a crash never merges twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from keepgreen.app.github.api import GithubApi, GithubPull, Where
from keepgreen.app.ports import (
    BuildConflict,
    Landing,
    LandResult,
    MergeHost,
    TestCommit,
)
from keepgreen.core.enums import Mergeability, MergeMethod
from keepgreen.core.model import PullRequestInfo, Repository

log = structlog.get_logger(__name__)


def where(repo: Repository) -> Where:
    """How the API names `repo` (a repository of the App)."""
    if repo.github_installation_id is None:
        raise ValueError(f"{repo.ref} did not come through the GitHub App")
    return Where(repo.github_installation_id, repo.ref.owner, repo.ref.name)


class FetchingHost(MergeHost, Protocol):
    """A git host whose mirror can be brought up to date on demand."""

    def refresh(self, repo: Repository, refs: Sequence[str]) -> None:
        """Fetch `refs` from the server now."""
        ...

    def rebase_tree(self, repo: Repository, *, head_sha: str, onto: str, since: str) -> str | None:
        """The tree replaying the commits of `head_sha` not in `since` onto `onto` ends on;
        None when they do not replay cleanly.
        """
        ...


class MergeFeedback(Protocol):
    """What the PR shows about its merge."""

    def merging(self, repo: Repository, number: int, head_sha: str) -> None:
        """Just before the merge: keepgreen's check run on the head passes (a branch rule
        that requires it lets the merge through).
        """
        ...

    def merged(self, repo: Repository, number: int, sha: str) -> None:
        """GitHub merged the PR as commit `sha`."""
        ...


@dataclass(frozen=True, slots=True)
class _Seen:
    pull: GithubPull | None
    at: float


class GithubHost:
    """MergeHost for the App's repositories: git through `git`, PRs and merges through `api`."""

    def __init__(
        self,
        *,
        git: FetchingHost,
        api: GithubApi,
        reconcile_seconds: float,
        feedback: MergeFeedback,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._git = git
        self._api = api
        self._reconcile_seconds = reconcile_seconds
        self._feedback = feedback
        self._monotonic = monotonic
        self._seen: dict[tuple[str, int], _Seen] = {}
        self._lock = threading.Lock()

    def _token(self, repo: Repository) -> None:
        """Renew the installation token's file when it is about to expire (git reads it)."""
        if repo.github_installation_id is not None:
            self._api.git_token_file(repo.github_installation_id)

    def _pull(self, repo: Repository, number: int, *, fresh: bool = False) -> GithubPull | None:
        key = (str(repo.id), number)
        now = self._monotonic()
        with self._lock:
            seen = self._seen.get(key)
        if not fresh and seen is not None and now - seen.at < self._reconcile_seconds:
            return seen.pull
        pull = self._api.pull_request(where(repo), number)
        with self._lock:
            self._seen[key] = _Seen(pull, now)
        return pull

    def forget(self, repo: Repository, number: int) -> None:
        """Read the PR from the API at its next use (a webhook said it changed)."""
        with self._lock:
            self._seen.pop((str(repo.id), number), None)

    # -- CodeHost ---------------------------------------------------------------------------

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        pull = self._pull(repo, number)
        if pull is None or pull.state != "open":
            return None
        self._token(repo)
        info = self._git.pull_request(repo, number)
        if info is None:
            return None
        return PullRequestInfo(
            number=number,
            head_sha=info.head_sha,
            title=pull.title,
            author=pull.author,
            head_branch=pull.head_ref,
        )

    def pull_request_heads(
        self, repo: Repository, numbers: Sequence[int], *, fresh: bool = False
    ) -> dict[int, str | None]:
        """Each PR's head, as `pull_request` has it (None: closed or gone); `fresh`: the API
        asked and the PR refs fetched now.
        """
        if fresh:
            self._token(repo)
            self._git.pull_request_heads(repo, numbers, fresh=True)
        heads: dict[int, str | None] = {}
        for number in numbers:
            if fresh:
                self.forget(repo, number)
            info = self.pull_request(repo, number)
            heads[number] = None if info is None else info.head_sha
        return heads

    def mergeability(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> Mergeability:
        self._token(repo)
        return self._git.mergeability(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    # -- MergeHost --------------------------------------------------------------------------

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        self._token(repo)
        return self._git.branch_tip(repo, branch)

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        self._token(repo)
        return self._git.build_test_commit(repo, base_sha=base_sha, prs=prs, branch=branch)

    def delete_branch(self, repo: Repository, branch: str) -> None:
        self._token(repo)
        self._git.delete_branch(repo, branch)

    def is_up_to_date(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> bool:
        self._token(repo)
        return self._git.is_up_to_date(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    def tree_of(self, repo: Repository, commit: str) -> str:
        self._token(repo)
        return self._git.tree_of(repo, commit)

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        """Merge the PR through GitHub when the tree it makes is the tested one (see above)."""
        number = landing.link.number
        target = f"refs/heads/{landing.target_branch}"
        self._token(repo)
        self._git.refresh(repo, [target])
        tip = self._git.branch_tip(repo, landing.target_branch)
        pull = self._pull(repo, number, fresh=True)
        if pull is not None and pull.merged:
            # Merged already: by this landing before a crash (or by hand). Never again.
            log.info("github pr already merged", repo=str(repo.ref), pr=number, tip=tip)
            if pull.merge_commit_sha is not None:
                self._feedback.merged(repo, number, pull.merge_commit_sha)
            return LandResult(tip) if tip is not None else LandResult(None, "target_moved")
        if tip != landing.expected_tip:
            return LandResult(None, "target_moved")
        if landing.exact and self._git.tree_of(repo, tip) != landing.parent_tree:
            return LandResult(None, "tree_mismatch")
        if pull is None or pull.state != "open":
            return LandResult(
                None, "push_rejected", detail=f"pull request #{number} is closed on GitHub"
            )
        if pull.head_sha != landing.link.head_sha:
            return LandResult(None, "tree_mismatch")  # pushed to: the PR leaves (PrHeadMoved)
        if landing.method is MergeMethod.REBASE and landing.exact:
            # GitHub's rebase replays the PR's commits one by one: that can end on another
            # tree than the tested merge (or not apply). Testing again would test the same
            # merge, so the PR fails with the reason.
            replayed = self._git.rebase_tree(
                repo, head_sha=pull.head_sha, onto=tip, since=landing.parent_commit
            )
            if replayed != landing.link.tree:
                return LandResult(
                    None,
                    "push_rejected",
                    detail=(
                        f"GitHub's rebase of pull request #{number} would not land the tested "
                        "tree: its commits do not replay onto the branch as they merge. Squash "
                        "it or merge it with a merge commit (the queue's mergeMethod)."
                    ),
                )
        self._feedback.merging(repo, number, pull.head_sha)
        answer = self._api.merge(
            where(repo),
            number,
            head_sha=landing.link.head_sha,
            method=landing.method,
            # A squash is titled as GitHub titles it, "<PR title> (#N)"; a merge commit keeps
            # GitHub's "Merge pull request #N from ..." (a rebase makes no commit of its own).
            title=f"{landing.title} (#{number})" if landing.method is MergeMethod.SQUASH else None,
        )
        if answer.sha is None:
            if answer.refusal == "head_moved":
                return LandResult(None, "tree_mismatch")
            return LandResult(
                None,
                "push_rejected",
                detail=f"GitHub refused to merge pull request #{number}: {answer.message}",
            )
        self.forget(repo, number)
        # The branch moved on GitHub, not by a push from the mirror: fetch it, so that the
        # next pass does not take the mirror's old tip for a branch moved back.
        self._git.refresh(repo, [target])
        self._check_landed_tree(repo, landing, answer.sha)
        self._feedback.merged(repo, number, answer.sha)
        return LandResult(answer.sha)

    def _check_landed_tree(self, repo: Repository, landing: Landing, sha: str) -> None:
        commit = self._api.commit(where(repo), sha)
        if commit is None or not landing.exact or commit.tree == landing.link.tree:
            return
        log.error(
            "github merged a tree other than the tested one",
            repo=str(repo.ref),
            pr=landing.link.number,
            merged=sha,
            tree=commit.tree,
            tested_tree=landing.link.tree,
        )


__all__ = ["GithubHost", "where"]
