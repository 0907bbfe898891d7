"""Which tests are quarantined, and which failures a merge queue may put down to the test:
quarantine off quarantines nothing; a person's ALWAYS puts any test in and NEVER keeps any out;
otherwise a flaky test is in while auto-quarantine of flaky tests is on (the default) and a
broken one while auto-quarantine of broken tests is on (off by default). A flaky test's failure
is forgivable even unquarantined, unless a person said NEVER.
"""

from __future__ import annotations

import itertools

import pytest

from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import (
    QuarantineOverride,
    QuarantineSettings,
    is_forgivable,
    is_quarantined,
)

OFF = QuarantineSettings(enabled=False)
ON = QuarantineSettings(enabled=True, auto_quarantine_flaky=True)
ON_BY_HAND = QuarantineSettings(enabled=True, auto_quarantine_flaky=False)
ON_BROKEN_TOO = QuarantineSettings(enabled=True, auto_quarantine_broken=True)
ON_BROKEN_ONLY = QuarantineSettings(
    enabled=True, auto_quarantine_flaky=False, auto_quarantine_broken=True
)
ALWAYS, NEVER = QuarantineOverride.ALWAYS, QuarantineOverride.NEVER
HEALTHY, FLAKY, BROKEN = TestStatus.HEALTHY, TestStatus.FLAKY, TestStatus.BROKEN

# Every repository setting, override and status: the rule is small enough to check whole.
EVERY_SETTING = [
    QuarantineSettings(enabled=enabled, auto_quarantine_flaky=flaky, auto_quarantine_broken=broken)
    for enabled, flaky, broken in itertools.product((False, True), repeat=3)
]
EVERY_OVERRIDE: list[QuarantineOverride | None] = [None, ALWAYS, NEVER]
EVERY_CASE = list(itertools.product(EVERY_SETTING, EVERY_OVERRIDE, list(TestStatus)))


def test_the_defaults_quarantine_flaky_tests_but_not_broken_ones() -> None:
    settings = QuarantineSettings()
    assert (settings.enabled, settings.auto_quarantine_flaky) == (False, True)
    assert settings.auto_quarantine_broken is False
    turned_on = QuarantineSettings(enabled=True)
    assert is_quarantined(turned_on, None, FLAKY)
    assert not is_quarantined(turned_on, None, BROKEN)


@pytest.mark.parametrize(
    ("settings", "override", "status", "quarantined"),
    [
        (OFF, ALWAYS, BROKEN, False),  # quarantine off: nothing is quarantined
        (QuarantineSettings(auto_quarantine_broken=True), None, BROKEN, False),
        (ON, None, FLAKY, True),
        (ON, None, BROKEN, False),  # broken tests stay out by default
        (ON, None, HEALTHY, False),
        (ON, ALWAYS, BROKEN, True),
        (ON_BY_HAND, None, FLAKY, False),
        (ON_BROKEN_TOO, None, BROKEN, True),
        (ON_BROKEN_TOO, None, FLAKY, True),
        (ON_BROKEN_TOO, None, HEALTHY, False),  # a healthy test only by a person's ALWAYS
        (ON_BROKEN_TOO, NEVER, BROKEN, False),  # NEVER keeps a broken test out
        (ON_BROKEN_ONLY, None, BROKEN, True),
        (ON_BROKEN_ONLY, None, FLAKY, False),
        (ON_BROKEN_ONLY, ALWAYS, FLAKY, True),
    ],
)
def test_quarantined_tests(
    settings: QuarantineSettings,
    override: QuarantineOverride | None,
    status: TestStatus,
    quarantined: bool,
) -> None:
    assert is_quarantined(settings, override, status) is quarantined


@pytest.mark.parametrize(("settings", "override", "status"), EVERY_CASE)
def test_overrides_win_over_every_automatic_rule(
    settings: QuarantineSettings, override: QuarantineOverride | None, status: TestStatus
) -> None:
    quarantined = is_quarantined(settings, override, status)
    if not settings.enabled:
        assert not quarantined
    elif override is ALWAYS:
        assert quarantined
    elif override is NEVER:
        assert not quarantined
    else:
        assert quarantined is settings.is_automatic(status)
    # Whatever is quarantined is forgivable; NEVER makes nothing forgivable.
    assert not quarantined or is_forgivable(settings, override, status)
    assert override is not NEVER or not is_forgivable(settings, override, status)


@pytest.mark.parametrize(
    ("settings", "status", "automatic"),
    [
        (ON, FLAKY, True),
        (ON, BROKEN, False),
        (ON_BY_HAND, FLAKY, False),
        (ON_BROKEN_TOO, BROKEN, True),
        (ON_BROKEN_TOO, HEALTHY, False),
    ],
)
def test_which_statuses_are_quarantined_automatically(
    settings: QuarantineSettings, status: TestStatus, automatic: bool
) -> None:
    assert settings.is_automatic(status) is automatic


@pytest.mark.parametrize(
    ("settings", "override", "status", "forgivable"),
    [
        (OFF, None, HEALTHY, False),
        (OFF, None, FLAKY, True),  # known flaky counts without quarantine
        (OFF, None, BROKEN, False),
        (OFF, ALWAYS, BROKEN, False),  # quarantine off: nothing is quarantined
        (OFF, NEVER, FLAKY, False),  # a person said its failures always count
        (ON, None, FLAKY, True),
        (ON, None, BROKEN, False),  # auto-quarantine of broken tests is off by default
        (ON, ALWAYS, BROKEN, True),  # broken and quarantined by the team
        (ON, ALWAYS, HEALTHY, True),
        (ON, NEVER, FLAKY, False),
        (ON_BY_HAND, None, FLAKY, True),
        (ON_BY_HAND, ALWAYS, HEALTHY, True),
        (ON_BY_HAND, None, HEALTHY, False),
        (ON_BROKEN_TOO, None, BROKEN, True),  # broken, and the repository quarantines those
        (ON_BROKEN_TOO, NEVER, BROKEN, False),
        (QuarantineSettings(auto_quarantine_broken=True), None, BROKEN, False),  # off
    ],
)
def test_forgivable_failures(
    settings: QuarantineSettings,
    override: QuarantineOverride | None,
    status: TestStatus,
    forgivable: bool,
) -> None:
    assert is_forgivable(settings, override, status) is forgivable
