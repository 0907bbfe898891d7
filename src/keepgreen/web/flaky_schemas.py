"""Request and response bodies of the flaky-test API, as trunk-openapi.json has them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainSerializer, StrictBool, StrictStr

from keepgreen.core.flaky.ci_runs import (
    CiProvider,
    ConclusionCause,
    RunConclusion,
    run_time_problem,
)
from keepgreen.core.limits import MAX_CI_RUN_ATTEMPT
from keepgreen.core.names import MAX_NAME_LENGTH
from keepgreen.web.schemas import RepoIn, Request, Response
from keepgreen.web.wire import AnyCase, Branch, Integer, Name, PositivePrNumber, Sha, iso

# Times leave as the merge-queue API writes them: UTC, milliseconds, a Z.
Timestamp = Annotated[datetime, PlainSerializer(iso, return_type=str, when_used="json")]
_NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError as error:
        raise ValueError("must be a UUID") from error


TestId = Annotated[
    StrictStr,
    Field(min_length=32, max_length=45, json_schema_extra={"format": "uuid"}),
    AfterValidator(_uuid),
]
Slug = Name  # an org slug is a name like any other
Text = Annotated[StrictStr, Field(max_length=2000, pattern=_NO_CONTROL)]
PageSize = Annotated[int, Field(ge=1, le=100), Integer]
CommitSha = Annotated[StrictStr, Field(min_length=7, max_length=64, pattern=r"^[0-9a-fA-F]+$")]


class PageQueryIn(Request):
    page_size: PageSize
    page_token: Annotated[StrictStr, Field(max_length=512)] = ""


class FlakyRequest(Request):
    repo: RepoIn
    org_url_slug: Slug


class ListUnhealthyRequest(FlakyRequest):
    page_query: PageQueryIn
    status: Annotated[Literal["flaky", "broken"], AnyCase] = Field(
        json_schema_extra={"enum": ["FLAKY", "BROKEN"]}
    )


class ListFailingRequest(FlakyRequest):
    start_time: datetime
    end_time: datetime
    page_query: PageQueryIn


class ListQuarantinedRequest(FlakyRequest):
    page_query: PageQueryIn


class TestDetailsRequest(FlakyRequest):
    __test__ = False

    test_id: TestId


class LinkTicketRequest(Request):
    test_case_id: TestId
    external_ticket_id: Annotated[
        StrictStr, Field(min_length=1, max_length=255, pattern=_NO_CONTROL)
    ]
    repo: RepoIn


class QuarantineOverrideRequest(FlakyRequest):
    test_id: TestId
    # null clears the override (the automatic rule applies again).
    setting: Annotated[Literal["always_quarantine", "never_quarantine"] | None, AnyCase] = Field(
        json_schema_extra={"enum": ["ALWAYS_QUARANTINE", "NEVER_QUARANTINE", None]}
    )


class FlagTestRequest(FlakyRequest):
    test_id: TestId
    flaky: StrictBool
    reason: Annotated[StrictStr, Field(max_length=256, pattern=_NO_CONTROL)] = ""


class SettingsRequest(FlakyRequest):
    pass


Globs = Annotated[
    list[Annotated[StrictStr, Field(min_length=1, max_length=255, pattern=_NO_CONTROL)]],
    Field(min_length=1, max_length=10),
]
Share = Annotated[float, Field(gt=0, le=1)]
Hours = Annotated[int, Field(ge=1, le=24 * 90), Integer]
MonitorName = Annotated[StrictStr, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


class PassOnRetryIn(Request):
    enabled: StrictBool = True
    recovery_days: Annotated[int, Field(ge=1, le=15), Integer] = 7
    branches: Globs = Field(default_factory=lambda: ["*"])


class FailingStreakIn(Request):
    enabled: StrictBool = True
    runs: Annotated[int, Field(ge=1, le=100), Integer] = 3
    branches: Globs = Field(default_factory=lambda: ["main", "master"])


class FailureRateIn(Request):
    name: MonitorName
    classification: Annotated[Literal["flaky", "broken"], AnyCase]
    activation: Share
    resolution: Share | None = None
    window_hours: Hours
    min_sample: Annotated[int, Field(ge=1, le=100_000), Integer]
    stale_hours: Hours | None = None
    branches: Globs = Field(default_factory=lambda: ["*"])
    enabled: StrictBool = True


class FailureCountIn(Request):
    name: MonitorName
    classification: Annotated[Literal["flaky", "broken"], AnyCase]
    failures: Annotated[int, Field(ge=1, le=100_000), Integer] = 1
    window_hours: Hours
    resolution_hours: Hours
    branches: Globs = Field(default_factory=lambda: ["*"])
    enabled: StrictBool = True


class MonitorsIn(Request):
    pass_on_retry: PassOnRetryIn = Field(default_factory=PassOnRetryIn)
    # Omitted, the default (3 runs on main/master); null turns it off.
    failing_streak: FailingStreakIn | None = Field(default_factory=FailingStreakIn)
    failure_rate: Annotated[list[FailureRateIn], Field(max_length=10)] = Field(default_factory=list)
    failure_count: Annotated[list[FailureCountIn], Field(max_length=10)] = Field(
        default_factory=list
    )
    infrastructure_failure_share: Share = 0.8


class QuarantineIn(Request):
    # Omitted, each takes its default (update-settings replaces every setting).
    enabled: StrictBool = False
    auto_quarantine_flaky: StrictBool = True
    auto_quarantine_broken: StrictBool = False


class FlakySettingsIn(Request):
    quarantine: QuarantineIn = Field(default_factory=QuarantineIn)
    monitors: MonitorsIn = Field(default_factory=MonitorsIn)
    ticket_url_template: (
        Annotated[
            StrictStr,
            Field(max_length=1000, pattern=r"^https?://[^\x00-\x20\x7f]*\{id\}[^\x00-\x20\x7f]*$"),
        ]
        | None
    ) = None


class UpdateSettingsRequest(FlakyRequest):
    settings: FlakySettingsIn


class UploadMetadataIn(Request):
    repo: RepoIn
    org_url_slug: Slug | None = None
    commit_sha: CommitSha
    branch: Branch
    pr_number: PositivePrNumber | None = None
    job_url: Text | None = None
    variant: Annotated[StrictStr, Field(max_length=64, pattern=_NO_CONTROL)] = ""
    run_id: Annotated[StrictStr, Field(max_length=255, pattern=_NO_CONTROL)] | None = None
    codeowners: Annotated[StrictStr, Field(max_length=1024 * 1024)] | None = None
    # The same as the Idempotency-Key header (which wins when both are sent).
    idempotency_key: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None


class TestIdentifierIn(Request):
    __test__ = False

    id: StrictStr = ""


class QuarantineConfigRequest(Request):
    repo: RepoIn
    orgUrlSlug: Slug | None = None
    testIdentifiers: Annotated[list[TestIdentifierIn], Field(max_length=100_000)] = Field(
        default_factory=list
    )


class CreateBundleUploadRequest(Request):
    """Trunk's uploader asking where to PUT its bundle (camelCase, as it sends it)."""

    repo: RepoIn
    orgUrlSlug: Slug | None = None
    clientVersion: Annotated[StrictStr, Field(max_length=1000)] | None = None
    remoteUrls: Annotated[
        list[Annotated[StrictStr, Field(max_length=2000)]], Field(max_length=100)
    ] = Field(default_factory=list)
    externalId: Annotated[StrictStr, Field(max_length=1000)] | None = None
    testCollectionShortId: Annotated[StrictStr, Field(max_length=100)] | None = None


