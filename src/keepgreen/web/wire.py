"""Reusable wire types: lenient where the interface says so, strict everywhere else.

Enums accept any case and answer lowercase; `pr.number` accepts an integer or a numeric string;
every other field takes exactly its JSON type (no "true" for true, no 1.5 for 1).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictStr,
    WithJsonSchema,
)

from keepgreen.core.limits import (
    MAX_BATCH_SIZE,
    MAX_CONCURRENCY,
    MAX_MINUTES,
    MAX_PAGE_TAKE,
    MAX_PENDING_FAILURE_DEPTH,
    MAX_PR_NUMBER,
    MAX_RETRIES,
)
from keepgreen.core.names import (
    BRANCH_PATTERN,
    MAX_NAME_LENGTH,
    PLAIN_NAME_PATTERN,
    SHA_PATTERN,
    branch_name_problem,
    normalize_sha,
    plain_name_problem,
)


def _lowercase(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _integer(value: Any) -> Any:
    """JSON integers, including integral floats such as 3.0 (JSON Schema counts them as
    integers); never booleans, strings or fractions.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


def _number_or_name(value: Any) -> Any:
    """A priority: a name (string) passes through; anything else must be an integer."""
    if value is None or isinstance(value, str):
        return value
    return _integer(value)


NumberOrName = BeforeValidator(_number_or_name)


def _pr_number(value: Any) -> Any:
    """Numeric strings become ints too (the official uploader sends `"number": "5"`)."""
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= 10:
            return int(text)
        raise ValueError("must be an integer or a string of digits")
    return _integer(value)


AnyCase = BeforeValidator(_lowercase)
"""Put on an enum field so it takes its values in any case (`RUNNING`, `Running`, `running`)."""


def _checked(problem_of: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str) -> str:
        problem = problem_of(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")


def _no_control_characters(value: str) -> str:
    # PostgreSQL text cannot hold NUL; no name needs any control character.
    if _CONTROL_CHARACTER.search(value):
        raise ValueError("must not contain control characters")
    return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def refuse_lone_surrogates(value: Any) -> Any:
    """`value` as it is, unless it (or an item of it) holds a lone surrogate.

    JSON may escape one (`"\\ud800"`) and Python then decodes it into a `str` no encoding
    writes, so it would fail later (storing it, or writing it into a response). Dicts are left
    to the request model they are validated as, which checks its own fields.
    """
    if isinstance(value, str):
        found = _LONE_SURROGATE.search(value)
        if found is not None:
            raise ValueError(
                f"must be valid Unicode text, and holds a lone surrogate (\\u{ord(found[0]):x})"
            )
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            try:
                refuse_lone_surrogates(item)
            except ValueError as error:
                raise ValueError(f"item {index} {error}") from None
    return value


def _sha_problem(value: str) -> str | None:
    return None if normalize_sha(value) else "must be a hex commit sha of 4-64 digits"


# Repository host, owner and name: looked up, never created through the API.
Name = Annotated[
    StrictStr,
    Field(min_length=1, max_length=MAX_NAME_LENGTH),
    AfterValidator(_no_control_characters),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_NAME_LENGTH,
            "pattern": r"^[^\x00-\x1f\x7f]*$",
        }
    ),
]
# The schema carries the same rules as the validators, so generated clients (and schemathesis)
# know exactly which values are accepted.
Branch = Annotated[
    StrictStr,
    _checked(branch_name_problem),
    WithJsonSchema({"type": "string", "maxLength": MAX_NAME_LENGTH, "pattern": BRANCH_PATTERN}),
]
Sha = Annotated[
    StrictStr,
    _checked(_sha_problem),
    WithJsonSchema({"type": "string", "pattern": SHA_PATTERN}),
]
PlainName = Annotated[
    StrictStr,
    _checked(plain_name_problem),
    WithJsonSchema({"type": "string", "maxLength": MAX_NAME_LENGTH, "pattern": PLAIN_NAME_PATTERN}),
]
Flag = StrictBool

Integer = BeforeValidator(_integer)
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY), Integer]
Minutes = Annotated[int, Field(ge=0, le=MAX_MINUTES), Integer]
Depth = Annotated[int, Field(ge=0, le=MAX_PENDING_FAILURE_DEPTH), Integer]
BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE), Integer]
Retries = Annotated[int, Field(ge=0, le=MAX_RETRIES), Integer]
Take = Annotated[int, Field(ge=1, le=MAX_PAGE_TAKE), Integer]


def _pr_number_schema(minimum: int) -> WithJsonSchema:
    # The string form is documented up to nine digits (a pattern cannot say "<= 2**32-1");
    # longer numeric strings within the bound are accepted as well.
    pattern = "^[0-9]{1,9}$" if minimum == 0 else "^[1-9][0-9]{0,8}$"
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": minimum, "maximum": MAX_PR_NUMBER},
                {"type": "string", "pattern": pattern},
            ]
        }
    )


PrNumber = Annotated[
    int, BeforeValidator(_pr_number), Field(ge=0, le=MAX_PR_NUMBER), _pr_number_schema(0)
]
PositivePrNumber = Annotated[
    int, BeforeValidator(_pr_number), Field(ge=1, le=MAX_PR_NUMBER), _pr_number_schema(1)
]


def iso(moment: datetime) -> str:
    """`2026-09-17T10:16:02.000Z`: UTC, milliseconds, a Z."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
