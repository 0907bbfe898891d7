"""Uploads from Trunk's own uploader (trunk-analytics-cli, and the GitHub Action around it).

The uploader asks `createBundleUpload` for an upload URL, then PUTs its bundle there (a tar,
zstd-compressed: meta.json, the JUnit reports, internal.bin, CODEOWNERS). The URL is keepgreen's
own, signed (see upload_links), so the PUT needs no API token. The bundle is stored through the
ingest service exactly as a multipart upload is (same parser, limits and summary), with the
bundle id as its idempotency key: a second PUT of one URL stores nothing new.

Which commit, branch, PR and job a bundle is about is decided here, as Trunk decides it: the
commit the uploader resolved (the PR's head, not GitHub's merge commit), the CI's own variables
(captured in meta.json) for branch, PR and job, and the branch git named when the CI says none.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Literal, Protocol

import structlog

from keepgreen.app.errors import InvalidInput, NotFound
from keepgreen.app.flaky.ingest import IngestService, ReportFile, UploadMetadata, UploadSummary
from keepgreen.app.flaky.upload_links import UploadGrant, UploadLinks
from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, IdFactory, UnitOfWork, UnitOfWorkFactory
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.ci_env import detect_ci
from keepgreen.core.ids import OrgId
from keepgreen.core.limits import MAX_PR_NUMBER
from keepgreen.core.model import RepoRef
from keepgreen.core.names import branch_name_problem, normalize_sha

# How long an upload URL stays valid. The uploader asks for it after the tests ran and PUTs
# within seconds; an hour covers a slow network and its retries.
UPLOAD_URL_LIFETIME = timedelta(hours=1)
SECRET_NAME = "bundle-uploads"  # noqa: S105 (the name the secret is stored under, not a secret)
# The idempotency key of a bundle's upload: one key per upload URL.
IDEMPOTENCY_PREFIX = "trunk-bundle:"
MAX_VARIANT_CHARS = 64
MAX_JOB_URL_CHARS = 2000
MAX_RUN_ID_CHARS = 255
# The PR number's column: PostgreSQL's integer.
MAX_STORED_PR_NUMBER = min(MAX_PR_NUMBER, 2**31 - 1)
# Prefixes git puts before a branch name, removed as Trunk's uploader removes them
# (refs/remotes/pull/12/merge is GitHub's merge ref of PR 12, checked out detached).
_REF_PREFIXES = ("refs/heads/", "refs/remotes/origin/", "refs/remotes/", "refs/", "origin/")

UploaderOutcome = Literal["uploaded", "failed", "unreadable"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class BundleMeta:
    """What a bundle's meta.json says, as the uploader wrote it."""

    org: str  # the org slug the uploader was given
    repo: RepoRef  # repo.repo: what it parsed from the repository's remote URL
    head_sha: str  # repo.repo_head_sha, "" when it found none
    head_branch: str  # repo.repo_head_branch as git names it (refs/heads/main), or ""
    use_uncloned_repo: bool  # the branch was given by hand, and wins over the CI's
    envs: Mapping[str, str]  # the CI variables the uploader captured
    variant: str
    # The uploader's own view of the run, read but not trusted: keepgreen decides what failed
    # from the reports, and what is quarantined from its own settings.
    failed_test_ids: tuple[str, ...] = ()
    quarantined_test_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Bundle:
    meta: BundleMeta
    reports: tuple[ReportFile, ...]
    codeowners: str | None = None  # the CODEOWNERS file the bundle carries


class BundleReader(Protocol):
    """Reads a bundle from its body; raises InvalidInput naming the member and the problem for
    anything it cannot read or that passes a limit, having held no more than the limits allow.
    """

    def __call__(self, body: IO[bytes]) -> Bundle: ...


@dataclass(frozen=True, slots=True)
class UploaderReport:
    """What the uploader's telemetry says of one of its runs."""

    failed: bool
    reason: str


class UploaderReportReader(Protocol):
    """Reads the uploader's telemetry body; None when it cannot."""

    def __call__(self, body: bytes) -> UploaderReport | None: ...