def _run_time(moment: datetime) -> datetime:
    """A run's start or end in UTC (a time without a zone is UTC), within the bounds."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    problem = run_time_problem(moment)
    if problem is not None:
        raise ValueError(problem)
    return moment.astimezone(UTC)


RunTime = Annotated[datetime, AfterValidator(_run_time)]
# A provider's id of a run or job: "" is taken as none (it cannot tell runs apart).
ProviderId = Annotated[StrictStr, Field(max_length=MAX_NAME_LENGTH, pattern=_NO_CONTROL)]


class CreateCiRunRequest(FlakyRequest):
    """Trunk's create-ci-run: one run of one CI job, field for field as the spec has it."""

    ci_job_name: Name
    provider: Annotated[CiProvider, AnyCase] | None = None
    run_start: RunTime
    run_end: RunTime
    branch: Branch
    sha: Sha
    attempt: Annotated[int, Field(ge=0, le=MAX_CI_RUN_ATTEMPT), Integer]
    run_conclusion: Annotated[RunConclusion, AnyCase] | None = None
    run_conclusion_cause: Annotated[ConclusionCause, AnyCase] | None = None
    providers_job_id: ProviderId | None = None
    providers_run_id: ProviderId | None = None


class ListCiRunsRequest(FlakyRequest):
    """keepgreen's read of the runs create-ci-run stored, filtered by branch and commit."""

    branch: Branch | None = None
    sha: Sha | None = None
    page_query: PageQueryIn


