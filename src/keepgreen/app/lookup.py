"""Finding a client's repository and queue inside its org, with the 404s clients see."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from keepgreen.app.admin import presented_hash
from keepgreen.app.errors import NotFound
from keepgreen.app.ports import QuickReads, UnitOfWork
from keepgreen.core.ids import OrgId
from keepgreen.core.model import (
    Queue,
    QueueAsk,
    QueuedOptions,
    QueueEntry,
    QueueVersion,
    RepoRef,
    Repository,
    TokenRead,
)

# What a quick read of a queue found.
Found = TypeVar("Found", QueueVersion, QueuedOptions)


def find_repository(uow: UnitOfWork, org_id: OrgId, ref: RepoRef) -> Repository:
    """The org's repository; another org's repository is as unknown as a missing one."""
    repository = uow.repositories.find(org_id, ref)
    if repository is None:
        raise _no_repository(ref)
    return repository


def queue_version(quick: QuickReads, org_id: OrgId, ref: RepoRef, branch: str) -> QueueVersion:
    """The org's queue's id and version in one read, with find_repository's and find_queue's
    404s.
    """
    return _in_a_queue(quick.queue_version(org_id, ref, branch), ref, branch)


def queued_options(
    quick: QuickReads, org_id: OrgId, ref: RepoRef, branch: str, number: int
) -> QueuedOptions:
    """PR `number`'s state and options in the org's queue, in one read, with find_repository's
    and find_queue's 404s.
    """
    return _in_a_queue(quick.queued_options(org_id, ref, branch, number), ref, branch)


async def for_tokens(
    read: Callable[[list[tuple[str, QueueAsk]]], Awaitable[Sequence[TokenRead[Found] | None]]],
    asked: Sequence[tuple[str, QueueAsk]],
) -> list[tuple[OrgId, Found] | None]:
    """What `read` (a quick read made for the orgs of tokens' hashes) found for each presented
    token and what it asks: its org and what was found, when the token is live and its org's
    queue exists; None for anything else, which the full path answers (with its 401 or 404).
    """
    answers: list[tuple[OrgId, Found] | None] = [None] * len(asked)
    readable = [
        (index, hashed, ask)
        for index, (token, ask) in enumerate(asked)
        if (hashed := presented_hash(token)) is not None
    ]
    if not readable:
        return answers
    found = await read([(hashed, ask) for _index, hashed, ask in readable])
    for (index, hashed, _ask), one in zip(readable, found, strict=True):
        if one is None or not hmac.compare_digest(one.token_hash, hashed):
            continue
        if one.found.queue_id is not None:
            answers[index] = (one.org_id, one.found)
    return answers


def _in_a_queue(found: Found | None, ref: RepoRef, branch: str) -> Found:
    """A quick read's answer, or the 404 of a repository or queue it did not find."""
    if found is None:
        raise _no_repository(ref)
    if found.queue_id is None:
        raise _no_queue(ref, branch)
    return found


def _no_repository(ref: RepoRef) -> NotFound:
    return NotFound("repository_not_found", f"repository {ref} is not registered")


def _no_queue(ref: RepoRef, branch: str) -> NotFound:
    return NotFound("queue_not_found", f"repository {ref} has no merge queue for branch {branch!r}")


def find_queue(
    uow: UnitOfWork, repository: Repository, branch: str, *, lock: bool = False
) -> Queue:
    queue = uow.queues.find(repository.id, branch, lock=lock)
    if queue is None:
        raise _no_queue(repository.ref, branch)
    return queue


def find_entry(uow: UnitOfWork, queue: Queue, number: int) -> QueueEntry:
    """The PR's entry in the queue, whatever its state (404 if never submitted there)."""
    entry = uow.entries.find(queue.id, number)
    if entry is None:
        raise NotFound(
            "pull_request_not_found",
            f"pull request #{number} was never submitted to the queue for {queue.branch!r}",
        )
    return entry


def find_entry_by_branch(uow: UnitOfWork, queue: Queue, branch: str) -> QueueEntry:
    """The entry of the PR submitted from `branch`: the one in the queue, else the one that
    left it last (404 if no PR was ever submitted from it).
    """
    entry = uow.entries.find_by_branch(queue.id, branch)
    if entry is None:
        raise NotFound(
            "pull_request_not_found",
            f"no pull request from branch {branch!r} was ever submitted to the queue for "
            f"{queue.branch!r}",
        )
    return entry


def find_queued_entry(uow: UnitOfWork, queue: Queue, number: int) -> QueueEntry:
    """The PR's entry while it is in the queue (404 once it merged, failed or was cancelled)."""
    entry = uow.entries.find(queue.id, number)
    if entry is None or entry.state.is_terminal:
        raise NotFound(
            "pull_request_not_queued",
            f"pull request #{number} is not in the queue for {queue.branch!r}",
        )
    return entry
