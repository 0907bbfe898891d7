"""The merge button at the door (`keepgreen.web.polled`): the first submit of a PR is written
before the router, in one transaction with the first submits of the same moment, and reads
back at once as the route's submit would have left it; anything else reaches the route.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from keepgreen.app.pull_requests import FirstSubmit, PullRequestService
from keepgreen.bootstrap import Container
from keepgreen.core.ids import OrgId
from keepgreen.core.model import QueueAsk
from keepgreen.core.priority import priority_from_name
from tests.conftest import LogLines
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO, Api, assert_error, pr_verb, submit, update_queue
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
    registered_repo: GitRepo,
    monkeypatch: pytest.MonkeyPatch,
    log_lines: LogLines,
) -> None:
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    route = Counted(monkeypatch, PullRequestService, "submit")
    answer = submit(queue, 1, priority="high", noBatch=True)
    assert (answer.status_code, answer.json()) == (200, {})
    assert route.calls == 0
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
    write = container.pull_requests.submit_first

    def counted(asked: list[FirstSubmit]) -> list[bool]:
        sizes.append(len(asked))
        return write(asked)

    monkeypatch.setattr(container.pull_requests, "submit_first", counted)

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
    queue: Api, container: Container
) -> None:
    org = org_of(container, queue.token)

    def first(number: int, branch: str = "main") -> FirstSubmit:
        return FirstSubmit(org, QueueAsk(REPO, branch, number), None, None)

    prs = container.pull_requests
    assert prs.submit_first([first(5), first(3)]) == [True, True]
    # Already in the queue, twice in one call, a branch without a queue: left to `submit`.
    assert prs.submit_first([first(3), first(4), first(4), first(9, "develop")]) == [
        False,
        True,
        False,
        False,
    ]
    found = entries(container, org)
    assert sorted(found) == [3, 4, 5]
    assert [number for number, _ in sorted(found.items(), key=lambda one: one[1][0].position)] == [
        5,
        3,
        4,
    ]
