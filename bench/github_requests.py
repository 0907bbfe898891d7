"""What keepgreen as a GitHub App spends of an installation's hourly request budget.

    python bench/github_requests.py [--prs 10] [--idle-passes 30] [--json]

keepgreen (in this process, on SQLite in a temporary data dir) runs against the fake GitHub of
the tests (`tests/support/fake_github`: GitHub's REST API and git over HTTP, every exchange
validated against GitHub's OpenAPI description). The App is installed on one repository whose
`main` requires `ci/test`; `--prs` PRs are queued by `/keepgreen merge` comments; CI answers
each test branch with a passing check run; worker passes run until every PR is merged. Then
`--idle-passes` passes run with nothing to do (one second apart, the worker's poll interval).

Two runs, the same work, measured in the same process: with each PR's check run and comment
(what an App's queue has by default) and without them (`statusCheckEnabled` and
`commentsEnabled` off): the reference. Requests are the REST API's (git's are not counted: they
are the remote git host's, see bench/remote_pass.py), counted by the fake per operation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the fake GitHub lives with the tests

from tests.support.fake_github import FakeGithub  # noqa: E402
from tests.support.github_app import GithubRepoDriver, app_files  # noqa: E402

from keepgreen.app.pull_requests import QueueTarget  # noqa: E402
from keepgreen.app.queues import QueueUpdate  # noqa: E402
from keepgreen.bootstrap import Container, bootstrap  # noqa: E402
from keepgreen.core.enums import PrState  # noqa: E402
from keepgreen.logs import configure_logging  # noqa: E402
from keepgreen.settings import Settings  # noqa: E402

OWNER, NAME = "acme", "widgets"
MAX_PASSES = 400


def api_requests(fake: FakeGithub) -> Counter[str]:
    return Counter(
        request.operation_id or request.path
        for request in fake.requests
        if not request.path.startswith("/git/")
    )


def run(*, prs: int, idle_passes: int, feedback: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch, FakeGithub(Path(scratch) / "github") as fake:
        directory = Path(scratch)
        settings = Settings(
            data_dir=directory / "data",
            git_retry_max_seconds=0.0,
            **app_files(fake, directory / "app").settings(),
        )
        container = bootstrap(settings)
        try:
            return _measure(container, fake, prs=prs, idle_passes=idle_passes, feedback=feedback)
        finally:
            container.close()


def _measure(
    container: Container, fake: FakeGithub, *, prs: int, idle_passes: int, feedback: bool
) -> dict[str, Any]:
    container.admin.create_token(OWNER)
    installation = fake.add_installation(OWNER)
    fake.add_repository(installation, OWNER, NAME, files={"README.md": "widgets\n"})
    fake.protect(OWNER, NAME, "main", ["ci/test"])
    fake.set_permission(OWNER, NAME, "ada", "write")

    def send(event: str, payload: Any) -> int:
        container.github_webhooks.receive(
            delivery_id=str(uuid.uuid4()), event=event, payload=payload
        )
        return 202

    repo = GithubRepoDriver(fake, installation, OWNER, NAME, send)
    send(
        "installation",
        repo.payloads.installation(
            "created", account=OWNER, repositories=[(fake.repo(OWNER, NAME).id, NAME)]
        ),
    )
    container.worker.run_once()
    [info] = container.admin.list_repositories(org_slug=OWNER)
    target = QueueTarget(info.repository.org_id, info.repository.ref, "main")
    if not feedback:
        container.queues.update(
            target.org_id,
            target.repo,
            "main",
            QueueUpdate(status_check_enabled=False, comments_enabled=False),
        )
    numbers = [
        fake.open_pull_request(OWNER, NAME, branch=f"pr-{i}", files={f"f{i}.txt": f"{i}\n"})
        for i in range(prs)
    ]
    before = api_requests(fake)
    started = time.perf_counter()
    for number in numbers:
        repo.comment(number, "/keepgreen merge", author="ada")
    passes = 0
    while passes < MAX_PASSES:
        container.worker.run_once()
        repo.answer_ci(lambda _files: "success")
        passes += 1
        states = {container.pull_requests.get(target, n).state for n in numbers}
        if states == {PrState.MERGED}:
            break
    else:
        raise SystemExit(f"not every PR merged in {MAX_PASSES} passes")
    seconds = time.perf_counter() - started
    during = api_requests(fake) - before
    idle_start = api_requests(fake)
    idle_started = time.perf_counter()
    for _ in range(idle_passes):
        time.sleep(1.0)
        container.worker.run_once()
    idle_seconds = time.perf_counter() - idle_started
    idle = api_requests(fake) - idle_start
    total = sum(during.values())
    return {
        "feedback": feedback,
        "prs": prs,
        "merged": len(fake.merges),
        "passes": passes,
        "seconds": round(seconds, 2),
        "requests": total,
        "requests_per_pr": round(total / prs, 1),
        "by_operation": dict(sorted(during.items(), key=lambda item: -item[1])),
        "idle_requests": sum(idle.values()),
        "idle_requests_per_hour": round(sum(idle.values()) * 3600 / idle_seconds),
        "violations": len(fake.violations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=10)
    parser.add_argument("--idle-passes", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    configure_logging(level="warning", stream=sys.stderr)
    runs = [
        run(prs=options.prs, idle_passes=options.idle_passes, feedback=True),
        run(prs=options.prs, idle_passes=options.idle_passes, feedback=False),
    ]
    if options.json:
        print(json.dumps(runs, indent=2))
        return
    with_feedback, reference = runs
    print(f"{options.prs} PRs queued by comment, each tested alone and merged through GitHub")
    print(f"{'':38}{'check run + comment':>22}{'without (reference)':>22}")
    for label, key in (
        ("API requests, whole run", "requests"),
        ("API requests per merged PR", "requests_per_pr"),
        ("worker passes", "passes"),
        ("seconds", "seconds"),
        (f"idle: requests in {options.idle_passes} passes", "idle_requests"),
        ("idle: requests per hour", "idle_requests_per_hour"),
        ("requests outside GitHub's description", "violations"),
    ):
        print(f"{label:38}{with_feedback[key]:>22}{reference[key]:>22}")
    ratio = with_feedback["requests"] / max(reference["requests"], 1)
    print(f"check run and comment cost {ratio:.2f}x the reference's requests")
    print("by operation (with feedback):")
    for operation, count in with_feedback["by_operation"].items():
        print(f"  {operation:60}{count:>6}")


if __name__ == "__main__":
    main()
