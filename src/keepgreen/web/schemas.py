"""Request and response bodies of the merge-queue API, field for field as the interface has them.

Attribute names are the wire's camelCase names. Unknown request fields are ignored, so clients
written for newer or older revisions of the interface keep working.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from keepgreen.core.enums import (
    CommitState,
    DirectMergeMode,
    FlakyFailures,
    IncidentKind,
    Mergeability,
    MergeMethod,
    OptimizationMode,
    PrState,
    QueueMode,
    QueueState,
    TestBranchConstructionMode,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.limits import (
    DEFAULT_PAGE_TAKE,
    MAX_BATCHING_RULE_LENGTH,
    MAX_BATCHING_RULES,
    MAX_BOT_SUBMITTERS,
    MAX_HOURS,
    MAX_LABEL_LENGTH,
    MAX_REQUIRED_STATUSES,
    MAX_TEXT_LENGTH,
)
from keepgreen.core.model import canonical_json
from keepgreen.core.names import MAX_NAME_LENGTH, PLAIN_NAME_PATTERN, plain_name_problem
from keepgreen.web.wire import (
    AnyCase,
    BatchSize,
    Branch,
    Concurrency,
    Depth,
    Flag,
    Integer,
    Minutes,
    Name,
    NumberOrName,
    PlainName,
    PositivePrNumber,
    PrNumber,
    Retries,
    Sha,
    Take,
    refuse_lone_surrogates,
)


class Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Every field of every request body, in one place: a text that cannot be encoded is refused
    # at the edge, naming its field, before any other check or service sees it.
    @field_validator("*", mode="before")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        return refuse_lone_surrogates(value)


class Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests ------------------------------------------------------------------------------------


class RepoIn(Request):
    host: Name
    owner: Name
    name: Name


class PrIn(Request):
    number: PrNumber


class PrWithShaIn(Request):
    number: PositivePrNumber
    sha: Sha


class QueueRequest(Request):
    repo: RepoIn
    targetBranch: Branch


class QueueAnalyticsRequest(QueueRequest):
    """A period of a queue; without times, the 24 hours up to now."""

    startTime: datetime | None = None
    endTime: datetime | None = None


class PrRequest(QueueRequest):
    pr: PrIn


def _without_null(annotated: Any) -> WithJsonSchema:
    """The JSON schema of an `Annotated` type's own `WithJsonSchema` (no `null` added)."""
    found = next(m for m in annotated.__metadata__ if isinstance(m, WithJsonSchema))
    assert found.json_schema is not None  # noqa: S101 - every wire type declares its schema
    return WithJsonSchema(found.json_schema)


class PrLookupIn(Request):
    """A PR named by its number or by the branch it comes from (one of the two)."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["number"]}, {"required": ["branch"]}]}
    )

    # Absent, not null: the schema leaves `null` out, so that `oneOf` says exactly which
    # bodies are valid.
    number: Annotated[PrNumber | None, _without_null(PrNumber)] = None
    branch: Annotated[Branch | None, _without_null(Branch)] = None

    @model_validator(mode="after")
    def _one_of_two(self) -> PrLookupIn:
        if (self.number is None) == (self.branch is None):
            raise ValueError("give either pr.number or pr.branch, not both or neither")
        return self


class PrLookupRequest(QueueRequest):
    """getSubmittedPullRequest's body: the PR by number or by branch."""

    pr: PrLookupIn


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


PriorityIn = Annotated[
    int | str | None,
    NumberOrName,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": 255},
                {"type": "string", "enum": ["urgent", "high", "medium", "low"]},
                {"type": "null"},
            ]
        }
    ),
]


class SubmitRequest(PrRequest):
    priority: PriorityIn = None
    noBatch: Flag | None = None
    skipTheLine: Flag | None = Field(
        default=None, description="true submits with priority 0 (urgent)."
    )


# The pattern states the NUL rule in the schema; the validator enforces it with a clear message.
_NO_NUL = r"^[^\x00]*$"
TargetName = Annotated[
    StrictStr,
    Field(max_length=MAX_TEXT_LENGTH, json_schema_extra={"pattern": _NO_NUL}),
    AfterValidator(_without_nul),
]


