"""The keepgreen_* metrics as recorded: what each verb counts, and what the exposition holds."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from keepgreen.app.telemetry import PoolStats, RunTransition, Telemetry
from keepgreen.core.enums import PrState, StateReason, TestRunKind, TestRunStatus
from keepgreen.core.ids import PullRequestId, QueueId, TestRunId
from keepgreen.core.model import StateChange, TestRun

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def sample(telemetry: Telemetry, name: str, **labels: str) -> float:
    value = telemetry.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def change(
    before: PrState | None, after: PrState, reason: StateReason, number: int = 1
) -> StateChange:
    return StateChange(PullRequestId(f"pr-{number}"), QueueId("q"), before, after, reason, NOW)


def run(status: TestRunStatus, kind: TestRunKind = TestRunKind.MAIN) -> TestRun:
    return TestRun(
        id=TestRunId("run-1"),
        queue_id=QueueId("q"),
        kind=kind,
        status=status,
        branch="keepgreen-merge/pr-1/run-1",
        base_sha="0" * 40,
        sha=None,
        tested_prs=(PullRequestId("pr-1"),),
        dependent_prs=(),
        required_statuses=("ci",),
        created_at=NOW,
    )


def test_pr_changes_count_by_conclusion_and_reason() -> None:
    telemetry = Telemetry()
    telemetry.decided(
        [
            change(None, PrState.NOT_READY, StateReason.SUBMITTED),
            change(PrState.NOT_READY, PrState.PENDING, StateReason.READY),
            change(PrState.TESTS_PASSED, PrState.MERGED, StateReason.MERGED_BY_QUEUE),
            change(PrState.TESTING, PrState.FAILED, StateReason.TESTS_FAILED, 2),
            change(PrState.TESTING, PrState.FAILED, StateReason.TEST_RUN_TIMEOUT, 3),
            change(PrState.PENDING, PrState.CANCELLED, StateReason.PUSHED_TO, 4),
            change(PrState.TESTING, PrState.PENDING, StateReason.RESTART_REQUESTED, 5),
        ],
        [],
    )
    assert sample(telemetry, "keepgreen_prs_submitted_total") == 1
    assert sample(telemetry, "keepgreen_prs_merged_total", reason="merged_by_queue") == 1
    assert sample(telemetry, "keepgreen_prs_merged_total", reason="merged_directly") == 0
    assert sample(telemetry, "keepgreen_prs_failed_total", reason="tests_failed") == 1
    assert sample(telemetry, "keepgreen_prs_failed_total", reason="test_run_timeout") == 1
    assert sample(telemetry, "keepgreen_prs_cancelled_total", reason="pushed_to") == 1
    assert sample(telemetry, "keepgreen_pr_restarts_total", reason="restart_requested") == 1


def test_runs_count_when_they_start_testing_and_when_they_stop() -> None:
    """A queued bisection run is not testing yet; a run made and ended in one decision never
    tested: neither counts, so finished never exceeds started.
    """
    telemetry = Telemetry()
    queued = run(TestRunStatus.QUEUED, TestRunKind.BISECTION)
    testing = replace(queued, status=TestRunStatus.IN_PROGRESS)
    telemetry.decided([], [RunTransition(None, queued)])
    assert sample(telemetry, "keepgreen_test_runs_started_total", kind="bisection") == 0
    telemetry.decided([], [RunTransition(queued, testing)])
    assert sample(telemetry, "keepgreen_test_runs_started_total", kind="bisection") == 1
    failed = replace(testing, status=TestRunStatus.FAILED)
    telemetry.decided([], [RunTransition(testing, failed)])
    finished = "keepgreen_test_runs_finished_total"
    assert sample(telemetry, finished, kind="bisection", result="failed") == 1

    telemetry.decided([], [RunTransition(None, run(TestRunStatus.IN_PROGRESS))])
    telemetry.decided([], [RunTransition(None, run(TestRunStatus.CANCELLED))])
    assert sample(telemetry, "keepgreen_test_runs_started_total", kind="main") == 1
    assert sample(telemetry, finished, kind="main", result="cancelled") == 0


def test_label_values_stay_in_closed_sets() -> None:
    """A git subcommand or an HTTP method keepgreen does not know shares one `other` label, so
    a strange value cannot grow the number of series.
    """
    telemetry = Telemetry()
    telemetry.git_call("rev-parse", 0.01, "ok")
    telemetry.git_call("--git-dir=/srv/secret", 0.01, "exit_nonzero")
    telemetry.http_request(route="/v1/getQueue", method="BREW", status=405, seconds=0.001)
    assert sample(telemetry, "keepgreen_git_calls_total", operation="rev-parse", result="ok") == 1
    assert (
        sample(telemetry, "keepgreen_git_calls_total", operation="other", result="exit_nonzero")
        == 1
    )
    assert "/srv/secret" not in telemetry.exposition().decode()
    assert (
        sample(
            telemetry,
            "keepgreen_http_requests_total",
            route="/v1/getQueue",
            method="other",
            status="405",
        )
        == 1
    )


def test_exposition_has_no_created_series_and_the_pool_when_watched() -> None:
    telemetry = Telemetry()
    telemetry.watch_pool(lambda: PoolStats(size=5, checked_out=2, idle=3, overflow=1))
    telemetry.worker_pass(0.2, ok=True)
    text = telemetry.exposition().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert not [name for name in families if name.endswith("_created")]
    assert families["keepgreen_db_pool_checked_out_connections"].samples[0].value == 2
    assert families["keepgreen_db_pool_overflow_connections"].samples[0].value == 1
    passes = families["keepgreen_worker_pass_duration_seconds"].samples
    assert {s.name: s.value for s in passes if not s.name.endswith("_bucket")} == {
        "keepgreen_worker_pass_duration_seconds_count": 1.0,
        "keepgreen_worker_pass_duration_seconds_sum": 0.2,
    }


def test_each_telemetry_has_its_own_registry() -> None:
    """Containers (one per test) never share counters."""
    first, second = Telemetry(), Telemetry()
    first.lease("acquired")
    assert sample(first, "keepgreen_lease_changes_total", change="acquired") == 1
    assert sample(second, "keepgreen_lease_changes_total", change="acquired") == 0
