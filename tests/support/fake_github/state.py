"""What the fake GitHub holds and records: installations, repositories, pull requests, check
runs, comments, merges, tokens and the requests it answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tests.support.fake_github.bare import BareRepository

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
MergeMethod = Literal["merge", "squash", "rebase"]


@dataclass(frozen=True)
class User:
    """A GitHub user who granted the App, and the installations they can reach."""

    login: str
    installation_ids: tuple[int, ...]
    redirect_uri: str


@dataclass
class Installation:
    """The App installed on an account (a user or an organization)."""

    id: int
    account: str
    account_id: int
    account_type: Literal["User", "Organization"]
    created_at: str


@dataclass
class PullRequest:
    """A pull request; its head commit lives at `refs/pull/N/head` in the repository."""

    id: int
    number: int
    title: str
    body: str
    author: str
    branch: str
    base: str
    created_at: str
    updated_at: str
    state: Literal["open", "closed"] = "open"
    merged: bool = False
    merged_at: str | None = None
    merged_by: str | None = None
    closed_at: str | None = None
    merge_commit_sha: str | None = None
    labels: list[str] = field(default_factory=list)


@dataclass
class WorkflowRunRecord:
    """A GitHub Actions workflow run of a repository, as CI started it and moved it along."""

    id: int
    repo: str  # owner/name of the repository the run belongs to (where its workflow is)
    head_repo: str  # owner/name its head commit comes from: a fork's, or `repo` itself
    head_sha: str
    head_branch: str
    event: str
    status: str  # queued, in_progress, waiting, requested, pending or completed
    conclusion: str | None
    run_number: int
    created_at: str
    updated_at: str
    name: str = "CI"


@dataclass
class FakeRepo:
    """A repository of an installation, a bare git repository on disk."""

    id: int
    owner: str
    name: str
    installation_id: int
    bare: BareRepository
    clone_url: str
    created_at: str
    default_branch: str = "main"
    private: bool = True
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    # Users with an explicit permission; others read (as anyone may on a visible repository).
    permissions: dict[str, Permission] = field(default_factory=dict)
    # Required status check contexts per protected branch, from branch protection or rulesets.
    protection: dict[str, list[str]] = field(default_factory=dict)
    rulesets: dict[str, list[str]] = field(default_factory=dict)
    next_number: int = 1
    workflow_runs: dict[int, WorkflowRunRecord] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class CheckRunRecord:
    """A check run as it is now, and every state it went through (creation first)."""

    id: int
    repo: str  # owner/name
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    title: str | None
    summary: str | None
    text: str | None
    details_url: str | None
    external_id: str | None
    started_at: str | None
    completed_at: str | None
    app_slug: str  # the App that made it: the fake's App, or a CI's
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class StatusRecord:
    """A commit status set by CI (`POST /statuses/{sha}` on GitHub; the controller here)."""

    id: int
    repo: str
    sha: str
    context: str
    state: Literal["error", "failure", "pending", "success"]
    description: str | None
    target_url: str | None
    created_at: str


@dataclass
class CommentRecord:
    """An issue comment (pull requests are issues) and the bodies it had before each edit."""

    id: int
    repo: str
    issue_number: int
    author: str
    body: str
    created_at: str
    updated_at: str
    history: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MergeRecord:
    """A pull request merged through the API."""

    repo: str
    number: int
    method: MergeMethod
    sha: str  # the commit the base branch moved to
    tree: str
    parents: list[str]
    base: str
    head_sha: str


@dataclass(frozen=True)
class RecordedRequest:
    """One API or git request and the status it was answered."""

    method: str
    path: str
    status: int
    operation_id: str | None
    installation_id: int | None


@dataclass(frozen=True)
class IssuedToken:
    """An installation access token handed out."""

    token: str
    installation_id: int
    expires_at: float  # epoch seconds