class SetImpactedTargetsRequest(QueueRequest):
    pr: PrWithShaIn
    impactedTargets: Annotated[
        list[TargetName] | StrictStr,
        WithJsonSchema(
            {
                "anyOf": [
                    # Each target as TargetName states it: the NUL rule is the server's too.
                    {
                        "type": "array",
                        "items": {
                            "type": "string",
                            "maxLength": MAX_TEXT_LENGTH,
                            "pattern": _NO_NUL,
                        },
                    },
                    {"type": "string", "enum": ["ALL", "IMPACTS_ALL"]},
                ]
            }
        ),
    ]


class TestingDetailsRequest(QueueRequest):
    __test__ = False

    testRunId: Name


class CreateQueueRequest(QueueRequest):
    mode: Annotated[QueueMode, AnyCase] | None = None
    concurrency: Concurrency | None = None


RequiredStatuses = Annotated[
    list[PlainName],
    Field(max_length=MAX_REQUIRED_STATUSES),
]


def _label(value: str) -> str:
    problem = None if value == "" else plain_name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _rule(value: dict[str, Any]) -> dict[str, Any]:
    if len(canonical_json(value)) > MAX_BATCHING_RULE_LENGTH:
        raise ValueError(
            f"a batching rule is at most {MAX_BATCHING_RULE_LENGTH} characters of JSON"
        )
    return value


