"""GitHub webhooks in: each delivery is stored as it arrives and acted on by the worker.

The HTTP edge checks the signature (X-Hub-Signature-256) before anything else and answers at
once: GitHub gives a delivery 10 seconds, and a slow or dead worker must never make it time
out. A delivery GitHub sends again (X-GitHub-Delivery seen before) is stored once. Events
keepgreen does not act on are answered and dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import StrEnum

import structlog

from keepgreen.app.errors import InvalidInput
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.core.model import GithubDelivery

log = structlog.get_logger(__name__)

# The events keepgreen acts on (see the README's "Use it with GitHub").
ACTED_ON = frozenset(
    {
        "check_run",
        "check_suite",
        "installation",
        "installation_repositories",
        "issue_comment",
        "pull_request",
        "push",
        "status",
    }
)
# X-GitHub-Delivery is a GUID; X-GitHub-Event a lowercase word.
_DELIVERY_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
_EVENT = re.compile(r"[a-z_]{1,64}")
_MAX_ACTION_LENGTH = 64


class Received(StrEnum):
    """What became of a delivery."""

    QUEUED = "queued"  # stored for the worker
    DUPLICATE = "duplicate"  # delivered before: nothing more to do
    IGNORED = "ignored"  # an event keepgreen does not act on
    PONG = "pong"  # GitHub's `ping`, sent when the webhook is made


class WebhookIntake:
    """Stores verified GitHub deliveries for the worker (the signature is the edge's job)."""

    def __init__(self, uow: UnitOfWorkFactory, *, clock: Clock, wake: Callable[[], None]) -> None:
        self._uow = uow
        self._clock = clock
        self._wake = wake

    def receive(self, *, delivery_id: str, event: str, payload: object) -> Received:
        """Store the delivery of `event` unless it is known or not acted on.

        Raises InvalidInput for a delivery id or event name GitHub would not send, or a
        payload that is not a JSON object.
        """
        if not _DELIVERY_ID.fullmatch(delivery_id):
            raise InvalidInput(
                "invalid_delivery", "X-GitHub-Delivery must be GitHub's delivery id (a GUID)"
            )
        if not _EVENT.fullmatch(event):
            raise InvalidInput("invalid_event", "X-GitHub-Event must name a GitHub event")
        if not isinstance(payload, Mapping):
            raise InvalidInput("invalid_payload", "the payload must be a JSON object")
        if event == "ping":
            return Received.PONG
        if event not in ACTED_ON:
            log.info("github event ignored", github_event=event, delivery=delivery_id)
            return Received.IGNORED
        action = payload.get("action")
        installation = payload.get("installation")
        installation_id = installation.get("id") if isinstance(installation, Mapping) else None
        delivery = GithubDelivery(
            id=delivery_id,
            event=event,
            action=action[:_MAX_ACTION_LENGTH] if isinstance(action, str) else None,
            installation_id=installation_id if _is_id(installation_id) else None,
            payload=payload,
            received_at=self._clock(),
        )
        with self._uow() as uow:
            added = uow.github_deliveries.add_if_new(delivery)
            uow.commit()
        if not added:
            return Received.DUPLICATE
        log.info(
            "github delivery stored",
            github_event=event,
            action=delivery.action,
            delivery=delivery_id,
            installation=delivery.installation_id,
        )
        self._wake()
        return Received.QUEUED


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


__all__ = ["ACTED_ON", "Received", "WebhookIntake"]
