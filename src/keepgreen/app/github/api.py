"""The GitHub REST API as keepgreen uses it: the port, and the plain data it answers with.

Every call names the installation it acts as; the adapter signs in as the App (a JWT) to get
that installation's token, keeps it until shortly before it expires, and counts the calls
against the installation's hourly budget. A failure that passes (5xx, no answer, a rate
limit) is a `GithubUnavailable`, which the worker treats as it treats a git server that does
not answer: the queue backs off and tries again, nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from keepgreen.app.ports import CodeHostError
from keepgreen.core.enums import IncidentKind, MergeMethod

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
# The permissions that may queue or cancel a PR (GitHub's "write" and above).
MAY_MERGE: frozenset[str] = frozenset({"admin", "maintain", "write"})


class GithubUnavailable(CodeHostError):
    """GitHub did not do it now: 5xx, no answer, or a rate limit (`retry_after` seconds)."""

    def __init__(
        self,
        message: str,
        *,
        kind: IncidentKind = IncidentKind.GITHUB_UNAVAILABLE,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, kind=kind, retry_after=retry_after)


class GithubRefused(CodeHostError):
    """GitHub said no for good (the App lacks a permission, the installation is gone)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, kind=IncidentKind.GITHUB_REFUSED)
        self.status = status


@dataclass(frozen=True, slots=True)
class GithubRepo:
    """A repository an installation gives keepgreen."""

    id: int
    owner: str
    name: str
    clone_url: str
    default_branch: str


@dataclass(frozen=True, slots=True)
class GithubPull:
    """A pull request as the API shows it now."""

    number: int
    state: Literal["open", "closed"]
    merged: bool
    head_sha: str
    base_ref: str
    title: str
    author: str
    labels: tuple[str, ...] = ()
    mergeable: bool | None = None  # None while GitHub is still computing it
    merge_commit_sha: str | None = None  # once merged: the commit the merge made
    head_ref: str | None = None  # the branch the PR comes from


@dataclass(frozen=True, slots=True)
class GithubCommit:
    sha: str
    tree: str
    parents: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GithubWorkflowRun:
    """A GitHub Actions workflow run as the API shows it now."""

    id: int
    repository: str  # owner/name of the repository the run belongs to
    # owner/name of the repository its head commit comes from (a fork's for a fork's PR);
    # None when GitHub names none (the fork was deleted)
    head_repository: str | None
    head_sha: str
    status: str | None  # queued, in_progress, waiting, requested, pending or completed


@dataclass(frozen=True, slots=True)
class MergeAnswer:
    """What the merge endpoint said: the commit that landed, or why it did not."""

    sha: str | None
    refusal: Literal["not_mergeable", "head_moved"] | None = None
    message: str = ""


CheckStatus = Literal["queued", "in_progress", "completed"]
CheckConclusion = Literal["success", "failure", "cancelled", "neutral", "action_required"]


@dataclass(frozen=True, slots=True)
class CheckRunView:
    """What keepgreen's check run on a PR head says."""

    status: CheckStatus
    title: str
    summary: str
    conclusion: CheckConclusion | None = None
    details_url: str | None = None


@dataclass(frozen=True, slots=True)
class Where:
    """A repository as the API names it, and the installation that may act on it."""

    installation_id: int
    owner: str
    name: str


@dataclass(frozen=True, slots=True)
class Budget:
    """An installation's hourly request budget as GitHub last reported it."""

    limit: int
    remaining: int
    resets_at: datetime


class GithubApi(Protocol):
    """The calls keepgreen makes; each may raise GithubUnavailable or GithubRefused."""

    def installation_account(self, installation_id: int) -> str:
        """The login of the account (org or user) the App is installed on."""
        ...

    def installation_repositories(self, installation_id: int) -> list[GithubRepo]: ...

    def git_token_file(self, installation_id: int) -> str:
        """The path of a file holding a live token of the installation, for git over HTTPS
        (rewritten before the token expires; the file's path never changes).
        """
        ...

    def permission(self, where: Where, user: str) -> Permission: ...

    def pull_request(self, where: Where, number: int) -> GithubPull | None:
        """The PR, or None when there is no such PR."""
        ...

    def commit(self, where: Where, sha: str) -> GithubCommit | None: ...

    def merge(
        self,
        where: Where,
        number: int,
        *,
        head_sha: str,
        method: MergeMethod,
        title: str | None,
    ) -> MergeAnswer:
        """Merge PR `number` if its head is still `head_sha`; `title` names the commit a
        squash or merge commit makes (None: GitHub's own default).
        """
        ...

    def create_check_run(self, where: Where, *, head_sha: str, view: CheckRunView) -> int:
        """Create keepgreen's check run on `head_sha`; its id."""
        ...

    def update_check_run(self, where: Where, check_run_id: int, view: CheckRunView) -> None: ...

    def create_comment(self, where: Where, number: int, body: str) -> int: ...

    def update_comment(self, where: Where, comment_id: int, body: str) -> bool:
        """False when the comment is gone (deleted by a user)."""
        ...

    def add_label(self, where: Where, number: int, label: str) -> None:
        """Put `label` on PR `number` (GitHub makes a label it does not have yet)."""
        ...

    def remove_label(self, where: Where, number: int, label: str) -> None:
        """Take `label` off PR `number`; a label it does not carry is no error."""
        ...

    def required_checks(self, where: Where, branch: str) -> tuple[str, ...]:
        """The status checks the branch protection rule and rulesets of `branch` require."""
        ...

    def workflow_run(self, where: Where, run_id: int) -> GithubWorkflowRun | None:
        """Workflow run `run_id` of the repository, or None when GitHub shows no such run."""
        ...


__all__ = [
    "MAY_MERGE",
    "Budget",
    "CheckRunView",
    "GithubApi",
    "GithubCommit",
    "GithubPull",
    "GithubRefused",
    "GithubRepo",
    "GithubUnavailable",
    "GithubWorkflowRun",
    "MergeAnswer",
    "Permission",
    "Where",
]