# -- responses -------------------------------------------------------------------------------


class StatusOut(Response):
    value: Literal["healthy", "flaky", "broken"]
    reason: str
    timestamp: Timestamp


class FailureOut(Response):
    summary: str
    occurrence_count: int
    last_occurrence: Timestamp | None = None


class RepositoryLinkOut(Response):
    html_url: str


class TicketOut(Response):
    html_url: str


class TestOut(Response):
    __test__ = False

    id: str
    repository: RepositoryLinkOut
    html_url: str
    name: str
    variant: str
    status: StatusOut
    most_common_failures: list[FailureOut] | None = None
    failure_rate_last_7d: float | None = None
    failure_rate_last_24h: float | None = None
    file_path: str | None = None
    parent: str | None = None
    classname: str | None = None
    codeowners: list[str]
    pull_requests_impacted_last_7d: int
    quarantined: bool
    ticket: TicketOut | None = None


class PageOut(Response):
    total_rows: int
    total_pages: int
    next_page_token: str
    prev_page_token: str
    last_page_token: str
    page_index: int


class TestListOut(Response):
    __test__ = False

    tests: list[TestOut]
    page: PageOut


class StatusChangeOut(Response):
    value: Literal["healthy", "flaky", "broken"]
    reason: str
    timestamp: Timestamp


class TestDetailsOut(Response):
    __test__ = False

    test: TestOut
    # keepgreen's addition: how the status got here (oldest first).
    status_history: list[StatusChangeOut] | None = None


class QuarantinedTestOut(Response):
    name: str
    parent: str | None
    file: str | None
    classname: str | None
    status: Literal["HEALTHY", "FLAKY", "BROKEN"]
    codeowners: list[str]
    quarantine_setting: Literal["ALWAYS_QUARANTINE", "AUTO_QUARANTINE"]
    quarantined_at: Timestamp
    status_last_updated_at: Timestamp
    test_case_id: str
    variant: str


class QuarantinedListOut(Response):
    quarantined_tests: list[QuarantinedTestOut]
    page: PageOut


class FailedTestOut(Response):
    test_id: str
    name: str
    classname: str | None
    parent: str | None
    file: str | None
    quarantined: bool


class UploadSummaryOut(Response):
    upload_id: str
    files: int
    tests: int
    results: int
    passed: int
    failed: int
    skipped: int
    excluded_as_infrastructure_failure: bool
    quarantine_enabled: bool
    already_stored: bool = False  # a retried upload: this is the first one's answer
    failures: list[FailedTestOut]


class FlakySettingsOut(Response):
    settings: dict[str, Any]


class QuarantineConfigOut(Response):
    isDisabled: bool
    testIds: list[str]


class CreateBundleUploadOut(Response):
    """Where the bundle goes: `url` takes one PUT of it, for an hour, without the API token."""

    id: str
    idV2: str
    url: str
    key: str
    testCollectionBundleMetaId: str | None = None
    testCollectionBundleMetaCreatedAt: str | None = None


class CreateCiRunOut(Response):
    run_id: str


class CiRunOut(Response):
    run_id: str
    ci_job_name: str
    provider: CiProvider | None
    providers_run_id: str | None
    providers_job_id: str | None
    attempt: int
    branch: str
    sha: str
    run_start: Timestamp
    run_end: Timestamp
    run_conclusion: RunConclusion | None
    run_conclusion_cause: ConclusionCause | None
    reported_at: Timestamp  # when keepgreen first heard of the run
    updated_at: Timestamp  # and last


class CiRunListOut(Response):
    ci_runs: list[CiRunOut]
    page: PageOut
