"""The flaky-test read API's use cases: listings, one test's details, the quarantine list."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from keepgreen.app.errors import InvalidInput, NotFound
from keepgreen.app.flaky.pages import Page, PageTokens
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import FlakyListings
from keepgreen.app.instance_keys import instance_key
from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.core.flaky.failures import FailureTemplate, mine_templates
from keepgreen.core.flaky.model import StatusChange, TestCase
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import QuarantineSettings, is_quarantined
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef, Repository

MAX_FAILING_RANGE = timedelta(days=7)
WEEK = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class TestView:
    """A test case with the figures the API reports about it."""

    __test__ = False

    test: TestCase
    repository: Repository
    quarantined: bool
    ticket_url: str | None
    pull_requests_impacted_last_7d: int
    failure_rate_last_7d: float | None = None  # None where the listing does not report it
    failure_rate_last_24h: float | None = None
    most_common_failures: tuple[FailureTemplate, ...] | None = None


@dataclass(frozen=True, slots=True)
class TestPage:
    __test__ = False

    tests: tuple[TestView, ...]
    page: Page


@dataclass(frozen=True, slots=True)
class TestDetails:
    __test__ = False

    view: TestView
    history: tuple[StatusChange, ...]
    quarantine: QuarantineSettings = field(default_factory=QuarantineSettings)  # its switches


# What the dashboard's list of tests may show: the unhealthy and the quarantined ones.
BoardKind = Literal["flaky", "broken", "quarantined"]
BOARD_KINDS: tuple[BoardKind, ...] = ("flaky", "broken", "quarantined")
BOARD_LIMIT = 500  # tests read per kind; more is a search away
CHART_DAYS = 30


@dataclass(frozen=True, slots=True)
class TestBoard:
    """The tests of one repository the dashboard lists, most recent status change first;
    `truncated` when a kind held more than `BOARD_LIMIT` tests and only those were read.
    """

    __test__ = False

    tests: tuple[TestView, ...]
    truncated: bool


@dataclass(frozen=True, slots=True)
class DailyRuns:
    """One day of a test's non-skipped runs, on every branch."""

    day: datetime
    runs: int
    failures: int

    @property
    def rate(self) -> float:
        return self.failures / self.runs if self.runs else 0.0


def matches(view: TestView, *, kinds: Collection[BoardKind], owner: str, search: str) -> bool:
    """Whether the dashboard's filters keep a test: one of `kinds`, an owner containing
    `owner`, and `search` in its name, class, parent or file (both case-insensitive, "" keeps all).
    """
    test = view.test
    kind_of = {
        "flaky": test.status is TestStatus.FLAKY,
        "broken": test.status is TestStatus.BROKEN,
        "quarantined": view.quarantined,
    }
    if not any(kind_of[kind] for kind in kinds):
        return False
    if owner and not any(owner.lower() in person.lower() for person in test.codeowners):
        return False
    words = (test.name, test.classname or "", test.parent or "", test.file or "")
    return not search or any(search.lower() in word.lower() for word in words)


def ticket_url(settings: FlakySettings, ticket: str | None) -> str | None:
    if ticket is None:
        return None
    template = settings.ticket_url_template
    if template is None:
        # Without a tracker configured the ticket is still shown, as a URN naming it.
        return f"urn:ticket:{ticket}"
    return template.replace("{id}", ticket)


def page_size_of(size: int) -> int:
    if not 1 <= size <= 100:
        raise InvalidInput("invalid_field", "page_query.page_size must be between 1 and 100")
    return size


