"""Core values to wire bodies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta

from keepgreen.app.explain import Check, Evidence, Explanation
from keepgreen.app.testing import TestRunDetails
from keepgreen.core.enums import CommitState, TestRunStatus
from keepgreen.core.model import Incident, Queue, QueueEntry, QueueSnapshot, RepoRef, TestRun
from keepgreen.core.priority import DEFAULT_PRIORITY_NAME
from keepgreen.core.queue_analytics import QueueAnalytics
from keepgreen.core.scheduler import adaptive
from keepgreen.web.schemas import (
    BisectionOut,
    CheckOut,
    ChosenOut,
    EnqueuedPullRequest,
    EvidenceOut,
    ExplanationOut,
    IncidentOut,
    LeftOut,
    QueueAnalyticsOut,
    QueueConfigOut,
    QueueOut,
    ReadinessOut,
    RunOut,
    SpreadOut,
    StatusCheck,
    SubmittedPullRequest,
    TestedPullRequest,
    TestingDetails,
    WireRunStatus,
)
from keepgreen.web.wire import iso


def queue_config(queue: Queue, *, default_label: str) -> QueueConfigOut:
    """The queue's configuration as getQueue answers it; `default_label` is the instance's
    label that submits a PR on GitHub, which a queue without its own answers.
    """
    config = queue.config
    return QueueConfigOut(
        state=queue.state,
        branch=queue.branch,
        concurrency=config.concurrency,
        testingTimeoutMinutes=config.testing_timeout_minutes,
        mode=queue.mode,
        canOptimisticallyMerge=config.can_optimistically_merge,
        pendingFailureDepth=config.pending_failure_depth,
        batch=config.batch,
        batchingMaxWaitTimeMinutes=config.batching_max_wait_time_minutes,
        batchingMinSize=config.batching_min_size,
        createPrsForTestingBranches=config.create_prs_for_testing_branches,
        commentsEnabled=config.comments_enabled,
        commandsEnabled=config.commands_enabled,
        statusCheckEnabled=config.status_check_enabled,
        bisectionConcurrency=config.bisection_concurrency,
        requiredStatuses=list(config.required_statuses or ()),
        directMergeMode=config.direct_merge_mode,
        optimizationMode=config.optimization_mode,
        mergeMethod=config.merge_method,
        checkStartTimeoutMinutes=config.check_start_timeout_minutes,
        adaptiveTestingTimeout=config.adaptive_testing_timeout,
        stallMinutes=config.stall_minutes,
        acceptSkippedChecks=config.accept_skipped_checks,
        maxRetries=config.max_retries,
        flakyFailures=config.flaky_failures,
        bisectBesideQueue=config.bisect_beside_queue,
        adaptiveBatchSize=config.adaptive_batch_size,
        adaptiveDepth=config.adaptive_depth,
        notReadyTimeoutHours=config.not_ready_timeout_hours,
        enqueueingLabel=config.enqueueing_label or default_label,
        labelCommandsEnabled=config.label_commands_enabled,
        allowedBotSubmitters=list(config.allowed_bot_submitters),
        stateLabelsEnabled=config.state_labels_enabled,
        extensionEnabled=config.extension_enabled,
        testBranchConstructionMode=config.test_branch_construction_mode,
        batchingRules=[json.loads(rule) for rule in config.batching_rules],
    )


def queue_snapshot(snapshot: QueueSnapshot, *, default_label: str) -> QueueOut:
    waiting = [i for i in snapshot.incidents if i.is_open and i.pr_number is None]
    waiting_on = snapshot.waiting_on or (waiting[0].message if waiting else None)
    stalled = snapshot.stalled_since
    return QueueOut(
        **queue_config(snapshot.queue, default_label=default_label).model_dump(),
        enqueuedPullRequests=[enqueued(entry) for entry in snapshot.entries],
        waitingOn=waiting_on,
        stateReason="stalled" if stalled is not None else None,
        stalledSince=iso(stalled) if stalled is not None else None,
        incidents=[incident_out(incident) for incident in snapshot.incidents],
        chosen=chosen_out(snapshot.queue),
    )


def chosen_out(queue: Queue) -> ChosenOut:
    chosen = adaptive.chosen(queue)
    return ChosenOut(
        batchSize=chosen.batch_size,
        depth=chosen.depth,
        testingTimeoutMinutes=round(chosen.testing_timeout_minutes, 2),
        failureRate=None if chosen.failure_rate is None else round(chosen.failure_rate, 4),
        spuriousShare=round(chosen.spurious_share, 4),
        p95CiMinutes=None if chosen.p95_ci_minutes is None else round(chosen.p95_ci_minutes, 2),
        why=chosen.why,
    )


def incident_out(incident: Incident) -> IncidentOut:
    return IncidentOut(
        kind=incident.kind,
        message=incident.message,
        prNumber=incident.pr_number,
        startedAt=iso(incident.started_at),
        lastFailureAt=iso(incident.last_failure_at),
        endedAt=None if incident.ended_at is None else iso(incident.ended_at),
        failures=incident.failures,
    )


def enqueued(entry: QueueEntry) -> EnqueuedPullRequest:
    return EnqueuedPullRequest(
        id=entry.id,
        state=entry.state,
        stateChangedAt=iso(entry.state_changed_at),
        priorityValue=entry.priority.value,
        priorityName=entry.priority.name,
        usedDefaultPriorityName=DEFAULT_PRIORITY_NAME,
        skipTheLine=entry.priority.skips_the_line,
        noBatch=entry.no_batch,
        prNumber=entry.number,
        prTitle=entry.title,
        prSha=entry.head_sha,
        prBaseBranch=entry.base_branch,
        prAuthor=entry.author,
    )


def submitted(
    entry: QueueEntry,
    incidents: Sequence[Incident] = (),
    *,
    explanation: Explanation | None = None,
) -> SubmittedPullRequest:
    readiness = entry.readiness
    return SubmittedPullRequest(
        **enqueued(entry).model_dump(),
        readiness=ReadinessOut(
            hasImpactedTargets=readiness.has_impacted_targets,
            requiresImpactedTargets=readiness.requires_impacted_targets,
            doesBaseBranchMatch=readiness.does_base_branch_match,
            gitHubMergeability=readiness.mergeability,
        ),
        forceEnqueued=entry.force_enqueued,
        isCurrentlySubmittedToQueue=entry.is_submitted,
        verifiedByTestRun=entry.verified_by_test_run,
        incidents=[incident_out(incident) for incident in incidents],
        explanation=None if explanation is None else explanation_out(explanation),
    )


def explanation_out(explanation: Explanation) -> ExplanationOut:
    return ExplanationOut(
        progress=explanation.progress,
        verdict=explanation.verdict,
        title=explanation.title,
        summary=explanation.summary,
        detailsUrl=explanation.details_url,
        reasonCode=explanation.reason_code,
        evidence=evidence_out(explanation.evidence),
    )


def evidence_out(evidence: Evidence) -> EvidenceOut:
    bisection = evidence.bisection
    return EvidenceOut(
        testRun=None if evidence.test_run is None else run_out(evidence.test_run),
        checks=[check_out(check) for check in evidence.checks],
        failedStatuses=[check_out(check) for check in evidence.failed_statuses],
        passedRun=None if evidence.passed_run is None else run_out(evidence.passed_run),
        bisection=None
        if bisection is None
        else BisectionOut(
            batchRun=bisection.batch_run,
            isolatingRun=bisection.isolating_run,
            culprits=list(bisection.culprits),
        ),
    )


def run_out(run: TestRun) -> RunOut:
    # The chain links are the predicted branch in order, dependents first: the last ones are
    # the tested PRs (empty before the test commit is built).
    tested = [link.number for link in run.chain[len(run.chain) - len(run.tested_prs) :]]
    return RunOut(
        id=run.id,
        kind=run.kind,
        status=run.status,
        branch=run.branch,
        sha=run.sha,
        baseSha=run.base_sha,
        testedPrs=tested if run.chain else [],
        startedAt=None if run.started_at is None else iso(run.started_at),
        finishedAt=None if run.finished_at is None else iso(run.finished_at),
        attempt=run.attempt,
        failureReason=None if run.failure_reason is None else run.failure_reason.value,
        failureDetail=run.failure_detail,
    )


def check_out(check: Check) -> CheckOut:
    return CheckOut(
        context=check.context,
        state=check.state,
        description=check.description,
        targetUrl=check.target_url,
    )


def pull_request_url(repo: RepoRef, number: int) -> str:
    return f"https://{repo.host}/{repo.owner}/{repo.name}/pull/{number}"


def testing_details(details: TestRunDetails) -> TestingDetails:
    run = details.run
    repo = details.repository.ref
    return TestingDetails(
        requiredStatuses=list(details.required_statuses),
        requiredStatusesSource=details.required_statuses_source,
        testBranch=run.branch,
        testBranchSha=run.sha or "",
        createdAt=iso(run.created_at),
        status=wire_run_status(run.status),
        checkSuites=[],
        statusChecks=[
            # Always a string: a strict client reads `url` as one; "" when the status had none.
            StatusCheck(context=s.context, url=s.target_url or "", state=_upper(s.state))
            for s in details.statuses
        ],
        testedPullRequests=[
            TestedPullRequest(
                prNumber=e.number, prUrl=pull_request_url(repo, e.number), title=e.title
            )
            for e in details.tested
        ],
        impactedTargets=(
            None if details.impacted_targets is None else list(details.impacted_targets)
        ),
        impactedTargetsForTestedPrs=(
            None
            if details.impacted_targets_for_tested is None
            else list(details.impacted_targets_for_tested)
        ),
        dependentPrs=[e.number for e in details.dependent],
    )


def wire_run_status(status: TestRunStatus) -> WireRunStatus:
    """A run's status in the interface's enum: a bisection run waiting for its slot
    (keepgreen's `queued`) is in progress to a client.
    """
    return _WIRE_RUN_STATUS[status]


_WIRE_RUN_STATUS: dict[TestRunStatus, WireRunStatus] = {
    TestRunStatus.QUEUED: "in_progress",
    TestRunStatus.IN_PROGRESS: "in_progress",
    TestRunStatus.SUCCEEDED: "succeeded",
    TestRunStatus.FAILED: "failed",
    TestRunStatus.CANCELLED: "cancelled",
}


def _upper(state: CommitState) -> str:
    """The interface's status states are GitHub's (ERROR, FAILURE, PENDING, SUCCESS): a check
    that concluded skipped or neutral is shown as GitHub shows it, a success.
    """
    if state in (CommitState.SKIPPED, CommitState.NEUTRAL):
        return "SUCCESS"
    return state.value.upper()


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else delta.total_seconds()


def queue_analytics(figures: QueueAnalytics) -> QueueAnalyticsOut:
    return QueueAnalyticsOut(
        startTime=iso(figures.start),
        endTime=iso(figures.end),
        bucketSeconds=int(figures.bucket.total_seconds()),
        merged=figures.merged,
        mergedPerBucket=list(figures.merged_per_bucket),
        timeInQueueSeconds={
            part: SpreadOut(p50=_seconds(spread.p50), p95=_seconds(spread.p95))
            for part, spread in figures.time_in_queue.items()
        },
        left=[
            LeftOut(
                state=key.partition("/")[0],
                reason=key.partition("/")[2],
                count=count,
                perBucket=list(figures.left_per_bucket[key]),
            )
            for key, count in sorted(figures.left.items(), key=lambda item: -item[1])
        ],
        testRuns=figures.runs,
        testRunsPerMergedPr=figures.runs_per_merged_pr,
        testRunsSavedByBatching=figures.runs_saved_by_batching,
        retries=figures.retries,
        flakyFailuresForgiven=figures.flaky_failures_forgiven,
    )
