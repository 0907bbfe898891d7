"""A repository's flaky-test settings, and their plain-dict form (stored as JSON, on the wire)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from keepgreen.core.flaky.monitors import (
    FailingStreak,
    FailureCount,
    FailureRate,
    MonitorSettings,
    PassOnRetry,
    TestStatus,
    default_settings,
)
from keepgreen.core.flaky.quarantine import QuarantineSettings


@dataclass(frozen=True, slots=True)
class FlakySettings:
    """Everything a repository configures about flaky tests."""

    monitors: MonitorSettings = field(default_factory=default_settings)
    quarantine: QuarantineSettings = field(default_factory=QuarantineSettings)
    ticket_url_template: str | None = None  # e.g. https://acme.atlassian.net/browse/{id}


def monitors_to_dict(settings: MonitorSettings) -> dict[str, Any]:
    retry = settings.pass_on_retry
    streak = settings.failing_streak
    return {
        "failing_streak": None
        if streak is None
        else {
            "enabled": streak.enabled,
            "runs": streak.runs,
            "branches": list(streak.branches),
        },
        "pass_on_retry": {
            "enabled": retry.enabled,
            "recovery_days": retry.recovery_days,
            "branches": list(retry.branches),
        },
        "failure_rate": [
            {
                "name": rate.name,
                "classification": rate.classification.value,
                "activation": rate.activation,
                "resolution": rate.resolution,
                "window_hours": rate.window_hours,
                "min_sample": rate.min_sample,
                "stale_hours": rate.stale_hours,
                "branches": list(rate.branches),
                "enabled": rate.enabled,
            }
            for rate in settings.failure_rates
        ],
        "failure_count": [
            {
                "name": count.name,
                "classification": count.classification.value,
                "failures": count.failures,
                "window_hours": count.window_hours,
                "resolution_hours": count.resolution_hours,
                "branches": list(count.branches),
                "enabled": count.enabled,
            }
            for count in settings.failure_counts
        ],
        "infrastructure_failure_share": settings.infrastructure_failure_share,
    }


def monitors_from_dict(data: dict[str, Any]) -> MonitorSettings:
    """The inverse of monitors_to_dict (input already validated)."""
    retry = data["pass_on_retry"]
    streak = data.get("failing_streak")
    return MonitorSettings(
        failing_streak=None
        if streak is None
        else FailingStreak(
            runs=streak["runs"], branches=tuple(streak["branches"]), enabled=streak["enabled"]
        ),
        pass_on_retry=PassOnRetry(
            enabled=retry["enabled"],
            recovery_days=retry["recovery_days"],
            branches=tuple(retry["branches"]),
        ),
        failure_rates=tuple(
            FailureRate(
                name=rate["name"],
                classification=TestStatus(rate["classification"]),
                activation=rate["activation"],
                resolution=rate["resolution"],
                window_hours=rate["window_hours"],
                min_sample=rate["min_sample"],
                stale_hours=rate["stale_hours"],
                branches=tuple(rate["branches"]),
                enabled=rate["enabled"],
            )
            for rate in data["failure_rate"]
        ),
        failure_counts=tuple(
            FailureCount(
                name=count["name"],
                classification=TestStatus(count["classification"]),
                failures=count["failures"],
                window_hours=count["window_hours"],
                resolution_hours=count["resolution_hours"],
                branches=tuple(count["branches"]),
                enabled=count["enabled"],
            )
            for count in data["failure_count"]
        ),
        infrastructure_failure_share=data["infrastructure_failure_share"],
    )
