"""GitHub's REST API through githubkit (a client generated from GitHub's own API description).

The App signs in with a JWT (PyJWT, through githubkit's App auth) only to mint installation
tokens; every other call is made with the installation's token, kept until five minutes before
it expires. githubkit's own retries are off: a call that fails for a passing reason raises at
once and the worker's backoff (per queue, with incidents) decides when to try again, so a
worker never sleeps inside a request while it holds a lease. Each answer's `x-ratelimit-*`
headers update the installation's budget in the metrics.

For git, the token is written to `DATA_DIR/github/installation-ID.token` (mode 0600, replaced
atomically): git's credential helper reads that file, so the token never appears in a URL, a
command line or the environment.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import httpx
import structlog
from githubkit import AppAuthStrategy, GitHub, Response, TokenAuthStrategy
from githubkit.exception import (
    GitHubException,
    RateLimitExceeded,
    RequestError,
    RequestFailed,
    RequestTimeout,
)
from githubkit.utils import UNSET
from githubkit_schemas.v2022_11_28.models import InstallationRepositoriesGetResponse200
from pydantic import SecretStr

from keepgreen.app.github.api import (
    CheckRunView,
    GithubCommit,
    GithubPull,
    GithubRefused,
    GithubRepo,
    GithubUnavailable,
    GithubWorkflowRun,
    MergeAnswer,
    Permission,
    Where,
)
from keepgreen.app.ports import Clock
from keepgreen.app.telemetry import GithubOutcome, Telemetry
from keepgreen.core.enums import IncidentKind, MergeMethod

log = structlog.get_logger(__name__)

T = TypeVar("T")
# A token is renewed this long before GitHub says it expires (clocks differ; calls take time).
TOKEN_MARGIN = timedelta(minutes=5)
REQUEST_TIMEOUT_SECONDS = 15.0
CHECK_RUN_NAME = "keepgreen"
# The REST API version keepgreen speaks: the one github.com and every supported GitHub
# Enterprise Server release accept (a newer one would be refused by older servers).
API_VERSION: Literal["2022-11-28"] = "2022-11-28"
_PERMISSIONS: dict[str, Permission] = {
    "admin": "admin",
    "maintain": "maintain",
    "write": "write",
    "triage": "triage",
    "read": "read",
    "none": "none",
}
_METHODS: dict[MergeMethod, Literal["merge", "squash", "rebase"]] = {
    MergeMethod.MERGE_COMMIT: "merge",
    MergeMethod.SQUASH: "squash",
    MergeMethod.REBASE: "rebase",
}
_MAX_PAGES = 50  # 5,000 repositories per installation, far beyond what one org installs


@dataclass(frozen=True, slots=True)
class _Token:
    value: SecretStr
    expires_at: datetime


class GithubAppClient:
    """The `GithubApi` port over githubkit, for one App (one process may share it freely)."""

    def __init__(
        self,
        *,
        app_id: int,
        private_key: SecretStr,
        api_url: str,
        data_dir: Path,
        clock: Clock,
        telemetry: Telemetry,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._api_url = api_url.rstrip("/")
        self._clock = clock
        self._telemetry = telemetry
        self._transport = transport
        self._app = self._github(AppAuthStrategy(str(app_id), private_key.get_secret_value()))
        self._tokens: dict[int, _Token] = {}
        self._clients: dict[int, tuple[SecretStr, GitHub[Any]]] = {}
        self._lock = threading.Lock()
        self._token_dir = data_dir / "github"

    def _github(self, auth: AppAuthStrategy | TokenAuthStrategy) -> GitHub[Any]:
        return GitHub(
            auth,
            base_url=self._api_url,
            auto_retry=False,
            http_cache=False,
            timeout=REQUEST_TIMEOUT_SECONDS,
            user_agent="keepgreen",
            transport=self._transport,
        )

    # -- tokens -----------------------------------------------------------------------------

    def _token(self, installation_id: int) -> SecretStr:
        """A live token of the installation, minted when the one held is about to expire."""
        with self._lock:
            held = self._tokens.get(installation_id)
            if held is not None and held.expires_at - TOKEN_MARGIN > self._clock():
                return held.value
        answer = self._request(
            None,
            lambda: self._app.rest(API_VERSION).apps.create_installation_access_token(
                installation_id
            ),
        )
        if answer is None:
            raise GithubRefused(
                f"the GitHub App is not installed as installation {installation_id}", status=404
            )
        token = _Token(SecretStr(answer.text("token")), _parse_time(answer.text("expires_at")))
        with self._lock:
            self._tokens[installation_id] = token
        self._write_token_file(installation_id, token.value)
        log.info(
            "github installation token minted",
            installation=installation_id,
            expires_at=token.expires_at.isoformat(),
        )
        return token.value

    def _client(self, installation_id: int) -> GitHub[Any]:
        token = self._token(installation_id)
        with self._lock:
            held = self._clients.get(installation_id)
            if held is None or held[0] is not token:
                held = (token, self._github(TokenAuthStrategy(token.get_secret_value())))
                self._clients[installation_id] = held
            return held[1]

    def token_path(self, installation_id: int) -> Path:
        return self._token_dir / f"installation-{installation_id}.token"

    def _write_token_file(self, installation_id: int, token: SecretStr) -> None:
        self._token_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.token_path(installation_id)
        handle, temporary = tempfile.mkstemp(dir=self._token_dir, prefix=".token-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(token.get_secret_value())
            Path(temporary).replace(path)  # mkstemp made it 0600
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def git_token_file(self, installation_id: int) -> str:
        self._token(installation_id)
        return str(self.token_path(installation_id))

    # -- calls ------------------------------------------------------------------------------

    def _request(
        self,
        installation_id: int | None,
        call: Callable[[], Response[T, Any]],
    ) -> _Answer | None:
        """Make one request: its JSON answer, None for a 404, or GithubUnavailable or
        GithubRefused. Answers are read by hand, field by field, not into githubkit's models:
        those follow github.com's newest description, and GitHub Enterprise Server answers
        the same API version without the fields added since (a model would refuse them).
        """
        try:
            response = call()
        except RequestFailed as failed:
            status = failed.response.status_code
            self._note_budget(installation_id, failed.response.headers)
            if status == 404:
                self._count("not_found")
                return None
            raise self._failure(failed, status) from None
        except RequestTimeout:
            self._count("unavailable")
            raise GithubUnavailable(
                f"GitHub did not answer in {REQUEST_TIMEOUT_SECONDS:.0f} s"
            ) from None
        except RequestError as error:
            self._count("unavailable")
            raise GithubUnavailable(
                f"GitHub cannot be reached at {self._api_url} ({type(error.exc).__name__})"
            ) from None
        except GitHubException as error:
            self._count("unavailable")
            raise GithubUnavailable(f"GitHub's answer could not be read: {error}") from None
        self._note_budget(installation_id, response.headers)
        self._count("ok")
        try:
            body = response.json() if response.content else {}
        except ValueError:
            raise GithubRefused(
                "GitHub's answer is not JSON", status=response.status_code
            ) from None
        return _Answer(body, response.status_code)

    def _failure(self, failed: RequestFailed, status: int) -> GithubUnavailable | GithubRefused:
        message = _message(failed.response.raw_response)
        if isinstance(failed, RateLimitExceeded) or status == 429:
            self._count("rate_limited")
            retry_after = (
                failed.retry_after.total_seconds()
                if isinstance(failed, RateLimitExceeded)
                else None
            )
            return GithubUnavailable(
                f"GitHub's rate limit: {message}",
                kind=IncidentKind.GITHUB_RATE_LIMITED,
                retry_after=retry_after,
            )
        if status >= 500:
            self._count("unavailable")
            return GithubUnavailable(f"GitHub answered {status}: {message}")
        self._count("refused")
        return GithubRefused(f"GitHub answered {status}: {message}", status=status)

    def _count(self, outcome: GithubOutcome) -> None:
        self._telemetry.github_request(outcome)

    def _note_budget(self, installation_id: int | None, headers: httpx.Headers) -> None:
        if installation_id is None:
            return
        try:
            limit = int(headers["x-ratelimit-limit"])
            remaining = int(headers["x-ratelimit-remaining"])
        except (KeyError, ValueError):
            return
        self._telemetry.github_budget(installation_id, limit=limit, remaining=remaining)

    def _call(
        self,
        installation_id: int,
        call: Callable[[GitHub[Any]], Response[T, Any]],
    ) -> _Answer | None:
        client = self._client(installation_id)
        return self._request(installation_id, lambda: call(client))

    # -- the port ---------------------------------------------------------------------------

    def installation_account(self, installation_id: int) -> str:
        answer = self._request(
            None, lambda: self._app.rest(API_VERSION).apps.get_installation(installation_id)
        )
        if answer is None:
            raise GithubRefused(f"no GitHub App installation {installation_id}", status=404)
        account = answer.object("account")
        # A user or an organization has a login; an enterprise a slug.
        return account.optional_text("login") or account.text("slug")

    def installation_repositories(self, installation_id: int) -> list[GithubRepo]:
        repositories: list[GithubRepo] = []
        for page in range(1, _MAX_PAGES + 1):
            answer = self._call(installation_id, _repositories_page(page))
            if answer is None:
                break
            page_of = answer.objects("repositories")
            repositories.extend(
                GithubRepo(
                    id=repo.number("id"),
                    owner=repo.object("owner").text("login"),
                    name=repo.text("name"),
                    clone_url=repo.text("clone_url"),
                    default_branch=repo.text("default_branch"),
                )
                for repo in page_of
            )
            if not page_of or len(repositories) >= answer.number("total_count"):
                break
        return repositories

    def permission(self, where: Where, user: str) -> Permission:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).repos.get_collaborator_permission_level(
                where.owner, where.name, user
            ),
        )
        if answer is None:
            return "none"
        return _PERMISSIONS.get(answer.text("permission"), "none")

    def pull_request(self, where: Where, number: int) -> GithubPull | None:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).pulls.get(where.owner, where.name, number),
        )
        if answer is None:
            return None
        mergeable = answer.body.get("mergeable")
        return GithubPull(
            number=answer.number("number"),
            state="open" if answer.text("state") == "open" else "closed",
            merged=answer.body.get("merged") is True,
            head_sha=answer.object("head").text("sha"),
            base_ref=answer.object("base").text("ref"),
            title=answer.text("title"),
            author=answer.object("user").text("login"),
            labels=tuple(label.text("name") for label in answer.objects("labels")),
            mergeable=mergeable if isinstance(mergeable, bool) else None,
            merge_commit_sha=answer.optional_text("merge_commit_sha"),
            head_ref=answer.object("head").optional_text("ref"),
        )

    def commit(self, where: Where, sha: str) -> GithubCommit | None:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).git.get_commit(where.owner, where.name, sha),
        )
        if answer is None:
            return None
        return GithubCommit(
            sha=answer.text("sha"),
            tree=answer.object("tree").text("sha"),
            parents=tuple(parent.text("sha") for parent in answer.objects("parents")),
        )

    def merge(
        self,
        where: Where,
        number: int,
        *,
        head_sha: str,
        method: MergeMethod,
        title: str | None,
    ) -> MergeAnswer:
        try:
            answer = self._call(
                where.installation_id,
                lambda github: github.rest(API_VERSION).pulls.merge(
                    where.owner,
                    where.name,
                    number,
                    sha=head_sha,
                    merge_method=_METHODS[method],
                    commit_title=UNSET if title is None else title,
                ),
            )
        except GithubRefused as refused:
            # 405: GitHub will not merge it (a rule, a conflict); 409: the head moved.
            if refused.status == 405:
                return MergeAnswer(None, "not_mergeable", str(refused))
            if refused.status == 409:
                return MergeAnswer(None, "head_moved", str(refused))
            raise
        if answer is None:
            return MergeAnswer(None, "not_mergeable", f"pull request #{number} was not found")
        return MergeAnswer(answer.text("sha"))

    def create_check_run(self, where: Where, *, head_sha: str, view: CheckRunView) -> int:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).checks.create(
                where.owner,
                where.name,
                data=cast("Any", {"name": CHECK_RUN_NAME, "head_sha": head_sha, **_body(view)}),
            ),
        )
        if answer is None:
            raise GithubRefused(f"{where.owner}/{where.name} was not found", status=404)
        return answer.number("id")

    def update_check_run(self, where: Where, check_run_id: int, view: CheckRunView) -> None:
        self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).checks.update(
                where.owner, where.name, check_run_id, data=cast("Any", _body(view))
            ),
        )

    def create_comment(self, where: Where, number: int, body: str) -> int:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).issues.create_comment(
                where.owner, where.name, number, body=body
            ),
        )
        if answer is None:
            raise GithubRefused(f"pull request #{number} was not found", status=404)
        return answer.number("id")

    def update_comment(self, where: Where, comment_id: int, body: str) -> bool:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).issues.update_comment(
                where.owner, where.name, comment_id, body=body
            ),
        )
        return answer is not None

    def add_label(self, where: Where, number: int, label: str) -> None:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).issues.add_labels(
                where.owner, where.name, number, data={"labels": [label]}
            ),
        )
        if answer is None:
            raise GithubRefused(f"pull request #{number} was not found", status=404)

    def remove_label(self, where: Where, number: int, label: str) -> None:
        # A 404: the PR does not carry it (someone took it off), which is what was wanted.
        self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).issues.remove_label(
                where.owner, where.name, number, label
            ),
        )

    def required_checks(self, where: Where, branch: str) -> tuple[str, ...]:
        contexts: list[str] = []
        protection = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).repos.get_status_checks_protection(
                where.owner, where.name, branch
            ),
        )
        if protection is not None:
            contexts.extend(protection.texts("contexts"))
            contexts.extend(check.text("context") for check in protection.objects("checks"))
        rules = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).repos.get_branch_rules(
                where.owner, where.name, branch
            ),
        )
        if rules is not None:
            contexts.extend(_ruleset_contexts(rules.body_list))
        return tuple(dict.fromkeys(contexts))

    def workflow_run(self, where: Where, run_id: int) -> GithubWorkflowRun | None:
        answer = self._call(
            where.installation_id,
            lambda github: github.rest(API_VERSION).actions.get_workflow_run(
                where.owner, where.name, run_id, exclude_pull_requests=True
            ),
        )
        if answer is None:
            return None
        head = answer.body.get("head_repository")
        return GithubWorkflowRun(
            id=answer.number("id"),
            repository=answer.object("repository").text("full_name"),
            head_repository=(
                _Answer(head, answer.status).text("full_name") if isinstance(head, dict) else None
            ),
            head_sha=answer.text("head_sha"),
            status=answer.optional_text("status"),
        )


class _Answer:
    """A JSON answer, read field by field; a field missing or of another type is GitHub
    answering something keepgreen cannot use (GithubRefused), never a crash.
    """

    def __init__(self, body: object, status: int) -> None:
        self.status = status
        self.body: dict[str, object] = body if isinstance(body, dict) else {}
        self.body_list: list[object] = body if isinstance(body, list) else []

    def _bad(self, key: str, kind: str) -> GithubRefused:
        return GithubRefused(f"GitHub's answer has no {kind} `{key}`", status=self.status)

    def optional_text(self, key: str) -> str | None:
        value = self.body.get(key)
        return value if isinstance(value, str) else None

    def text(self, key: str) -> str:
        value = self.body.get(key)
        if not isinstance(value, str):
            raise self._bad(key, "text")
        return value

    def number(self, key: str) -> int:
        value = self.body.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._bad(key, "number")
        return value

    def object(self, key: str) -> _Answer:
        value = self.body.get(key)
        if not isinstance(value, dict):
            raise self._bad(key, "object")
        return _Answer(value, self.status)

    def objects(self, key: str) -> list[_Answer]:
        value = self.body.get(key, [])
        if not isinstance(value, list):
            raise self._bad(key, "list")
        return [_Answer(item, self.status) for item in value if isinstance(item, dict)]

    def texts(self, key: str) -> list[str]:
        value = self.body.get(key, [])
        return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _repositories_page(
    page: int,
) -> Callable[[GitHub[Any]], Response[InstallationRepositoriesGetResponse200, Any]]:
    def call(github: GitHub[Any]) -> Response[InstallationRepositoriesGetResponse200, Any]:
        return github.rest(API_VERSION).apps.list_repos_accessible_to_installation(
            per_page=100, page=page
        )

    return call


def _body(view: CheckRunView) -> dict[str, object]:
    body: dict[str, object] = {
        "status": view.status,
        "output": {"title": view.title[:255], "summary": view.summary[:65_000]},
    }
    if view.conclusion is not None:
        body["conclusion"] = view.conclusion
    if view.details_url is not None:
        body["details_url"] = view.details_url
    return body


def _ruleset_contexts(rules: object) -> list[str]:
    """The contexts of the `required_status_checks` rules among a branch's active rules."""
    contexts: list[str] = []
    if not isinstance(rules, list):
        return contexts
    for rule in rules:
        if not isinstance(rule, dict) or rule.get("type") != "required_status_checks":
            continue
        parameters = rule.get("parameters")
        checks = parameters.get("required_status_checks") if isinstance(parameters, dict) else []
        contexts.extend(
            check["context"]
            for check in (checks if isinstance(checks, list) else [])
            if isinstance(check, dict) and isinstance(check.get("context"), str)
        )
    return contexts


def _parse_time(text: str) -> datetime:
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _message(response: httpx.Response) -> str:
    """GitHub's own message from an error answer, cut short."""
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase or "no message"
    message = body.get("message") if isinstance(body, dict) else None
    return str(message)[:300] if message else response.reason_phrase or "no message"


__all__ = ["CHECK_RUN_NAME", "GithubAppClient"]