class FlakyReadService:
    def __init__(self, unit_of_work: UnitOfWorkFactory, *, clock: Clock) -> None:
        self._unit_of_work = unit_of_work
        self._clock = clock
        self._page_key: bytes | None = None

    def _tokens(self) -> PageTokens:
        """The signer of page tokens; its key is made and stored on first use, in a write of
        its own, so that listings only ever read.
        """
        if self._page_key is None:
            self._page_key = bytes.fromhex(instance_key(self._unit_of_work, "page-tokens"))
        return PageTokens(self._page_key)

    def list_unhealthy(
        self, org_id: OrgId, ref: RepoRef, status: TestStatus, *, size: int, token: str
    ) -> TestPage:
        if status is TestStatus.HEALTHY:
            raise InvalidInput("invalid_field", "status must be FLAKY or BROKEN")
        return self._listing(
            org_id,
            ref,
            ("list-unhealthy-tests", status.value),
            size=size,
            token=token,
            fetch=lambda store, repo, _s, offset, limit: (
                store.page_by_status(repo.id, status, offset=offset, limit=limit),
                store.count_by_status(repo.id, status),
            ),
            figures=False,
        )

    def list_failing(
        self,
        org_id: OrgId,
        ref: RepoRef,
        *,
        start: datetime,
        end: datetime,
        size: int,
        token: str,
    ) -> TestPage:
        if end <= start:
            raise InvalidInput("invalid_field", "end_time must be after start_time")
        if end - start > MAX_FAILING_RANGE:
            raise InvalidInput(
                "invalid_field", "start_time and end_time must be at most 7 days apart"
            )
        return self._listing(
            org_id,
            ref,
            ("list-failing-tests", start.isoformat(), end.isoformat()),
            size=size,
            token=token,
            fetch=lambda store, repo, _s, offset, limit: store.page_failing(
                repo.id, start, end, offset=offset, limit=limit
            ),
            figures=True,
        )

    def list_quarantined(self, org_id: OrgId, ref: RepoRef, *, size: int, token: str) -> TestPage:
        return self._listing(
            org_id,
            ref,
            ("list-quarantined-tests",),
            size=size,
            token=token,
            fetch=lambda store, repo, settings, offset, limit: (
                store.page_quarantined(repo.id, settings, offset=offset, limit=limit),
                store.count_quarantined(repo.id, settings),
            ),
            figures=False,
        )

    def details(self, org_id: OrgId, ref: RepoRef, test_id: str) -> TestDetails:
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            test = uow.flaky.test(repository.id, test_id)
            if test is None:
                raise NotFound("test_not_found", f"test {test_id} is not known in {ref}")
            settings = uow.flaky.settings(repository.id)
            (view,) = self._views(uow.flaky_listings, repository, settings, [test], figures=True)
            history = uow.flaky_listings.status_history(repository.id, test.id)
            return TestDetails(view, tuple(history), settings.quarantine)

    def board(
        self,
        org_id: OrgId,
        ref: RepoRef,
        *,
        kinds: Collection[BoardKind],
        owner: str = "",
        search: str = "",
    ) -> TestBoard:
        """The repository's flaky, broken and quarantined tests that pass the filters."""
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            settings = uow.flaky.settings(repository.id)
            store = uow.flaky_listings
            read: dict[str, TestCase] = {}
            truncated = False
            for status in (TestStatus.FLAKY, TestStatus.BROKEN):
                page = store.page_by_status(repository.id, status, offset=0, limit=BOARD_LIMIT + 1)
                truncated |= len(page) > BOARD_LIMIT
                read.update((test.id, test) for test in page[:BOARD_LIMIT])
            quarantined = store.page_quarantined(
                repository.id, settings, offset=0, limit=BOARD_LIMIT + 1
            )
            truncated |= len(quarantined) > BOARD_LIMIT
            read.update((test.id, test) for test in quarantined[:BOARD_LIMIT])
            ordered = sorted(read.values(), key=lambda test: test.status_at, reverse=True)
            views = self._views(store, repository, settings, ordered, figures=False)
        kept = [v for v in views if matches(v, kinds=kinds, owner=owner, search=search)]
        return TestBoard(tuple(kept), truncated)

    def daily(self, org_id: OrgId, ref: RepoRef, test_id: str) -> list[DailyRuns]:
        """The test's runs and failures per day over the last `CHART_DAYS` days, today last."""
        today = self._clock().replace(hour=0, minute=0, second=0, microsecond=0)
        days = [today - timedelta(days=back) for back in range(CHART_DAYS - 1, -1, -1)]
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            totals = uow.flaky_listings.daily_totals(repository.id, test_id, days)
        return [DailyRuns(day, *totals.get(day, (0, 0))) for day in days]

    def _listing(
        self,
        org_id: OrgId,
        ref: RepoRef,
        query: tuple[str, ...],
        *,
        size: int,
        token: str,
        fetch: Callable[
            [FlakyListings, Repository, FlakySettings, int, int], tuple[Sequence[TestCase], int]
        ],
        figures: bool,
    ) -> TestPage:
        size = page_size_of(size)
        tokens = self._tokens()
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            fingerprint = tokens.fingerprint(repository.id, size, *query)
            offset = tokens.offset(fingerprint, token)
            settings = uow.flaky.settings(repository.id)
            # The page and how many there are in all.
            tests, total = fetch(uow.flaky_listings, repository, settings, offset, size)
            views = self._views(uow.flaky_listings, repository, settings, tests, figures=figures)
        page = tokens.page(fingerprint, offset=offset, size=size, total=total)
        return TestPage(tuple(views), page)

    def _views(
        self,
        store: FlakyListings,
        repository: Repository,
        settings: FlakySettings,
        tests: Sequence[TestCase],
        *,
        figures: bool,
    ) -> list[TestView]:
        now = self._clock()
        ids = [test.id for test in tests]
        impacted = store.pull_requests_impacted(repository.id, ids, now - WEEK)
        rates = store.failure_rates(repository.id, ids, now=now) if figures else {}
        failures = store.failure_counts(repository.id, ids, now - WEEK) if figures else {}
        views = []
        for test in tests:
            rate = rates.get(test.id)
            views.append(
                TestView(
                    test=test,
                    repository=repository,
                    quarantined=is_quarantined(
                        settings.quarantine, test.quarantine_override, test.status
                    ),
                    ticket_url=ticket_url(settings, test.ticket),
                    pull_requests_impacted_last_7d=impacted.get(test.id, 0),
                    failure_rate_last_7d=(_rate(rate.failures_7d, rate.runs_7d) if rate else 0.0)
                    if figures
                    else None,
                    failure_rate_last_24h=(_rate(rate.failures_24h, rate.runs_24h) if rate else 0.0)
                    if figures
                    else None,
                    most_common_failures=tuple(mine_templates(failures.get(test.id, [])))
                    if figures
                    else None,
                )
            )
        return views


def _rate(failures: int, runs: int) -> float:
    return failures / runs if runs else 0.0
