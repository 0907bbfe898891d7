"""The REST operations of the fake GitHub: one method per operation id of the description,
each taking the request and answering (status, JSON body) from the fake's state.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.support.fake_github.bare import MergeConflict
from tests.support.fake_github.state import (
    CheckRunRecord,
    CommentRecord,
    FakeRepo,
    IssuedToken,
    MergeRecord,
    PullRequest,
)

if TYPE_CHECKING:
    from tests.support.fake_github.fake import FakeGithub


@dataclass
class Call:
    """A request for one operation, its caller known."""

    params: dict[str, str]
    query: dict[str, str]
    body: Any
    installation_id: int | None  # None: the App itself (JWT)


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class NotFound(Exception):
    """Answered 404 as GitHub does for what the caller may not see."""


class RestApi:
    """The operations, keyed by operation id in `handlers`."""

    def __init__(self, fake: FakeGithub) -> None:
        self.fake = fake
        self.handlers: dict[str, Callable[[Call], Answer]] = {
            "apps/get-authenticated": self.get_app,
            "apps/get-installation": self.get_installation,
            "apps/create-installation-access-token": self.create_token,
            "apps/list-repos-accessible-to-installation": self.list_installation_repos,
            "rate-limit/get": self.rate_limit,
            "apps/list-installations-for-authenticated-user": self.list_user_installations,
            "repos/get": self.get_repo,
            "repos/get-collaborator-permission-level": self.get_permission,
            "pulls/list": self.list_pulls,
            "pulls/get": self.get_pull,
            "pulls/merge": self.merge_pull,
            "git/get-commit": self.get_commit,
            "git/get-ref": self.get_ref,
            "checks/create": self.create_check_run,
            "checks/update": self.update_check_run,
            "checks/list-for-ref": self.list_check_runs,
            "repos/get-combined-status-for-ref": self.combined_status,
            "issues/create-comment": self.create_comment,
            "issues/list-comments": self.list_comments,
            "issues/update-comment": self.update_comment,
            "issues/add-labels": self.add_labels,
            "issues/remove-label": self.remove_label,
            "repos/get-status-checks-protection": self.get_required_checks,
            "repos/get-branch-rules": self.get_branch_rules,
            "actions/get-workflow-run": self.get_workflow_run,
        }

    @property
    def shapes(self) -> Any:
        return self.fake.shapes

    # --- the App -------------------------------------------------------------------------

    def get_app(self, call: Call) -> Answer:  # noqa: ARG002 (every operation takes its call)
        return Answer(200, self.shapes.app())

    def get_installation(self, call: Call) -> Answer:
        installation = self.fake.installations.get(int(call.params["installation_id"]))
        if installation is None:
            raise NotFound
        return Answer(200, self.shapes.installation(installation))

    def list_user_installations(self, call: Call) -> Answer:
        """The App's installations the calling user can reach, a page at a time."""
        assert call.installation_id is not None  # a user's caller number (see _authenticate)
        user = list(self.fake.user_tokens.values())[-1 - call.installation_id]
        reachable = [
            self.fake.installations[i]
            for i in sorted(user.installation_ids)
            if i in self.fake.installations
        ]
        per_page = int(call.query.get("per_page", "30"))
        page = int(call.query.get("page", "1"))
        shown = reachable[(page - 1) * per_page : page * per_page]
        return Answer(
            200,
            {
                "total_count": len(reachable),
                "installations": [self.shapes.installation(i) for i in shown],
            },
        )

    def create_token(self, call: Call) -> Answer:
        installation_id = int(call.params["installation_id"])
        if installation_id not in self.fake.installations:
            raise NotFound
        token = IssuedToken(
            token="ghs_" + secrets.token_urlsafe(27)[:36],
            installation_id=installation_id,
            expires_at=time.time() + self.fake.token_lifetime,
        )
        self.fake.tokens_issued.append(token)
        return Answer(
            201,
            {
                "token": token.token,
                "expires_at": iso(token.expires_at),
                "permissions": self.shapes.app()["permissions"],
                "repository_selection": "selected",
            },
        )

    # --- an installation -----------------------------------------------------------------

    def _repo(self, call: Call) -> FakeRepo:
        repo = self.fake.repos.get(f"{call.params['owner']}/{call.params['repo']}".lower())
        if repo is None or repo.installation_id != call.installation_id:
            raise NotFound
        return repo

    def _pull(self, repo: FakeRepo, number: str) -> PullRequest:
        pull = repo.pulls.get(int(number))
        if pull is None:
            raise NotFound
        return pull

    def list_installation_repos(self, call: Call) -> Answer:
        repos = [r for r in self.fake.repos.values() if r.installation_id == call.installation_id]
        page, links = self._page(call, sorted(repos, key=lambda r: r.id))
        return Answer(
            200,
            {
                "total_count": len(repos),
                "repository_selection": "selected",
                "repositories": [self.shapes.repository(r) for r in page],
            },
            links,
        )

    def _page(self, call: Call, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
        """One page of `items` and its `Link` header, as GitHub paginates lists."""
        per_page = min(int(call.query.get("per_page", 30)), 100)
        page = max(int(call.query.get("page", 1)), 1)
        last = max((len(items) + per_page - 1) // per_page, 1)
        links = []
        path = call.params.get("__path__", "")
        for rel, number in (("next", page + 1), ("last", last)):
            if page < last:
                links.append(
                    f'<{self.fake.api_url}{path}?per_page={per_page}&page={number}>; rel="{rel}"'
                )
        return items[(page - 1) * per_page : page * per_page], (
            {"Link": ", ".join(links)} if links else {}
        )

    def rate_limit(self, call: Call) -> Answer:
        used, limit, reset = self.fake.rate_budget(call.installation_id)
        core = {"limit": limit, "used": used, "remaining": max(limit - used, 0), "reset": reset}
        other = {"limit": 30, "used": 0, "remaining": 30, "reset": reset}
        return Answer(
            200,
            {
                "resources": {"core": core, "search": other, "graphql": core},
                "rate": core,
            },
        )

    def get_repo(self, call: Call) -> Answer:
        return Answer(200, self.shapes.repository(self._repo(call), permission="write"))

    def get_permission(self, call: Call) -> Answer:
        repo = self._repo(call)
        login = call.params["username"]
        permission = repo.permissions.get(login.lower(), "read")
        # GitHub names `maintain` as write and `triage` as read in this (legacy) field.
        legacy = {"maintain": "write", "triage": "read"}.get(permission, permission)
        user = self.shapes.user(login) | {
            "role_name": permission,
            "permissions": {
                "admin": permission == "admin",
                "maintain": permission in {"admin", "maintain"},
                "push": permission in {"admin", "maintain", "write"},
                "triage": permission in {"admin", "maintain", "write", "triage"},
                "pull": permission != "none",
            },
        }
        return Answer(200, {"permission": legacy, "role_name": permission, "user": user})

    def _pull_json(self, repo: FakeRepo, pull: PullRequest, *, full: bool) -> dict[str, Any]:
        head = self.fake.pull_head(repo, pull)
        base = repo.bare.resolve(f"refs/heads/{pull.base}") or ""
        mergeable: bool | None = None
        if pull.state == "open":
            mergeable = self.fake.test_merge(repo, pull) is not None
        return self.shapes.pull(
            repo, pull, head_sha=head, base_sha=base, mergeable=mergeable, full=full
        )

    def list_pulls(self, call: Call) -> Answer:
        repo = self._repo(call)
        state = call.query.get("state", "open")
        pulls = [
            p
            for p in sorted(repo.pulls.values(), key=lambda p: p.number, reverse=True)
            if state in {"all", p.state} and call.query.get("base", p.base) == p.base
        ]
        page, links = self._page(call, pulls)
        return Answer(200, [self._pull_json(repo, p, full=False) for p in page], links)

    def get_pull(self, call: Call) -> Answer:
        repo = self._repo(call)
        return Answer(
            200, self._pull_json(repo, self._pull(repo, call.params["pull_number"]), full=True)
        )

    def merge_pull(self, call: Call) -> Answer:
        repo = self._repo(call)
        pull = self._pull(repo, call.params["pull_number"])
        body = call.body or {}
        method = body.get("merge_method", "merge")
        if pull.state != "open":
            return Answer(405, self.shapes.error("Pull Request is not mergeable"))
        head = self.fake.pull_head(repo, pull)
        if body.get("sha") and body["sha"] != head:
            return Answer(
                409, self.shapes.error("Head branch was modified. Review and try the merge again.")
            )
        base_sha = repo.bare.resolve(f"refs/heads/{pull.base}")
        if base_sha is None:
            return Answer(405, self.shapes.error("Base branch was deleted"))
        try:
            tree = repo.bare.merge_tree(base_sha, head)
            if method == "rebase":
                commits = repo.bare.commits_between(base_sha, head)
                sha = repo.bare.rebase(base_sha, commits) if commits else base_sha
            else:
                title = body.get("commit_title") or (
                    f"Merge pull request #{pull.number} from {repo.owner}/{pull.branch}"
                    if method == "merge"
                    else f"{pull.title} (#{pull.number})"
                )
                message = body.get("commit_message", pull.title if method == "merge" else "")
                text = f"{title}\n\n{message}\n" if message else f"{title}\n"
                parents = [base_sha, head] if method == "merge" else [base_sha]
                sha = repo.bare.commit_tree(
                    tree,
                    parents,
                    text,
                    author=(pull.author, f"{pull.author}@users.noreply.github.com"),
                )
        except MergeConflict:
            return Answer(
                405,
                self.shapes.error(
                    "Merge conflict" if method != "rebase" else "This branch can't be rebased"
                ),
            )
        repo.bare.update_ref(f"refs/heads/{pull.base}", sha, old=base_sha)
        now = iso(time.time())
        pull.state, pull.merged, pull.merged_at, pull.closed_at = "closed", True, now, now
        pull.merge_commit_sha, pull.merged_by, pull.updated_at = (
            sha,
            self.shapes.app_slug + "[bot]",
            now,
        )
        info = repo.bare.commit_info(sha)
        assert info is not None
        self.fake.merges.append(
            MergeRecord(
                repo=repo.full_name,
                number=pull.number,
                method=method,
                sha=sha,
                tree=info.tree,
                parents=info.parents,
                base=pull.base,
                head_sha=head,
            )
        )
        return Answer(
            200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}
        )

    def get_commit(self, call: Call) -> Answer:
        repo = self._repo(call)
        info = repo.bare.commit_info(call.params["commit_sha"])
        if info is None:
            raise NotFound
        return Answer(200, self.shapes.git_commit(repo, info))

    def get_ref(self, call: Call) -> Answer:
        repo = self._repo(call)
        ref = f"refs/{call.params['ref']}"
        sha = (
            repo.bare.resolve(ref)
            if call.params["ref"].startswith(("heads/", "tags/", "pull/"))
            else None
        )
        if sha is None:
            raise NotFound
        return Answer(200, self.shapes.git_ref(repo, ref, sha))

    # --- check runs and statuses -----------------------------------------------------------

    def _run_json(self, repo: FakeRepo, run: CheckRunRecord) -> dict[str, Any]:
        pulls = [
            p
            for p in repo.pulls.values()
            if p.state == "open" and self.fake.pull_head(repo, p) == run.head_sha
        ]
        return self.shapes.check_run(repo, run, pulls=pulls)

    def create_check_run(self, call: Call) -> Answer:
        repo = self._repo(call)
        body = call.body
        head = repo.bare.resolve(body["head_sha"])
        if head is None:
            return Answer(
                422,
                self.shapes.error("Validation Failed", status=422)
                | {"errors": [{"resource": "CheckRun", "code": "invalid", "field": "head_sha"}]},
            )
        run = self.fake.record_check_run(
            repo, name=body["name"], head_sha=head, app_slug=self.shapes.app_slug, fields=body
        )
        return Answer(201, self._run_json(repo, run))

    def update_check_run(self, call: Call) -> Answer:
        repo = self._repo(call)
        run = self.fake.check_runs.get(int(call.params["check_run_id"]))
        if run is None or run.repo != repo.full_name:
            raise NotFound
        self.fake.apply_check_run_fields(run, call.body or {})
        return Answer(200, self._run_json(repo, run))

    def list_check_runs(self, call: Call) -> Answer:
        repo = self._repo(call)
        sha = self.fake.resolve_ref(repo, call.params["ref"])
        if sha is None:
            return Answer(
                422, self.shapes.error(f"No commit found for SHA: {call.params['ref']}", status=422)
            )
        runs = [
            r
            for r in self.fake.check_runs.values()
            if r.repo == repo.full_name and r.head_sha == sha
        ]
        if "check_name" in call.query:
            runs = [r for r in runs if r.name == call.query["check_name"]]
        if call.query.get("filter", "latest") == "latest":
            latest: dict[tuple[str, str], CheckRunRecord] = {}
            for run in runs:
                latest[(run.app_slug, run.name)] = run
            runs = list(latest.values())
        if "status" in call.query:
            runs = [r for r in runs if r.status == call.query["status"]]
        runs.sort(key=lambda r: r.id, reverse=True)
        page, links = self._page(call, runs)
        return Answer(
            200,
            {"total_count": len(runs), "check_runs": [self._run_json(repo, r) for r in page]},
            links,
        )

    def combined_status(self, call: Call) -> Answer:
        repo = self._repo(call)
        sha = self.fake.resolve_ref(repo, call.params["ref"])
        if sha is None:
            raise NotFound
        latest: dict[str, Any] = {}
        for status in self.fake.statuses:
            if status.repo == repo.full_name and status.sha == sha:
                latest[status.context] = status
        statuses = sorted(latest.values(), key=lambda s: s.id, reverse=True)
        states = {s.state for s in statuses}
        if not statuses or "pending" in states:
            state = "pending"
        elif states & {"error", "failure"}:
            state = "failure"
        else:
            state = "success"
        url = f"{self.fake.api_url}/repos/{repo.full_name}"
        minimal = self.shapes.repository(repo)
        return Answer(
            200,
            {
                "state": state,
                "statuses": [self.shapes.status(repo, s) for s in statuses],
                "sha": sha,
                "total_count": len(statuses),
                "repository": minimal,
                "commit_url": f"{url}/commits/{sha}",
                "url": f"{url}/commits/{sha}/status",
            },
        )

    # --- comments --------------------------------------------------------------------------

    def create_comment(self, call: Call) -> Answer:
        repo = self._repo(call)
        number = int(call.params["issue_number"])
        if number not in repo.pulls:
            raise NotFound
        comment = self.fake.record_comment(
            repo, number, author=self.shapes.app_slug + "[bot]", body=call.body["body"]
        )
        return Answer(201, self.shapes.comment(repo, comment))

    def list_comments(self, call: Call) -> Answer:
        repo = self._repo(call)
        number = int(call.params["issue_number"])
        if number not in repo.pulls:
            raise NotFound
        comments = sorted(
            (
                c
                for c in self.fake.comments.values()
                if c.repo == repo.full_name and c.issue_number == number
            ),
            key=lambda c: c.id,
        )
        page, links = self._page(call, comments)
        return Answer(200, [self.shapes.comment(repo, c) for c in page], links)

    def update_comment(self, call: Call) -> Answer:
        repo = self._repo(call)
        comment = self.fake.comments.get(int(call.params["comment_id"]))
        if comment is None or comment.repo != repo.full_name:
            raise NotFound
        comment.history.append(comment.body)
        comment.body = call.body["body"]
        comment.updated_at = iso(time.time())
        return Answer(200, self.shapes.comment(repo, comment))

    # --- labels ----------------------------------------------------------------------------

    def add_labels(self, call: Call) -> Answer:
        """GitHub adds the names given (making a repository label it lacks) and answers every
        label the issue now has; the body is `{"labels": [...]}` or a bare list of names.
        """
        repo = self._repo(call)
        pull = self._pull(repo, call.params["issue_number"])
        body = call.body
        names = body.get("labels", []) if isinstance(body, dict) else body
        for name in names:
            label = name if isinstance(name, str) else name["name"]
            if label not in pull.labels:
                pull.labels.append(label)
        return Answer(200, [self.shapes.label(repo, name) for name in pull.labels])

    def remove_label(self, call: Call) -> Answer:
        """A label the issue does not have is a 404 ("Label does not exist")."""
        repo = self._repo(call)
        pull = self._pull(repo, call.params["issue_number"])
        name = call.params["name"]
        if name not in pull.labels:
            raise NotFound
        pull.labels.remove(name)
        return Answer(200, [self.shapes.label(repo, label) for label in pull.labels])

    # --- protection ------------------------------------------------------------------------

    def get_required_checks(self, call: Call) -> Answer:
        repo = self._repo(call)
        branch = call.params["branch"]
        if branch not in repo.protection:
            return Answer(404, self.shapes.error("Branch not protected"))
        url = (
            f"{self.fake.api_url}/repos/{repo.full_name}/branches/{branch}"
            "/protection/required_status_checks"
        )
        contexts = repo.protection[branch]
        return Answer(
            200,
            {
                "url": url,
                "strict": False,
                "contexts": contexts,
                "checks": [{"context": c, "app_id": None} for c in contexts],
                "contexts_url": f"{url}/contexts",
            },
        )

    def get_workflow_run(self, call: Call) -> Answer:
        """A run of the repository's workflows; a run of another repository is not found
        here, as GitHub finds runs only under their own repository.
        """
        repo = self._repo(call)
        run = repo.workflow_runs.get(int(call.params["run_id"]))
        if run is None:
            raise NotFound
        return Answer(200, self.shapes.workflow_run(repo, run))

    def get_branch_rules(self, call: Call) -> Answer:
        repo = self._repo(call)
        contexts = repo.rulesets.get(call.params["branch"])
        if not contexts:
            return Answer(200, [])
        return Answer(
            200,
            [
                {
                    "type": "required_status_checks",
                    "parameters": {
                        "strict_required_status_checks_policy": False,
                        "required_status_checks": [{"context": c} for c in contexts],
                    },
                    "ruleset_source_type": "Repository",
                    "ruleset_source": repo.full_name,
                    "ruleset_id": 1,
                }
            ],
        )


def new_comment(
    repo: FakeRepo, comment_id: int, number: int, *, author: str, body: str
) -> CommentRecord:
    now = iso(time.time())
    return CommentRecord(comment_id, repo.full_name, number, author, body, now, now)
