"""Validation of the names clients send: branches, repository parts, status contexts, shas."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 255
_SHA = re.compile(r"^[0-9a-f]{4,64}$")
SHA_PATTERN = r"^\s*[0-9a-fA-F]{4,64}\s*$"
# git's check-ref-format rules as one ECMA/Python regex, for the OpenAPI document;
# `branch_name_problem` applies the same rules and says which one failed.
BRANCH_PATTERN = (
    r"^(?!.*\.\.)(?!.*@\{)(?!.*//)(?![/.-])(?!.*/[.])(?!.*[/.]$)(?!.*\.lock(?:/|$))(?!@$)"
    r"[^\x00-\x20~^:?*\[\\\x7f]{1,255}$"
)
# A name with something visible in it and no control characters.
PLAIN_NAME_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
_FORBIDDEN_REF_CHARS = frozenset(" ~^:?*[\\\x7f")


def branch_name_problem(name: str) -> str | None:
    """Why `name` is not a usable branch name (git's check-ref-format rules), or None."""
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters"
    if any(ord(ch) < 0x20 or ch in _FORBIDDEN_REF_CHARS for ch in name):
        return "must not contain spaces, control characters or any of ~^:?*[\\"
    if name.startswith(("/", "-")) or name.endswith(("/", ".")):
        return "must not start with '/' or '-' nor end with '/' or '.'"
    if any(part.endswith(".lock") for part in name.split("/")):
        return "must not have a path component ending in '.lock'"
    if ".." in name or "//" in name or "@{" in name or name == "@":
        return "must not contain '..', '//' or '@{'"
    if any(part.startswith(".") for part in name.split("/")):
        return "must not have a path component starting with '.'"
    return None


def plain_name_problem(name: str) -> str | None:
    """Why `name` is not a usable host, owner, repository, context or slug, or None."""
    if not name.strip():
        return "must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return "must not contain control characters"
    return None


def normalize_sha(sha: str) -> str | None:
    """The lowercase hex form of a commit sha, or None when `sha` is not one."""
    lowered = sha.strip().lower()
    return lowered if _SHA.match(lowered) else None


# Variables a repository may pass to its built-in CI command: a plain name, and none of
# keepgreen's own settings (KEEPGREEN_*), which PR code never gets.
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
RESERVED_VARIABLE_PREFIX = "KEEPGREEN_"


def is_reserved_variable(name: str) -> bool:
    """Whether `name` is one of keepgreen's own settings (any case)."""
    return name.upper().startswith(RESERVED_VARIABLE_PREFIX)


def variable_name_problem(name: str) -> str | None:
    """Why a repository may not pass `name` to its CI command, or None."""
    if not _VARIABLE_NAME.fullmatch(name):
        return "is not a variable name (letters, digits and _, not starting with a digit)"
    if is_reserved_variable(name):
        return "is one of keepgreen's own settings, which PR code never gets"
    return None


# A repository's PR refspec names one ref per pull request: `{number}` stands for the number.
PR_NUMBER_FIELD = "{number}"


def pr_refspec_problem(refspec: str) -> str | None:
    """Why `refspec` cannot name pull request refs, or None. git's own ref-name rules are
    checked apart (by `git check-ref-format` on `pr_refspec_example(refspec)`).
    """
    if len(refspec) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters"
    if not refspec.startswith("refs/"):
        return "must start with 'refs/'"
    if "*" in refspec:
        return "must not contain '*': it names the one ref of pull request {number}"
    if refspec.count(PR_NUMBER_FIELD) != 1:
        return "must contain {number} exactly once"
    rest = refspec.replace(PR_NUMBER_FIELD, "")
    if "{" in rest or "}" in rest:
        return "must not contain '{' or '}' other than in {number}"
    return None


def pr_refspec_example(refspec: str) -> str:
    """The ref `refspec` names for pull request 1: what git's ref-name rules are checked on."""
    return refspec.replace(PR_NUMBER_FIELD, "1")


def branch_prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot begin test branch names, or None. git's own branch-name rules are
    checked apart (by `git check-ref-format --branch` on `example_test_branch(prefix)`).
    """
    if not prefix:
        return "must not be empty"
    if len(prefix) > MAX_NAME_LENGTH - len("/pr-N/<test run id>"):
        return "is too long for a branch name"
    if prefix.startswith("/") or prefix.endswith("/"):
        return "must not start or end with '/'"
    if prefix.startswith("-"):
        return "must not start with '-'"
    return None


def example_test_branch(prefix: str) -> str:
    """A test branch name made with `prefix`, as the scheduler makes them."""
    return f"{prefix}/pr-1/00000000-0000-0000-0000-000000000000"