@dataclass(frozen=True, slots=True)
class BundleTicket:
    """An upload URL's parts: the bundle id and the signed token its path carries."""

    bundle_id: str
    token: str
    expires_at: datetime


class BundleUploadService:
    def __init__(
        self,
        unit_of_work: UnitOfWorkFactory,
        *,
        ingest: IngestService,
        read_bundle: BundleReader,
        read_uploader_report: UploaderReportReader,
        clock: Clock,
        new_id: IdFactory,
        telemetry: Telemetry,
    ) -> None:
        self._unit_of_work = unit_of_work
        self._ingest = ingest
        self._read_bundle = read_bundle
        self._read_uploader_report = read_uploader_report
        self._clock = clock
        self._new_id = new_id
        self._telemetry = telemetry
        # The secret never changes once made: it is read from the database once per process.
        self._links: UploadLinks | None = None

    def _upload_links(self, uow: UnitOfWork) -> UploadLinks:
        if self._links is None:
            key = uow.flaky.secret(SECRET_NAME, secrets.token_hex(32))
            self._links = UploadLinks(bytes.fromhex(key))
        return self._links

    def create(self, org_id: OrgId, ref: RepoRef) -> BundleTicket:
        """An upload URL for one bundle into the org's repository (404 when it is not one)."""
        with self._unit_of_work() as uow:
            repository = find_repository(uow, org_id, ref)
            links = self._upload_links(uow)
            uow.commit()  # the secret, the first time one is asked for
        grant = UploadGrant(
            bundle_id=self._new_id(),
            org_id=org_id,
            repository_id=repository.id,
            ref=repository.ref,
            expires_at=self._clock() + UPLOAD_URL_LIFETIME,
        )
        log.info("bundle upload created", repo=str(ref), bundle=grant.bundle_id)
        return BundleTicket(grant.bundle_id, links.sign(grant), grant.expires_at)

    def admit(self, token: str) -> UploadGrant:
        """The grant of an upload URL's token; Forbidden (403) when it is forged or expired."""
        links = self._links
        if links is None:
            with self._unit_of_work() as uow:
                links = self._upload_links(uow)
                uow.commit()
        return links.verify(token, now=self._clock())

    def store(self, grant: UploadGrant, body: IO[bytes]) -> UploadSummary:
        """Reads the bundle and stores its reports as one upload, once per upload URL."""
        with self._unit_of_work(read_only=True) as uow:
            org = uow.orgs.get(grant.org_id)
            repository = uow.repositories.find(grant.org_id, grant.ref)
        if org is None or repository is None or repository.id != grant.repository_id:
            raise NotFound(
                "repository_not_found",
                f"repository {grant.ref} is no longer registered as it was when this upload "
                "URL was made",
            )
        bundle = self._read_bundle(body)
        meta = bundle.meta
        if meta.org != org.slug or meta.repo != grant.ref:
            raise InvalidInput(
                "bundle_mismatch",
                f"meta.json: the bundle is for org {meta.org!r}, repository {meta.repo}, but "
                f"the upload URL for org {org.slug!r}, repository {grant.ref}",
            )
        metadata = upload_metadata(
            meta,
            ref=grant.ref,
            key=IDEMPOTENCY_PREFIX + grant.bundle_id,
            codeowners=bundle.codeowners,
        )
        summary = self._ingest.upload(grant.org_id, org.slug, metadata, bundle.reports)
        # The uploader quarantined failures by ids it computed itself; ones keepgreen did not
        # see fail mean the two disagree on ids (or on what failed): worth an operator's look.
        failed_here = {failure.test_id for failure in summary.failures}
        unseen = [test_id for test_id in meta.quarantined_test_ids if test_id not in failed_here]
        log.info(
            "bundle upload stored" if not summary.repeated else "bundle upload already stored",
            repo=str(grant.ref),
            bundle=grant.bundle_id,
            upload=summary.upload_id,
            uploader_failed=len(meta.failed_test_ids),
            uploader_quarantined=len(meta.quarantined_test_ids),
        )
        if unseen:
            log.warning(
                "the uploader quarantined tests keepgreen did not see fail",
                repo=str(grant.ref),
                bundle=grant.bundle_id,
                count=len(unseen),
                example=unseen[0][:64],
            )
        return summary

    def note_uploader_report(self, body: bytes) -> None:
        """Counts one telemetry report of the uploader, and logs the failures it reports."""
        report = self._read_uploader_report(body)
        outcome: UploaderOutcome
        if report is None:
            outcome = "unreadable"
        elif report.failed:
            outcome = "failed"
            log.info("the uploader reported a failed upload", reason=report.reason[:200])
        else:
            outcome = "uploaded"
        self._telemetry.uploader_report(outcome)


