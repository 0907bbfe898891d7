"""A dict that counts its writes: what the scheduler derives from its entries, runs and targets
(the queue order, the dependencies, the run testing each entry) is kept until they change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Tracked(dict[K, V]):
    """A dict that counts its writes, so what is derived from it can be kept until it changes.

    Every way of changing a dict in place moves `version` (`|=` is not used on it); reading is
    the plain dict's.
    """

    __slots__ = ("version",)

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        super().__init__(items)
        self.version = 0

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.version += 1

    def __delitem__(self, key: K) -> None:
        super().__delitem__(key)
        self.version += 1

    def pop(self, key: K, *default: Any) -> Any:
        self.version += 1
        return super().pop(key, *default)

    def popitem(self) -> tuple[K, V]:
        self.version += 1
        return super().popitem()

    def setdefault(self, key: K, default: Any = None) -> Any:
        self.version += 1
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self.version += 1
        super().clear()
