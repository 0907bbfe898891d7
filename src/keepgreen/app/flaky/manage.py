"""What people change about flaky tests: settings, quarantine overrides, flags, tickets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from keepgreen.app.errors import NotFound
from keepgreen.app.flaky.detection import Detector
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from keepgreen.core.flaky.model import TestCase
from keepgreen.core.flaky.monitors import ManualFlag
from keepgreen.core.flaky.quarantine import QuarantineOverride
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef, Repository


@dataclass(frozen=True, slots=True)
class QuarantineConfig:
    """Trunk's getQuarantineConfig answer: quarantining off, or which of the asked ids are."""

    is_disabled: bool
    test_ids: tuple[str, ...]


class FlakyManageService:
    def __init__(
        self, unit_of_work: UnitOfWorkFactory, *, detector: Detector, clock: Clock
    ) -> None:
        self._unit_of_work = unit_of_work
        self._detector = detector
        self._clock = clock

    def settings(self, org_id: OrgId, ref: RepoRef) -> FlakySettings:
        with self._unit_of_work(read_only=True) as uow:
            return uow.flaky.settings(find_repository(uow, org_id, ref).id)

    def update_settings(self, org_id: OrgId, ref: RepoRef, settings: FlakySettings) -> None:
        """Store new settings and re-evaluate the unhealthy tests under them at once (a
        disabled or deleted monitor resolves straight away, as field notes §1.6 say).
        """
        now = self._clock()
        with self._unit_of_work() as uow:
            repository = find_repository(uow, org_id, ref)
            uow.flaky.save_settings(repository.id, settings, at=now)
            unhealthy = uow.flaky.unhealthy_ids(repository.id)
            self._detector.reevaluate(
                uow.flaky, repository.id, settings.monitors, unhealthy, now=now
            )
            uow.commit()

    def set_override(
        self, org_id: OrgId, ref: RepoRef, test_id: str, override: QuarantineOverride | None
    ) -> None:
        with self._unit_of_work() as uow:
            repository, test = self._test(uow, org_id, ref, test_id)
            uow.flaky.set_override(repository.id, test.id, override, at=self._clock())
            uow.commit()

    def flag(self, org_id: OrgId, ref: RepoRef, test_id: str, *, reason: str | None) -> None:
        """Flag a test flaky by hand (None clears the flag); its status follows at once."""
        now = self._clock()
        with self._unit_of_work() as uow:
            repository, test = self._test(uow, org_id, ref, test_id)
            flag = ManualFlag(reason, now) if reason is not None else None
            uow.flaky.set_manual_flag(repository.id, test.id, flag)
            monitors = uow.flaky.settings(repository.id).monitors
            self._detector.reevaluate(uow.flaky, repository.id, monitors, [test.id], now=now)
            uow.commit()

    def link_ticket(self, org_id: OrgId, ref: RepoRef, test_id: str, ticket: str) -> None:
        with self._unit_of_work() as uow:
            repository, test = self._test(uow, org_id, ref, test_id)
            uow.flaky.set_ticket(repository.id, test.id, ticket)
            uow.commit()

    def quarantine_config(
        self, org_id: OrgId, ref: RepoRef, test_ids: Sequence[str]
    ) -> QuarantineConfig:
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            settings = uow.flaky.settings(repository.id)
            if not settings.quarantine.enabled:
                return QuarantineConfig(is_disabled=True, test_ids=())
            found = uow.flaky.quarantined_ids(repository.id, settings, test_ids)
            quarantined = tuple(test_id for test_id in test_ids if test_id in found)
            return QuarantineConfig(is_disabled=False, test_ids=quarantined)

    @staticmethod
    def _test(
        uow: UnitOfWork, org_id: OrgId, ref: RepoRef, test_id: str
    ) -> tuple[Repository, TestCase]:
        repository = find_repository(uow, org_id, ref)
        test = uow.flaky.test(repository.id, test_id)
        if test is None:
            raise NotFound("test_not_found", f"test {test_id} is not known in {ref}")
        return repository, test
