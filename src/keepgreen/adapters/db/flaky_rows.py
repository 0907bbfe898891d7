"""Flaky-test rows and the core values they hold: conversions and shared query parts."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, TypeVarTuple, cast

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    Table,
    and_,
    case,
    false,
    func,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy import (
    cast as cast_to,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import InstrumentedAttribute, Session

from keepgreen.adapters.db.tables import TestCaseRow, TestCommitRow, TestUploadRow
from keepgreen.adapters.db.types import UtcDateTime
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import UploadRecord
from keepgreen.core.flaky.model import TestCase
from keepgreen.core.flaky.monitors import ManualFlag, MonitorState, TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride
from keepgreen.core.ids import RepositoryId

CHUNK = 500  # ids per IN (...) list: well under SQLite's and PostgreSQL's parameter limits
T = TypeVar("T")
Columns = TypeVarTuple("Columns")


# A commit's roll-up with a failure: `failures > 0` written out, as the partial indexes on the
# roll-ups say it. From a bound 0 SQLite cannot tell that the index's rows are all failing,
# and reads each row to check (8x slower for the PRs a page's tests impacted); and the generic
# plan PostgreSQL makes for a statement psycopg has prepared cannot use the index at all.
FAILED_ON_COMMIT = TestCommitRow.failures > literal_column("0")


def chunks(items: Collection[T]) -> Iterator[list[T]]:
    ordered = list(items)
    for start in range(0, len(ordered), CHUNK):
        yield ordered[start : start + CHUNK]


def of_tests(
    session: Session,
    query: Select[*Columns],
    test_id: ColumnElement[str] | InstrumentedAttribute[str],
    ids: list[str],
    *,
    at: tuple[InstrumentedAttribute[datetime], Sequence[datetime]] | None = None,
) -> Select[*Columns]:
    """The rows of `query` whose `test_id` is one of `ids` (at most CHUNK), and whose time is
    one of those `at` gives (a column and its values), with `query`'s columns.

    On PostgreSQL each id (and time) is looked up on its own, a lateral join over the list,
    so the rows are found through the key whatever the statistics say: a table that grew by
    a million rows in a minute has statistics a few uploads behind, and with them PostgreSQL
    read every row of the repository for an `IN (...)` and filtered them.
    """
    if session.get_bind().dialect.name != "postgresql":
        query = query.where(test_id.in_(ids))
        return query if at is None else query.where(at[0].in_(at[1]))
    wanted = func.unnest(postgresql.array(ids)).table_valued("id").render_derived(name="wanted")
    query = query.where(test_id == wanted.c.id)
    sources: Any = wanted
    if at is not None:
        times = cast_to(postgresql.array(list(at[1])), postgresql.ARRAY(UtcDateTime()))
        when = func.unnest(times).table_valued("at").render_derived(name="times")
        query = query.where(at[0] == when.c.at)
        sources = wanted.join(when, true())
    # OFFSET 0 keeps PostgreSQL from pulling the subquery up into a plain join.
    found = query.offset(0).lateral("found")
    return cast("Select[*Columns]", select(found).select_from(sources.join(found, true())))


def state_to_json(state: MonitorState) -> dict[str, Any]:
    return {
        "active": state.active,
        "since": state.since.isoformat() if state.since else None,
        "reason": state.reason,
        "classification": state.classification.value,
    }


def state_from_json(data: dict[str, Any]) -> MonitorState:
    since = data.get("since")
    return MonitorState(
        active=bool(data["active"]),
        since=datetime.fromisoformat(since) if since else None,
        reason=str(data["reason"]),
        classification=TestStatus(data["classification"]),
    )


def test_case_of(row: TestCaseRow | Row[Any]) -> TestCase:
    """The test of a row: mapped, or a plain row of `TEST_CASES` (read faster: no ORM)."""
    flag = (
        ManualFlag(row.manual_flag_reason or "", row.manual_flag_at)
        if row.manual_flag_at is not None
        else None
    )
    return TestCase(
        id=row.id,
        repository_id=RepositoryId(row.repository_id),
        name=row.name,
        classname=row.classname,
        parent=row.parent,
        file=row.file,
        variant=row.variant,
        status=TestStatus(row.status),
        status_reason=row.status_reason,
        status_at=row.status_at,
        first_seen_at=row.first_seen_at,
        last_seen_at=row.last_seen_at,
        monitors={key: state_from_json(value) for key, value in (row.monitors or {}).items()},
        manual_flag=flag,
        quarantine_override=(
            QuarantineOverride(row.quarantine_override) if row.quarantine_override else None
        ),
        quarantine_override_at=row.quarantine_override_at,
        ticket=row.ticket,
        codeowners=tuple(row.codeowners or ()),
    )


def upload_of(row: TestUploadRow) -> UploadRecord:
    return UploadRecord(
        id=row.id,
        repository_id=RepositoryId(row.repository_id),
        commit_sha=row.commit_sha,
        branch=row.branch,
        pr_number=row.pr_number,
        job_url=row.job_url,
        run_id=row.run_id,
        variant=row.variant,
        received_at=row.received_at,
        files=row.files,
        tests=row.tests,
        results=row.results,
        failed=row.failed,
        skipped=row.skipped,
        excluded=row.excluded,
        upload_key=row.upload_key,
        failed_tests=tuple(row.failed_tests or ()),
    )


def quarantined(repository_id: RepositoryId, settings: FlakySettings) -> ColumnElement[bool]:
    """The repository's tests that are quarantined under `settings`: the SQL form of
    core.flaky.quarantine.is_quarantined (tests/adapters/test_quarantine_rule.py holds the two
    to the same answer for every status, override and setting).
    """
    if not settings.quarantine.enabled:
        return false()
    always = TestCaseRow.quarantine_override == QuarantineOverride.ALWAYS.value
    automatic = [
        status.value
        for status in (TestStatus.FLAKY, TestStatus.BROKEN)
        if settings.quarantine.is_automatic(status)
    ]
    rule = always
    if automatic:
        without_never = or_(
            TestCaseRow.quarantine_override.is_(None),
            TestCaseRow.quarantine_override != QuarantineOverride.NEVER.value,
        )
        rule = or_(always, and_(TestCaseRow.status.in_(automatic), without_never))
    # Implied by the rule, and said so that both planners use the quarantine candidates'
    # partial index (SQLite needs the index's condition among the query's own terms, as
    # tables.QUARANTINE_CANDIDATE writes it). Literals, not parameters: SQLite matches the
    # index's condition as written.
    unhealthy: list[ColumnElement[str]] = [
        literal_column(f"'{status.value}'") for status in (TestStatus.FLAKY, TestStatus.BROKEN)
    ]
    candidate = or_(TestCaseRow.status.in_(unhealthy), TestCaseRow.quarantine_override.is_not(None))
    return and_(TestCaseRow.repository_id == repository_id, candidate, rule)


def load_tests(
    session: Session, repository_id: RepositoryId, ids: Collection[str]
) -> Mapping[str, TestCase]:
    """Those of `ids` that are tests of the repository (another's with the same id are not)."""
    found: dict[str, TestCase] = {}
    for chunk in chunks(ids):
        query = select(TEST_CASES).where(
            TestCaseRow.repository_id == repository_id, TestCaseRow.id.in_(chunk)
        )
        for row in session.execute(query):
            found[row.id] = test_case_of(row)
    return found


def table_of(row: type[Any]) -> Table:
    table: Table = row.__table__
    return table


# The tests' table, selected whole as plain rows for test_case_of (no ORM objects to build).
TEST_CASES = table_of(TestCaseRow)


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def when(condition: ColumnElement[bool], value: Any) -> Any:
    return case((condition, value), else_=0)


def greatest(left: Any, right: Any, dialect: str) -> Any:
    # PostgreSQL's greatest() and SQLite's two-argument max() both return NULL when an
    # argument is NULL; the caller's coalesce falls back to whichever is set.
    return func.greatest(left, right) if dialect == "postgresql" else func.max(left, right)
