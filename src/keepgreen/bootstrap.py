"""The composition root: builds the engine, adapters and services from settings, once."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from keepgreen.adapters.ci.runner import BuiltInRunner
from keepgreen.adapters.ci.sandbox import make_sandbox
from keepgreen.adapters.db.engine import (
    READ_ONLY_OPTION,
    folder_problem,
    migrate,
    open_engine,
    pool_stats,
)
from keepgreen.adapters.db.quick_reads import SqlQuickReads
from keepgreen.adapters.db.uow import SqlUnitOfWork
from keepgreen.adapters.db.wake import wake_channel
from keepgreen.adapters.git.local_host import LocalGitHost, local_path
from keepgreen.adapters.git.refnames import is_valid_ref_name
from keepgreen.adapters.git.remote_host import CodeHosts, RemoteGitHost, mirror_path
from keepgreen.adapters.git.survey import RepositorySurveyor
from keepgreen.adapters.github.client import CHECK_RUN_NAME, GithubAppClient
from keepgreen.adapters.github.sign_in import GithubSignIn
from keepgreen.adapters.junit import ReportError, TooManyResults, parse_report
from keepgreen.adapters.owners import OwnersFile, read_codeowners
from keepgreen.adapters.trunk import parse_test_report, read_bundle, read_uploader_report
from keepgreen.app.admin import AdminService
from keepgreen.app.dashboard import DashboardService
from keepgreen.app.engine import QueueEngine
from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.bundles import BundleUploadService
from keepgreen.app.flaky.ci_runs import CiRunService
from keepgreen.app.flaky.detection import Detector, Housekeeping
from keepgreen.app.flaky.ingest import IngestService, ResultLimitReached
from keepgreen.app.flaky.manage import FlakyManageService
from keepgreen.app.flaky.reads import FlakyReadService
from keepgreen.app.github.duties import GithubDuties
from keepgreen.app.github.events import GithubEvents
from keepgreen.app.github.feedback import GithubFeedbackPublisher
from keepgreen.app.github.fork_runs import ForkRuns
from keepgreen.app.github.host import GithubHost
from keepgreen.app.github.installations import GithubInstallations, github_host_name
from keepgreen.app.github.intake import WebhookIntake
from keepgreen.app.metrics import MetricsService
from keepgreen.app.ports import (
    Clock,
    IdFactory,
    MergeHost,
    UnitOfWork,
    UnitOfWorkFactory,
    WakeChannel,
)
from keepgreen.app.pull_requests import PullRequestService
from keepgreen.app.queue_history import QueueHistoryService
from keepgreen.app.queues import QueueService
from keepgreen.app.telemetry import Telemetry
from keepgreen.app.testing import StatusService, TestingService
from keepgreen.app.web_sessions import WebSessionService
from keepgreen.app.worker import Worker, WorkerSettings
from keepgreen.core.flaky.results import CaseResult
from keepgreen.core.model import Repository
from keepgreen.settings import Settings, SettingsError


def utc_now() -> datetime:
    """The system clock, timezone-aware UTC."""
    return datetime.now(UTC)


def new_uuid() -> str:
    return str(uuid.uuid4())


def parse_junit(filename: str, data: bytes, *, max_results: int) -> list[CaseResult]:
    """The JUnit parser, its refusals as the 400 that names the file."""
    try:
        return parse_report(filename, data, max_results=max_results)
    except TooManyResults:
        raise ResultLimitReached from None
    except ReportError as error:
        raise InvalidInput("invalid_report", f"file {error}") from error


class CodeOwnersFiles:
    """CODEOWNERS from an upload's text, or from the repository's default branch: HEAD of a
    local repository; for one on a git server, its mirror's `main` (or `master`), which the
    queue keeps fetched.
    """

    def __init__(self, *, telemetry: Telemetry, data_dir: Path) -> None:
        self._telemetry = telemetry
        self._data_dir = data_dir

    def from_text(self, text: str) -> OwnersFile:
        return OwnersFile.parse(text)

    def from_repository(self, repository: Repository) -> OwnersFile | None:
        path = local_path(repository.git_url)
        refs: tuple[str, ...] = ("HEAD",)
        if path is None:
            path = mirror_path(self._data_dir, str(repository.id))
            refs = ("refs/heads/main", "refs/heads/master")
        if not path.exists():
            return None
        for ref in refs:
            text = read_codeowners(path, ref, telemetry=self._telemetry)
            if text is not None:
                return OwnersFile.parse(text)
        return None


@dataclass(frozen=True, slots=True)
class Container:
    """Everything the entry points use; one per process (or per test)."""

    settings: Settings
    engine: Engine
    quick_reads: SqlQuickReads  # the token and queue-version reads of every polled request
    admin: AdminService
    queues: QueueService
    pull_requests: PullRequestService
    testing: TestingService
    statuses: StatusService
    metrics: MetricsService
    queue_history: QueueHistoryService  # a queue's recent workload, for `keepgreen simulate`
    unit_of_work: UnitOfWorkFactory
    worker: Worker
    runner: BuiltInRunner
    ingest: IngestService
    bundles: BundleUploadService  # Trunk's uploader: its upload URLs and bundles
    flaky: FlakyReadService
    flaky_manage: FlakyManageService
    ci_runs: CiRunService  # the CI runs CI reports (create-ci-run)
    dashboard: DashboardService  # what the web dashboard's merge-queue pages show
    web_sessions: WebSessionService  # dashboard sign-ins
    housekeeping: Housekeeping
    telemetry: Telemetry  # the keepgreen_* metrics of this process (GET /metrics)
    metrics_token: SecretStr | None  # opens GET /metrics; None: /metrics refuses everyone
    github_webhooks: WebhookIntake
    # Signs GitHub's deliveries; None: POST /webhooks/github answers 404 (no App configured).
    github_webhook_secret: SecretStr | None
    # The App's installations (`keepgreen github link`); None: no App configured.
    github_installations: GithubInstallations | None = None
    # A fork's workflow run in place of a token (setImpactedTargets); None: no App configured.
    fork_runs: ForkRuns | None = None
    # Wakes the workers of other processes (and this one's, when it serves).
    wake_channel: WakeChannel | None = None

    def close(self) -> None:
        self.runner.close(wait=False)
        self.quick_reads.close()
        if self.wake_channel is not None:
            self.wake_channel.close()
        self.engine.dispose()


def _waker(parts: dict[str, Worker], channel: WakeChannel) -> Callable[[], None]:
    """Wakes this process's worker (once built) and, through `channel`, those of others."""

    def wake() -> None:
        if "worker" in parts:
            parts["worker"].wake()
        channel.send()

    return wake


