"""Driving keepgreen as a GitHub App in tests: the fake GitHub's deliveries signed with the
App's secret, the test branches keepgreen pushed there, and CI answering on them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.fake_github import FakeGithub
from tests.support.fake_github.webhooks import Payloads, signature

WEBHOOK_SECRET = "keepgreen-webhook-secret"
TEST_BRANCH_PREFIX = "refs/heads/keepgreen-merge/"


@dataclass(frozen=True)
class AppFiles:
    """The App's settings as files and values, for a container or a `keepgreen serve`."""

    private_key_file: Path
    webhook_secret_file: Path
    app_id: int
    api_url: str

    def settings(self) -> dict[str, Any]:
        return {
            "github_app_id": self.app_id,
            "github_private_key_file": self.private_key_file,
            "github_webhook_secret_file": self.webhook_secret_file,
            "github_api_url": self.api_url,
        }

    def environment(self) -> dict[str, str]:
        return {f"KEEPGREEN_{name.upper()}": str(value) for name, value in self.settings().items()}


def app_files(fake: FakeGithub, directory: Path) -> AppFiles:
    directory.mkdir(parents=True, exist_ok=True)
    key = fake.write_private_key(directory / "app.pem")
    secret = directory / "webhook-secret"
    secret.write_text(WEBHOOK_SECRET + "\n")
    return AppFiles(key, secret, fake.app_id, fake.api_url)


def signed(event: str, payload: Mapping[str, Any], *, delivery_id: str | None = None,
           secret: str = WEBHOOK_SECRET) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    """A delivery's body and GitHub's headers, signed with `secret`."""
    body = json.dumps(payload).encode()
    return body, {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/fake",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature(body, secret),
    }


@dataclass
class GithubRepoDriver:
    """One repository on the fake GitHub: its payloads, PRs and test branches."""

    fake: FakeGithub
    installation_id: int
    owner: str
    name: str
    send: Callable[[str, Mapping[str, Any]], int]  # event, payload -> HTTP status
    answered: dict[str, str] = field(default_factory=dict)  # test branch sha -> conclusion

    @property
    def payloads(self) -> Payloads:
        return self.fake.payloads(self.owner, self.name)

    def test_branches(self) -> dict[str, str]:
        """keepgreen's test branches on GitHub: name -> sha."""
        listed = self.fake.repo(self.owner, self.name).bare.git(
            "for-each-ref", "--format=%(objectname) %(refname)", TEST_BRANCH_PREFIX
        )
        branches = {}
        for line in listed.splitlines():
            sha, ref = line.split(" ", 1)
            branches[ref.removeprefix("refs/heads/")] = sha
        return branches

    def files_at(self, sha: str) -> set[str]:
        bare = self.fake.repo(self.owner, self.name).bare
        return set(bare.git("ls-tree", "-r", "--name-only", sha).split())

    def tree_of(self, sha: str) -> str:
        bare = self.fake.repo(self.owner, self.name).bare
        return bare.git("rev-parse", f"{sha}^{{tree}}").strip()

    def answer_ci(self, verdict: Callable[[set[str]], str], *, context: str = "ci/test") -> int:
        """Send a `check_run` completed webhook for each test branch not answered yet, with the
        conclusion `verdict` gives for the files of its commit; how many were sent.
        """
        sent = 0
        for branch, sha in self.test_branches().items():
            if sha in self.answered:
                continue
            conclusion = verdict(self.files_at(sha))
            self.answered[sha] = conclusion
            payload = self.payloads.check_run(
                head_sha=sha, name=context, conclusion=conclusion, head_branch=branch,
                details_url=f"https://ci.example.com/{sha[:8]}",
            )  # fmt: skip
            assert self.send("check_run", payload) == 202
            sent += 1
        return sent

    def comment(self, number: int, body: str, *, author: str) -> int:
        payload = self.payloads.issue_comment(
            number=number, body=body, author=author, comment_id=abs(hash(body)) % 10**6 + 1
        )
        return self.send("issue_comment", payload)

    def label(self, number: int, label: str, *, sender: str, action: str = "labeled") -> int:
        pull = self.fake.repo(self.owner, self.name).pulls[number]
        labels = (label,) if action == "labeled" else ()
        self.fake.set_labels(self.owner, self.name, number, list(labels))
        payload = self.payloads.pull_request(
            action, number=number, head_sha=self.fake.head_sha(self.owner, self.name, number),
            head_ref=pull.branch, labels=labels, label=label, sender=sender,
        )  # fmt: skip
        return self.send("pull_request", payload)

    def pushed_to(self, number: int, *, files: dict[str, str]) -> int:
        pull = self.fake.repo(self.owner, self.name).pulls[number]
        before = self.fake.head_sha(self.owner, self.name, number)
        after = self.fake.push_to_pull_request(self.owner, self.name, number, files=files)
        payload = self.payloads.pull_request(
            "synchronize", number=number, head_sha=after, head_ref=pull.branch,
            before=before, sender="ada",
        )  # fmt: skip
        return self.send("pull_request", payload)
