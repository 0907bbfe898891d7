"""keepgreen as a GitHub App, end to end through real processes: `keepgreen serve` (API and
worker) against the fake GitHub (its REST API and git over HTTP), webhooks sent over HTTP and
signed as GitHub signs them. Everything is judged from GitHub's side: merges, check runs,
comments.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.test_serve_e2e import Served, keepgreen
from tests.support.fake_github import FakeGithub
from tests.support.fake_github.webhooks import deliver
from tests.support.github_app import WEBHOOK_SECRET, GithubRepoDriver, app_files, signed

pytestmark = pytest.mark.slow

OWNER = "acme"
WRITER, READER = "ada", "mallory"
WAIT_SECONDS = 60.0


@pytest.fixture
def fake(fake_github: FakeGithub) -> FakeGithub:
    return fake_github


@pytest.fixture
def env(fresh_env: dict[str, str], fake: FakeGithub, tmp_path: Path) -> dict[str, str]:
    return {
        **fresh_env,
        **app_files(fake, tmp_path / "app").environment(),
        "KEEPGREEN_GITHUB_RECONCILE_SECONDS": "1",
        "KEEPGREEN_WORKER_POLL_SECONDS": "0.2",
        "KEEPGREEN_GIT_RETRY_MAX_SECONDS": "1",
    }


def wait_for(
    what: str,
    check: Callable[[], bool],
    served: Served,
    *,
    tick: Callable[[], object] = lambda: None,
) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        tick()
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"waited {WAIT_SECONDS} s for {what}; keepgreen said:\n{served.output[-6000:]}")


def test_installed_on_two_repositories_queued_tested_and_merged_on_github(
    env: dict[str, str], workdir: Path, tmp_path: Path, fake: FakeGithub
) -> None:
    keepgreen("token", "create", "--org", OWNER, env=env, cwd=workdir)
    installation = fake.add_installation(OWNER)
    for name in ("widgets", "gadgets"):
        fake.add_repository(installation, OWNER, name, files={"README.md": f"{name}\n"})
        fake.protect(OWNER, name, "main", ["ci/test"])
        fake.set_permission(OWNER, name, WRITER, "write")
    served = Served(env=env, cwd=workdir, log=tmp_path / "serve.log", worker=True)
    try:
        served.wait_until_answering()
        hook = served.url.removesuffix("/v1") + "/webhooks/github"

        def send(event: str, payload: Mapping[str, Any]) -> int:
            sent = deliver(
                hook, event, payload, secret=WEBHOOK_SECRET, delivery_id=str(uuid.uuid4())
            )
            return sent.status_code

        widgets = GithubRepoDriver(fake, installation, OWNER, "widgets", send)
        gadgets = GithubRepoDriver(fake, installation, OWNER, "gadgets", send)

        # Installed: both repositories registered, each with a queue on main.
        repos = [(fake.repo(OWNER, n).id, n) for n in ("widgets", "gadgets")]
        assert (
            send(
                "installation",
                widgets.payloads.installation("created", account=OWNER, repositories=repos),
            )
            == 202
        )

        def registered() -> bool:
            listed = keepgreen("repo", "list", "--org", OWNER, env=env, cwd=workdir, check=False)
            return "widgets" in listed.stdout and "gadgets" in listed.stdout

        wait_for("both repositories to be registered", registered, served)

        # A forged signature is refused; a replayed delivery is taken once.
        body, headers = signed("ping", {"zen": "hi"}, secret="not-the-secret")
        assert httpx.post(hook, content=body, headers=headers).status_code == 401
        good = fake.open_pull_request(
            OWNER, "widgets", branch="good", files={"good.txt": "1\n"}, author=WRITER
        )
        bad = fake.open_pull_request(
            OWNER, "widgets", branch="bad", files={"bad.txt": "1\n"}, author=WRITER
        )
        label = widgets.payloads.pull_request(
            "labeled", number=good, head_sha=fake.head_sha(OWNER, "widgets", good),
            head_ref="good", labels=("keepgreen-merge",), label="keepgreen-merge", sender=WRITER,
        )  # fmt: skip
        fake.set_labels(OWNER, "widgets", good, ["keepgreen-merge"])
        replayed = str(uuid.uuid4())
        first = deliver(hook, "pull_request", label, secret=WEBHOOK_SECRET, delivery_id=replayed)
        again = deliver(hook, "pull_request", label, secret=WEBHOOK_SECRET, delivery_id=replayed)
        assert (first.status_code, again.status_code) == (202, 200)
        assert again.json()["status"] == "duplicate"
        assert widgets.comment(bad, "/keepgreen merge", author=WRITER) == 202

        # On gadgets: someone without write access is refused; a queued PR pushed to leaves.
        refused = fake.open_pull_request(
            OWNER, "gadgets", branch="r", files={"r.txt": "1\n"}, author=READER
        )
        assert gadgets.comment(refused, "/keepgreen merge", author=READER) == 202
        pushed = fake.open_pull_request(
            OWNER, "gadgets", branch="p", files={"p.txt": "1\n"}, author=WRITER
        )
        assert gadgets.comment(pushed, "/keepgreen merge", author=WRITER) == 202
        wait_for(
            "the refusal and the pushed PR's check run",
            lambda: (
                bool(fake.comments_on(OWNER, "gadgets", refused))
                and bool(
                    fake.check_runs_for(
                        OWNER, "gadgets", head_sha=fake.head_sha(OWNER, "gadgets", pushed)
                    )
                )
            ),
            served,
        )
        [reply] = fake.comments_on(OWNER, "gadgets", refused)
        assert f"@{READER} only people with write access" in reply.body
        old_head = fake.head_sha(OWNER, "gadgets", pushed)
        assert gadgets.pushed_to(pushed, files={"p.txt": "2\n"}) == 202
        wait_for(
            "the pushed PR's check run to say cancelled",
            lambda: (
                fake.check_runs_for(OWNER, "gadgets", head_sha=old_head)[0].conclusion
                == "cancelled"
            ),
            served,
        )

        # The good PR is tested; main moves meanwhile: the run starts again on the new tip.
        wait_for("a test branch on widgets", lambda: bool(widgets.test_branches()), served)
        first_runs = set(widgets.test_branches().values())
        before = fake.branch_sha(OWNER, "widgets", "main")
        after = fake.push_to_branch(OWNER, "widgets", "main", files={"other.txt": "x\n"})
        assert (
            send("push", widgets.payloads.push(ref="refs/heads/main", before=before, after=after))
            == 202
        )

        def restarted() -> bool:
            shas = set(widgets.test_branches().values()) - first_runs
            return any(
                after in fake.repo(OWNER, "widgets").bare.git("rev-list", sha).split()
                for sha in shas
            )

        wait_for("the runs to start again on the new main", restarted, served)

        # GitHub fails for a while; CI answers on the test branches as check runs.
        fake.fail(502, times=4)
        fake.fail(429, times=2, retry_after=1)

        def verdict(files: set[str]) -> str:
            return "failure" if "bad.txt" in files else "success"

        for sha in first_runs:
            widgets.answered[sha] = "stale"  # runs of the old main are not answered
        wait_for(
            "the good PR merged and the bad one failed",
            lambda: (
                bool(fake.merges)
                and fake.check_runs_for(
                    OWNER, "widgets", head_sha=fake.head_sha(OWNER, "widgets", bad)
                )[-1].conclusion
                == "failure"
            ),
            served,
            tick=lambda: widgets.answer_ci(verdict),
        )
        [merge] = fake.merges
        assert merge.number == good
        tested = {
            widgets.tree_of(sha) for sha, said in widgets.answered.items() if said == "success"
        }
        assert merge.tree in tested
        good_check = fake.check_runs_for(
            OWNER, "widgets", head_sha=fake.head_sha(OWNER, "widgets", good)
        )[-1]
        assert (good_check.conclusion, good_check.title) == (
            "success",
            f"Merged as {merge.sha[:12]}",
        )
        bad_check = fake.check_runs_for(
            OWNER, "widgets", head_sha=fake.head_sha(OWNER, "widgets", bad)
        )[-1]
        assert "its tests failed" in bad_check.title
        [good_comment] = fake.comments_on(OWNER, "widgets", good)
        assert "Merged" in good_comment.body
        assert good_comment.history
    finally:
        served.stop()
    # Nothing secret in what keepgreen printed.
    for token in fake.tokens_issued:
        assert token.token not in served.output
