"""SQL implementations of the repository ports. They never commit; the unit of work does."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy import Select, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from keepgreen.adapters.db.effects_codec import effect_from_payload, effect_to_payload
from keepgreen.adapters.db.mapping import (
    EntriesReadAgain,
    commit_status_from_row,
    entry_from_row,
    entry_values,
    impacted_targets_from_row,
    incident_from_row,
    queue_from_row,
    repository_from_row,
    state_change_from_row,
    state_change_values,
    write_entry,
    write_queue,
    write_repository,
)
from keepgreen.adapters.db.tables import (
    ApiTokenRow,
    Base,
    CiRunHolderRow,
    CiRunRow,
    CommitStatusRow,
    FlakySettingsRow,
    GithubDeliveryRow,
    GithubFeedbackRow,
    GithubInstallationRow,
    ImpactedTargetsRow,
    OrgRow,
    QueueEffectRow,
    QueueEntryRow,
    QueueIncidentRow,
    QueueLeaseRow,
    QueueRow,
    RepositoryRow,
    StateChangeRow,
    TestCaseRow,
    TestCommitRow,
    TestDayTotalRow,
    TestFailureDayRow,
    TestFailureTemplateRow,
    TestHourRow,
    TestHourTotalRow,
    TestResultRow,
    TestRunEntryRow,
    TestRunRow,
    TestStatusChangeRow,
    TestUploadRow,
    WebSessionRow,
    WorkerRow,
)
from keepgreen.app.ports import EntryPage, IdFactory, StoredToken, StoredWebSession
from keepgreen.core.enums import (
    CommitState,
    IncidentKind,
    PrState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import OrgId, PullRequestId, QueueId, RepositoryId, TestRunId
from keepgreen.core.model import (
    ChainLink,
    CommitStatus,
    GithubDelivery,
    GithubFeedback,
    GithubInstallation,
    ImpactedTargets,
    Incident,
    Org,
    Queue,
    QueueEntry,
    RepoRef,
    Repository,
    StateChange,
    TestRun,
)
from keepgreen.core.ordering import Placed
from keepgreen.core.priority import Priority
from keepgreen.core.scheduler import Effect


def _upsert(
    session: Session,
    table: type[Base],
    values: dict[str, object],
    *,
    keys: tuple[str, ...],
    updates: tuple[str, ...],
) -> None:
    """Insert `values`, or on a clash of the unique `keys` update the `updates` columns.

    Both dialects spell it ON CONFLICT ... DO UPDATE; SQLAlchemy has one insert per dialect.
    """
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    statement = insert(table).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=list(keys),
        set_={column: statement.excluded[column] for column in updates},
    )
    session.execute(statement)


def _insert_ignore(
    session: Session, table: type[Base], values: dict[str, object], *, keys: tuple[str, ...]
) -> bool:
    """Insert `values` unless the unique `keys` clash; True when the row was inserted.

    Told by the row RETURNING gives back, not by `rowcount`: psycopg reports -1 (unknown) for
    INSERT ... ON CONFLICT DO NOTHING, which once made two workers both believe they had
    inserted the same queue's first lease row.
    """
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    statement = (
        insert(table)
        .values(**values)
        .on_conflict_do_nothing(index_elements=list(keys))
        .returning(*(table.__table__.c[key] for key in keys))
    )
    return session.execute(statement).first() is not None


_CONCLUDED = (PrState.MERGED.value, PrState.FAILED.value, PrState.CANCELLED.value)


# Statements of the merge button's path, built once: a statement built per call costs more
# than running it on SQLite. Each runs with its parameters named as below.
_IS_THE_ORGS_REPOSITORY = (
    RepositoryRow.org_id == bindparam("org_id"),
    RepositoryRow.host == bindparam("host"),
    RepositoryRow.owner == bindparam("owner"),
    RepositoryRow.name == bindparam("name"),
)
_REPOSITORY_OF_ORG = select(RepositoryRow).where(*_IS_THE_ORGS_REPOSITORY)
_QUEUE_OF_BRANCH = select(QueueRow).where(
    QueueRow.repository_id == bindparam("repository_id"), QueueRow.branch == bindparam("branch")
)
_QUEUE_OF_BRANCH_LOCKED = _QUEUE_OF_BRANCH.with_for_update()
# The statements below are on the tables, not the mapped classes: the ORM's machinery
# (keeping the session's objects in step, which nothing here needs: the session holds no
# position, and the rows inserted are read back by later statements) cost more than the
# statements. They do not flush the session first as ORM statements do: the methods that
# insert entries and history flush it; taking positions needs nothing pending (no
# write of a queue's row touches its position).
_QUEUES = Base.metadata.tables[QueueRow.__tablename__]
_TAKE_POSITION = (
    update(_QUEUES)
    .where(_QUEUES.c.id == bindparam("queue_id"))
    .values(position_seq=_QUEUES.c.position_seq + 1)
    .returning(_QUEUES.c.position_seq)
)
_DECISION_VERSION = select(_QUEUES.c.decision_version).where(_QUEUES.c.id == bindparam("queue_id"))
_ENTRIES = Base.metadata.tables[QueueEntryRow.__tablename__]
_INSERT_ENTRIES = insert(_ENTRIES)
# Every column of an entry by its id: `SqlEntries.save_all`, one statement for many rows.
_UPDATE_ENTRIES = (
    update(_ENTRIES)
    .where(_ENTRIES.c.id == bindparam("entry_id"))
    .values({column.key: bindparam(column.key) for column in _ENTRIES.c if column.key != "id"})
)
_INSERT_STATE_CHANGES = insert(Base.metadata.tables[StateChangeRow.__tablename__])


def _of_org(org_id: OrgId, ref: RepoRef) -> dict[str, str]:
    """The parameters of `_IS_THE_ORGS_REPOSITORY`."""
    return {"org_id": org_id, "host": ref.host, "owner": ref.owner, "name": ref.name}


class SqlOrgs:
    def __init__(self, session: Session) -> None:
        self._session = session

    def get_by_slug(self, slug: str) -> Org | None:
        row = self._session.scalar(select(OrgRow).where(OrgRow.slug == slug))
        return None if row is None else Org(OrgId(row.id), row.slug, row.created_at)

    def get(self, org_id: OrgId) -> Org | None:
        row = self._session.get(OrgRow, org_id)
        return None if row is None else Org(OrgId(row.id), row.slug, row.created_at)

    def add(self, org: Org) -> None:
        self._session.add(OrgRow(id=org.id, slug=org.slug, created_at=org.created_at))
        # No ORM relationships are declared, so parents are flushed before their children.
        self._session.flush()

    def list_all(self) -> Sequence[Org]:
        rows = self._session.scalars(select(OrgRow).order_by(OrgRow.slug))
        return [Org(OrgId(row.id), row.slug, row.created_at) for row in rows]


class SqlTokens:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, token: StoredToken) -> None:
        self._session.add(
            ApiTokenRow(
                id=token.id,
                org_id=token.org_id,
                token_hash=token.token_hash,
                created_at=token.created_at,
                name=token.name,
                revoked_at=token.revoked_at,
            )
        )

    def find_by_hash(self, token_hash: str) -> StoredToken | None:
        row = self._session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == token_hash))
        return None if row is None else _token_from_row(row)

    def get(self, token_id: str) -> StoredToken | None:
        row = self._session.get(ApiTokenRow, token_id)
        return None if row is None else _token_from_row(row)

    def list(self, org_id: OrgId | None = None) -> Sequence[StoredToken]:
        query = select(ApiTokenRow).order_by(ApiTokenRow.created_at, ApiTokenRow.id)
        if org_id is not None:
            query = query.where(ApiTokenRow.org_id == org_id)
        return [_token_from_row(row) for row in self._session.scalars(query)]

    def revoke(self, token_id: str, at: datetime) -> None:
        # Only a live token is revoked: the first revocation's time stays.
        self._session.execute(
            update(ApiTokenRow)
            .where(ApiTokenRow.id == token_id, ApiTokenRow.revoked_at.is_(None))
            .values(revoked_at=at)
        )


class SqlWebSessions:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, web_session: StoredWebSession) -> None:
        self._session.add(
            WebSessionRow(
                secret_hash=web_session.secret_hash,
                org_id=web_session.org_id,
                token_id=web_session.token_id,
                created_at=web_session.created_at,
                expires_at=web_session.expires_at,
            )
        )

    def find(self, secret_hash: str) -> StoredWebSession | None:
        row = self._session.get(WebSessionRow, secret_hash)
        if row is None:
            return None
        return StoredWebSession(
            secret_hash=row.secret_hash,
            org_id=OrgId(row.org_id),
            token_id=row.token_id,
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    def delete(self, secret_hash: str) -> None:
        self._session.execute(delete(WebSessionRow).where(WebSessionRow.secret_hash == secret_hash))

    def delete_expired(self, now: datetime) -> int:
        result = self._session.execute(delete(WebSessionRow).where(WebSessionRow.expires_at < now))
        return int(getattr(result, "rowcount", 0) or 0)


def _token_from_row(row: ApiTokenRow) -> StoredToken:
    return StoredToken(
        id=row.id,
        org_id=OrgId(row.org_id),
        token_hash=row.token_hash,
        created_at=row.created_at,
        name=row.name,
        revoked_at=row.revoked_at,
    )


class SqlRepositories:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, repository: Repository) -> None:
        row = RepositoryRow(id=repository.id)
        write_repository(row, repository)
        self._session.add(row)
        self._session.flush()

    def save(self, repository: Repository) -> None:
        write_repository(self._session.get_one(RepositoryRow, repository.id), repository)
        self._session.flush()

    def delete(self, repository_id: RepositoryId) -> None:
        """Delete the repository, its queues (with their PRs, runs and history), its commit
        statuses, its flaky-test data and the CI runs reported for it. Children go first,
        explicitly: SQLite enforces the foreign keys, and the cascades must not be the only
        thing that cleans up.
        """
        queues = SqlQueues(self._session)
        for queue_id in self._session.scalars(
            select(QueueRow.id).where(QueueRow.repository_id == repository_id)
        ):
            queues.delete(QueueId(queue_id))
        for table in (
            TestResultRow,
            TestStatusChangeRow,
            TestFailureTemplateRow,
            TestFailureDayRow,
            TestCommitRow,
            TestHourRow,
            TestHourTotalRow,
            TestDayTotalRow,
            TestUploadRow,
            TestCaseRow,
            FlakySettingsRow,
            CiRunRow,
            CommitStatusRow,
        ):
            self._session.execute(delete(table).where(table.repository_id == repository_id))
        self._session.execute(delete(RepositoryRow).where(RepositoryRow.id == repository_id))

    def list_all(self) -> Sequence[Repository]:
        rows = self._session.scalars(
            select(RepositoryRow).order_by(
                RepositoryRow.host, RepositoryRow.owner, RepositoryRow.name, RepositoryRow.org_id
            )
        )
        return [repository_from_row(row) for row in rows]

    def with_ref(self, ref: RepoRef) -> Sequence[Repository]:
        rows = self._session.scalars(
            select(RepositoryRow)
            .where(
                RepositoryRow.host == ref.host,
                RepositoryRow.owner == ref.owner,
                RepositoryRow.name == ref.name,
            )
            .order_by(RepositoryRow.org_id)
        )
        return [repository_from_row(row) for row in rows]

    def find(self, org_id: OrgId, ref: RepoRef) -> Repository | None:
        row = self._session.scalar(_REPOSITORY_OF_ORG, _of_org(org_id, ref))
        return None if row is None else repository_from_row(row)

    def get(self, repository_id: RepositoryId) -> Repository:
        return repository_from_row(self._session.get_one(RepositoryRow, repository_id))

    def using_git_url(self, git_url: str) -> Sequence[Repository]:
        rows = self._session.scalars(select(RepositoryRow).where(RepositoryRow.git_url == git_url))
        return [repository_from_row(row) for row in rows]

    def list_for_org(self, org_id: OrgId) -> Sequence[Repository]:
        rows = self._session.scalars(
            select(RepositoryRow)
            .where(RepositoryRow.org_id == org_id)
            .order_by(RepositoryRow.host, RepositoryRow.owner, RepositoryRow.name)
        )
        return [repository_from_row(row) for row in rows]


class SqlQueues:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, queue: Queue) -> None:
        row = QueueRow(id=queue.id, position_seq=0)
        write_queue(row, queue)
        self._session.add(row)
        self._session.flush()

    def save(self, queue: Queue) -> None:
        write_queue(self._session.get_one(QueueRow, queue.id), queue)

    def delete(self, queue_id: QueueId) -> None:
        # Children first: SQLite enforces the foreign keys, and not every backend cascades.
        run_ids = select(TestRunRow.id).where(TestRunRow.queue_id == queue_id)
        self._session.execute(delete(CiRunHolderRow).where(CiRunHolderRow.test_run_id.in_(run_ids)))
        self._session.execute(
            delete(TestRunEntryRow).where(TestRunEntryRow.test_run_id.in_(run_ids))
        )
        for table in (
            QueueEffectRow,
            QueueLeaseRow,
            TestRunRow,
            StateChangeRow,
            ImpactedTargetsRow,
            QueueEntryRow,
        ):
            self._session.execute(delete(table).where(table.queue_id == queue_id))
        self._session.execute(delete(QueueRow).where(QueueRow.id == queue_id))

    def find(self, repository_id: RepositoryId, branch: str, *, lock: bool = False) -> Queue | None:
        row = self._session.scalar(
            _QUEUE_OF_BRANCH_LOCKED if lock else _QUEUE_OF_BRANCH,
            {"repository_id": repository_id, "branch": branch},
        )
        return None if row is None else queue_from_row(row)

    def get(self, queue_id: QueueId, *, lock: bool = False) -> Queue | None:
        query = select(QueueRow).where(QueueRow.id == queue_id)
        if lock:
            query = query.with_for_update()
        row = self._session.scalar(query)
        return None if row is None else queue_from_row(row)

    def list_ids(self) -> Sequence[QueueId]:
        """Every queue, oldest first: what the worker walks."""
        rows = self._session.scalars(select(QueueRow.id).order_by(QueueRow.created_at, QueueRow.id))
        return [QueueId(queue_id) for queue_id in rows]

    def list_for_repositories(self, repository_ids: Sequence[RepositoryId]) -> Sequence[Queue]:
        if not repository_ids:
            return []
        rows = self._session.scalars(
            select(QueueRow)
            .where(QueueRow.repository_id.in_(repository_ids))
            .order_by(QueueRow.repository_id, QueueRow.branch)
        )
        return [queue_from_row(row) for row in rows]

    def decision_version(self, queue_id: QueueId) -> int | None:
        found = self._session.scalar(_DECISION_VERSION, {"queue_id": queue_id})
        return None if found is None else int(found)

    def next_position(self, queue_id: QueueId) -> int:
        # One UPDATE ... RETURNING: atomic on PostgreSQL and on SQLite >= 3.35.
        return int(self._session.execute(_TAKE_POSITION, {"queue_id": queue_id}).scalar_one())


# The queues whose entries the process read last (a worker's, an API's), each read's entries
# kept for the next (see `EntriesReadAgain`).
_READ_AGAIN = EntriesReadAgain(reads=64)


class SqlEntries:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, entry: QueueEntry) -> None:
        self.add_all((entry,))

    def add_all(self, entries: Sequence[QueueEntry]) -> None:
        # One INSERT of every row, without the unit of work's bookkeeping; what the session
        # has pending is written first, so rows keep the order they were written in.
        self._session.flush()
        self._session.execute(
            _INSERT_ENTRIES, [{"id": entry.id, **entry_values(entry)} for entry in entries]
        )

    def save(self, entry: QueueEntry) -> None:
        write_entry(self._session.get_one(QueueEntryRow, entry.id), entry)

    def save_all(self, entries: Sequence[QueueEntry]) -> None:
        # A decision changes many entries at once (a hundred PRs read in one pass): one
        # UPDATE for them all, instead of loading each into the session to write it there.
        # An entry the session holds already is written through it, so what it holds and
        # writes at the flush stays true.
        plain = []
        for entry in entries:
            row = self._session.identity_map.get(identity_key(QueueEntryRow, entry.id))
            if row is not None:
                write_entry(row, entry)
            else:
                plain.append({"entry_id": entry.id, **entry_values(entry)})
        if plain:
            self._session.execute(_UPDATE_ENTRIES, plain)

    def find(self, queue_id: QueueId, number: int) -> QueueEntry | None:
        row = self._session.scalar(
            select(QueueEntryRow).where(
                QueueEntryRow.queue_id == queue_id, QueueEntryRow.number == number
            )
        )
        return None if row is None else entry_from_row(row)

    def find_by_branch(self, queue_id: QueueId, branch: str) -> QueueEntry | None:
        terminal = [state.value for state in PrState if state.is_terminal]
        row = self._session.scalar(
            select(QueueEntryRow)
            .where(QueueEntryRow.queue_id == queue_id, QueueEntryRow.head_branch == branch)
            .order_by(
                QueueEntryRow.state.in_(terminal),  # false (in the queue) sorts first
                QueueEntryRow.state_changed_at.desc(),
                QueueEntryRow.number.desc(),
            )
            .limit(1)
        )
        return None if row is None else entry_from_row(row)

    def get(self, entry_id: PullRequestId) -> QueueEntry:
        return entry_from_row(self._session.get_one(QueueEntryRow, entry_id))

    def list_for_queues(
        self, queue_ids: Sequence[QueueId], *, states: frozenset[PrState] | None = None
    ) -> Sequence[QueueEntry]:
        if not queue_ids:
            return []
        # Plain rows, not ORM objects: every decision reads a queue's live entries, and
        # building tracked objects for them cost more than the statement (the few entries a
        # decision changes are loaded again by `save`).
        table = QueueEntryRow.__table__
        query = select(table).where(table.c.queue_id.in_(queue_ids))
        if states is not None:
            query = query.where(table.c.state.in_([s.value for s in states]))
        rows = self._session.execute(query.order_by(table.c.position, table.c.id)).all()
        return _READ_AGAIN.entries((tuple(queue_ids), states), rows)

    def placed(self, queue_id: QueueId) -> Sequence[Placed]:
        terminal = [state.value for state in PrState if state.is_terminal]
        rows = self._session.execute(
            select(
                QueueEntryRow.id,
                QueueEntryRow.state,
                QueueEntryRow.priority_value,
                QueueEntryRow.priority_name,
                QueueEntryRow.position,
            ).where(QueueEntryRow.queue_id == queue_id, QueueEntryRow.state.not_in(terminal))
        )
        return [
            Placed(PullRequestId(id_), PrState(state), Priority(value, name), position)
            for id_, state, value, name, position in rows
        ]

    def page(
        self,
        queue_id: QueueId,
        *,
        state: PrState | None,
        concluded_since: datetime | None,
        cursor: PullRequestId | None,
        take: int,
    ) -> EntryPage:
        query = select(QueueEntryRow).where(QueueEntryRow.queue_id == queue_id)
        if state is not None:
            query = query.where(QueueEntryRow.state == state.value)
        if concluded_since is not None:
            query = query.where(
                QueueEntryRow.state.in_(_CONCLUDED),
                QueueEntryRow.state_changed_at >= concluded_since,
            )
        if cursor is not None:
            start = self._session.get_one(QueueEntryRow, cursor)
            query = query.where(
                (QueueEntryRow.position > start.position)
                | ((QueueEntryRow.position == start.position) & (QueueEntryRow.id >= start.id))
            )
        rows = list(
            self._session.scalars(
                query.order_by(QueueEntryRow.position, QueueEntryRow.id).limit(take + 1)
            )
        )
        next_cursor = PullRequestId(rows[take].id) if len(rows) > take else None
        return EntryPage([entry_from_row(row) for row in rows[:take]], next_cursor)

    def exists(self, queue_id: QueueId, entry_id: PullRequestId) -> bool:
        count = self._session.scalar(
            select(func.count())
            .select_from(QueueEntryRow)
            .where(QueueEntryRow.queue_id == queue_id, QueueEntryRow.id == entry_id)
        )
        return bool(count)


class SqlHistory:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, change: StateChange) -> None:
        self._session.add(StateChangeRow(**state_change_values(change)))

    def add_all(self, changes: Sequence[StateChange]) -> None:
        # As `SqlEntries.add_all`: one INSERT, after what the session has pending.
        self._session.flush()
        self._session.execute(
            _INSERT_STATE_CHANGES, [state_change_values(change) for change in changes]
        )

    def list_for_entry(self, entry_id: PullRequestId) -> Sequence[StateChange]:
        rows = self._session.scalars(
            select(StateChangeRow)
            .where(StateChangeRow.entry_id == entry_id)
            .order_by(StateChangeRow.at, StateChangeRow.id)
        )
        return [state_change_from_row(row) for row in rows]

    def last_for_entry(self, entry_id: PullRequestId) -> StateChange | None:
        row = self._session.scalar(
            select(StateChangeRow)
            .where(StateChangeRow.entry_id == entry_id)
            .order_by(StateChangeRow.at.desc(), StateChangeRow.id.desc())
            .limit(1)
        )
        return None if row is None else state_change_from_row(row)

    def list_since(self, queue_ids: Sequence[QueueId], since: datetime) -> Sequence[StateChange]:
        if not queue_ids:
            return []
        changed = (
            select(StateChangeRow.entry_id)
            .where(StateChangeRow.queue_id.in_(queue_ids), StateChangeRow.at >= since)
            .distinct()
        )
        rows = self._session.scalars(
            select(StateChangeRow)
            .where(StateChangeRow.entry_id.in_(changed))
            .order_by(StateChangeRow.at, StateChangeRow.id)
        )
        return [state_change_from_row(row) for row in rows]


class SqlGithubDeliveries:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add_if_new(self, delivery: GithubDelivery) -> bool:
        return _insert_ignore(
            self._session,
            GithubDeliveryRow,
            {
                "id": delivery.id,
                "event": delivery.event,
                "action": delivery.action,
                "installation_id": delivery.installation_id,
                "payload": dict(delivery.payload),
                "received_at": delivery.received_at,
            },
            keys=("id",),
        )

    def pending(self, *, limit: int) -> Sequence[GithubDelivery]:
        rows = self._session.scalars(
            select(GithubDeliveryRow)
            .where(GithubDeliveryRow.processed_at.is_(None))
            .order_by(GithubDeliveryRow.received_at, GithubDeliveryRow.id)
            .limit(limit)
        )
        return [
            GithubDelivery(
                id=row.id,
                event=row.event,
                action=row.action,
                installation_id=row.installation_id,
                payload=row.payload,
                received_at=row.received_at,
            )
            for row in rows
        ]

    def claim(self, delivery_id: str, *, at: datetime) -> bool:
        # Told by the row RETURNING gives back (psycopg's rowcount may be -1, unknown).
        claimed = self._session.scalar(
            update(GithubDeliveryRow)
            .where(GithubDeliveryRow.id == delivery_id, GithubDeliveryRow.processed_at.is_(None))
            .values(processed_at=at)
            .returning(GithubDeliveryRow.id)
        )
        return claimed is not None

    def release(self, delivery_id: str) -> None:
        self._session.execute(
            update(GithubDeliveryRow)
            .where(GithubDeliveryRow.id == delivery_id)
            .values(processed_at=None)
        )


class SqlGithubInstallations:
    def __init__(self, session: Session) -> None:
        self._session = session

    def get(self, installation_id: int) -> GithubInstallation | None:
        row = self._session.get(GithubInstallationRow, installation_id)
        return None if row is None else _installation(row)

    def save(self, installation: GithubInstallation) -> None:
        row = self._session.get(GithubInstallationRow, installation.id)
        if row is None:
            row = GithubInstallationRow(id=installation.id)
            self._session.add(row)
        row.account = installation.account
        row.org_id = installation.org_id
        row.linked = installation.linked
        row.created_at = installation.created_at
        self._session.flush()

    def delete(self, installation_id: int) -> None:
        self._session.execute(
            delete(GithubInstallationRow).where(GithubInstallationRow.id == installation_id)
        )

    def list_all(self) -> Sequence[GithubInstallation]:
        rows = self._session.scalars(
            select(GithubInstallationRow).order_by(GithubInstallationRow.id)
        )
        return [_installation(row) for row in rows]

    def repositories(self, installation_id: int) -> Sequence[Repository]:
        rows = self._session.scalars(
            select(RepositoryRow)
            .where(RepositoryRow.github_installation_id == installation_id)
            .order_by(RepositoryRow.owner, RepositoryRow.name)
        )
        return [repository_from_row(row) for row in rows]

    def by_github_name(self, owner: str, name: str) -> Sequence[Repository]:
        rows = self._session.scalars(
            select(RepositoryRow).where(
                RepositoryRow.github_installation_id.is_not(None),
                func.lower(RepositoryRow.owner) == owner.lower(),
                func.lower(RepositoryRow.name) == name.lower(),
            )
        )
        return [repository_from_row(row) for row in rows]


def _installation(row: GithubInstallationRow) -> GithubInstallation:
    return GithubInstallation(
        id=row.id,
        account=row.account,
        org_id=None if row.org_id is None else OrgId(row.org_id),
        created_at=row.created_at,
        linked=row.linked,
    )


class SqlGithubFeedback:
    def __init__(self, session: Session) -> None:
        self._session = session

    def get(self, repository_id: RepositoryId, number: int) -> GithubFeedback | None:
        row = self._session.get(GithubFeedbackRow, (repository_id, number))
        if row is None:
            return None
        return GithubFeedback(
            repository_id=RepositoryId(row.repository_id),
            number=row.number,
            check_run_id=row.check_run_id,
            check_run_sha=row.check_run_sha,
            comment_id=row.comment_id,
            shown=row.shown,
            shown_comment=row.shown_comment,
            shown_at=row.shown_at,
            merged_sha=row.merged_sha,
            state_label=row.state_label,
        )

    def save(self, feedback: GithubFeedback) -> None:
        row = self._session.get(GithubFeedbackRow, (feedback.repository_id, feedback.number))
        if row is None:
            row = GithubFeedbackRow(repository_id=feedback.repository_id, number=feedback.number)
            self._session.add(row)
        row.check_run_id = feedback.check_run_id
        row.check_run_sha = feedback.check_run_sha
        row.comment_id = feedback.comment_id
        row.shown = feedback.shown
        row.shown_comment = feedback.shown_comment
        row.shown_at = feedback.shown_at
        row.merged_sha = feedback.merged_sha
        row.state_label = feedback.state_label
        self._session.flush()


class SqlIncidents:
    """The incident history of each queue. Written by the worker holding the queue's lease
    only, so finding the open incident and then changing it needs no lock of its own.
    """

    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self,
        queue_id: QueueId,
        kind: IncidentKind,
        message: str,
        *,
        now: datetime,
        pr_number: int | None = None,
    ) -> Incident:
        row = self._session.scalars(
            self._open(queue_id, [kind], pr_number).order_by(QueueIncidentRow.id.desc()).limit(1)
        ).first()
        if row is None:
            row = QueueIncidentRow(
                queue_id=queue_id,
                pr_number=pr_number,
                kind=kind.value,
                message=message,
                started_at=now,
                last_failure_at=now,
                failures=1,
            )
            self._session.add(row)
        else:
            row.message = message
            row.last_failure_at = now
            row.failures += 1
        self._session.flush()
        return incident_from_row(row)

    def close(
        self,
        queue_id: QueueId,
        *,
        now: datetime,
        kinds: Collection[IncidentKind],
        pr_number: int | None = None,
    ) -> Sequence[Incident]:
        rows = list(self._session.scalars(self._open(queue_id, kinds, pr_number)))
        for row in rows:
            row.ended_at = now
        return [incident_from_row(row) for row in rows]

    def list_open(self, queue_ids: Sequence[QueueId]) -> Sequence[Incident]:
        if not queue_ids:
            return []
        rows = self._session.scalars(
            select(QueueIncidentRow)
            .where(QueueIncidentRow.queue_id.in_(queue_ids), QueueIncidentRow.ended_at.is_(None))
            .order_by(QueueIncidentRow.id)
        )
        return [incident_from_row(row) for row in rows]

    def recent(
        self, queue_id: QueueId, *, limit: int, since: datetime | None = None
    ) -> Sequence[Incident]:
        query = select(QueueIncidentRow).where(QueueIncidentRow.queue_id == queue_id)
        if since is not None:
            query = query.where(
                or_(QueueIncidentRow.ended_at.is_(None), QueueIncidentRow.ended_at >= since)
            )
        rows = self._session.scalars(query.order_by(QueueIncidentRow.id.desc()).limit(limit))
        return [incident_from_row(row) for row in rows]

    def _open(
        self, queue_id: QueueId, kinds: Collection[IncidentKind], pr_number: int | None
    ) -> Select[QueueIncidentRow]:
        number = (
            QueueIncidentRow.pr_number.is_(None)
            if pr_number is None
            else QueueIncidentRow.pr_number == pr_number
        )
        return select(QueueIncidentRow).where(
            QueueIncidentRow.queue_id == queue_id,
            QueueIncidentRow.ended_at.is_(None),
            QueueIncidentRow.kind.in_([kind.value for kind in kinds]),
            number,
        )


class SqlTestRuns:
    __test__ = False

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, run: TestRun) -> None:
        row = TestRunRow(id=run.id)
        self._write(row, run)
        self._session.add(row)
        self._session.flush()
        self._add_members(run)

    def save(self, run: TestRun) -> None:
        self._write(self._session.get_one(TestRunRow, run.id), run)

    def save_members(self, run: TestRun) -> None:
        """Rewrite which entries the run includes (a queued bisection run drops merged ones)."""
        self._session.execute(delete(TestRunEntryRow).where(TestRunEntryRow.test_run_id == run.id))
        self._add_members(run)

    def _add_members(self, run: TestRun) -> None:
        for role, entry_ids in (("dependent", run.dependent_prs), ("tested", run.tested_prs)):
            for ordinal, entry_id in enumerate(entry_ids):
                self._session.add(
                    TestRunEntryRow(
                        test_run_id=run.id, entry_id=entry_id, role=role, ordinal=ordinal
                    )
                )

    @staticmethod
    def _write(row: TestRunRow, run: TestRun) -> None:
        row.queue_id = run.queue_id
        row.kind = run.kind.value
        row.status = run.status.value
        row.branch = run.branch
        row.base_sha = run.base_sha
        row.sha = run.sha
        row.required_statuses = list(run.required_statuses)
        row.created_at = run.created_at
        row.finished_at = run.finished_at
        row.failure_reason = None if run.failure_reason is None else run.failure_reason.value
        row.base_tree = run.base_tree
        row.chain = [[link.number, link.head_sha, link.commit, link.tree] for link in run.chain]
        row.bisection_root = run.bisection_root
        row.started_at = run.started_at
        row.closed_at = run.closed_at
        row.attempt = run.attempt
        row.failure_detail = run.failure_detail

    def list_open(self, queue_id: QueueId) -> Sequence[TestRun]:
        rows = self._session.scalars(
            select(TestRunRow)
            .where(TestRunRow.queue_id == queue_id, TestRunRow.closed_at.is_(None))
            .order_by(TestRunRow.created_at, TestRunRow.id)
        )
        return self._load_all(rows)

    def list_failed_in_bisections(
        self, queue_id: QueueId, roots: Collection[TestRunId]
    ) -> Sequence[TestRun]:
        if not roots:
            return []
        rows = self._session.scalars(
            select(TestRunRow)
            .where(
                TestRunRow.queue_id == queue_id,
                TestRunRow.bisection_root.in_(list(roots)),
                TestRunRow.status == TestRunStatus.FAILED.value,
            )
            .order_by(TestRunRow.created_at, TestRunRow.id)
        )
        return self._load_all(rows)

    def get(self, queue_id: QueueId, run_id: TestRunId) -> TestRun | None:
        row = self._session.scalar(
            select(TestRunRow).where(TestRunRow.queue_id == queue_id, TestRunRow.id == run_id)
        )
        return None if row is None else self._load_all([row])[0]

    def list_active(self, queue_ids: Sequence[QueueId]) -> Sequence[TestRun]:
        if not queue_ids:
            return []
        rows = self._session.scalars(
            select(TestRunRow)
            .where(
                TestRunRow.queue_id.in_(queue_ids),
                TestRunRow.status == TestRunStatus.IN_PROGRESS.value,
            )
            .order_by(TestRunRow.created_at, TestRunRow.id)
        )
        return self._load_all(rows)

    def bisection_roots(self, run_ids: Collection[TestRunId]) -> Mapping[TestRunId, TestRunId]:
        if not run_ids:
            return {}
        rows = self._session.execute(
            select(TestRunRow.id, TestRunRow.bisection_root).where(
                TestRunRow.id.in_(list(run_ids)), TestRunRow.bisection_root.is_not(None)
            )
        )
        return {TestRunId(run_id): TestRunId(root) for run_id, root in rows if root}

    def kinds(self, run_ids: Collection[TestRunId]) -> Mapping[TestRunId, TestRunKind]:
        if not run_ids:
            return {}
        rows = self._session.execute(
            select(TestRunRow.id, TestRunRow.kind).where(TestRunRow.id.in_(list(run_ids)))
        )
        return {TestRunId(run_id): TestRunKind(kind) for run_id, kind in rows}

    def _load_all(self, found: Iterable[TestRunRow]) -> list[TestRun]:
        """The runs of `found` with their members, read for all of them in one statement."""
        rows = list(found)
        members: dict[str, list[TestRunEntryRow]] = {row.id: [] for row in rows}
        if members:
            for member in self._session.scalars(
                select(TestRunEntryRow)
                .where(TestRunEntryRow.test_run_id.in_(list(members)))
                .order_by(TestRunEntryRow.test_run_id, TestRunEntryRow.ordinal)
            ):
                members[member.test_run_id].append(member)
        return [self._load(row, members[row.id]) for row in rows]

    @staticmethod
    def _load(row: TestRunRow, members: Sequence[TestRunEntryRow]) -> TestRun:
        return TestRun(
            id=TestRunId(row.id),
            queue_id=QueueId(row.queue_id),
            kind=TestRunKind(row.kind),
            status=TestRunStatus(row.status),
            branch=row.branch,
            base_sha=row.base_sha,
            sha=row.sha,
            tested_prs=tuple(PullRequestId(m.entry_id) for m in members if m.role == "tested"),
            dependent_prs=tuple(
                PullRequestId(m.entry_id) for m in members if m.role == "dependent"
            ),
            required_statuses=tuple(row.required_statuses),
            created_at=row.created_at,
            finished_at=row.finished_at,
            failure_reason=None if row.failure_reason is None else StateReason(row.failure_reason),
            base_tree=row.base_tree,
            chain=tuple(
                ChainLink(int(n), str(h), str(c), str(t)) for n, h, c, t in row.chain or ()
            ),
            bisection_root=None if row.bisection_root is None else TestRunId(row.bisection_root),
            started_at=row.started_at,
            closed_at=row.closed_at,
            attempt=row.attempt,
            failure_detail=row.failure_detail,
        )


class SqlCommitStatuses:
    def __init__(self, session: Session, new_id: IdFactory) -> None:
        self._session = session
        self._new_id = new_id

    def upsert(self, status: CommitStatus) -> None:
        # One INSERT ... ON CONFLICT DO UPDATE: concurrent first reports of a status cannot
        # race each other into a unique-key error.
        values = {
            "repository_id": status.repository_id,
            "sha": status.sha,
            "context": status.context,
            "state": status.state.value,
            "target_url": status.target_url,
            "description": status.description,
            "updated_at": status.updated_at,
        }
        _upsert(
            self._session,
            CommitStatusRow,
            {"id": self._new_id(), **values},
            keys=("repository_id", "sha", "context"),
            updates=("state", "target_url", "description", "updated_at"),
        )

    def states_for_shas(
        self, repository_id: RepositoryId, shas: Collection[str]
    ) -> dict[str, dict[str, CommitState]]:
        """The reported states by sha, then context, for the given commits."""
        found: dict[str, dict[str, CommitState]] = {}
        if not shas:
            return found
        rows = self._session.execute(
            select(CommitStatusRow.sha, CommitStatusRow.context, CommitStatusRow.state).where(
                CommitStatusRow.repository_id == repository_id,
                CommitStatusRow.sha.in_(list(shas)),
            )
        )
        for sha, context, state in rows:
            found.setdefault(sha, {})[context] = CommitState(state)
        return found

    def list_for_sha(self, repository_id: RepositoryId, sha: str) -> Sequence[CommitStatus]:
        rows = self._session.scalars(
            select(CommitStatusRow)
            .where(CommitStatusRow.repository_id == repository_id, CommitStatusRow.sha == sha)
            .order_by(CommitStatusRow.context)
        )
        return [commit_status_from_row(row) for row in rows]


class SqlImpactedTargets:
    def __init__(self, session: Session, new_id: IdFactory) -> None:
        self._session = session
        self._new_id = new_id

    def upsert(self, targets: ImpactedTargets) -> None:
        _upsert(
            self._session,
            ImpactedTargetsRow,
            {
                "id": self._new_id(),
                "queue_id": targets.queue_id,
                "pr_number": targets.pr_number,
                "head_sha": targets.head_sha,
                "targets": None if targets.targets is None else list(targets.targets),
                "uploaded_at": targets.uploaded_at,
            },
            keys=("queue_id", "pr_number", "head_sha"),
            updates=("targets", "uploaded_at"),
        )

    def find_for_heads(
        self, queue_id: QueueId, heads: Collection[tuple[int, str]]
    ) -> dict[tuple[int, str], ImpactedTargets]:
        """The uploads for each `(pr_number, head_sha)` that has one, in one query."""
        if not heads:
            return {}
        wanted = set(heads)
        rows = self._session.scalars(
            select(ImpactedTargetsRow).where(
                ImpactedTargetsRow.queue_id == queue_id,
                ImpactedTargetsRow.pr_number.in_(sorted({number for number, _ in wanted})),
            )
        )
        found = {}
        for row in rows:
            key = (row.pr_number, row.head_sha)
            if key in wanted:
                found[key] = impacted_targets_from_row(row)
        return found

    def find(self, queue_id: QueueId, pr_number: int, head_sha: str) -> ImpactedTargets | None:
        row = self._session.scalar(
            select(ImpactedTargetsRow).where(
                ImpactedTargetsRow.queue_id == queue_id,
                ImpactedTargetsRow.pr_number == pr_number,
                ImpactedTargetsRow.head_sha == head_sha,
            )
        )
        return None if row is None else impacted_targets_from_row(row)


class SqlEffects:
    """The outbox of decided effects, per queue, in the order they were decided."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, queue_id: QueueId, effect: Effect, at: datetime) -> None:
        kind, payload = effect_to_payload(effect)
        self._session.add(
            QueueEffectRow(queue_id=queue_id, kind=kind, payload=payload, created_at=at)
        )

    def list(self, queue_id: QueueId) -> Sequence[tuple[int, Effect]]:
        rows = self._session.scalars(
            select(QueueEffectRow)
            .where(QueueEffectRow.queue_id == queue_id)
            .order_by(QueueEffectRow.id)
        )
        return [(row.id, effect_from_payload(row.kind, row.payload)) for row in rows]

    def delete(self, effect_id: int) -> bool:
        """Remove a carried-out effect; False when another worker already did."""
        result = self._session.execute(delete(QueueEffectRow).where(QueueEffectRow.id == effect_id))
        return bool(getattr(result, "rowcount", 0))


