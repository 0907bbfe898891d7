"""Webhook deliveries as GitHub sends them: the JSON body signed with HMAC-SHA256 of the
shared secret, and GitHub's headers.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import httpx


def signature(body: bytes, secret: str | bytes) -> str:
    """The `X-Hub-Signature-256` value of `body`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def deliver(
    url: str,
    event: str,
    payload: Mapping[str, Any],
    *,
    secret: str | bytes,
    delivery_id: str,
    timeout: float = 10.0,
) -> httpx.Response:
    """POST `payload` to `url` with GitHub's webhook headers."""
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/fake",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Hook-ID": "1",
        "X-GitHub-Hook-Installation-Target-Type": "integration",
        "X-Hub-Signature-256": signature(body, secret),
    }
    return httpx.post(url, content=body, headers=headers, timeout=timeout)


EXAMPLES = Path(__file__).parents[2] / "fixtures" / "github" / "webhooks-examples.json"


@cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    return {event["name"]: event["examples"] for event in json.loads(EXAMPLES.read_text())}


def example(event: str, action: str | None = None) -> dict[str, Any]:
    """A copy of GitHub's last (newest) published example of `event` (with `action`)."""
    for payload in reversed(_examples()[event]):
        if action is None or payload.get("action") == action:
            return copy.deepcopy(payload)
    # Actions without an example of their own start from `synchronize`'s (a full pull request).
    return copy.deepcopy(next(p for p in _examples()[event] if p.get("action") == "synchronize"))


def _account_type(login: str) -> str:
    """GitHub's `type` of an account: an App's bot account's login ends in `[bot]`."""
    return "Bot" if login.endswith("[bot]") else "User"


