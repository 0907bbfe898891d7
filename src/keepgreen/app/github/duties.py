"""What the worker does for the GitHub App besides moving queues: act on stored deliveries
(each pass), show each PR's place (after each queue's pass), read the branch protection's
required checks (at most every reconcile interval per queue), and sync installations (a
chore, so that a lost `installation_repositories` webhook is made good).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from keepgreen.app.github.api import GithubApi
from keepgreen.app.github.events import GithubEvents
from keepgreen.app.github.feedback import GithubFeedbackPublisher
from keepgreen.app.github.host import where
from keepgreen.app.github.installations import GithubInstallations
from keepgreen.core.ids import QueueId
from keepgreen.core.model import Queue, Repository


class GithubDuties:
    """The worker's GitHub chores, each safe to run in several workers at once."""

    def __init__(
        self,
        *,
        api: GithubApi,
        events: GithubEvents,
        installations: GithubInstallations,
        publisher: GithubFeedbackPublisher,
        reconcile_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._events = events
        self._installations = installations
        self._publisher = publisher
        self._reconcile_seconds = reconcile_seconds
        self._monotonic = monotonic
        self._protection_read: dict[QueueId, float] = {}
        self._lock = threading.Lock()

    def act_on_deliveries(self) -> int:
        """Act on the webhook deliveries waiting; how many were done."""
        return self._events.process_pending()

    def publish(self, queue_id: QueueId) -> None:
        """Bring the check runs and comments of the queue's PRs up to date."""
        self._publisher.publish(queue_id)

    def required_statuses(self, repository: Repository, queue: Queue) -> tuple[str, ...] | None:
        """The checks the branch protection requires of the queue's branch when they are due
        to be read again (None: not due, or not a repository of the App).
        """
        if repository.github_installation_id is None:
            return None
        now = self._monotonic()
        with self._lock:
            last = self._protection_read.get(queue.id)
            if last is not None and now - last < self._reconcile_seconds:
                return None
            self._protection_read[queue.id] = now
        return self._api.required_checks(where(repository), queue.branch)

    def sync_installations(self) -> None:
        """Register the repositories installations give that a lost webhook did not bring."""
        self._installations.sync_all()


__all__ = ["GithubDuties"]
