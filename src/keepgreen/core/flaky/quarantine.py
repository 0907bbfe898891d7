"""Quarantine: whether a test's failures are forgiven (field notes §1.7).

Only flaky tests are quarantined automatically; a broken test fails the build until someone
sets ALWAYS for it. NEVER wins over the automatic rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from keepgreen.core.flaky.monitors import TestStatus


class QuarantineOverride(StrEnum):
    """A person's decision for one test; wire values are Trunk's upper-case names."""

    ALWAYS = "ALWAYS_QUARANTINE"  # quarantined whatever its status (while quarantine is on)
    NEVER = "NEVER_QUARANTINE"  # never quarantined, even when flaky


@dataclass(frozen=True, slots=True)
class QuarantineSettings:
    """A repository's switches: quarantining on at all, and auto-quarantine of flaky tests."""

    enabled: bool = False
    auto_quarantine_flaky: bool = True


def is_quarantined(
    settings: QuarantineSettings, override: QuarantineOverride | None, status: TestStatus
) -> bool:
    if not settings.enabled:
        return False
    if override is QuarantineOverride.ALWAYS:
        return True
    if override is QuarantineOverride.NEVER:
        return False
    return settings.auto_quarantine_flaky and status is TestStatus.FLAKY


def is_forgivable(
    settings: QuarantineSettings, override: QuarantineOverride | None, status: TestStatus
) -> bool:
    """Whether a merge queue may put a failure of this test down to the test rather than the
    code: the test is quarantined, or known flaky without a person's NEVER.

    A broken test (it fails every time) is a real failure unless someone quarantined it;
    NEVER says its failures always count, so it wins over a flaky status here as well.
    """
    if is_quarantined(settings, override, status):
        return True
    return status is TestStatus.FLAKY and override is not QuarantineOverride.NEVER