class Payloads:
    """Webhook payloads for one installation's repository: GitHub's examples with only the
    ids, shas, names, numbers, labels, bodies, logins and installation id changed.
    """

    def __init__(self, *, installation_id: int, owner: str, name: str, repo_id: int) -> None:
        self.installation_id = installation_id
        self.owner = owner
        self.name = name
        self.repo_id = repo_id

    def _repository(self, repository: dict[str, Any]) -> None:
        repository.update(id=self.repo_id, name=self.name, full_name=f"{self.owner}/{self.name}")
        repository["owner"]["login"] = self.owner
        if "default_branch" in repository:
            repository["default_branch"] = "main"

    def _common(self, payload: dict[str, Any], sender: str) -> dict[str, Any]:
        if "repository" in payload:
            self._repository(payload["repository"])
        payload["installation"] = {"id": self.installation_id, "node_id": "MDIzOkludGVncmF0aW9u"}
        payload["sender"].update(login=sender, type=_account_type(sender))
        return payload

    def installation(
        self,
        action: str,
        *,
        account: str,
        repositories: list[tuple[int, str]],
        sender: str = "octocat",
    ) -> dict[str, Any]:
        """`installation` created/deleted on `account` with `repositories` (id, name)."""
        payload = example("installation", action)
        payload["installation"]["id"] = self.installation_id
        payload["installation"]["account"]["login"] = account
        # Older examples predate these fields, which GitHub now always sends.
        payload["installation"].setdefault("suspended_at", None)
        payload["installation"].setdefault("suspended_by", None)
        template = payload["repositories"][0]
        payload["repositories"] = [
            template | {"id": repo_id, "name": name, "full_name": f"{account}/{name}"}
            for repo_id, name in repositories
        ]
        payload["sender"]["login"] = sender
        return payload

    def installation_repositories(
        self, action: str, *, repositories: list[tuple[int, str]], sender: str = "octocat"
    ) -> dict[str, Any]:
        """`installation_repositories` added/removed."""
        payload = example("installation_repositories")
        payload["action"] = action
        payload["installation"]["id"] = self.installation_id
        payload["installation"]["account"]["login"] = self.owner
        payload["installation"].setdefault("suspended_at", None)
        payload["installation"].setdefault("suspended_by", None)
        payload.setdefault("requester", None)
        template = (payload["repositories_added"] or payload["repositories_removed"])[0]
        listed = [
            template | {"id": repo_id, "name": name, "full_name": f"{self.owner}/{name}"}
            for repo_id, name in repositories
        ]
        payload["repositories_added"] = listed if action == "added" else []
        payload["repositories_removed"] = listed if action == "removed" else []
        payload["sender"]["login"] = sender
        return payload

    def pull_request(
        self,
        action: str,
        *,
        number: int,
        head_sha: str,
        head_ref: str,
        base_ref: str = "main",
        base_sha: str | None = None,
        title: str = "A change",
        author: str = "ada",
        labels: tuple[str, ...] = (),
        label: str | None = None,
        before: str | None = None,
        base_from: str | None = None,
        merged: bool = False,
        sender: str = "ada",
    ) -> dict[str, Any]:
        """`pull_request` opened/synchronize/closed/reopened/edited/labeled/unlabeled.
        synchronize needs `before` (the old head); edited `base_from` (the old base branch);
        labeled/unlabeled `label`.
        """
        payload = self._common(example("pull_request", action), sender)
        payload["action"] = action
        payload["number"] = number
        pull = payload["pull_request"]
        pull.update(number=number, title=title, state="closed" if action == "closed" else "open")
        pull["id"] = self.repo_id * 1000 + number
        pull["merged"] = merged
        pull["user"]["login"] = author
        pull["head"].update(ref=head_ref, sha=head_sha, label=f"{self.owner}:{head_ref}")
        pull["base"].update(ref=base_ref, label=f"{self.owner}:{base_ref}")
        if base_sha is not None:
            pull["base"]["sha"] = base_sha
        for side in ("head", "base"):
            if pull[side].get("repo"):
                self._repository(pull[side]["repo"])
        label_template = (
            next(iter(pull["labels"]), None) or example("pull_request", "labeled")["label"]
        )
        pull["labels"] = [label_template | {"name": name} for name in labels]
        if action in {"labeled", "unlabeled"}:
            payload["label"] = label_template | {"name": label or "keepgreen-merge"}
        if action == "synchronize":
            payload["before"], payload["after"] = before or "0" * 40, head_sha
        if action != "synchronize":  # only a push says where the head moved from
            payload.pop("before", None)
            payload.pop("after", None)
        if action == "edited":
            payload["changes"] = {
                "base": {"ref": {"from": base_from or "main"}, "sha": {"from": "0" * 40}}
            }
        return payload

    def issue_comment(
        self, *, number: int, body: str, author: str, comment_id: int = 1
    ) -> dict[str, Any]:
        """`issue_comment` created on pull request `number`."""
        payload = self._common(example("issue_comment", "created"), author)
        issue = payload["issue"]
        issue["number"] = number
        url = f"https://api.github.com/repos/{self.owner}/{self.name}/pulls/{number}"
        html = f"https://github.com/{self.owner}/{self.name}/pull/{number}"
        issue["pull_request"] = {
            "url": url,
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "merged_at": None,
        }
        payload["comment"].update(id=comment_id, body=body)
        payload["comment"]["user"].update(login=author, type=_account_type(author))
        return payload

    def push(self, *, ref: str, before: str, after: str, sender: str = "ada") -> dict[str, Any]:
        """`push` of `ref` (`refs/heads/main`) from `before` to `after`."""
        payload = self._common(example("push"), sender)
        payload.update(ref=ref, before=before, after=after, created=False, deleted=False)
        if payload.get("head_commit"):
            payload["head_commit"]["id"] = after
        payload["commits"] = [c | {"id": after} for c in payload["commits"][-1:]]
        return payload

    def check_run(
        self,
        *,
        head_sha: str,
        name: str,
        conclusion: str,
        head_branch: str,
        check_run_id: int = 1,
        details_url: str | None = None,
        sender: str = "ci[bot]",
    ) -> dict[str, Any]:
        """`check_run` completed on a commit of `head_branch`."""
        payload = self._common(example("check_run", "completed"), sender)
        run = payload["check_run"]
        run.update(
            id=check_run_id,
            head_sha=head_sha,
            name=name,
            status="completed",
            conclusion=conclusion,
            pull_requests=[],
        )
        if details_url is not None:
            run["details_url"] = details_url
        run["check_suite"].update(
            head_branch=head_branch,
            head_sha=head_sha,
            conclusion=conclusion,
            status="completed",
            pull_requests=[],
        )
        return payload

    def check_suite(
        self, *, head_sha: str, head_branch: str, conclusion: str, sender: str = "ci[bot]"
    ) -> dict[str, Any]:
        """`check_suite` completed on a commit of `head_branch`."""
        payload = self._common(example("check_suite", "completed"), sender)
        payload["check_suite"].update(
            head_sha=head_sha,
            head_branch=head_branch,
            conclusion=conclusion,
            status="completed",
            after=head_sha,
            pull_requests=[],
        )
        return payload

    def status(
        self,
        *,
        sha: str,
        context: str,
        state: str,
        target_url: str | None = None,
        branches: tuple[str, ...] = (),
        sender: str = "ci[bot]",
    ) -> dict[str, Any]:
        """`status` of `context` on commit `sha`."""
        payload = self._common(example("status"), sender)
        payload.update(sha=sha, context=context, state=state, target_url=target_url)
        payload["commit"]["sha"] = sha
        template = next(iter(payload["branches"]), None)
        payload["branches"] = (
            [
                template | {"name": name, "commit": template["commit"] | {"sha": sha}}
                for name in branches
            ]
            if template
            else []
        )
        return payload