class SqlLeases:
    """One writer per queue: a lease row taken and renewed by compare-and-swap."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def acquire(self, queue_id: QueueId, holder: str, *, now: datetime, until: datetime) -> bool:
        """Take or renew the queue's lease; False while another holder's lease is unexpired."""
        taken = self._session.execute(
            update(QueueLeaseRow)
            .where(
                QueueLeaseRow.queue_id == queue_id,
                (QueueLeaseRow.holder == holder) | (QueueLeaseRow.expires_at < now),
            )
            .values(holder=holder, expires_at=until)
        )
        if getattr(taken, "rowcount", 0):
            return True
        exists = self._session.scalar(
            select(func.count())
            .select_from(QueueLeaseRow)
            .where(QueueLeaseRow.queue_id == queue_id)
        )
        if exists:
            return False
        return _insert_ignore(
            self._session,
            QueueLeaseRow,
            {"queue_id": queue_id, "holder": holder, "expires_at": until},
            keys=("queue_id",),
        )

    def release(self, queue_id: QueueId, holder: str) -> None:
        self._session.execute(
            delete(QueueLeaseRow).where(
                QueueLeaseRow.queue_id == queue_id, QueueLeaseRow.holder == holder
            )
        )

    def release_all(self, holder: str) -> None:
        """Hand back every lease `holder` has (a worker stopping), so others take over at once."""
        self._session.execute(delete(QueueLeaseRow).where(QueueLeaseRow.holder == holder))

    def holds(self, queue_id: QueueId, holder: str) -> bool:
        """Fencing: True when `holder` has the queue's lease, which then stays its own until
        this transaction ends (the row is locked; on SQLite the transaction is the writer).

        Expiry is not checked: an expired lease nobody took over still leaves one writer.
        """
        row = self._session.scalar(
            select(QueueLeaseRow.queue_id)
            .where(QueueLeaseRow.queue_id == queue_id, QueueLeaseRow.holder == holder)
            .with_for_update()
        )
        return row is not None


class SqlWorkers:
    """Worker heartbeats, and which worker started each built-in CI run."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def beat(self, holder: str, *, host: str, pid: int, now: datetime) -> None:
        """Say `holder` is alive at `now` (registering it the first time)."""
        _upsert(
            self._session,
            WorkerRow,
            {"holder": holder, "host": host, "pid": pid, "started_at": now, "heartbeat_at": now},
            keys=("holder",),
            updates=("heartbeat_at",),
        )

    def remove(self, holder: str) -> None:
        """`holder` stopped cleanly: from now on it counts as dead."""
        self._session.execute(delete(WorkerRow).where(WorkerRow.holder == holder))

    def alive(self, holders: Collection[str], *, since: datetime) -> set[str]:
        """The `holders` that beat at or after `since`."""
        if not holders:
            return set()
        rows = self._session.scalars(
            select(WorkerRow.holder).where(
                WorkerRow.holder.in_(list(holders)), WorkerRow.heartbeat_at >= since
            )
        )
        return set(rows)

    def record_ci(self, run_id: TestRunId, holder: str, *, now: datetime) -> None:
        """`holder` starts run `run_id`'s built-in CI (again)."""
        _upsert(
            self._session,
            CiRunHolderRow,
            {"test_run_id": run_id, "holder": holder, "started_at": now},
            keys=("test_run_id",),
            updates=("holder", "started_at"),
        )

    def ci_holders(self, run_ids: Collection[TestRunId]) -> dict[TestRunId, str]:
        """The worker that last started each run's built-in CI, for the runs that have one."""
        if not run_ids:
            return {}
        rows = self._session.execute(
            select(CiRunHolderRow.test_run_id, CiRunHolderRow.holder).where(
                CiRunHolderRow.test_run_id.in_(list(run_ids))
            )
        )
        return {TestRunId(run_id): holder for run_id, holder in rows}
