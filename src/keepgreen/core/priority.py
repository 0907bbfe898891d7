"""Priorities: names and numbers 0-255, 0 the highest; `urgent` (0) is skip-the-line.

The interface allows any unsigned 32-bit number: one above 255 is taken as 255, the lowest.
"""

from __future__ import annotations

from dataclasses import dataclass

PRIORITY_NAMES: dict[str, int] = {"urgent": 0, "high": 10, "medium": 100, "low": 200}
DEFAULT_PRIORITY_NAME = "medium"
MAX_PRIORITY_VALUE = 255
MAX_PRIORITY_NUMBER = 4_294_967_295  # the interface's bound (uint32); above 255 means 255


@dataclass(frozen=True, slots=True)
class Priority:
    """A PR's priority. `name` is the name it was given by, or the name its value carries."""

    value: int
    name: str

    @property
    def skips_the_line(self) -> bool:
        """Priority 0 preempts lower-priority testing runs."""
        return self.value == 0


DEFAULT_PRIORITY = Priority(PRIORITY_NAMES[DEFAULT_PRIORITY_NAME], DEFAULT_PRIORITY_NAME)


class PriorityError(ValueError):
    """A priority outside 0-4294967295 or with an unknown name."""


def priority_from_value(value: int) -> Priority:
    """A numeric priority; values equal to a named level carry that name, others `custom`.
    A number above 255 (the interface allows up to 4294967295) is 255, the lowest.
    """
    if not 0 <= value <= MAX_PRIORITY_NUMBER:
        raise PriorityError(f"priority must be between 0 and {MAX_PRIORITY_NUMBER}, got {value}")
    value = min(value, MAX_PRIORITY_VALUE)
    for name, named_value in PRIORITY_NAMES.items():
        if named_value == value:
            return Priority(value, name)
    return Priority(value, "custom")


def priority_from_name(name: str) -> Priority:
    """A named priority, in any case: urgent, high, medium or low."""
    key = name.strip().lower()
    if key not in PRIORITY_NAMES:
        names = ", ".join(PRIORITY_NAMES)
        raise PriorityError(f"unknown name {name!r}; use one of {names} or a number 0-255")
    return Priority(PRIORITY_NAMES[key], key)