def github_sign_in(settings: Settings) -> GithubSignIn | None:
    """The dashboard's "Sign in with GitHub", when the App's OAuth client is configured."""
    client_secret = settings.github_client_secret()
    if client_secret is None or settings.github_client_id is None:
        return None
    return GithubSignIn(
        web_url=settings.github_web_url(),
        api_url=settings.github_api_url,
        client_id=settings.github_client_id,
        client_secret=client_secret,
    )


def bootstrap(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    new_id: IdFactory = new_uuid,
    code_host: MergeHost | None = None,
    run_migrations: bool = True,
) -> Container:
    """Build the container; migrations run first unless told otherwise.

    Raises SettingsError (DatabaseUnavailable for the database) when the data dir cannot be
    made or the database cannot be opened: one sentence, no password.
    """
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SettingsError(
            f"KEEPGREEN_DATA_DIR is {settings.data_dir}, which cannot be created: "
            f"{folder_problem(settings.data_dir, error)}"
        ) from error
    metrics_token = settings.metrics_token()  # a bad token file stops the start, not a scrape
    github_webhook_secret = settings.github_webhook_secret()
    telemetry = Telemetry()
    engine = open_engine(settings.resolved_database_url())
    telemetry.watch_pool(lambda: pool_stats(engine))
    if run_migrations:
        migrate(engine)
    sessions = sessionmaker(engine, expire_on_commit=False)
    read_sessions = sessionmaker(
        engine.execution_options(**{READ_ONLY_OPTION: True}), expire_on_commit=False
    )

    quick_reads = SqlQuickReads(engine)

    def unit_of_work(*, read_only: bool = False) -> UnitOfWork:
        return SqlUnitOfWork(read_sessions if read_only else sessions, new_id)

    github_key = settings.github_private_key()  # a bad key file stops the start
    if github_webhook_secret is not None and github_key is None:
        # Deliveries would be stored for a worker that cannot act on them.
        raise SettingsError(
            "KEEPGREEN_GITHUB_WEBHOOK_SECRET_FILE is set, but without KEEPGREEN_GITHUB_APP_ID "
            "and KEEPGREEN_GITHUB_PRIVATE_KEY_FILE keepgreen cannot act as the GitHub App: "
            "set them too, or unset the webhook secret"
        )
    github_api: GithubAppClient | None = None
    github_host: GithubHost | None = None
    publisher: GithubFeedbackPublisher | None = None
    remote = RemoteGitHost(data_dir=settings.data_dir, telemetry=telemetry)
    if github_key is not None and settings.github_app_id is not None:
        github_api = GithubAppClient(
            app_id=settings.github_app_id,
            private_key=github_key,
            api_url=settings.github_api_url,
            data_dir=settings.data_dir,
            clock=clock,
            telemetry=telemetry,
        )
        publisher = GithubFeedbackPublisher(unit_of_work, api=github_api, clock=clock)
        github_host = GithubHost(
            git=remote,
            api=github_api,
            reconcile_seconds=settings.github_reconcile_seconds,
            feedback=publisher,
        )
    host = (
        code_host
        if code_host is not None
        else CodeHosts(local=LocalGitHost(telemetry=telemetry), remote=remote, github=github_host)
    )
    queue_engine = QueueEngine(clock=clock, telemetry=telemetry)
    # The runner reports through the status service, which wakes the worker; the worker
    # starts the runner. Both exist before either is used, so tie them with a late lookup.
    parts: dict[str, Worker] = {}
    # The worker that reads what this process wrote may run in another process (the HTTP
    # processes of `serve --workers N`, a `keepgreen worker` beside the API).
    wakes = wake_channel(engine)
    wake = _waker(parts, wakes)

    statuses = StatusService(unit_of_work, clock=clock, wake=wake)
    detector = Detector()
    housekeeping = Housekeeping(
        unit_of_work,
        detector=detector,
        clock=clock,
        result_retention_days=settings.result_retention_days,
        rollup_retention_days=settings.rollup_retention_days,
    )
    runner = BuiltInRunner(
        data_dir=settings.data_dir,
        report=statuses.record,
        sandbox=make_sandbox(settings.ci_sandbox, readonly_paths=settings.readonly_paths()),
        max_parallel=settings.ci_parallel,
        telemetry=telemetry,
    )
    admin = AdminService(
        unit_of_work,
        clock=clock,
        new_id=new_id,
        locate=RepositorySurveyor(),
        check_ref=is_valid_ref_name,
        quick=quick_reads,
    )
    queues = QueueService(
        unit_of_work, engine=queue_engine, wake=wake, clock=clock, new_id=new_id, quick=quick_reads
    )
    pull_requests = PullRequestService(
        unit_of_work,
        code_host=host,
        engine=queue_engine,
        wake=wake,
        clock=clock,
        new_id=new_id,
        quick=quick_reads,
        first_entries=quick_reads,
    )
    installations: GithubInstallations | None = None
    duties: GithubDuties | None = None
    chores: list[Callable[[], object]] = [housekeeping.sweep, housekeeping.purge]
    if github_api is not None and publisher is not None and github_host is not None:
        installations = GithubInstallations(
            unit_of_work,
            api=github_api,
            admin=admin,
            queues=queues,
            clock=clock,
            host_name=github_host_name(settings.github_api_url),
        )
        duties = GithubDuties(
            api=github_api,
            events=GithubEvents(
                unit_of_work,
                api=github_api,
                installations=installations,
                pull_requests=pull_requests,
                statuses=statuses,
                clock=clock,
                merge_label=settings.github_merge_label,
                own_check_name=CHECK_RUN_NAME,
                wake=wake,
                forget=github_host.forget,
            ),
            installations=installations,
            publisher=publisher,
            reconcile_seconds=settings.github_reconcile_seconds,
        )
        chores.append(duties.sync_installations)
    worker = Worker(
        unit_of_work,
        engine=queue_engine,
        host=host,
        runner=runner,
        clock=clock,
        settings=WorkerSettings(
            holder=f"{socket.gethostname()}:{os.getpid()}:{new_uuid()[:8]}",
            lease_seconds=settings.worker_lease_seconds,
            heartbeat_seconds=settings.worker_heartbeat_seconds,
            poll_seconds=settings.worker_poll_seconds,
            chore_seconds=settings.flaky_sweep_seconds,
            git_retry_max_seconds=settings.git_retry_max_seconds,
            api_rest_ratio=settings.worker_api_rest_ratio,
            host=socket.gethostname(),
            pid=os.getpid(),
        ),
        chores=chores,
        recover=runner.recover,
        telemetry=telemetry,
        github=duties,
        wake_channel=wakes,
    )
    parts["worker"] = worker
    ingest = IngestService(
        unit_of_work,
        parse=parse_junit,
        parse_test_report=parse_test_report,
        owners=CodeOwnersFiles(telemetry=telemetry, data_dir=settings.data_dir),
        detector=detector,
        clock=clock,
        new_id=new_id,
        telemetry=telemetry,
    )
    return Container(
        settings=settings,
        engine=engine,
        quick_reads=quick_reads,
        wake_channel=wakes,
        admin=admin,
        queues=queues,
        pull_requests=pull_requests,
        testing=TestingService(unit_of_work, clock=clock),
        statuses=statuses,
        metrics=MetricsService(unit_of_work, clock=clock),
        queue_history=QueueHistoryService(unit_of_work, clock=clock),
        unit_of_work=unit_of_work,
        worker=worker,
        runner=runner,
        ingest=ingest,
        bundles=BundleUploadService(
            unit_of_work,
            ingest=ingest,
            read_bundle=read_bundle,
            read_uploader_report=read_uploader_report,
            clock=clock,
            new_id=new_id,
            telemetry=telemetry,
        ),
        flaky=FlakyReadService(unit_of_work, clock=clock),
        flaky_manage=FlakyManageService(unit_of_work, detector=detector, clock=clock),
        ci_runs=CiRunService(unit_of_work, clock=clock, new_id=new_id),
        dashboard=DashboardService(
            unit_of_work,
            clock=clock,
            queues=queues,
            pull_requests=pull_requests,
            logs=runner.read_log,
        ),
        web_sessions=WebSessionService(unit_of_work, clock=clock, github=github_sign_in(settings)),
        housekeeping=housekeeping,
        telemetry=telemetry,
        metrics_token=metrics_token,
        github_webhooks=WebhookIntake(unit_of_work, clock=clock, wake=wake),
        github_webhook_secret=github_webhook_secret,
        github_installations=installations,
        fork_runs=None if github_api is None else ForkRuns(unit_of_work, api=github_api),
    )


__all__ = ["Container", "bootstrap", "new_uuid", "utc_now"]