# "" puts the queue back on the instance's label. The schema says what `_label` accepts: ""
# or a plain name.
EnqueueingLabel = Annotated[
    StrictStr,
    Field(max_length=MAX_LABEL_LENGTH),
    AfterValidator(_label),
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": MAX_LABEL_LENGTH,
            "pattern": f"^(?:{PLAIN_NAME_PATTERN[1:-1]})?$",
        }
    ),
]
BotLogin = Annotated[
    StrictStr, Field(max_length=MAX_NAME_LENGTH, pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*(\[bot\])?$")
]
BatchingRule = Annotated[dict[str, Any], AfterValidator(_rule)]
Hours = Annotated[int, Field(ge=0, le=MAX_HOURS), Integer]


def _settable(state: QueueState) -> QueueState:
    if state is QueueState.SWITCHING_MODES:
        raise ValueError("switching_modes is set by keepgreen, not by clients")
    return state


SettableQueueState = Annotated[
    QueueState,
    AnyCase,
    AfterValidator(_settable),
    WithJsonSchema({"type": "string", "enum": ["running", "paused", "draining"]}),
]


class UpdateQueueRequest(QueueRequest):
    state: SettableQueueState | None = None
    mode: Annotated[QueueMode, AnyCase] | None = None
    concurrency: Concurrency | None = None
    bisectionConcurrency: Concurrency | None = None
    testingTimeoutMinutes: Minutes | None = None
    pendingFailureDepth: Depth | None = None
    canOptimisticallyMerge: Flag | None = None
    batch: Flag | None = None
    batchingMaxWaitTimeMinutes: Minutes | None = None
    batchingMinSize: BatchSize | None = None
    createPrsForTestingBranches: Flag | None = None
    commentsEnabled: Flag | None = None
    commandsEnabled: Flag | None = None
    statusCheckEnabled: Flag | None = None
    directMergeMode: Annotated[DirectMergeMode, AnyCase] | None = None
    optimizationMode: Annotated[OptimizationMode, AnyCase] | None = None
    mergeMethod: Annotated[MergeMethod, AnyCase] | None = None
    requiredStatuses: RequiredStatuses | None = None
    deleteRequiredStatuses: Flag | None = None
    # keepgreen's own settings (not in the interface).
    checkStartTimeoutMinutes: Minutes | None = None
    adaptiveTestingTimeout: Flag | None = None
    stallMinutes: Minutes | None = None
    acceptSkippedChecks: Flag | None = None
    maxRetries: Retries | None = None
    flakyFailures: Annotated[FlakyFailures, AnyCase] | None = None
    bisectBesideQueue: Flag | None = None
    adaptiveBatchSize: Flag | None = None
    adaptiveDepth: Flag | None = None
    # Answered by the hosted service beyond its published spec.
    notReadyTimeoutHours: Hours | None = None
    enqueueingLabel: EnqueueingLabel | None = None
    labelCommandsEnabled: Flag | None = None
    allowedBotSubmitters: Annotated[list[BotLogin], Field(max_length=MAX_BOT_SUBMITTERS)] | None = (
        None
    )
    stateLabelsEnabled: Flag | None = None
    extensionEnabled: Flag | None = None
    testBranchConstructionMode: Annotated[TestBranchConstructionMode, AnyCase] | None = None
    batchingRules: Annotated[list[BatchingRule], Field(max_length=MAX_BATCHING_RULES)] | None = None


class ListPullRequestsRequest(QueueRequest):
    state: Annotated[PrState, AnyCase] | None = None
    since: datetime | None = None
    cursor: Annotated[StrictStr, Field(max_length=64), AfterValidator(_without_nul)] | None = None
    take: Take = DEFAULT_PAGE_TAKE


# Stored as text: PostgreSQL text cannot hold a NUL, so none is accepted (on every backend).
StatusText = Annotated[
    StrictStr,
    Field(max_length=MAX_TEXT_LENGTH),
    AfterValidator(_without_nul),
    WithJsonSchema({"type": "string", "maxLength": MAX_TEXT_LENGTH, "pattern": r"^[^\x00]*$"}),
]


class SetCommitStatusRequest(Request):
    repo: RepoIn
    sha: Sha
    context: PlainName
    state: Annotated[CommitState, AnyCase]
    targetUrl: StatusText | None = None
    description: StatusText | None = None


# -- responses -----------------------------------------------------------------------------------


class Empty(Response):
    """What write verbs answer: `{}`."""


class ErrorDetail(Response):
    code: str
    message: str


class ErrorBody(Response):
    error: ErrorDetail


class EnqueuedPullRequest(Response):
    id: str
    state: PrState
    stateChangedAt: str
    priorityValue: int
    priorityName: str
    usedDefaultPriorityName: str
    skipTheLine: bool
    noBatch: bool
    prNumber: int
    prTitle: str
    prSha: str
    prBaseBranch: str
    prAuthor: str


class QueueConfigOut(Response):
    state: QueueState
    branch: str
    concurrency: int
    testingTimeoutMinutes: int
    mode: QueueMode
    canOptimisticallyMerge: bool
    pendingFailureDepth: int
    batch: bool
    batchingMaxWaitTimeMinutes: int
    batchingMinSize: int
    createPrsForTestingBranches: bool
    commentsEnabled: bool
    commandsEnabled: bool
    statusCheckEnabled: bool
    bisectionConcurrency: int
    requiredStatuses: list[str]
    directMergeMode: DirectMergeMode
    optimizationMode: OptimizationMode
    mergeMethod: MergeMethod
    # keepgreen's own settings (not in the interface).
    checkStartTimeoutMinutes: int
    adaptiveTestingTimeout: bool
    stallMinutes: int
    acceptSkippedChecks: bool
    maxRetries: int
    flakyFailures: FlakyFailures
    bisectBesideQueue: bool
    adaptiveBatchSize: bool
    adaptiveDepth: bool
    # Answered by the hosted service beyond its published spec.
    notReadyTimeoutHours: int
    enqueueingLabel: str
    labelCommandsEnabled: bool
    allowedBotSubmitters: list[str]
    stateLabelsEnabled: bool
    extensionEnabled: bool
    testBranchConstructionMode: TestBranchConstructionMode
    batchingRules: list[dict[str, Any]]


class IncidentOut(Response):
    """A fault of the queue's git server (keepgreen's own field; not in the interface)."""

    kind: IncidentKind
    message: str = Field(description="What happened, in one sentence without secrets.")
    prNumber: int | None = Field(description="The PR it concerns; null: the whole queue.")
    startedAt: str
    lastFailureAt: str
    endedAt: str | None = Field(description="null while the incident lasts.")
    failures: int = Field(description="Failed attempts during the incident.")


class ChosenOut(Response):
    """What the queue runs by now, chosen from its own record (keepgreen's own field)."""

    batchSize: int = Field(description="PRs per run now (1 without batching).")
    depth: int = Field(description="Main runs in flight at most now.")
    testingTimeoutMinutes: float = Field(description="When a run without a result times out.")
    failureRate: float | None = Field(
        description="The chance one PR fails a run (real or spurious), decayed over about the "
        "last 50 runs' PRs; null before 20 PRs were tested."
    )
    spuriousShare: float = Field(
        description="The estimated chance a failure is spurious, from the queue's retries (1/2 "
        "before any); what decides whether a failed run is retried."
    )
    p95CiMinutes: float | None = Field(
        description="The p95 of its last passed runs' CI time; null before 20 passed."
    )
    why: str = Field(description="What the adaptive settings chose by, in plain words.")


class QueueOut(QueueConfigOut):
    enqueuedPullRequests: list[EnqueuedPullRequest]
    waitingOn: str | None = Field(
        default=None,
        description="What keeps the queue from going on, in plain words (its git server "
        "unreachable, its branch missing; when stalled, what it waits on: a check that has "
        "not reported, a PR that is not ready; when paused with PRs in it, that it is "
        "paused); null when nothing does. keepgreen's own field.",
    )
    stateReason: Literal["stalled"] | None = Field(
        default=None,
        description="stalled: the queue holds PRs but neither started a test run nor merged "
        "a PR for its stallMinutes (waitingOn says what it waits on); null otherwise. A "
        "paused queue is never stalled. keepgreen's own field.",
    )
    stalledSince: str | None = Field(
        default=None,
        description="While stalled: since when the queue has not moved on (its last run "
        "started or PR merged, its oldest PR's submission or its last update, whichever is "
        "latest); null otherwise. keepgreen's own field.",
    )
    incidents: list[IncidentOut] = Field(
        default_factory=list,
        description="The queue's git server incidents, open or ended within a day, newest "
        "first. keepgreen's own field.",
    )
    chosen: ChosenOut | None = Field(
        default=None,
        description="What the queue runs by now (batch size, depth, testing timeout) and the "
        "record it chose them from. keepgreen's own field.",
    )


class ReadinessOut(Response):
    hasImpactedTargets: bool
    requiresImpactedTargets: bool
    doesBaseBranchMatch: bool
    gitHubMergeability: Mergeability


class CheckOut(Response):
    """One required check of a run as CI reported it (keepgreen's own shape)."""

    context: str
    state: CommitState | None = Field(description="null: CI never reported this check.")
    description: str | None
    targetUrl: str | None


class RunOut(Response):
    """A test run named as evidence (keepgreen's own shape)."""

    id: str
    kind: TestRunKind
    status: TestRunStatus
    branch: str
    sha: str | None = Field(description="The test commit; null before it was built.")
    baseSha: str = Field(description="The target branch tip it was built on.")
    testedPrs: list[int] = Field(
        description="The PRs it tested (on top of the PRs ahead), once its commit was built."
    )
    startedAt: str | None
    finishedAt: str | None
    attempt: int = Field(description="0 for a first run; n for its n-th retry.")
    failureReason: str | None = Field(
        description="Why it failed (a reason code), or why its failure was forgiven."
    )
    failureDetail: str | None = Field(
        description="What the reason alone does not say: the check that never started, the "
        "flaky tests that failed."
    )


class BisectionOut(Response):
    """The failed batch a PR was part of, and what bisecting it found."""

    batchRun: str = Field(description="The failed batch run the bisection started from.")
    isolatingRun: str | None = Field(
        description="The run that failed this PR alone, when bisection found it to be a culprit."
    )
    culprits: list[int] = Field(description="The PRs bisection failed, in the batch's order.")


class EvidenceOut(Response):
    """What the explanation rests on, as data (keepgreen's own shape)."""

    testRun: RunOut | None = Field(
        description="The run testing the PR now, or the one that decided it once it left."
    )
    checks: list[CheckOut] = Field(description="testRun's required checks as they stand.")
    failedStatuses: list[CheckOut] = Field(
        description="When testRun failed: its required checks that failed (or, after a "
        "timeout, that never passed), with their links."
    )
    passedRun: RunOut | None = Field(
        description="The run whose pass verified the PR (verifiedByTestRun): its own, or a "
        "successor's that tested it with PRs behind it (optimistic merge)."
    )
    bisection: BisectionOut | None = Field(
        description="For a PR of a failed batch: the bisection and the culprits it found."
    )


class ExplanationOut(Response):
    """What the PR waits on, or why it left, in plain words (keepgreen's own field)."""

    progress: Literal["queued", "in_progress", "completed"] = Field(
        description="queued: waits for its turn; in_progress: tested or being landed; "
        "completed: left the queue (see verdict)."
    )
    verdict: Literal["success", "failure", "cancelled"] | None = Field(
        description="Once it left: merged (success), failed, or cancelled; null before."
    )
    title: str = Field(description='One line: "Queued: position 2 of 5", "Failed: its tests '
                       'failed".')  # fmt: skip
    summary: str = Field(
        description="A few lines (Markdown): the run, each required check it waits on and "
        "since when, or the reason it left."
    )
    detailsUrl: str | None = Field(description="The CI run's page, when a check reported one.")
    reasonCode: str = Field(
        description="Why the PR last changed state, as a stable snake_case code (`tests_failed`, "
        "`bisecting`, `merged_by_queue`...): see the README for the list."
    )
    evidence: EvidenceOut


class SubmittedPullRequest(EnqueuedPullRequest):
    readiness: ReadinessOut
    forceEnqueued: bool
    isCurrentlySubmittedToQueue: bool
    verifiedByTestRun: str | None
    incidents: list[IncidentOut] = Field(
        default_factory=list,
        description="Git server incidents of its queue or of this PR since it was submitted, "
        "newest first (a refused landing, a server that could not be reached). keepgreen's "
        "own field.",
    )
    explanation: ExplanationOut | None = Field(
        default=None,
        description="What the PR waits on, or why it left, in plain words (the same words "
        "its GitHub check run shows). keepgreen's own field.",
    )


class PullRequestList(Response):
    pullRequests: list[EnqueuedPullRequest]
    nextCursor: str | None = Field(default=None, description="Absent on the last page.")


class CheckRun(Response):
    name: str
    url: str
    status: str
    conclusion: str | None = None


class CheckSuite(Response):
    checkRuns: list[CheckRun]


# The interface's run statuses (keepgreen's own `queued` is not one of them).
WireRunStatus = Literal["in_progress", "failed", "cancelled", "succeeded"]


class StatusCheck(Response):
    context: str
    url: str = Field(default="", description="the status's target URL; empty when it had none")
    state: str = Field(description="ERROR, FAILURE, PENDING or SUCCESS (uppercase, as GitHub's)")


class TestedPullRequest(Response):
    prNumber: int
    prUrl: str
    title: str


class TestingDetails(Response):
    __test__ = False

    requiredStatuses: list[str]
    requiredStatusesSource: str
    testBranch: str
    testBranchSha: str
    createdAt: str
    status: WireRunStatus = Field(
        description="A bisection run waiting for its slot is in_progress."
    )
    checkSuites: list[CheckSuite]
    statusChecks: list[StatusCheck]
    testedPullRequests: list[TestedPullRequest]
    impactedTargets: list[str] | None = None
    impactedTargetsForTestedPrs: list[str] | None = None
    dependentPrs: list[int]


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer."""
    descriptions = {
        400: "Invalid input; the message names the field",
        401: "Missing or unknown x-api-token",
        403: "The signed upload URL is not valid, or has expired",
        404: "Unknown repository, queue, pull request or test run",
        409: "The current state does not allow the operation",
        413: "Request body over 20 MiB",
        503: "The code host could not be read",
    }
    return {code: {"model": ErrorBody, "description": descriptions[code]} for code in codes}


class SpreadOut(Response):
    p50: float | None
    p95: float | None


class LeftOut(Response):
    state: str
    reason: str
    count: int
    perBucket: list[int]


class QueueAnalyticsOut(Response):
    """A queue's figures over a period (keepgreen's own call; the dashboard shows the same)."""

    startTime: str
    endTime: str
    bucketSeconds: int
    merged: int
    mergedPerBucket: list[int]
    timeInQueueSeconds: dict[str, SpreadOut]
    left: list[LeftOut]
    testRuns: int
    testRunsPerMergedPr: float | None
    testRunsSavedByBatching: int
    retries: int
    flakyFailuresForgiven: int
