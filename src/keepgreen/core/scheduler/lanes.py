"""Who depends on whom: one line in single mode, lanes of overlapping targets in parallel mode.

An entry depends on every entry ahead of it whose impacted targets overlap its own, and on what
those depend on (the predicted branch must contain them: they will have merged first). "ALL"
(`None`) overlaps everything, so it is a barrier; an empty list overlaps nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from keepgreen.core.enums import QueueMode
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueEntry

Targets: TypeAlias = tuple[str, ...] | None


def _overlap(first: Targets, second: Targets) -> bool:
    if first is None or second is None:
        return bool(first is None or first) and bool(second is None or second)
    return not set(first).isdisjoint(second)


def dependencies(
    order: Sequence[QueueEntry],
    *,
    mode: QueueMode,
    targets: Mapping[PullRequestId, Targets],
) -> dict[PullRequestId, tuple[PullRequestId, ...]]:
    """Every entry's dependencies (transitive), in queue order.

    In single mode an entry depends on all entries ahead. In parallel mode an entry without
    uploaded targets counts as impacting everything (it cannot be placed in a lane).
    """
    if mode is QueueMode.SINGLE:
        # One line: everything ahead, already in queue order.
        ids = tuple(entry.id for entry in order)
        return {entry_id: ids[:index] for index, entry_id in enumerate(ids)}
    position = {entry.id: index for index, entry in enumerate(order)}
    closure: dict[PullRequestId, set[PullRequestId]] = {}
    for index, entry in enumerate(order):
        found: set[PullRequestId] = set()
        mine = targets.get(entry.id)
        for ahead in order[:index]:
            if ahead.id not in found and _overlap(mine, targets.get(ahead.id)):
                found.add(ahead.id)
                found |= closure[ahead.id]
        closure[entry.id] = found
    return {
        entry_id: tuple(sorted(found, key=position.__getitem__))
        for entry_id, found in closure.items()
    }
