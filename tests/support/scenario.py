"""Scenario tests of the whole queue: real git, the HTTP API, the worker, a scripted CI.

A `Scenario` drives one queue the way users and CI do: PRs are refs in a real repository,
requests go through the v1 API, the worker runs pass by pass in the test's thread, and CI
answers with `setCommitStatus` according to what the test commit's tree holds (a file named
`BAD-<n>`, added by `pr(n, ..., bad=True)`, makes every test commit containing it fail).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from keepgreen.adapters.db.tables import TestRunRow
from keepgreen.bootstrap import Container
from keepgreen.core.enums import StateReason, TestRunStatus
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import QueueEntry, RepoRef, StateChange, TestRun
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import Api

CI = "ci"


@dataclass
class Scenario:
    container: Container
    api: Api
    repo: GitRepo
    clock: FakeClock
    branch: str = "main"
    # PR numbers whose next run testing them fails once (a flake), then pass as usual.
    flaky_once: set[int] = field(default_factory=set)
    # Set False to leave runs unanswered (a CI that never reports).
    ci_answers: bool = True
    # (dependents, tested) PR numbers of every run CI answered, in answering order.
    started: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    # The runs CI answered, as built (with their chains), in answering order.
    answered_runs: list[TestRun] = field(default_factory=list)

    # -- setup ------------------------------------------------------------------------------

    def create_queue(self, *, statuses: list[str] | None = None, **config: Any) -> None:
        """Create the queue and configure it; `statuses` overrides the required statuses
        (default: the scripted CI's context; `[]` sets no override at all).
        """
        response = self.api.post("createQueue", targetBranch=self.branch)
        assert response.status_code == 200, response.text
        required = [CI] if statuses is None else statuses
        if required:
            config["requiredStatuses"] = required
        if config:
            self.update_queue(**config)

    def update_queue(self, **config: Any) -> dict[str, Any]:
        response = self.api.post("updateQueue", targetBranch=self.branch, **config)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def pr(self, number: int, files: dict[str, str], *, bad: bool = False, **opts: Any) -> str:
        """Open PR `number` changing `files` (plus a `BAD` marker when it breaks the build)."""
        changed = dict(files)
        if bad:
            changed[f"BAD-{number}"] = "this PR breaks the build\n"
        self.sync_worktree()
        return self.repo.open_pr(number, changed, **opts)

    def sync_worktree(self) -> None:
        """Bring the work tree and index to the target branch's tip: keepgreen lands with
        `update-ref`, which leaves a checked-out work tree behind (and a commit made from it
        would revert what landed).
        """
        self.repo.git("checkout", "-q", "-f", self.branch)
        self.repo.git("reset", "-q", "--hard", self.branch)

    def push_to_main(self, files: dict[str, str], message: str) -> str:
        """A commit on the target branch made behind the queue's back; its sha."""
        self.sync_worktree()
        return self.repo.commit(files, message)

    def push_to_pr(self, number: int, files: dict[str, str], message: str) -> str:
        """A new commit on top of PR `number` (its ref moves there); the new head sha."""
        self.sync_worktree()
        return self.repo.add_to_pr(number, files, message)

    def close_pr(self, number: int) -> None:
        """The PR's ref disappears, as when it is closed."""
        self.repo.git("update-ref", "-d", f"refs/pull/{number}/head")

    def post(self, verb: str, **fields: Any) -> Any:
        """Any v1 verb about this queue; the raw response."""
        return self.api.post(verb, targetBranch=self.branch, **fields)

    def submit(self, number: int, **fields: Any) -> None:
        response = self.try_submit(number, **fields)
        assert response.status_code == 200, response.text

    def try_submit(self, number: int, **fields: Any) -> Any:
        return self.post("submitPullRequest", pr={"number": number}, **fields)

    def cancel(self, number: int) -> None:
        response = self.post("cancelPullRequest", pr={"number": number})
        assert response.status_code == 200, response.text

    def restart(self, number: int) -> None:
        response = self.post("restartTestsOnPullRequest", pr={"number": number})
        assert response.status_code == 200, response.text

    def set_state(self, state: str) -> None:
        self.update_queue(state=state)

    def targets(self, number: int, targets: list[str]) -> None:
        sha = self.repo.tip(f"refs/pull/{number}/head")
        response = self.api.post(
            "setImpactedTargets",
            targetBranch=self.branch,
            pr={"number": number, "sha": sha},
            impactedTargets=targets,
        )
        assert response.status_code == 200, response.text

    # -- running ----------------------------------------------------------------------------

    def work(self) -> None:
        """One worker pass (observe git, tick, carry out effects)."""
        self.container.worker.run_once()

    def answer_ci(self) -> int:
        """Report a status for every built run that has none yet; the number answered."""
        if not self.ci_answers:
            return 0
        answered = 0
        # Oldest first, and among runs made together the shortest predicted branch first.
        runs = sorted(self.open_runs(), key=lambda r: (r.created_at, len(r.members)))
        for run in runs:
            if run.status is not TestRunStatus.IN_PROGRESS or run.sha is None:
                continue
            with self.container.unit_of_work() as uow:
                repository = uow.repositories.get(self.queue_row().repository_id)
                reported = uow.statuses.states_for_shas(repository.id, [run.sha])
            if reported.get(run.sha, {}).get(CI) is not None:
                continue
            tested = self.numbers(run.tested_prs)
            self.started.append((self.numbers(run.dependent_prs), tested))
            self.answered_runs.append(run)
            files = self.repo.git("ls-tree", "-r", "--name-only", run.sha).splitlines()
            failing = any(name.startswith("BAD-") for name in files)
            # A flake hits the run testing the PR, not the runs that merely hold it.
            flakes = self.flaky_once & set(tested)
            if flakes:
                failing = True
                self.flaky_once -= flakes
            self.set_status(run.sha, "failure" if failing else "success")
            answered += 1
        return answered

    def set_status(self, sha: str, state: str, context: str = CI) -> None:
        response = self.api.post("setCommitStatus", sha=sha, context=context, state=state)
        assert response.status_code == 200, response.text

    def wait_for(
        self, done: Callable[[], bool], *, seconds: float = 20.0, pause: float = 0.05
    ) -> None:
        """Work pass after pass (with short real sleeps, for background CI) until `done()`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.work()
            if done():
                return
            time.sleep(pause)
        msg = f"not done after {seconds} s: {self.final()}"
        raise AssertionError(msg)

    def settle(self, *, rounds: int = 80) -> None:
        """Work and answer CI until a pass changes nothing more."""
        for _ in range(rounds):
            self.work()
            if self.answer_ci() == 0 and not self.outbox():
                self.work()  # let the last answers land
                if self.answer_ci() == 0 and not self.outbox():
                    return
        msg = "the queue did not settle"
        raise AssertionError(msg)

    # -- reading ----------------------------------------------------------------------------

    def queue_row(self) -> Any:
        ref = RepoRef(self.api.repo["host"], self.api.repo["owner"], self.api.repo["name"])
        with self.container.unit_of_work() as uow:
            org = uow.orgs.get_by_slug("acme")
            assert org is not None
            repository = uow.repositories.find(org.id, ref)
            assert repository is not None
            queue = uow.queues.find(repository.id, self.branch)
            assert queue is not None
            return queue

    def open_runs(self) -> list[TestRun]:
        with self.container.unit_of_work() as uow:
            return list(uow.test_runs.list_open(self.queue_row().id))

    def open_numbers(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(dependents, tested) PR numbers of every open run, shortest predicted branch first
        (runs made in one decision share a creation time, so that is no order).
        """
        found = [
            (self.numbers(run.dependent_prs), self.numbers(run.tested_prs))
            for run in self.open_runs()
        ]
        return sorted(found, key=lambda pair: (len(pair[0]) + len(pair[1]), pair))

    def open_run_testing(self, number: int) -> TestRun:
        """The open run whose tested PRs include PR `number`."""
        entry_id = self.entry(number).id
        return next(run for run in self.open_runs() if entry_id in run.tested_prs)

    def all_runs(self) -> list[TestRun]:
        """Every run the queue ever made (open or closed), oldest first."""
        queue_id = self.queue_row().id
        with Session(self.container.engine) as session:
            ids = session.scalars(
                select(TestRunRow.id)
                .where(TestRunRow.queue_id == queue_id)
                .order_by(TestRunRow.created_at, TestRunRow.id)
            ).all()
        with self.container.unit_of_work() as uow:
            found = [uow.test_runs.get(queue_id, TestRunId(run_id)) for run_id in ids]
        return [run for run in found if run is not None]

    def run(self, run_id: TestRunId) -> TestRun:
        with self.container.unit_of_work() as uow:
            found = uow.test_runs.get(self.queue_row().id, run_id)
        assert found is not None
        return found

    def testing_details(self, run_id: str) -> dict[str, Any]:
        response = self.post("getMergeQueueTestingDetails", testRunId=run_id)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def get_queue(self) -> dict[str, Any]:
        response = self.post("getQueue")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def get_pr(self, number: int) -> dict[str, Any]:
        response = self.post("getSubmittedPullRequest", pr={"number": number})
        assert response.status_code == 200, response.text
        return dict(response.json())

    def list_prs(self, **fields: Any) -> list[dict[str, Any]]:
        response = self.post("listPullRequests", **fields)
        assert response.status_code == 200, response.text
        return list(response.json()["pullRequests"])

    def metrics(self) -> str:
        response = self.api.client.get(
            "/v1/getMergeQueueMetrics", headers={"x-api-token": self.api.token}
        )
        assert response.status_code == 200, response.text
        return str(response.text)

    def outbox(self) -> list[Any]:
        with self.container.unit_of_work() as uow:
            return list(uow.effects.list(self.queue_row().id))

    def live_entries(self) -> list[QueueEntry]:
        from keepgreen.app.engine import live_entries

        with self.container.unit_of_work() as uow:
            return list(live_entries(uow, self.queue_row().id))

    def entry(self, number: int) -> QueueEntry:
        with self.container.unit_of_work() as uow:
            found = uow.entries.find(self.queue_row().id, number)
            assert found is not None
            return found

    def numbers(self, entry_ids: tuple[Any, ...]) -> tuple[int, ...]:
        with self.container.unit_of_work() as uow:
            return tuple(uow.entries.get(entry_id).number for entry_id in entry_ids)

    def history(self, number: int) -> list[StateChange]:
        with self.container.unit_of_work() as uow:
            return list(uow.history.list_for_entry(self.entry(number).id))

    def reasons(self, number: int) -> list[StateReason]:
        return [change.reason for change in self.history(number)]

    def final(self) -> dict[int, tuple[str, str]]:
        """Every PR's (state, reason) as the API and the history tell it."""
        found: dict[int, tuple[str, str]] = {}
        with self.container.unit_of_work() as uow:
            for entry in uow.entries.list_for_queues([self.queue_row().id]):
                found[entry.number] = (entry.state.value, entry.state_reason.value)
        return found

    def api_state(self, number: int) -> str:
        return str(self.get_pr(number)["state"])

    def states(self) -> dict[int, str]:
        """Every PR's state, as `final()` without the reasons."""
        return {number: state for number, (state, _) in self.final().items()}

    def main_log(self) -> list[str]:
        """Subjects of the target branch's first-parent history, newest first."""
        return self.repo.git("log", "--first-parent", "--format=%s", self.branch).splitlines()

    def main_commits(self) -> list[str]:
        """Shas of the target branch's first-parent history, newest first."""
        return self.repo.git("log", "--first-parent", "--format=%H", self.branch).splitlines()

    def main_files(self) -> set[str]:
        return set(self.repo.git("ls-tree", "-r", "--name-only", self.branch).splitlines())

    def test_branches(self) -> list[str]:
        out = self.repo.git("for-each-ref", "--format=%(refname)", "refs/heads/keepgreen-merge")
        return [line for line in out.splitlines() if line]
