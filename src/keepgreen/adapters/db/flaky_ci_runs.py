"""The CI runs CI reported (create-ci-run) on SQL: stored once per run key, and listed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, func, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from keepgreen.adapters.db.flaky_rows import table_of
from keepgreen.adapters.db.tables import CiRunRow
from keepgreen.core.flaky.ci_runs import CiProvider, CiRun, ConclusionCause, RunConclusion
from keepgreen.core.ids import CiRunId, RepositoryId


class SqlCiRuns:
    def __init__(self, session: Session) -> None:
        self._session = session

    def claim(self, run: CiRun) -> CiRun | None:
        dialect = self._session.get_bind().dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        table = table_of(CiRunRow)
        claimed = self._session.execute(
            insert(table)
            .values(id=run.id, repository_id=run.repository_id, **_fields(run))
            # PostgreSQL waits here for a transaction inserting the same key, then skips the
            # row if that one committed. A NULL key never conflicts.
            .on_conflict_do_nothing(index_elements=["repository_id", "run_key"])
            .returning(table.c.id)
        ).first()
        if claimed is not None:
            return None
        row = self._session.scalars(
            select(CiRunRow).where(
                CiRunRow.repository_id == run.repository_id, CiRunRow.run_key == run.run_key
            )
        ).one()
        return _run_of(row)

    def save(self, run: CiRun) -> None:
        row = self._session.scalars(
            select(CiRunRow).where(
                CiRunRow.repository_id == run.repository_id, CiRunRow.id == run.id
            )
        ).one()
        for name, value in _fields(run).items():
            setattr(row, name, value)
        self._session.flush()

    def page(
        self,
        repository_id: RepositoryId,
        *,
        branch: str | None,
        sha: str | None,
        offset: int,
        limit: int,
    ) -> tuple[Sequence[CiRun], int]:
        where: list[ColumnElement[bool]] = [CiRunRow.repository_id == repository_id]
        if branch is not None:
            where.append(CiRunRow.branch == branch)
        if sha is not None:
            where.append(CiRunRow.sha == sha)
        total = self._session.scalar(select(func.count()).select_from(CiRunRow).where(*where))
        rows = self._session.scalars(
            select(CiRunRow)
            .where(*where)
            .order_by(CiRunRow.run_start.desc(), CiRunRow.id)
            .offset(offset)
            .limit(limit)
        )
        return [_run_of(row) for row in rows], int(total or 0)

    def purge(self, *, before: datetime) -> int:
        result = self._session.execute(delete(CiRunRow).where(CiRunRow.updated_at < before))
        return int(getattr(result, "rowcount", 0) or 0)


def _fields(run: CiRun) -> dict[str, Any]:
    """The columns a report writes (all but the id and repository, which never change)."""
    return {
        "run_key": run.run_key,
        "ci_job_name": run.ci_job_name,
        "provider": run.provider.value if run.provider else None,
        "providers_run_id": run.providers_run_id,
        "providers_job_id": run.providers_job_id,
        "attempt": run.attempt,
        "branch": run.branch,
        "sha": run.sha,
        "run_start": run.run_start,
        "run_end": run.run_end,
        "run_conclusion": run.conclusion.value if run.conclusion else None,
        "run_conclusion_cause": run.conclusion_cause.value if run.conclusion_cause else None,
        "reported_at": run.reported_at,
        "updated_at": run.updated_at,
    }


def _run_of(row: CiRunRow) -> CiRun:
    return CiRun(
        id=CiRunId(row.id),
        repository_id=RepositoryId(row.repository_id),
        ci_job_name=row.ci_job_name,
        branch=row.branch,
        sha=row.sha,
        run_start=row.run_start,
        run_end=row.run_end,
        attempt=row.attempt,
        reported_at=row.reported_at,
        updated_at=row.updated_at,
        provider=CiProvider(row.provider) if row.provider else None,
        providers_run_id=row.providers_run_id,
        providers_job_id=row.providers_job_id,
        conclusion=RunConclusion(row.run_conclusion) if row.run_conclusion else None,
        conclusion_cause=(
            ConclusionCause(row.run_conclusion_cause) if row.run_conclusion_cause else None
        ),
    )
