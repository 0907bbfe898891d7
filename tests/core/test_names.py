"""Validation of client-supplied names: branches, plain names and commit shas."""

from __future__ import annotations

import string
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from keepgreen.core.names import (
    MAX_NAME_LENGTH,
    branch_name_problem,
    normalize_sha,
    plain_name_problem,
)


@pytest.mark.parametrize(
    "name",
    ["main", "master", "release/1.0", "feature/x-y_z", "v2.x", "a", "ünïcode", "a" * 255],
)
def test_usable_branch_names_pass(name: str) -> None:
    assert branch_name_problem(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a" * 256,
        "with space",
        "tab\there",
        "new\nline",
        "del\x7f",
        "tilde~1",
        "caret^",
        "co:lon",
        "ques?",
        "star*",
        "brack[et",
        "back\\slash",
        "/leading",
        "-leading",
        "trailing/",
        "trailing.",
        "branch.lock",
        "double..dot",
        "double//slash",
        "at@{brace",
        "@",
        ".hidden",
        "dir/.hidden",
    ],
)
def test_unusable_branch_names_are_explained(name: str) -> None:
    problem = branch_name_problem(name)
    assert isinstance(problem, str)
    assert problem


def test_a_path_component_ending_in_lock_is_refused() -> None:
    # git refuses any component ending in `.lock` (check-ref-format rule 1), not only the last.
    assert branch_name_problem("release.lock/1.0") is not None


def _git_accepts_branch(name: str) -> bool:
    result = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{name}"], capture_output=True, check=False
    )
    return result.returncode == 0


branch_alphabet = st.sampled_from([*string.ascii_letters[:6], *"0./-_@{~^:?*[\\ é"])


@settings(max_examples=300, deadline=None)
@given(st.text(branch_alphabet, min_size=1, max_size=12))
@example("x.lock/y")
def test_every_accepted_branch_name_is_a_valid_git_branch(name: str) -> None:
    if branch_name_problem(name) is None:
        assert _git_accepts_branch(name), name


@pytest.mark.parametrize("name", ["github.com", "acme", "my-repo", "ci/build (pr)", "ünï", "x"])
def test_plain_names_pass(name: str) -> None:
    assert plain_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "   ", "\t", "a" * (MAX_NAME_LENGTH + 1), "a\x00b", "a\x7f"])
def test_unusable_plain_names_are_explained(name: str) -> None:
    assert plain_name_problem(name)


def test_plain_name_length_limit_is_inclusive() -> None:
    assert plain_name_problem("a" * MAX_NAME_LENGTH) is None


@given(st.text(max_size=40))
def test_plain_names_with_control_characters_are_refused(text: str) -> None:
    has_control = any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)
    if has_control or not text.strip():
        assert plain_name_problem(text) is not None
    else:
        assert plain_name_problem(text) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("07FC773F16C0353BC3820FED65D89AFDDB9F81C3", "07fc773f16c0353bc3820fed65d89afddb9f81c3"),
        ("  abcd \n", "abcd"),
        ("a" * 64, "a" * 64),
    ],
)
def test_shas_are_normalized_to_lowercase_hex(raw: str, expected: str) -> None:
    assert normalize_sha(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "a" * 65, "g" * 40, "0x1234", "12 34", "main"])
def test_non_shas_are_refused(raw: str) -> None:
    assert normalize_sha(raw) is None


@given(st.text("0123456789abcdefABCDEF", min_size=4, max_size=64))
def test_every_hex_string_of_4_to_64_digits_is_a_sha(raw: str) -> None:
    assert normalize_sha(raw) == raw.lower()


@given(st.text(max_size=70))
def test_normalized_shas_are_lowercase_hex_of_valid_length(raw: str) -> None:
    normalized = normalize_sha(raw)
    if normalized is not None:
        assert 4 <= len(normalized) <= 64
        assert set(normalized) <= set("0123456789abcdef")
        assert normalized == raw.strip().lower()


@given(st.text(branch_alphabet, min_size=1, max_size=12))
@example("release.lock/1.0")
@example("a..b")
def test_the_openapi_branch_pattern_says_what_the_validator_says(name: str) -> None:
    """The schema's regex and the validator must accept exactly the same branch names."""
    import re

    from keepgreen.core.names import BRANCH_PATTERN

    assert (re.fullmatch(BRANCH_PATTERN, name) is not None) == (branch_name_problem(name) is None)
