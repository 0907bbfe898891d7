"""Merge-queue endpoints of API v1: queues, pull requests, testing details, commit statuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from keepgreen.app.errors import InvalidInput
from keepgreen.app.pull_requests import QueueTarget
from keepgreen.app.queues import QueueUpdate
from keepgreen.core.ids import OrgId, PullRequestId
from keepgreen.core.model import RepoRef, canonical_json
from keepgreen.core.priority import (
    Priority,
    PriorityError,
    priority_from_name,
    priority_from_value,
)
from keepgreen.web.auth import (
    ForkRunClaim,
    Org,
    OrgOrForkRun,
    Services,
    Snapshots,
    org_of_fork_run,
)
from keepgreen.web.presenters import (
    enqueued,
    queue_analytics,
    queue_config,
    queue_snapshot,
    submitted,
    testing_details,
)
from keepgreen.web.schemas import (
    CreateQueueRequest,
    Empty,
    ListPullRequestsRequest,
    PrLookupRequest,
    PrRequest,
    PullRequestList,
    QueueAnalyticsOut,
    QueueAnalyticsRequest,
    QueueConfigOut,
    QueueOut,
    QueueRequest,
    RepoIn,
    SetCommitStatusRequest,
    SetImpactedTargetsRequest,
    SubmitRequest,
    SubmittedPullRequest,
    TestingDetails,
    TestingDetailsRequest,
    UpdateQueueRequest,
    error_responses,
)
from keepgreen.web.snapshots import pr_key, queue_key, snapshot_answer, to_json

router = APIRouter(tags=["merge queue"])

READ = error_responses(400, 401, 404, 413)
POLLED = {304: {"description": "Not modified: If-None-Match named the current ETag"}, **READ}
WRITE = error_responses(400, 401, 404, 409, 413)
SUBMIT = error_responses(400, 401, 404, 409, 413, 503)
_ALL_TARGETS = frozenset({"ALL", "IMPACTS_ALL"})


def repo_ref(repo: RepoIn) -> RepoRef:
    return RepoRef(repo.host, repo.owner, repo.name)


def utc_since(moment: datetime | None) -> datetime | None:
    """`since` in UTC (naive means UTC); a moment beyond what UTC datetimes can hold (e.g.
    9999-12-31T23:59-23:59) is clamped to the first or last one, which selects the same PRs.
    """
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        end = datetime.max.replace(tzinfo=UTC)
        return end if moment.year == end.year else datetime.min.replace(tzinfo=UTC)


def _before(moment: datetime, period: timedelta) -> datetime:
    """`period` before `moment`, or the first UTC datetime when that is earlier still."""
    first = datetime.min.replace(tzinfo=UTC)
    return moment - period if moment - first >= period else first


def target_of(org_id: OrgId, body: QueueRequest) -> QueueTarget:
    return QueueTarget(org_id, repo_ref(body.repo), body.targetBranch)


def parse_priority(body: SubmitRequest) -> Priority | None:
    """The submitted priority: skipTheLine wins, then a number or a name; None keeps the
    current one (or the default for a new submission).
    """
    if body.skipTheLine:
        return priority_from_value(0)
    value = body.priority
    try:
        if value is None:
            return None
        if isinstance(value, bool):
            raise PriorityError("must be a number 0-255 or a name")
        if isinstance(value, int):
            return priority_from_value(value)
        if value.strip().isdigit():
            return priority_from_value(int(value.strip()))
        return priority_from_name(value)
    except PriorityError as error:
        raise InvalidInput("invalid_field", f"priority: {error}") from error


@router.post("/submitPullRequest", response_model=Empty, responses=SUBMIT)
async def submit_pull_request(body: SubmitRequest, org: Org, services: Services) -> dict[str, Any]:
    """Submit a pull request to a merge queue; resubmitting updates its priority and noBatch."""
    target, priority = target_of(org, body), parse_priority(body)
    prs = services.pull_requests
    # A resubmit that changes nothing is one read, made here (a hop to the thread pool costs
    # more); anything else is a transaction, in the thread pool.
    if not prs.changes_nothing(target, body.pr.number, priority=priority, no_batch=body.noBatch):
        await run_in_threadpool(
            prs.submit, target, body.pr.number, priority=priority, no_batch=body.noBatch
        )
    return {}


@router.post("/cancelPullRequest", response_model=Empty, responses=WRITE)
def cancel_pull_request(body: PrRequest, org: Org, services: Services) -> dict[str, Any]:
    """Cancel a pull request in a merge queue (404 when it is not in the queue)."""
    services.pull_requests.cancel(target_of(org, body), body.pr.number)
    return {}


@router.post("/restartTestsOnPullRequest", response_model=Empty, responses=WRITE)
def restart_tests(body: PrRequest, org: Org, services: Services) -> dict[str, Any]:
    """Restart tests on a pull request that is testing or waiting on a failure."""
    services.pull_requests.restart(target_of(org, body), body.pr.number)
    return {}


@router.post("/setImpactedTargets", response_model=Empty, responses=WRITE)
def set_impacted_targets(
    body: SetImpactedTargetsRequest, caller: OrgOrForkRun, services: Services
) -> dict[str, Any]:
    """Set the impacted targets of a PR head: a list of names, or "ALL".

    A PR from a fork, whose CI has no secrets, may send `x-forked-workflow-run-id:
    <github.run_id>` instead of the token when keepgreen is connected as a GitHub App: the
    run must be a running workflow run of this repository, from a fork, on `pr.sha`.
    """
    org = (
        org_of_fork_run(services, caller, repo=repo_ref(body.repo), sha=body.pr.sha)
        if isinstance(caller, ForkRunClaim)
        else caller
    )
    targets: tuple[str, ...] | None
    if isinstance(body.impactedTargets, str):
        if body.impactedTargets.strip().upper() not in _ALL_TARGETS:
            raise InvalidInput(
                "invalid_field", 'impactedTargets must be a list of strings or the string "ALL"'
            )
        targets = None
    else:
        targets = tuple(body.impactedTargets)
    services.pull_requests.set_impacted_targets(
        target_of(org, body), body.pr.number, body.pr.sha, targets
    )
    return {}


@router.post("/getSubmittedPullRequest", response_model=SubmittedPullRequest, responses=POLLED)
async def get_submitted_pull_request(
    body: PrLookupRequest, org: Org, services: Services, snapshots: Snapshots, request: Request
) -> Response:
    """A pull request submitted to the queue, with its state, priority and readiness; named by
    its number, or by its branch (the PR from it in the queue, else the last one that left).
    The answer carries an ETag; sent back as If-None-Match, it gets 304 while the PR is
    unchanged.
    """
    current = services.queues.version(org, repo_ref(body.repo), body.targetBranch)
    target = target_of(org, body)
    number = body.pr.number
    if number is None:
        assert body.pr.branch is not None  # noqa: S101 - the schema asks for one of the two
        number = services.pull_requests.number_from_branch(target, body.pr.branch)

    def build() -> tuple[int, bytes]:
        explained = services.pull_requests.get_explained(target, number)
        answer = submitted(explained.entry, explained.incidents, explanation=explained.explanation)
        return explained.queue_version, to_json(answer)

    key = pr_key(current.queue_id, number)
    return snapshot_answer(request, await snapshots.answer(key, current.version, build))


@router.post(
    "/listPullRequests",
    response_model=PullRequestList,
    responses=READ,
    response_model_exclude_none=True,  # nextCursor is absent on the last page
)
def list_pull_requests(
    body: ListPullRequestsRequest, org: Org, services: Services
) -> PullRequestList:
    """Pull requests of a queue in submission order, optionally by state or concluded since."""
    since = utc_since(body.since)
    page = services.pull_requests.list(
        target_of(org, body),
        state=body.state,
        concluded_since=since,
        cursor=None if body.cursor is None else PullRequestId(body.cursor),
        take=body.take,
    )
    return PullRequestList(
        pullRequests=[enqueued(entry) for entry in page.entries], nextCursor=page.next_cursor
    )


@router.post(
    "/getMergeQueueTestingDetails",
    response_model=TestingDetails,
    responses=READ,
    response_model_exclude_none=True,  # impacted targets appear only once uploaded
)
def get_testing_details(
    body: TestingDetailsRequest, org: Org, services: Services
) -> TestingDetails:
    """What a test run (the UUID of its testing branch) is testing, and its statuses."""
    return testing_details(
        services.testing.details(org, repo_ref(body.repo), body.targetBranch, body.testRunId)
    )


@router.post("/createQueue", response_model=Empty, responses=WRITE)
def create_queue(body: CreateQueueRequest, org: Org, services: Services) -> dict[str, Any]:
    """Create a queue for a branch (409 if it exists); configure it with updateQueue."""
    services.queues.create(
        org, repo_ref(body.repo), body.targetBranch, mode=body.mode, concurrency=body.concurrency
    )
    return {}


def queue_update_of(body: UpdateQueueRequest) -> QueueUpdate:
    """The service's update from an `updateQueue` body (the API's and the settings page's)."""
    return QueueUpdate(
        state=body.state,
        mode=body.mode,
        concurrency=body.concurrency,
        bisection_concurrency=body.bisectionConcurrency,
        testing_timeout_minutes=body.testingTimeoutMinutes,
        pending_failure_depth=body.pendingFailureDepth,
        can_optimistically_merge=body.canOptimisticallyMerge,
        batch=body.batch,
        batching_max_wait_time_minutes=body.batchingMaxWaitTimeMinutes,
        batching_min_size=body.batchingMinSize,
        create_prs_for_testing_branches=body.createPrsForTestingBranches,
        comments_enabled=body.commentsEnabled,
        commands_enabled=body.commandsEnabled,
        status_check_enabled=body.statusCheckEnabled,
        direct_merge_mode=body.directMergeMode,
        optimization_mode=body.optimizationMode,
        merge_method=body.mergeMethod,
        required_statuses=(None if body.requiredStatuses is None else tuple(body.requiredStatuses)),
        delete_required_statuses=bool(body.deleteRequiredStatuses),
        check_start_timeout_minutes=body.checkStartTimeoutMinutes,
        adaptive_testing_timeout=body.adaptiveTestingTimeout,
        stall_minutes=body.stallMinutes,
        accept_skipped_checks=body.acceptSkippedChecks,
        max_retries=body.maxRetries,
        flaky_failures=body.flakyFailures,
        bisect_beside_queue=body.bisectBesideQueue,
        adaptive_batch_size=body.adaptiveBatchSize,
        adaptive_depth=body.adaptiveDepth,
        not_ready_timeout_hours=body.notReadyTimeoutHours,
        enqueueing_label=body.enqueueingLabel,
        label_commands_enabled=body.labelCommandsEnabled,
        allowed_bot_submitters=_tuple_or_none(body.allowedBotSubmitters),
        state_labels_enabled=body.stateLabelsEnabled,
        extension_enabled=body.extensionEnabled,
        test_branch_construction_mode=body.testBranchConstructionMode,
        batching_rules=(
            None if body.batchingRules is None else tuple(map(canonical_json, body.batchingRules))
        ),
    )


