"""Which failures a merge queue may put down to the test: quarantined tests, and flaky ones a
person did not mark NEVER; a broken test only when quarantined.
"""

from __future__ import annotations

import pytest

from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings, is_forgivable

OFF = QuarantineSettings(enabled=False)
ON = QuarantineSettings(enabled=True, auto_quarantine_flaky=True)
ON_BY_HAND = QuarantineSettings(enabled=True, auto_quarantine_flaky=False)
ALWAYS, NEVER = QuarantineOverride.ALWAYS, QuarantineOverride.NEVER
HEALTHY, FLAKY, BROKEN = TestStatus.HEALTHY, TestStatus.FLAKY, TestStatus.BROKEN


@pytest.mark.parametrize(
    ("settings", "override", "status", "forgivable"),
    [
        (OFF, None, HEALTHY, False),
        (OFF, None, FLAKY, True),  # known flaky counts without quarantine
        (OFF, None, BROKEN, False),
        (OFF, ALWAYS, BROKEN, False),  # quarantine off: nothing is quarantined
        (OFF, NEVER, FLAKY, False),  # a person said its failures always count
        (ON, None, FLAKY, True),
        (ON, None, BROKEN, False),  # auto-quarantine never covers broken tests
        (ON, ALWAYS, BROKEN, True),  # broken and quarantined by the team
        (ON, ALWAYS, HEALTHY, True),
        (ON, NEVER, FLAKY, False),
        (ON_BY_HAND, None, FLAKY, True),
        (ON_BY_HAND, ALWAYS, HEALTHY, True),
        (ON_BY_HAND, None, HEALTHY, False),
    ],
)
def test_forgivable_failures(
    settings: QuarantineSettings,
    override: QuarantineOverride | None,
    status: TestStatus,
    forgivable: bool,
) -> None:
    assert is_forgivable(settings, override, status) is forgivable
