"""Reusable wire types: lenient where the interface says so, strict everywhere else.

Enums accept any case and answer lowercase; `pr.number` accepts an integer or a numeric string;
every other field takes exactly its JSON type (no "true" for true, no 1.5 for 1).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool, StrictInt, StrictStr, WithJsonSchema

from keepgreen.core.limits import (
    MAX_BATCH_SIZE,
    MAX_CONCURRENCY,
    MAX_MINUTES,
    MAX_PAGE_TAKE,
    MAX_PENDING_FAILURE_DEPTH,
    MAX_PR_NUMBER,
)
from keepgreen.core.names import MAX_NAME_LENGTH


def _lowercase(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _pr_number(value: Any) -> Any:
    """Numeric strings become ints (the official uploader sends `"number": "5"`)."""
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= 10:
            return int(text)
        raise ValueError("must be an integer or a string of digits")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer or a string of digits")
    return value


AnyCase = BeforeValidator(_lowercase)
"""Put on an enum field so it takes its values in any case (`RUNNING`, `Running`, `running`)."""

Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
Branch = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
Flag = StrictBool

Concurrency = Annotated[StrictInt, Field(ge=1, le=MAX_CONCURRENCY)]
Minutes = Annotated[StrictInt, Field(ge=0, le=MAX_MINUTES)]
Depth = Annotated[StrictInt, Field(ge=0, le=MAX_PENDING_FAILURE_DEPTH)]
BatchSize = Annotated[StrictInt, Field(ge=1, le=MAX_BATCH_SIZE)]
Take = Annotated[StrictInt, Field(ge=1, le=MAX_PAGE_TAKE)]


def _pr_number_schema(minimum: int) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": minimum, "maximum": MAX_PR_NUMBER},
                {"type": "string", "pattern": "^[0-9]{1,10}$"},
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