def _tuple_or_none(values: list[str] | None) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)


@router.post("/updateQueue", response_model=QueueConfigOut, responses=WRITE)
def update_queue(body: UpdateQueueRequest, org: Org, services: Services) -> QueueConfigOut:
    """Change a queue's state, mode or settings; answers the whole configuration."""
    update = queue_update_of(body)
    updated = services.queues.update(org, repo_ref(body.repo), body.targetBranch, update)
    return queue_config(updated, default_label=services.settings.github_merge_label)


@router.post("/getQueue", response_model=QueueOut, responses=POLLED)
async def get_queue(
    body: QueueRequest, org: Org, services: Services, snapshots: Snapshots, request: Request
) -> Response:
    """A queue's configuration and its enqueued pull requests in queue order. The answer
    carries an ETag; sent back as If-None-Match, it gets 304 while the queue is unchanged.
    """
    ref = repo_ref(body.repo)
    current = services.queues.version(org, ref, body.targetBranch)

    def build() -> tuple[int, bytes]:
        built = services.queues.get(org, ref, body.targetBranch)
        return built.queue.version, to_json(
            queue_snapshot(built, default_label=services.settings.github_merge_label)
        )

    key = queue_key(current.queue_id)
    return snapshot_answer(request, await snapshots.answer(key, current.version, build))


