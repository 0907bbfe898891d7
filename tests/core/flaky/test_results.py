"""new_case_result builds the same frozen CaseResult as the class does, only faster."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime

import pytest

from keepgreen.core.flaky.results import CaseResult, Outcome, new_case_result

VALUES = (
    "adds an item",
    "shop.Cart",
    "cart",
    "tests/test_cart.py",
    "trunk:cart-adds",
    Outcome.FAILED,
    2,
    125,
    "assert 1 == 2",
    "def test_adds():\n>   assert 1 == 2",
    datetime(2024, 5, 1, 12, tzinfo=UTC),
)


def test_it_is_a_case_result_equal_to_one_the_class_builds() -> None:
    built = new_case_result(*VALUES)

    assert type(built) is CaseResult
    assert built == CaseResult(*VALUES)
    assert hash(built) == hash(CaseResult(*VALUES))
    assert repr(built) == repr(CaseResult(*VALUES))
    assert tuple(getattr(built, field.name) for field in fields(CaseResult)) == VALUES


def test_it_is_frozen_picklable_and_replaceable_like_any_case_result() -> None:
    built = new_case_result(*VALUES)

    with pytest.raises(FrozenInstanceError):
        built.name = "other"  # type: ignore[misc]  # what the test checks
    assert pickle.loads(pickle.dumps(built)) == built  # noqa: S301  # our own object
    assert replace(built, message=None).message is None
    assert replace(built, message=None).name == "adds an item"


def test_defaults_are_the_classes() -> None:
    built = new_case_result("a", None, None, None, None, Outcome.PASSED)

    assert built == CaseResult("a", None, None, None, None, Outcome.PASSED)