def upload_metadata(
    meta: BundleMeta, *, ref: RepoRef, key: str, codeowners: str | None
) -> UploadMetadata:
    """The upload a bundle stands for: commit, branch, PR, job and variant (see the module)."""
    ci = detect_ci(meta.envs)
    sha = _commit_sha(meta.head_sha) or _commit_sha(ci.commit_sha)
    if sha is None:
        raise InvalidInput(
            "invalid_bundle",
            "meta.json: repo.repo_head_sha is not a commit sha (the uploader's "
            "--repo-head-sha sets it)",
        )
    named = _branch_name(meta.head_branch)
    branch = (named if meta.use_uncloned_repo else None) or ci.branch or named
    if not branch:
        raise InvalidInput(
            "invalid_bundle",
            "meta.json: the bundle names no branch, and its CI variables none either (the "
            "uploader's --repo-head-branch sets it)",
        )
    problem = branch_name_problem(branch)
    if problem is not None:
        raise InvalidInput(
            "invalid_bundle",
            f"meta.json: the branch {branch[:300]!r} {problem} (the uploader's "
            "--repo-head-branch sets it)",
        )
    if len(meta.variant) > MAX_VARIANT_CHARS or not meta.variant.isprintable():
        raise InvalidInput(
            "invalid_bundle",
            f"meta.json: variant must be at most {MAX_VARIANT_CHARS} printable characters",
        )
    pr_number = _pr_number(meta.envs.get("TRUNK_PR_NUMBER")) or ci.pr_number
    return UploadMetadata(
        repo=ref,
        org_url_slug=meta.org,
        commit_sha=sha,
        branch=branch,
        pr_number=pr_number if pr_number and pr_number <= MAX_STORED_PR_NUMBER else None,
        job_url=_bounded(ci.job_url, MAX_JOB_URL_CHARS),
        variant=meta.variant,
        run_id=_bounded(ci.run_id, MAX_RUN_ID_CHARS),
        codeowners=codeowners,
        idempotency_key=key,
    )


def _commit_sha(value: str | None) -> str | None:
    """A full or abbreviated commit sha (at least 7 hex digits, as uploads take), lowercase."""
    sha = normalize_sha(value) if value is not None else None
    return sha if sha is not None and len(sha) >= 7 else None


def _branch_name(ref: str) -> str:
    for prefix in _REF_PREFIXES:
        if ref.startswith(prefix):
            return ref.removeprefix(prefix)
    return ref


def _pr_number(value: str | None) -> int | None:
    """TRUNK_PR_NUMBER (`--pr-number`), which wins over what the CI says, as in Trunk."""
    digits = (value or "").strip()
    # Ten digits hold every PR number there is; more is garbage (and a long enough digit
    # string is more than Python converts to an int).
    if not digits.isascii() or not digits.isdigit() or len(digits) > 10:
        return None
    return int(digits) or None


def _bounded(value: str | None, limit: int) -> str | None:
    """A CI value as stored: dropped, not cut, when too long or not printable (a cut URL or
    run id would name something else).
    """
    if value is None or len(value) > limit or not value.isprintable():
        return None
    return value


__all__ = [
    "Bundle",
    "BundleMeta",
    "BundleReader",
    "BundleTicket",
    "BundleUploadService",
    "UploaderReport",
    "UploaderReportReader",
    "upload_metadata",
]
