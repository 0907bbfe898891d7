"""`FakeGithub`: GitHub's REST API and git over smart HTTP on one loopback port, with the
controller the tests drive it by and the state they assert on.
"""

from __future__ import annotations

import itertools
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.fake_github.bare import BareRepository, Files, MergeConflict
from tests.support.fake_github.openapi import Description
from tests.support.fake_github.rest import RestApi, iso, new_comment
from tests.support.fake_github.server import FakeGithubServer
from tests.support.fake_github.shapes import Shapes, user_id
from tests.support.fake_github.state import (
    CheckRunRecord,
    CommentRecord,
    FakeRepo,
    Installation,
    IssuedToken,
    MergeRecord,
    Permission,
    PullRequest,
    RecordedRequest,
    StatusRecord,
    User,
    WorkflowRunRecord,
)
from tests.support.fake_github.webhooks import Payloads
from tests.support.fake_github.webhooks import deliver as deliver_webhook

API_PREFIX = "/api/v3"
_APP_IDS = itertools.count(secrets.randbelow(1_000_000) + 100_000)
RATE_LIMIT_WINDOW_SECONDS = 3600


class FakeGithub:
    """A GitHub for one App on 127.0.0.1: `with FakeGithub() as fake:` serves until the end.

    Thread-safe: API requests are answered one at a time under `lock`, which the controller
    methods take too; git requests run `git http-backend` outside it.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        app_id: int | None = None,
        app_slug: str = "keepgreen",
        token_lifetime: float = 3600.0,
        rate_limit: int = 5000,
    ) -> None:
        self._own_directory = directory is None
        self.directory = (
            Path(tempfile.mkdtemp(prefix="fakegh-")) if directory is None else directory
        )
        self.git_root = self.directory / "git"
        self.git_root.mkdir(parents=True, exist_ok=True)
        # A new App per fake by default: clients cache JWTs and tokens by App id, process-wide.
        self.app_id = app_id if app_id is not None else next(_APP_IDS)
        self.app_slug = app_slug
        self.token_lifetime = token_lifetime
        self.rate_limit = rate_limit
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem: bytes = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        self.public_key_pem: bytes = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.lock = threading.RLock()
        self.description = Description.load()
        # What the tests assert on.
        self.installations: dict[int, Installation] = {}
        self.repos: dict[str, FakeRepo] = {}  # by lower-cased owner/name
        self.merges: list[MergeRecord] = []
        self.check_runs: dict[int, CheckRunRecord] = {}
        self.statuses: list[StatusRecord] = []
        self.comments: dict[int, CommentRecord] = {}
        self.requests: list[RecordedRequest] = []
        self.tokens_issued: list[IssuedToken] = []
        self.violations: list[str] = []
        self._failures: list[tuple[int, float | None]] = []
        self._budgets: dict[int | None, tuple[int, int]] = {}  # caller: (used, reset epoch)
        # The App's OAuth client, and the people who signed in through it: a code GitHub gave
        # the browser (single use), and the user tokens it was exchanged for.
        self.client_id = f"Iv23li{secrets.token_hex(7)}"
        self.client_secret = secrets.token_hex(20)
        self._codes: dict[str, User] = {}
        self.user_tokens: dict[str, User] = {}
        self._next_id = 1000
        self.server = FakeGithubServer(self)
        self.shapes = Shapes(
            api_url=self.api_url, web_url=self.web_url, app_id=self.app_id, app_slug=app_slug
        )
        self.rest = RestApi(self)

    # --- life ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """The REST API's base URL (GitHub Enterprise Server style)."""
        return f"{self.web_url}{API_PREFIX}"

    def start(self) -> FakeGithub:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> FakeGithub:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def write_private_key(self, path: Path) -> Path:
        """Save the App's private key (PEM, mode 0600) where keepgreen will read it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.private_key_pem)
        path.chmod(0o600)
        return path

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # --- controller: installations and repositories ---------------------------------------

    def add_installation(
        self,
        account: str,
        *,
        id: int | None = None,  # noqa: A002 (GitHub's name for it)
        account_type: str = "Organization",
    ) -> int:
        """Install the App on `account`; its installation id."""
        with self.lock:
            installation_id = id if id is not None else self._new_id()
            self.installations[installation_id] = Installation(
                id=installation_id,
                account=account,
                account_id=user_id(account),
                account_type="User" if account_type == "User" else "Organization",
                created_at=iso(time.time()),
            )
            return installation_id

    def remove_installation(self, installation_id: int) -> None:
        """Uninstall: the installation, its tokens and its repositories' access go."""
        with self.lock:
            del self.installations[installation_id]

    def add_repository(
        self,
        installation_id: int,
        owner: str,
        name: str,
        *,
        files: Files | None = None,
        default_branch: str = "main",
        private: bool = True,
    ) -> FakeRepo:
        """A repository of the installation: a bare repository whose default branch has one
        commit with `files` (a README by default).
        """
        with self.lock:
            if installation_id not in self.installations:
                raise KeyError(f"no installation {installation_id}")
            bare = BareRepository(self.git_root / owner / f"{name}.git")
            bare.init(default_branch=default_branch)
            initial = bare.commit_files(
                parent=None,
                files=files if files is not None else {"README.md": f"# {name}\n"},
                message="Initial commit\n",
                author=("Ada Author", "ada@example.com"),
            )
            bare.update_ref(f"refs/heads/{default_branch}", initial)
            repo = FakeRepo(
                id=self._new_id(),
                owner=owner,
                name=name,
                installation_id=installation_id,
                bare=bare,
                clone_url=f"{self.web_url}/git/{owner}/{name}.git",
                created_at=iso(time.time()),
                default_branch=default_branch,
                private=private,
            )
            self.repos[repo.full_name.lower()] = repo
            return repo

    def repo(self, owner: str, name: str) -> FakeRepo:
        return self.repos[f"{owner}/{name}".lower()]

    def remove_repository(self, owner: str, name: str) -> None:
        """The installation loses the repository (it stays on disk, unreachable)."""
        with self.lock:
            del self.repos[f"{owner}/{name}".lower()]

    # --- controller: pull requests and branches -------------------------------------------

    def open_pull_request(
        self,
        owner: str,
        name: str,
        *,
        branch: str,
        files: Files,
        title: str = "A change",
        body: str = "",
        author: str = "ada",
        base: str = "main",
        message: str | None = None,
    ) -> int:
        """Commit `files` on `branch` (made from `base` when it does not exist) and open a pull
        request from it; its number. The head is also at `refs/pull/N/head`.
        """
        with self.lock:
            repo = self.repo(owner, name)
            start = repo.bare.resolve(f"refs/heads/{branch}") or repo.bare.resolve(
                f"refs/heads/{base}"
            )
            head = repo.bare.commit_files(
                parent=start,
                files=files,
                message=f"{message or title}\n",
                author=(author, f"{author}@users.noreply.github.com"),
            )
            repo.bare.update_ref(f"refs/heads/{branch}", head)
            number = repo.next_number
            repo.next_number += 1
            now = iso(time.time())
            repo.pulls[number] = PullRequest(
                id=self._new_id(),
                number=number,
                title=title,
                body=body,
                author=author,
                branch=branch,
                base=base,
                created_at=now,
                updated_at=now,
            )
            repo.bare.update_ref(f"refs/pull/{number}/head", head)
            return number

    def push_to_pull_request(
        self, owner: str, name: str, number: int, *, files: Files, message: str = "More work"
    ) -> str:
        """A new commit on the pull request's branch; the new head sha."""
        with self.lock:
            repo = self.repo(owner, name)
            pull = repo.pulls[number]
            head = repo.bare.commit_files(
                parent=self.pull_head(repo, pull),
                files=files,
                message=f"{message}\n",
                author=(pull.author, f"{pull.author}@users.noreply.github.com"),
            )
            repo.bare.update_ref(f"refs/heads/{pull.branch}", head)
            repo.bare.update_ref(f"refs/pull/{number}/head", head)
            pull.updated_at = iso(time.time())
            return head

    def push_to_branch(
        self,
        owner: str,
        name: str,
        branch: str = "main",
        *,
        files: Files,
        message: str = "Someone else's change",
        author: str = "bob",
    ) -> str:
        """A new commit on `branch` (made from the default branch if new); its sha."""
        with self.lock:
            repo = self.repo(owner, name)
            parent = repo.bare.resolve(f"refs/heads/{branch}") or repo.bare.resolve(
                f"refs/heads/{repo.default_branch}"
            )
            sha = repo.bare.commit_files(
                parent=parent,
                files=files,
                message=f"{message}\n",
                author=(author, f"{author}@users.noreply.github.com"),
            )
            repo.bare.update_ref(f"refs/heads/{branch}", sha)
            return sha

    def close_pull_request(self, owner: str, name: str, number: int) -> None:
        with self.lock:
            pull = self.repo(owner, name).pulls[number]
            pull.state, pull.closed_at = "closed", iso(time.time())

    def reopen_pull_request(self, owner: str, name: str, number: int) -> None:
        with self.lock:
            pull = self.repo(owner, name).pulls[number]
            pull.state, pull.closed_at = "open", None

    def set_base(self, owner: str, name: str, number: int, base: str) -> None:
        """Change the branch a pull request targets (the `edited` event's change)."""
        with self.lock:
            self.repo(owner, name).pulls[number].base = base

    def set_labels(self, owner: str, name: str, number: int, labels: list[str]) -> None:
        with self.lock:
            self.repo(owner, name).pulls[number].labels = list(labels)

    def set_permission(self, owner: str, name: str, user: str, permission: Permission) -> None:
        """`user`'s permission on the repository (anyone not set reads)."""
        with self.lock:
            self.repo(owner, name).permissions[user.lower()] = permission

    def protect(
        self, owner: str, name: str, branch: str, contexts: list[str], *, ruleset: bool = False
    ) -> None:
        """Require `contexts` on `branch`: by branch protection, or by a ruleset."""
        with self.lock:
            repo = self.repo(owner, name)
            (repo.rulesets if ruleset else repo.protection)[branch] = list(contexts)

    def add_status(
        self,
        owner: str,
        name: str,
        *,
        sha: str,
        context: str,
        state: str,
        description: str | None = None,
        target_url: str | None = None,
    ) -> StatusRecord:
        """A commit status set by CI."""
        with self.lock:
            status = StatusRecord(
                id=self._new_id(),
                repo=f"{owner}/{name}",
                sha=sha,
                context=context,
                state=state,  # type: ignore[arg-type]  # checked by the API's description
                description=description,
                target_url=target_url,
                created_at=iso(time.time()),
            )
            self.statuses.append(status)
            return status

    def add_check_run(
        self,
        owner: str,
        name: str,
        *,
        head_sha: str,
        check_name: str,
        conclusion: str | None = "success",
        app_slug: str = "ci",
        details_url: str | None = None,
    ) -> CheckRunRecord:
        """A check run reported by another App (CI): completed with `conclusion`, or in
        progress when `conclusion` is None.
        """
        with self.lock:
            fields: dict[str, Any] = {"details_url": details_url}
            if conclusion is None:
                fields["status"] = "in_progress"
            else:
                fields |= {"status": "completed", "conclusion": conclusion}
            return self.record_check_run(
                self.repo(owner, name),
                name=check_name,
                head_sha=head_sha,
                app_slug=app_slug,
                fields=fields,
            )

    def add_workflow_run(
        self,
        owner: str,
        name: str,
        *,
        head_sha: str,
        fork_owner: str | None = None,
        status: str = "in_progress",
        head_branch: str = "patch-1",
        event: str = "pull_request",
    ) -> int:
        """A GitHub Actions run of the repository's workflow on `head_sha`, for a pull request
        from `fork_owner`'s fork of it (from the repository itself when None); its run id.
        """
        with self.lock:
            repo = self.repo(owner, name)
            now = iso(time.time())
            run = WorkflowRunRecord(
                id=self._new_id(),
                repo=repo.full_name,
                head_repo=repo.full_name if fork_owner is None else f"{fork_owner}/{repo.name}",
                head_sha=head_sha,
                head_branch=head_branch,
                event=event,
                status=status,
                conclusion="success" if status == "completed" else None,
                run_number=len(repo.workflow_runs) + 1,
                created_at=now,
                updated_at=now,
            )
            repo.workflow_runs[run.id] = run
            return run.id

    def set_workflow_run_status(
        self, owner: str, name: str, run_id: int, status: str, conclusion: str | None = None
    ) -> None:
        """Move a workflow run along (`completed` with `conclusion`, success by default)."""
        with self.lock:
            run = self.repo(owner, name).workflow_runs[run_id]
            run.status = status
            run.conclusion = (conclusion or "success") if status == "completed" else None
            run.updated_at = iso(time.time())

    def fail(self, status: int = 502, *, times: int = 1, retry_after: float | None = None) -> None:
        """The next `times` API requests are answered `status`: 5xx as GitHub's front end
        does, 403/429 as its secondary rate limit (with `Retry-After` when given).
        """
        with self.lock:
            self._failures.extend([(status, retry_after)] * times)

    def expire_tokens(self) -> None:
        """Every token issued so far expires now."""
        with self.lock:
            self.tokens_issued = [
                IssuedToken(t.token, t.installation_id, min(t.expires_at, time.time() - 1))
                for t in self.tokens_issued
            ]

    # --- reading state ---------------------------------------------------------------------

    def branch_sha(self, owner: str, name: str, branch: str = "main") -> str | None:
        return self.repo(owner, name).bare.resolve(f"refs/heads/{branch}")

    def head_sha(self, owner: str, name: str, number: int) -> str:
        repo = self.repo(owner, name)
        return self.pull_head(repo, repo.pulls[number])

    def check_runs_for(
        self, owner: str, name: str, *, head_sha: str | None = None
    ) -> list[CheckRunRecord]:
        full = f"{owner}/{name}"
        return [
            run
            for run in self.check_runs.values()
            if run.repo == full and head_sha in {None, run.head_sha}
        ]

    def comments_on(self, owner: str, name: str, number: int) -> list[CommentRecord]:
        full = f"{owner}/{name}"
        return [c for c in self.comments.values() if c.repo == full and c.issue_number == number]

    def pull_head(self, repo: FakeRepo, pull: PullRequest) -> str:
        """The pull request's head; a push to its branch (over git) moves it, as on GitHub."""
        branch = repo.bare.resolve(f"refs/heads/{pull.branch}")
        current = repo.bare.resolve(f"refs/pull/{pull.number}/head")
        if pull.state == "open" and branch and branch != current:
            repo.bare.update_ref(f"refs/pull/{pull.number}/head", branch)
            return branch
        assert current is not None
        return current

    def test_merge(self, repo: FakeRepo, pull: PullRequest) -> str | None:
        """GitHub's test merge at `refs/pull/N/merge`; None when the pull request conflicts."""
        base = repo.bare.resolve(f"refs/heads/{pull.base}")
        head = self.pull_head(repo, pull)
        if base is None:
            return None
        try:
            tree = repo.bare.merge_tree(base, head)
        except MergeConflict:
            return None
        existing = repo.bare.resolve(f"refs/pull/{pull.number}/merge")
        info = repo.bare.commit_info(existing) if existing else None
        if info and info.parents == [base, head]:
            return existing
        sha = repo.bare.commit_tree(tree, [base, head], f"Merge {head} into {base}\n")
        repo.bare.update_ref(f"refs/pull/{pull.number}/merge", sha)
        return sha

    def resolve_ref(self, repo: FakeRepo, ref: str) -> str | None:
        """A sha, branch or tag as the commits endpoints take it."""
        for candidate in (f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
            sha = repo.bare.resolve(candidate)
            if sha:
                return sha
        return None

    # --- used by the REST operations -------------------------------------------------------

    def record_check_run(
        self, repo: FakeRepo, *, name: str, head_sha: str, app_slug: str, fields: Mapping[str, Any]
    ) -> CheckRunRecord:
        run = CheckRunRecord(
            id=self._new_id(),
            repo=repo.full_name,
            name=name,
            head_sha=head_sha,
            status="queued",
            conclusion=None,
            title=None,
            summary=None,
            text=None,
            details_url=None,
            external_id=None,
            started_at=iso(time.time()),
            completed_at=None,
            app_slug=app_slug,
        )
        self.check_runs[run.id] = run
        self.apply_check_run_fields(run, fields)
        return run

    def apply_check_run_fields(self, run: CheckRunRecord, fields: Mapping[str, Any]) -> None:
        """Apply a create or update body as GitHub does (a conclusion completes the run)."""
        for name in ("name", "details_url", "external_id", "started_at", "status"):
            if name in fields and fields[name] is not None:
                setattr(run, name, fields[name])
        if fields.get("conclusion"):
            run.conclusion = fields["conclusion"]
            run.status = "completed"
        if run.status == "completed":
            run.completed_at = fields.get("completed_at") or run.completed_at or iso(time.time())
        else:
            run.conclusion, run.completed_at = None, None
        output = fields.get("output") or {}
        for name in ("title", "summary", "text"):
            if name in output:
                setattr(run, name, output[name])
        run.history.append(
            {
                "status": run.status,
                "conclusion": run.conclusion,
                "title": run.title,
                "summary": run.summary,
                "text": run.text,
                "details_url": run.details_url,
            }
        )

    def record_comment(
        self, repo: FakeRepo, number: int, *, author: str, body: str
    ) -> CommentRecord:
        comment = new_comment(repo, self._new_id(), number, author=author, body=body)
        self.comments[comment.id] = comment
        return comment

    def add_comment(
        self, owner: str, name: str, number: int, *, author: str, body: str
    ) -> CommentRecord:
        """A comment written by a user (send the `issue_comment` webhook yourself)."""
        with self.lock:
            return self.record_comment(self.repo(owner, name), number, author=author, body=body)

    def take_failure(self) -> tuple[int, float | None] | None:
        return self._failures.pop(0) if self._failures else None

    def rate_budget(self, caller: int | None) -> tuple[int, int, int]:
        """(used, limit, reset epoch) of the caller's hourly budget (None: the App's JWT)."""
        now = int(time.time())
        used, reset = self._budgets.get(caller, (0, now + RATE_LIMIT_WINDOW_SECONDS))
        if now >= reset:
            used, reset = 0, now + RATE_LIMIT_WINDOW_SECONDS
        self._budgets[caller] = (used, reset)
        return used, self.rate_limit, reset

    def spend(self, caller: int | None) -> tuple[int, int, int]:
        used, limit, reset = self.rate_budget(caller)
        self._budgets[caller] = (used + 1, reset)
        return used + 1, limit, reset

    def authorize(self, login: str, installation_ids: Sequence[int], redirect_uri: str) -> str:
        """What GitHub does when `login` grants the App at /login/oauth/authorize: the code
        it sends the browser back with (`installation_ids`: the installations they can reach).
        """
        code = secrets.token_hex(10)
        with self.lock:
            self._codes[code] = User(login, tuple(installation_ids), redirect_uri)
        return code

    def exchange_code(self, form: Mapping[str, str]) -> dict[str, str]:
        """POST /login/oauth/access_token, as GitHub answers it (200 even when it refuses)."""
        if (form.get("client_id"), form.get("client_secret")) != (
            self.client_id,
            self.client_secret,
        ):
            return {"error": "incorrect_client_credentials"}
        user = self._codes.pop(form.get("code", ""), None)
        if user is None:
            return {"error": "bad_verification_code"}
        if form.get("redirect_uri", user.redirect_uri) != user.redirect_uri:
            return {"error": "redirect_uri_mismatch"}
        token = "ghu_" + secrets.token_urlsafe(27)[:36]
        self.user_tokens[token] = user
        return {"access_token": token, "token_type": "bearer", "scope": ""}

    def live_token(self, token: str) -> IssuedToken | None:
        now = time.time()
        for issued in self.tokens_issued:
            if (
                issued.token == token
                and issued.expires_at > now
                and issued.installation_id in self.installations
            ):
                return issued
        return None

    # --- webhooks --------------------------------------------------------------------------

    def payloads(self, owner: str, name: str) -> Payloads:
        """Webhook payload builders for the repository (its ids and installation)."""
        repo = self.repo(owner, name)
        return Payloads(
            installation_id=repo.installation_id, owner=repo.owner, name=repo.name, repo_id=repo.id
        )

    def deliver(
        self,
        url: str,
        event: str,
        payload: Mapping[str, Any],
        *,
        secret: str | bytes,
        delivery_id: str | None = None,
        timeout: float = 10.0,
    ) -> httpx.Response:
        """POST `payload` to `url` as GitHub delivers a webhook, signed with `secret`."""
        return deliver_webhook(
            url,
            event,
            payload,
            secret=secret,
            delivery_id=delivery_id or str(uuid.uuid4()),
            timeout=timeout,
        )


@contextmanager
def running_fake_github(directory: Path | None = None, **options: Any) -> Iterator[FakeGithub]:
    """A started FakeGithub, stopped on exit (for fixtures)."""
    with FakeGithub(directory, **options) as fake:
        yield fake
