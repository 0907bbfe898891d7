"""The statements of the merge button's write: PRs their queue has never had entering it, as
`SqlQuickReads.enter_first` runs them (see `keepgreen.app.ports.FirstEntries`).

On PostgreSQL the write is one statement, its own transaction: the queue's row updated
(positions taken, and the queue found as it was read: not draining, the same modes), the
entries inserted from it (none when it was not found), a PR entered meanwhile left out by the
(queue, number) key, and a history line for each entry inserted. The rows travel as two
JSON documents (an array of objects each), which the server reads into rows of the tables'
own types (`json_populate_recordset`), so the statement's text is the same for any number of
PRs and the server keeps it prepared. Each is one text parameter, encoded by the standard
library's C encoder: one array per column, dumped value by value in Python, was an eighth of
the merge button's time in the API. On SQLite the same three steps are three statements in
one transaction.

The columns and their values are the ORM tables' (`entry_values`, `state_change_values`),
each value made ready for the driver by its column type's own bind processing, so the rows
are those the ORM would write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.engine import Dialect

from keepgreen.adapters.db.mapping import entry_values, state_change_values
from keepgreen.adapters.db.tables import Base, QueueEntryRow, StateChangeRow
from keepgreen.core.enums import QueueState
from keepgreen.core.ids import QueueId
from keepgreen.core.model import QueueEntry, QueueModes, StateChange

_ENTRIES: Table = Base.metadata.tables[QueueEntryRow.__tablename__]
_CHANGES: Table = Base.metadata.tables[StateChangeRow.__tablename__]
# Rows of one SQLite INSERT at most (24 values each, under SQLite's limit of variables).
SQLITE_ROWS = 100

# The queue as it was read, and its positions taken: `count` positions after the last.
_TAKEN = ("count", "queue_id", "draining", "mode", "pending_mode")  # its PostgreSQL marks
_TAKE = (
    "UPDATE queues SET position_seq = position_seq + {count} "
    "WHERE id = {queue_id} AND state <> {draining} AND mode = {mode} "
    "AND pending_mode {same} {pending_mode} RETURNING position_seq - {count}"
)


class FirstEntryStatements:
    """The statements for one dialect, built once, and the parameters of one write."""

    def __init__(self, dialect: Dialect) -> None:
        # Every column of an entry; every column of a history line but its generated id.
        self.entry_columns: list[Column[Any]] = list(_ENTRIES.columns)
        self.change_columns: list[Column[Any]] = [
            column for column in _CHANGES.columns if column.key != "id"
        ]
        self._entry_bind = [_bind(column, dialect) for column in self.entry_columns]
        self._change_bind = [_bind(column, dialect) for column in self.change_columns]
        if dialect.name == "postgresql":
            self.postgresql = self._one_statement()
        else:
            self.take = _TAKE.format(
                count="?", queue_id="?", draining="?", mode="?", same="IS", pending_mode="?"
            )
            self._inserts: dict[int, str] = {}
            names = ", ".join(column.name for column in self.change_columns)
            marks = ", ".join(["?"] * len(self.change_columns))
            # One history line (executemany).
            self.insert_changes = f"INSERT INTO {_CHANGES.name} ({names}) VALUES ({marks})"  # noqa: S608

    def _one_statement(self) -> str:
        entry_names = [column.name for column in self.entry_columns]
        change_names = [column.name for column in self.change_columns]
        take = _TAKE.format(
            count="%(count)s",
            queue_id="%(queue_id)s",
            draining="%(draining)s",
            mode="%(mode)s",
            same="IS NOT DISTINCT FROM",
            pending_mode="%(pending_mode)s",
        )
        picked = ", ".join(
            "taken.first + asked.position" if name == "position" else f"asked.{name}"
            for name in entry_names
        )
        return (
            f"WITH taken(first) AS ({take}), "  # noqa: S608 (the tables' names, no input)
            f"entered AS (INSERT INTO {_ENTRIES.name} ({', '.join(entry_names)}) "
            f"SELECT {picked} FROM taken, {_rows(_ENTRIES, 'entries')} AS asked "
            "ON CONFLICT (queue_id, number) DO NOTHING RETURNING id) "
            f"INSERT INTO {_CHANGES.name} ({', '.join(change_names)}) "
            f"SELECT {', '.join(f'change.{name}' for name in change_names)} "
            f"FROM entered JOIN {_rows(_CHANGES, 'changes')} AS change "
            "ON change.entry_id = entered.id RETURNING entry_id"
        )

    def postgresql_parameters(
        self,
        queue_id: QueueId,
        modes: QueueModes,
        entries: Sequence[QueueEntry],
        changes: Sequence[StateChange],
    ) -> dict[str, Any]:
        """The one statement's parameters: `entries` in position order, each `position`
        counted from 1 among them, and their history lines, as JSON.
        """
        parameters: dict[str, Any] = dict(
            zip(_TAKEN, self.take_parameters(queue_id, modes, len(entries)), strict=False)
        )
        parameters["entries"] = _json(self.entry_columns, self.entry_rows(entries, 0))
        parameters["changes"] = _json(self.change_columns, self.change_rows(changes))
        return parameters

    def take_parameters(self, queue_id: QueueId, modes: QueueModes, count: int) -> tuple[Any, ...]:
        """The parameters of `_TAKE`, in the order of its marks."""
        pending = None if modes.pending_mode is None else modes.pending_mode.value
        return (count, queue_id, QueueState.DRAINING.value, modes.mode.value, pending, count)

    def insert_entries(self, count: int) -> str:
        """SQLite: `count` entries, a PR entered meanwhile left out; their ids returned."""
        if count not in self._inserts:
            marks = f"({', '.join(['?'] * len(self.entry_columns))})"
            self._inserts[count] = (
                f"INSERT INTO {_ENTRIES.name} "  # noqa: S608 (the table's names, no input)
                f"({', '.join(column.name for column in self.entry_columns)}) "
                f"VALUES {', '.join([marks] * count)} "
                "ON CONFLICT (queue_id, number) DO NOTHING RETURNING id"
            )
        return self._inserts[count]

    def entry_rows(self, entries: Sequence[QueueEntry], first: int) -> list[list[Any]]:
        """The rows of `entries`, their positions after `first` (PostgreSQL: 0, the
        statement adds the first it takes).
        """
        return [
            _row(
                self.entry_columns,
                self._entry_bind,
                {"id": entry.id, **entry_values(entry), "position": first + entry.position},
            )
            for entry in entries
        ]

    def change_rows(self, changes: Sequence[StateChange]) -> list[list[Any]]:
        return [
            _row(self.change_columns, self._change_bind, state_change_values(change))
            for change in changes
        ]


def _row(
    columns: Sequence[Column[Any]], bind: Sequence[Callable[[Any], Any]], values: dict[str, Any]
) -> list[Any]:
    """A row's values in the order of `columns`, made ready for the driver."""
    return [convert(values[column.key]) for column, convert in zip(columns, bind, strict=True)]


def _bind(column: Column[Any], dialect: Dialect) -> Callable[[Any], Any]:
    processor = column.type.bind_processor(dialect)
    return (lambda value: value) if processor is None else processor


def _rows(table: Table, parameter: str) -> str:
    """Rows of `table`'s own type read from the JSON array of objects `parameter` names: each
    value goes through its column type's input, so a value too long for its column is refused
    (an explicit cast to VARCHAR(36) would cut it short).
    """
    return f"json_populate_recordset(NULL::{table.name}, %({parameter})s::json)"


def _json(columns: Sequence[Column[Any]], rows: list[list[Any]]) -> str:
    """`rows` as a JSON array of objects keyed by column name; datetimes (aware, from the
    bind processing) in ISO 8601 with their offset.
    """
    names = [column.name for column in columns]
    return json.dumps([dict(zip(names, row, strict=True)) for row in rows], default=_iso)


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a column value")