@router.post("/getQueueAnalytics", response_model=QueueAnalyticsOut, responses=READ)
def get_queue_analytics(
    body: QueueAnalyticsRequest, org: Org, services: Services
) -> QueueAnalyticsOut:
    """A queue's figures over a period (default: the last 24 hours; at most 90 days): merges
    per hour (per day beyond 48 hours), time in queue p50/p95 split into waiting, testing and
    blocked, why PRs left, test runs per merged PR and runs saved by batching, retries and
    flaky failures forgiven.
    """
    end = utc_since(body.endTime) or services.dashboard.now()
    start = utc_since(body.startTime) or _before(end, timedelta(hours=24))
    return queue_analytics(
        services.dashboard.analytics(
            org, repo_ref(body.repo), body.targetBranch, start=start, end=end
        )
    )


@router.post("/deleteQueue", response_model=Empty, responses=WRITE)
def delete_queue(body: QueueRequest, org: Org, services: Services) -> dict[str, Any]:
    """Delete a queue; it must hold no submitted pull request (409 otherwise)."""
    services.queues.delete(org, repo_ref(body.repo), body.targetBranch)
    return {}


@router.post("/setCommitStatus", response_model=Empty, responses=WRITE)
def set_commit_status(body: SetCommitStatusRequest, org: Org, services: Services) -> dict[str, Any]:
    """Report a CI status for a commit; the last report per (repo, sha, context) wins."""
    services.statuses.set_commit_status(
        org,
        repo_ref(body.repo),
        sha=body.sha,
        context=body.context,
        state=body.state,
        target_url=body.targetUrl,
        description=body.description,
    )
    return {}
