"""The JSON the fake GitHub answers, built from its state in GitHub's shapes (checked against
the vendored description on every answer).
"""

from __future__ import annotations

import base64
import zlib
from typing import Any
from urllib.parse import quote

from tests.support.fake_github.bare import CommitInfo
from tests.support.fake_github.state import (
    CheckRunRecord,
    CommentRecord,
    FakeRepo,
    Installation,
    PullRequest,
    StatusRecord,
    WorkflowRunRecord,
)

APP_PERMISSIONS = {
    "actions": "read",
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "read",
}
APP_EVENTS = [
    "check_run",
    "check_suite",
    "issue_comment",
    "pull_request",
    "push",
    "status",
]
DOCS = "https://docs.github.com/rest"


def node_id(kind: str, number: int) -> str:
    return base64.b64encode(f"0{len(kind)}:{kind}{number}".encode()).decode()


def user_id(login: str) -> int:
    """A stable id per login, as GitHub's are per account."""
    return zlib.crc32(login.encode()) % 10_000_000 + 1


class Shapes:
    """Builders of GitHub's JSON for one fake served at `web_url` (html) and `api_url`."""

    def __init__(self, *, api_url: str, web_url: str, app_id: int, app_slug: str) -> None:
        self.api = api_url
        self.web = web_url
        self.app_id = app_id
        self.app_slug = app_slug

    def user(self, login: str, *, kind: str = "User") -> dict[str, Any]:
        # Bots' logins end in `[bot]`, which URLs carry percent-encoded.
        path = quote(login)
        url = f"{self.api}/users/{path}"
        kind = "Bot" if login.endswith("[bot]") else kind
        return {
            "login": login,
            "id": user_id(login),
            "node_id": node_id("User", user_id(login)),
            "avatar_url": f"{self.web}/avatars/{path}",
            "gravatar_id": "",
            "url": url,
            "html_url": f"{self.web}/{path}",
            "followers_url": f"{url}/followers",
            "following_url": f"{url}/following{{/other_user}}",
            "gists_url": f"{url}/gists{{/gist_id}}",
            "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{url}/subscriptions",
            "organizations_url": f"{url}/orgs",
            "repos_url": f"{url}/repos",
            "events_url": f"{url}/events{{/privacy}}",
            "received_events_url": f"{url}/received_events",
            "type": kind,
            "user_view_type": "public",
            "site_admin": False,
        }

    def app(self) -> dict[str, Any]:
        return {
            "id": self.app_id,
            "slug": self.app_slug,
            "node_id": node_id("Integration", self.app_id),
            "client_id": f"Iv1.{self.app_id:016x}",
            "owner": self.user("keepgreen-owner", kind="Organization"),
            "name": self.app_slug,
            "description": "keepgreen merge queue (fake GitHub)",
            "external_url": self.web,
            "html_url": f"{self.web}/apps/{self.app_slug}",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
            "permissions": APP_PERMISSIONS,
            "events": APP_EVENTS,
            "installations_count": 1,
        }

    def ci_app(self, slug: str) -> dict[str, Any]:
        """Another App (a CI) that reports check runs."""
        if slug == self.app_slug:
            return self.app()
        app_id = user_id(slug)
        return {
            **self.app(),
            "id": app_id,
            "slug": slug,
            "node_id": node_id("Integration", app_id),
            "client_id": f"Iv1.{app_id:016x}",
            "name": slug,
            "html_url": f"{self.web}/apps/{slug}",
        }

    def installation(self, installation: Installation) -> dict[str, Any]:
        return {
            "id": installation.id,
            "account": self.user(installation.account, kind=installation.account_type),
            "repository_selection": "selected",
            "access_tokens_url": f"{self.api}/app/installations/{installation.id}/access_tokens",
            "repositories_url": f"{self.api}/installation/repositories",
            "html_url": f"{self.web}/settings/installations/{installation.id}",
            "app_id": self.app_id,
            "app_slug": self.app_slug,
            "target_id": installation.account_id,
            "target_type": installation.account_type,
            "permissions": APP_PERMISSIONS,
            "events": APP_EVENTS,
            "created_at": installation.created_at,
            "updated_at": installation.created_at,
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": None,
            "suspended_at": None,
        }

    def repository(self, repo: FakeRepo, *, permission: str | None = None) -> dict[str, Any]:
        """A repository in the shape shared by `repository` and `full-repository`."""
        full = repo.full_name
        url = f"{self.api}/repos/{full}"
        html = f"{self.web}/{full}"
        shape: dict[str, Any] = {
            "id": repo.id,
            "node_id": node_id("Repository", repo.id),
            "name": repo.name,
            "full_name": full,
            "owner": self.user(repo.owner, kind="Organization"),
            "private": repo.private,
            "html_url": html,
            "description": None,
            "fork": False,
            "url": url,
            "archive_url": f"{url}/{{archive_format}}{{/ref}}",
            "assignees_url": f"{url}/assignees{{/user}}",
            "blobs_url": f"{url}/git/blobs{{/sha}}",
            "branches_url": f"{url}/branches{{/branch}}",
            "collaborators_url": f"{url}/collaborators{{/collaborator}}",
            "comments_url": f"{url}/comments{{/number}}",
            "commits_url": f"{url}/commits{{/sha}}",
            "compare_url": f"{url}/compare/{{base}}...{{head}}",
            "contents_url": f"{url}/contents/{{+path}}",
            "contributors_url": f"{url}/contributors",
            "deployments_url": f"{url}/deployments",
            "downloads_url": f"{url}/downloads",
            "events_url": f"{url}/events",
            "forks_url": f"{url}/forks",
            "git_commits_url": f"{url}/git/commits{{/sha}}",
            "git_refs_url": f"{url}/git/refs{{/sha}}",
            "git_tags_url": f"{url}/git/tags{{/sha}}",
            "git_url": f"git:{self.web.split(':', 1)[1]}/{full}.git",
            "issue_comment_url": f"{url}/issues/comments{{/number}}",
            "issue_events_url": f"{url}/issues/events{{/number}}",
            "issues_url": f"{url}/issues{{/number}}",
            "keys_url": f"{url}/keys{{/key_id}}",
            "labels_url": f"{url}/labels{{/name}}",
            "languages_url": f"{url}/languages",
            "merges_url": f"{url}/merges",
            "milestones_url": f"{url}/milestones{{/number}}",
            "notifications_url": f"{url}/notifications{{?since,all,participating}}",
            "pulls_url": f"{url}/pulls{{/number}}",
            "releases_url": f"{url}/releases{{/id}}",
            "ssh_url": f"git@127.0.0.1:{full}.git",
            "stargazers_url": f"{url}/stargazers",
            "statuses_url": f"{url}/statuses/{{sha}}",
            "subscribers_url": f"{url}/subscribers",
            "subscription_url": f"{url}/subscription",
            "tags_url": f"{url}/tags",
            "teams_url": f"{url}/teams",
            "trees_url": f"{url}/git/trees{{/sha}}",
            "clone_url": repo.clone_url,
            "mirror_url": None,
            "hooks_url": f"{url}/hooks",
            "svn_url": html,
            "homepage": None,
            "language": None,
            "forks_count": 0,
            "forks": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "size": 1,
            "default_branch": repo.default_branch,
            "open_issues_count": sum(p.state == "open" for p in repo.pulls.values()),
            "open_issues": sum(p.state == "open" for p in repo.pulls.values()),
            "is_template": False,
            "topics": [],
            "has_issues": True,
            "has_projects": False,
            "has_wiki": False,
            "has_pages": False,
            "has_downloads": False,
            "has_discussions": False,
            "archived": False,
            "disabled": False,
            "visibility": "private" if repo.private else "public",
            "pushed_at": repo.created_at,
            "created_at": repo.created_at,
            "updated_at": repo.created_at,
            "allow_rebase_merge": True,
            "allow_squash_merge": True,
            "allow_merge_commit": True,
            "allow_auto_merge": False,
            "delete_branch_on_merge": False,
            "allow_forking": False,
            "web_commit_signoff_required": False,
            "license": None,
            "network_count": 0,
            "subscribers_count": 0,
        }
        if permission is not None:
            shape["permissions"] = {
                "admin": permission == "admin",
                "maintain": permission in {"admin", "maintain"},
                "push": permission in {"admin", "maintain", "write"},
                "triage": permission in {"admin", "maintain", "write", "triage"},
                "pull": True,
            }
        return shape

    def pull(
        self,
        repo: FakeRepo,
        pull: PullRequest,
        *,
        head_sha: str,
        base_sha: str,
        mergeable: bool | None,
        full: bool,
    ) -> dict[str, Any]:
        """A pull request: the full shape (`full`) or the one of a list."""
        url = f"{self.api}/repos/{repo.full_name}/pulls/{pull.number}"
        issue = f"{self.api}/repos/{repo.full_name}/issues/{pull.number}"
        html = f"{self.web}/{repo.full_name}/pull/{pull.number}"
        repo_json = self.repository(repo)
        shape: dict[str, Any] = {
            "url": url,
            "id": pull.id,
            "node_id": node_id("PullRequest", pull.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue,
            "commits_url": f"{url}/commits",
            "review_comments_url": f"{url}/comments",
            "review_comment_url": f"{self.api}/repos/{repo.full_name}/pulls/comments{{/number}}",
            "comments_url": f"{issue}/comments",
            "statuses_url": f"{self.api}/repos/{repo.full_name}/statuses/{head_sha}",
            "number": pull.number,
            "state": pull.state,
            "locked": False,
            "title": pull.title,
            "user": self.user(pull.author),
            "body": pull.body or None,
            "labels": [self.label(repo, name) for name in pull.labels],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": pull.created_at,
            "updated_at": pull.updated_at,
            "closed_at": pull.closed_at,
            "merged_at": pull.merged_at,
            "merge_commit_sha": pull.merge_commit_sha,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": {
                "label": f"{repo.owner}:{pull.branch}",
                "ref": pull.branch,
                "sha": head_sha,
                "user": self.user(repo.owner, kind="Organization"),
                "repo": repo_json,
            },
            "base": {
                "label": f"{repo.owner}:{pull.base}",
                "ref": pull.base,
                "sha": base_sha,
                "user": self.user(repo.owner, kind="Organization"),
                "repo": repo_json,
            },
            "_links": {
                "self": {"href": url},
                "html": {"href": html},
                "issue": {"href": issue},
                "comments": {"href": f"{issue}/comments"},
                "review_comments": {"href": f"{url}/comments"},
                "review_comment": {
                    "href": f"{self.api}/repos/{repo.full_name}/pulls/comments{{/number}}"
                },
                "commits": {"href": f"{url}/commits"},
                "statuses": {"href": f"{self.api}/repos/{repo.full_name}/statuses/{head_sha}"},
            },
            "author_association": "MEMBER",
            "auto_merge": None,
            "draft": False,
        }
        if full:
            if pull.merged or mergeable is None:
                state = "unknown"
            else:
                state = "clean" if mergeable else "dirty"
            shape |= {
                "merged": pull.merged,
                "mergeable": None if pull.merged else mergeable,
                "rebaseable": None if pull.merged else mergeable,
                "mergeable_state": state,
                "merged_by": self.user(pull.merged_by) if pull.merged_by else None,
                "comments": 0,
                "review_comments": 0,
                "maintainer_can_modify": False,
                "commits": 1,
                "additions": 1,
                "deletions": 0,
                "changed_files": 1,
            }
        return shape

    def label(self, repo: FakeRepo, name: str) -> dict[str, Any]:
        label_id = user_id(f"{repo.full_name}:{name}")
        return {
            "id": label_id,
            "node_id": node_id("Label", label_id),
            "url": f"{self.api}/repos/{repo.full_name}/labels/{name}",
            "name": name,
            "description": None,
            "color": "0e8a16",
            "default": False,
        }

    def git_commit(self, repo: FakeRepo, commit: CommitInfo) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/git/commits"
        return {
            "sha": commit.sha,
            "node_id": node_id("Commit", int(commit.sha[:12], 16)),
            "url": f"{url}/{commit.sha}",
            "html_url": f"{self.web}/{repo.full_name}/commit/{commit.sha}",
            "author": {
                "name": commit.author.name,
                "email": commit.author.email,
                "date": commit.author.date,
            },
            "committer": {
                "name": commit.committer.name,
                "email": commit.committer.email,
                "date": commit.committer.date,
            },
            "tree": {
                "sha": commit.tree,
                "url": f"{self.api}/repos/{repo.full_name}/git/trees/{commit.tree}",
            },
            "message": commit.message.rstrip("\n"),
            "parents": [
                {
                    "sha": parent,
                    "url": f"{url}/{parent}",
                    "html_url": f"{self.web}/{repo.full_name}/commit/{parent}",
                }
                for parent in commit.parents
            ],
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            },
        }

    def git_ref(self, repo: FakeRepo, ref: str, sha: str) -> dict[str, Any]:
        return {
            "ref": ref,
            "node_id": node_id("Ref", zlib.crc32(ref.encode())),
            "url": f"{self.api}/repos/{repo.full_name}/git/{ref}",
            "object": {
                "type": "commit",
                "sha": sha,
                "url": f"{self.api}/repos/{repo.full_name}/git/commits/{sha}",
            },
        }

    def check_run(
        self, repo: FakeRepo, run: CheckRunRecord, *, pulls: list[PullRequest]
    ) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/check-runs/{run.id}"
        return {
            "id": run.id,
            "node_id": node_id("CheckRun", run.id),
            "head_sha": run.head_sha,
            "external_id": run.external_id or "",
            "url": url,
            "html_url": f"{self.web}/{repo.full_name}/runs/{run.id}",
            "details_url": run.details_url,
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": run.started_at,
            "completed_at": run.completed_at,
            "output": {
                "title": run.title,
                "summary": run.summary,
                "text": run.text,
                "annotations_count": 0,
                "annotations_url": f"{url}/annotations",
            },
            "name": run.name,
            "check_suite": {"id": user_id(f"{repo.full_name}:{run.head_sha}:{run.app_slug}")},
            "app": self.ci_app(run.app_slug),
            "pull_requests": [self.pull_minimal(repo, pull) for pull in pulls],
        }

    def pull_minimal(self, repo: FakeRepo, pull: PullRequest) -> dict[str, Any]:
        """A pull request as check runs list it (`pull-request-minimal`)."""
        target = {"id": repo.id, "url": f"{self.api}/repos/{repo.full_name}", "name": repo.name}
        return {
            "id": pull.id,
            "number": pull.number,
            "url": f"{self.api}/repos/{repo.full_name}/pulls/{pull.number}",
            "head": {"ref": pull.branch, "sha": "", "repo": target},
            "base": {"ref": pull.base, "sha": "", "repo": target},
        }

    def workflow_run(self, repo: FakeRepo, run: WorkflowRunRecord) -> dict[str, Any]:
        """A workflow run (`workflow-run`); its head repository is a fork when `run.head_repo`
        is not the repository itself (the fork shaped as a public copy of it).
        """
        url = f"{self.api}/repos/{repo.full_name}/actions/runs/{run.id}"
        head = self.repository(repo)
        if run.head_repo.lower() != repo.full_name.lower():
            owner, _, name = run.head_repo.partition("/")
            fork = FakeRepo(
                id=user_id(run.head_repo),
                owner=owner,
                name=name,
                installation_id=0,
                bare=repo.bare,
                clone_url=f"{self.web}/{run.head_repo}.git",
                created_at=repo.created_at,
                default_branch=repo.default_branch,
                private=False,
            )
            head = self.repository(fork) | {"fork": True}
            head["owner"] = self.user(owner)
        commit = repo.bare.commit_info(run.head_sha)
        workflow_id = user_id(f"{repo.full_name}:.github/workflows/ci.yml")
        return {
            "id": run.id,
            "name": run.name,
            "node_id": node_id("WorkflowRun", run.id),
            "check_suite_id": user_id(f"{repo.full_name}:suite:{run.id}"),
            "check_suite_node_id": node_id("CheckSuite", run.id),
            "head_branch": run.head_branch,
            "head_sha": run.head_sha,
            "path": ".github/workflows/ci.yml",
            "run_number": run.run_number,
            "run_attempt": 1,
            "referenced_workflows": [],
            "event": run.event,
            "status": run.status,
            "conclusion": run.conclusion,
            "workflow_id": workflow_id,
            "url": url,
            "html_url": f"{self.web}/{repo.full_name}/actions/runs/{run.id}",
            # Asked with exclude_pull_requests (as keepgreen asks), and empty for a fork's run
            # anyway: GitHub lists only PRs whose head is in the repository itself.
            "pull_requests": [],
            "created_at": run.created_at,
            "updated_at": run.updated_at,
            "actor": self.user(run.head_repo.partition("/")[0]),
            "triggering_actor": self.user(run.head_repo.partition("/")[0]),
            "run_started_at": run.created_at,
            "jobs_url": f"{url}/jobs",
            "logs_url": f"{url}/logs",
            "check_suite_url": f"{self.api}/repos/{repo.full_name}/check-suites/{run.id}",
            "artifacts_url": f"{url}/artifacts",
            "cancel_url": f"{url}/cancel",
            "rerun_url": f"{url}/rerun",
            "previous_attempt_url": None,
            "workflow_url": f"{self.api}/repos/{repo.full_name}/actions/workflows/{workflow_id}",
            "head_commit": None
            if commit is None
            else {
                "id": commit.sha,
                "tree_id": commit.tree,
                "message": commit.message.rstrip("\n"),
                "timestamp": commit.committer.date,
                "author": {"name": commit.author.name, "email": commit.author.email},
                "committer": {"name": commit.committer.name, "email": commit.committer.email},
            },
            "repository": self.repository(repo),
            "head_repository": head,
            "head_repository_id": head["id"],
            "display_title": run.head_branch,
        }

    def status(self, repo: FakeRepo, status: StatusRecord) -> dict[str, Any]:
        return {
            "id": status.id,
            "node_id": node_id("StatusContext", status.id),
            "url": f"{self.api}/repos/{repo.full_name}/statuses/{status.sha}",
            "avatar_url": None,
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": status.created_at,
            "updated_at": status.created_at,
        }

    def comment(self, repo: FakeRepo, comment: CommentRecord) -> dict[str, Any]:
        base = f"{self.api}/repos/{repo.full_name}/issues"
        return {
            "id": comment.id,
            "node_id": node_id("IssueComment", comment.id),
            "url": f"{base}/comments/{comment.id}",
            "html_url": (
                f"{self.web}/{repo.full_name}/pull/{comment.issue_number}#issuecomment-{comment.id}"
            ),
            "body": comment.body,
            "user": self.user(comment.author),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "issue_url": f"{base}/{comment.issue_number}",
            "author_association": "NONE",
        }

    def error(self, message: str, *, status: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"message": message, "documentation_url": DOCS}
        if status is not None:
            body["status"] = str(status)
        return body
