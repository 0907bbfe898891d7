"""Who depends on whom: one line in single mode, lanes of overlapping targets in parallel mode.

An entry depends on every entry ahead of it whose impacted targets overlap its own, and on what
those depend on (the predicted branch must contain them: they will have merged first). "ALL"
(`None`) overlaps everything, so it is a barrier; an empty list overlaps nothing.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from itertools import compress
from typing import Any, TypeAlias

from keepgreen.core.enums import QueueMode
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueEntry

Targets: TypeAlias = tuple[str, ...] | None


Deps: TypeAlias = tuple[PullRequestId, ...]
_BITS = bytes.maketrans(b"01", b"\x00\x01")


class Dependencies(dict[PullRequestId, Deps]):  # noqa: PLW1641 - unhashable, as a dict is
    """Every entry's dependencies, each worked out when first asked for.

    A queue of n entries has up to n²/2 dependency pairs, and a round of the scheduler reads
    only some of them: each entry's dependencies are kept as a bit mask over the queue order (bit
    i: the i-th entry) and turned into a tuple on first read. It is a complete dict: anything
    beyond `get`, `[]` and `in` (iterating, comparing, `len`) fills it first.
    """

    __slots__ = ("_filled", "_ids", "_masks")

    def __init__(self, ids: tuple[PullRequestId, ...], masks: dict[PullRequestId, int]) -> None:
        super().__init__()
        self._ids = ids
        self._masks = masks
        self._filled = False

    def _read(self, key: PullRequestId) -> Deps:
        found = dict.get(self, key)
        if found is None:
            # The mask's bits, lowest first, as bytes 0/1: the selectors of `compress`.
            bits = format(self._masks[key], "b")[::-1].encode().translate(_BITS)
            found = tuple(compress(self._ids, bits))
            dict.__setitem__(self, key, found)
        return found

    def _fill(self) -> None:
        if not self._filled:
            for key in self._masks:
                self._read(key)
            self._filled = True

    def get(self, key: PullRequestId, default: Any = None) -> Any:
        return self._read(key) if key in self._masks else default

    def __getitem__(self, key: PullRequestId) -> Deps:
        if key not in self._masks:
            raise KeyError(key)
        return self._read(key)

    def __contains__(self, key: object) -> bool:
        return key in self._masks

    def __iter__(self) -> Iterator[PullRequestId]:
        return iter(self._masks)

    def __len__(self) -> int:
        return len(self._masks)

    def __eq__(self, other: object) -> bool:
        self._fill()
        return dict.__eq__(self, other)

    def keys(self) -> KeysView[PullRequestId]:  # type: ignore[override] # dict's views, once filled
        self._fill()
        return dict.keys(self)

    def values(self) -> ValuesView[Deps]:  # type: ignore[override] # dict's views, once filled
        self._fill()
        return dict.values(self)

    def items(self) -> ItemsView[PullRequestId, Deps]:  # type: ignore[override] # dict's views, once filled
        self._fill()
        return dict.items(self)

    def __repr__(self) -> str:
        self._fill()
        return dict.__repr__(self)


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
    ids = tuple(entry.id for entry in order)
    if mode is QueueMode.SINGLE:
        # One line: everything ahead.
        return Dependencies(ids, {entry_id: (1 << index) - 1 for index, entry_id in enumerate(ids)})
    # Walking the queue front to back: an entry overlapping an earlier one on target t also
    # overlaps the last entry before it that touched t (or an ALL entry after that), whose
    # dependencies already hold every earlier toucher of t. So an entry's dependencies are, per
    # target, the last toucher and its dependencies; an ALL entry's are every entry ahead that
    # impacts anything. The same as checking every pair ahead, without the quadratic walk.
    masks: dict[PullRequestId, int] = {}
    touched_by: list[int] = []  # index -> its own bit and its dependencies
    last: dict[str, int] = {}  # target -> index of the last entry so far that impacts it
    last_all: int | None = None  # index of the last ALL entry so far
    impacting = 0  # every entry so far that impacts something
    for index, entry_id in enumerate(ids):
        mine = targets.get(entry_id)
        if mine is None:
            found = impacting
            last_all = index
            last.clear()  # an ALL entry is the last toucher of every target
        elif not mine:
            found = 0
        else:
            found = touched_by[last_all] if last_all is not None else 0
            for target in mine:
                toucher = last.get(target)
                if toucher is not None:
                    found |= touched_by[toucher]
            for target in mine:
                last[target] = index
        masks[entry_id] = found
        touched_by.append(found | (1 << index))
        if mine is None or mine:
            impacting |= 1 << index
    return Dependencies(ids, masks)
