"""Quarantine: whether a test's failures are forgiven (field notes §1.7).

Flaky tests are quarantined automatically unless the repository turns that off; broken tests
only when the repository turns that on (off by default, as the hosted service does: a test that
always fails is a real failure). A person's ALWAYS puts any test in and NEVER keeps any out,
whatever the automatic rules say.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from keepgreen.core.flaky.monitors import TestStatus


class QuarantineOverride(StrEnum):
    """A person's decision for one test; wire values are Trunk's upper-case names."""

    ALWAYS = "ALWAYS_QUARANTINE"  # quarantined whatever its status (while quarantine is on)
    NEVER = "NEVER_QUARANTINE"  # never quarantined, even when flaky or broken


@dataclass(frozen=True, slots=True)
class QuarantineSettings:
    """A repository's switches: quarantining on at all, and which unhealthy statuses it
    quarantines without a person's override.
    """

    enabled: bool = False
    auto_quarantine_flaky: bool = True
    # Off by default: Trunk's hosted service stopped auto-quarantining broken tests (field
    # notes §1.7), and a test that fails every time usually means the code is wrong.
    auto_quarantine_broken: bool = False

    def is_automatic(self, status: TestStatus) -> bool:
        """Whether a test of this status is quarantined without an override (while on)."""
        match status:
            case TestStatus.FLAKY:
                return self.auto_quarantine_flaky
            case TestStatus.BROKEN:
                return self.auto_quarantine_broken
            case TestStatus.HEALTHY:
                return False
            case _ as unreachable:
                assert_never(unreachable)


def is_quarantined(
    settings: QuarantineSettings, override: QuarantineOverride | None, status: TestStatus
) -> bool:
    """Whether the test's failures are quarantined now: never while quarantining is off;
    otherwise as its override says, and without one as the automatic rule for its status says.
    The store's SQL (`adapters/db/flaky_rows.quarantined`) encodes the same rule.
    """
    if not settings.enabled:
        return False
    if override is QuarantineOverride.ALWAYS:
        return True
    if override is QuarantineOverride.NEVER:
        return False
    return settings.is_automatic(status)


def is_forgivable(
    settings: QuarantineSettings, override: QuarantineOverride | None, status: TestStatus
) -> bool:
    """Whether a merge queue may put a failure of this test down to the test rather than the
    code: the test is quarantined, or known flaky without a person's NEVER.

    A broken test (it fails every time) is a real failure unless it is quarantined (by a
    person's ALWAYS, or automatically where the repository quarantines broken tests);
    NEVER says its failures always count, so it wins over a flaky status here as well.
    """
    if is_quarantined(settings, override, status):
        return True
    return status is TestStatus.FLAKY and override is not QuarantineOverride.NEVER
