"""The merge button at the door (`keepgreen.web.polled`): the first submit of a PR is written
before the router, in one transaction with the first submits of the same moment, and reads
back at once as the route's submit would have left it; anything else reaches the route.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import httpx
import pytest

from keepgreen.app.pull_requests import FirstSubmit, PullRequestService
from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState, QueueMode
from keepgreen.core.ids import OrgId, PullRequestId
from keepgreen.core.model import QueueAsk, QueueModes
from keepgreen.core.priority import priority_from_name
from tests.conftest import LogLines
from tests.support.gitrepo import GitRepo
from tests.support.wire import (
    REPO,
    Api,
    assert_error,
    pr_verb,
    submit,
    update_queue,
)
from tests.web.test_polled_fast_path import Counted


def org_of(container: Container, token: str) -> OrgId:
    org = container.admin.authenticate(token)
    assert org is not None
    return org


def entries(container: Container, org: OrgId) -> dict[int, Any]:
    """The queue's entries by PR number, with the state changes each has."""
    with container.unit_of_work(read_only=True) as uow:
        repository = uow.repositories.find(org, REPO)
        assert repository is not None
        found = uow.queues.find(repository.id, "main")
        assert found is not None
        return {
            entry.number: (entry, uow.history.list_for_entry(entry.id))
            for entry in uow.entries.list_for_queues([found.id])
        }


def test_a_first_submit_is_written_at_the_door_and_reads_back_at_once(
    queue: Api,
    container: Container,
    registered_repo: GitRepo,
    monkeypatch: pytest.MonkeyPatch,
    log_lines: LogLines,
) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    # The polled calls' answers are kept under the queue's version: the write moves it on.
    org = org_of(container, queue.token)
    before = container.quick_reads.queue_version(org, REPO, "main")
    route = Counted(monkeypatch, PullRequestService, "submit")
    answer = submit(queue, 1, priority="high", noBatch=True)
    assert (answer.status_code, answer.json()) == (200, {})
    assert route.calls == 0
    after = container.quick_reads.queue_version(org, REPO, "main")
    assert before is not None
    assert after is not None
    assert after.version > before.version
    pr = pr_verb(queue, "getSubmittedPullRequest", 1).json()
    assert (pr["state"], pr["isCurrentlySubmittedToQueue"], pr["noBatch"]) == (
        "not_ready",
        True,
        True,
    )
    high = priority_from_name("high")
    assert (pr["priorityValue"], pr["priorityName"]) == (high.value, high.name)
    [line] = log_lines.events("pr submitted")
    assert line["pr"] == 1
    access = log_lines.events("request")[0]
    assert (access["route"], access["status"]) == ("/v1/submitPullRequest", 200)


def test_first_submits_of_one_moment_share_one_transaction(
    queue: Api, container: Container, other_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six first submits, one of them twice, and another org's, at once through the real
    app: the door writes them together; each PR enters once, in its own position, with one
    state change; the repeat is a resubmit that changes nothing; the other org gets the 404.
    """
    app = queue.client.app
    sizes: list[int] = []
    write = container.quick_reads.enter_first

    async def counted(*args: Any) -> set[PullRequestId]:
        sizes.append(len(args[2]))
        return await write(*args)

    monkeypatch.setattr(container.quick_reads, "enter_first", counted)

    async def together() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kg") as client:

            def one(number: int, token: str) -> Any:
                return client.post(
                    "/v1/submitPullRequest",
                    json={"repo": queue.repo, "targetBranch": "main", "pr": {"number": number}},
                    headers={"x-api-token": token},
                )

            asked = [one(number, queue.token) for number in (1, 2, 3, 4, 5, 6, 3)]
            asked.append(one(7, other_token))
            return list(await asyncio.gather(*asked))

    answers = asyncio.run(together())
    assert [answer.status_code for answer in answers] == [200] * 7 + [404]
    assert max(sizes) > 1
    found = entries(container, org_of(container, queue.token))
    assert sorted(found) == [1, 2, 3, 4, 5, 6]
    assert len({entry.position for entry, _changes in found.values()}) == 6
    for entry, changes in found.values():
        assert (entry.state.value, [change.to_state.value for change in changes]) == (
            "not_ready",
            ["not_ready"],
        )


def test_what_the_door_does_not_write_gets_the_routes_answer(
    queue: Api, registered_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PR that left the queue (a new episode), and a first submit to a draining queue, go
    to the route: the PR is back in the queue; the draining queue answers 409.
    """
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    assert submit(queue, 1).status_code == 200
    assert pr_verb(queue, "cancelPullRequest", 1).status_code == 200
    route = Counted(monkeypatch, PullRequestService, "submit")
    assert submit(queue, 1).status_code == 200
    assert route.calls == 1
    assert pr_verb(queue, "getSubmittedPullRequest", 1).json()["isCurrentlySubmittedToQueue"]
    update_queue(queue, state="draining")
    assert_error(submit(queue, 2), 409, "queue_draining")
    assert route.calls == 2
    assert pr_verb(queue, "getSubmittedPullRequest", 2).status_code == 404


def test_submit_first_enters_each_new_pr_once_in_the_order_asked(
    queue: Api, container: Container, log_lines: LogLines
) -> None:
    org = org_of(container, queue.token)
    found = container.quick_reads.queued_options(org, REPO, "main", 0)
    assert found is not None
    assert found.queue_id is not None
    assert found.queue is not None
    queue_id, read = found.queue_id, found.queue

    def first(number: int, modes: QueueModes = read) -> FirstSubmit:
        return FirstSubmit(QueueAsk(REPO, "main", number), queue_id, modes, None, None)

    def submitted(*asked: FirstSubmit) -> list[bool]:
        return asyncio.run(container.pull_requests.submit_first(asked))

    assert submitted(first(5), first(3)) == [True, True]
    # Already in the queue, twice in one call: left to `submit`.
    assert submitted(first(3), first(4), first(4)) == [False, True, False]
    # The queue not as it was read (in another mode; draining): nothing is written.
    assert submitted(first(6, replace(read, mode=QueueMode.PARALLEL)), first(7)) == [
        False,
        False,
    ]
    update_queue(queue, state="draining")
    assert submitted(first(8)) == [False]
    found_entries = entries(container, org)
    assert sorted(found_entries) == [3, 4, 5]
    in_order = sorted(found_entries.items(), key=lambda one: one[1][0].position)
    assert [number for number, _ in in_order] == [5, 3, 4]
    for entry, changes in found_entries.values():
        assert entry.queue_id == queue_id
        assert [(change.from_state, change.to_state) for change in changes] == [
            (None, PrState.NOT_READY)
        ]
    assert [line["pr"] for line in log_lines.events("pr submitted")] == [5, 3, 4]


def test_a_first_submit_to_a_parallel_queue_waits_for_impacted_targets(
    queue: Api, container: Container, registered_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The door writes what the route would: a PR entering a queue in parallel mode (or
    switching to it) needs impacted targets for its head.
    """
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    update_queue(queue, mode="parallel")
    route = Counted(monkeypatch, PullRequestService, "submit")
    assert submit(queue, 1).status_code == 200
    assert route.calls == 0
    (entry, _changes) = entries(container, org_of(container, queue.token))[1]
    assert entry.readiness.requires_impacted_targets
