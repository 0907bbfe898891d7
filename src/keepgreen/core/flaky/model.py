"""Test cases as the flaky-test service knows them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from keepgreen.core.flaky.monitors import ManualFlag, MonitorState, TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride
from keepgreen.core.ids import RepositoryId


@dataclass(frozen=True, slots=True)
class TestCase:
    """One test of one repository (and variant), with its current status."""

    __test__ = False

    id: str
    repository_id: RepositoryId
    name: str
    classname: str | None
    parent: str | None
    file: str | None
    variant: str
    status: TestStatus
    status_reason: str
    status_at: datetime
    first_seen_at: datetime
    last_seen_at: datetime
    monitors: Mapping[str, MonitorState] = field(default_factory=dict)
    manual_flag: ManualFlag | None = None
    quarantine_override: QuarantineOverride | None = None
    quarantine_override_at: datetime | None = None
    ticket: str | None = None
    codeowners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One change of a test's status value, kept as its history."""

    test_case_id: str
    at: datetime
    status: TestStatus
    reason: str
