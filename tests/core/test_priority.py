"""Priorities: names, numbers 0-255 (above: the lowest) and skip-the-line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepgreen.core.priority import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY_NUMBER,
    MAX_PRIORITY_VALUE,
    PRIORITY_NAMES,
    Priority,
    PriorityError,
    priority_from_name,
    priority_from_value,
)

NAMED = [("urgent", 0), ("high", 10), ("medium", 100), ("low", 200)]


def test_default_priority_is_medium_100() -> None:
    assert Priority(100, "medium") == DEFAULT_PRIORITY


@pytest.mark.parametrize(("name", "value"), NAMED)
def test_names_map_to_documented_values(name: str, value: int) -> None:
    assert priority_from_name(name) == Priority(value, name)


@pytest.mark.parametrize("spelling", ["HIGH", "High", "hIgH", "  high  "])
def test_names_are_accepted_in_any_case_and_padding(spelling: str) -> None:
    assert priority_from_name(spelling) == Priority(10, "high")


@pytest.mark.parametrize("name", ["", "bogus", "highest", "default", "custom", "10"])
def test_unknown_names_are_refused(name: str) -> None:
    with pytest.raises(PriorityError):
        priority_from_name(name)


@pytest.mark.parametrize(("name", "value"), NAMED)
def test_values_of_named_levels_carry_the_name(name: str, value: int) -> None:
    assert priority_from_value(value) == Priority(value, name)


@pytest.mark.parametrize("value", [1, 9, 11, 99, 101, 199, 201, 255])
def test_other_values_are_custom(value: int) -> None:
    assert priority_from_value(value) == Priority(value, "custom")


@pytest.mark.parametrize("value", [256, 1000, 65_536, 4_294_967_295])
def test_numbers_above_255_that_the_interface_allows_are_the_lowest(value: int) -> None:
    assert priority_from_value(value) == Priority(255, "custom")


@pytest.mark.parametrize("value", [-1, -255, 4_294_967_296, 10**12])
def test_numbers_outside_the_interfaces_range_are_refused(value: int) -> None:
    with pytest.raises(PriorityError):
        priority_from_value(value)


def test_priority_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="between 0 and 4294967295"):
        priority_from_value(-1)


def test_only_priority_zero_skips_the_line() -> None:
    assert priority_from_value(0).skips_the_line
    assert priority_from_name("urgent").skips_the_line
    assert not priority_from_value(1).skips_the_line
    assert not priority_from_name("high").skips_the_line


@given(st.integers(min_value=0, max_value=MAX_PRIORITY_VALUE))
def test_every_value_round_trips(value: int) -> None:
    priority = priority_from_value(value)
    assert priority.value == value
    assert priority.skips_the_line == (value == 0)
    if priority.name == "custom":
        assert value not in PRIORITY_NAMES.values()
    else:
        assert PRIORITY_NAMES[priority.name] == value
        assert priority_from_name(priority.name) == priority


@given(st.integers().filter(lambda v: not 0 <= v <= MAX_PRIORITY_NUMBER))
def test_every_value_out_of_range_is_refused(value: int) -> None:
    with pytest.raises(PriorityError):
        priority_from_value(value)


@given(st.integers(min_value=MAX_PRIORITY_VALUE, max_value=MAX_PRIORITY_NUMBER))
def test_every_value_from_255_to_the_interfaces_bound_is_the_lowest(value: int) -> None:
    assert priority_from_value(value) == Priority(MAX_PRIORITY_VALUE, "custom")


@given(st.sampled_from(sorted(PRIORITY_NAMES)), st.data())
def test_every_casing_of_a_name_round_trips(name: str, data: st.DataObject) -> None:
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    spelled = "".join(c.upper() if up else c for c, up in zip(name, flips, strict=True))
    priority = priority_from_name(spelled)
    assert priority == Priority(PRIORITY_NAMES[name], name)
    assert priority_from_value(priority.value) == priority


@given(st.text(max_size=20))
def test_arbitrary_text_is_a_name_only_if_it_names_a_level(text: str) -> None:
    if text.strip().lower() in PRIORITY_NAMES:
        assert priority_from_name(text).name == text.strip().lower()
    else:
        with pytest.raises(PriorityError):
            priority_from_name(text)
