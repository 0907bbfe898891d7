"""A fork's workflow run in place of a token: which org a `setImpactedTargets` call acts for.

A pull request from a fork runs its CI without the repository's secrets, so Trunk's merge
action sends `x-forked-workflow-run-id: <github.run_id>` instead of `x-api-token`. keepgreen
asks GitHub, as the App's installation on the repository the call names, for that run, and
accepts only a run of that repository, from a fork, still running, on the head the call
names: what a fork's CI can prove without a secret, and what cannot be replayed once the run
is over. The call then acts for the org the repository belongs to.

Every refusal says which check failed. A repository keepgreen does not reach through the App
reads the same whether it is unknown or registered (by hand) in some org, so nothing about
other orgs can be learnt this way.
"""

from __future__ import annotations

from typing import Protocol

import structlog

from keepgreen.app.errors import Unauthenticated, Unavailable
from keepgreen.app.github.api import GithubRefused, GithubUnavailable, GithubWorkflowRun, Where
from keepgreen.app.ports import UnitOfWorkFactory
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef
from keepgreen.core.names import normalize_sha

log = structlog.get_logger(__name__)

FORK_RUN_HEADER = "x-forked-workflow-run-id"
# The statuses of a run that has not ended (GitHub's `status`; `completed` is the end).
RUNNING = frozenset({"queued", "in_progress", "waiting", "requested", "pending"})
# GitHub's ids are 64-bit integers.
_MAX_RUN_ID = 2**63 - 1
_SEND_A_TOKEN = "send an API token in x-api-token instead"  # noqa: S105 (advice, not a secret)


class WorkflowRuns(Protocol):
    """The one GitHub call this needs (`GithubApi.workflow_run`)."""

    def workflow_run(self, where: Where, run_id: int) -> GithubWorkflowRun | None:
        """The run, or None when GitHub shows none; may raise GithubUnavailable or
        GithubRefused.
        """
        ...


def parse_run_id(text: str) -> int | None:
    """The run id a header value names: a positive integer, in decimal digits only."""
    text = text.strip()
    if not text.isascii() or not text.isdigit():
        return None
    run_id = int(text)
    return run_id if 0 < run_id <= _MAX_RUN_ID else None


class ForkRuns:
    """Checks a fork's workflow run for a `setImpactedTargets` call."""

    def __init__(self, uow: UnitOfWorkFactory, *, api: WorkflowRuns) -> None:
        self._uow = uow
        self._api = api

    def org_of_run(self, run_id_text: str, *, repo: RepoRef, sha: str) -> OrgId:
        """The org a call naming `repo` and head `sha` acts for, on the strength of run
        `run_id_text` (the header's value). Raises Unauthenticated naming the check that
        failed, or Unavailable when GitHub cannot be asked now.
        """
        run_id = parse_run_id(run_id_text)
        if run_id is None:
            raise _refused(
                f"{FORK_RUN_HEADER} must be a positive integer (GitHub's run id, github.run_id)"
            )
        head_sha = normalize_sha(sha)
        if head_sha is None:
            raise _refused("pr.sha must be a hex commit sha to be checked against the run's head")
        org_id, where = self._repository(repo)
        full_name = f"{where.owner}/{where.name}"
        try:
            run = self._api.workflow_run(where, run_id)
        except GithubUnavailable as error:
            log.warning("github unavailable for a fork run", repo=full_name, error=str(error))
            raise Unavailable(
                "github_unavailable",
                f"GitHub cannot be asked about workflow run {run_id} right now; "
                "the server's log says why, and the request can be retried",
            ) from error
        except GithubRefused as refused:
            # Most often: the App lacks the `actions: read` permission.
            log.warning("github refused a fork run", repo=full_name, error=str(refused))
            raise _refused(
                f"GitHub refused to show workflow run {run_id} of {full_name} to keepgreen's "
                "App (it needs the actions: read permission)"
            ) from refused
        if run is None:
            raise _refused(f"GitHub shows no workflow run {run_id} in {full_name}")
        if run.repository.lower() != full_name.lower():
            raise _refused(f"workflow run {run_id} does not belong to {full_name}")
        if run.head_repository is None or run.head_repository.lower() == full_name.lower():
            raise _refused(f"workflow run {run_id} is not from a fork of {full_name}")
        if run.status not in RUNNING:
            raise _refused(
                f"workflow run {run_id} is not running (its status is {run.status}): a fork's "
                "run id stands for a token only while the run goes on"
            )
        if run.head_sha.lower() != head_sha:
            raise _refused(
                f"workflow run {run_id} is on commit {run.head_sha}, not on pr.sha {head_sha}"
            )
        return org_id

    def _repository(self, repo: RepoRef) -> tuple[OrgId, Where]:
        """The org of `repo` among those the App gives keepgreen, and where GitHub has it."""
        with self._uow(read_only=True) as uow:
            found = [
                found
                for found in uow.github_installations.by_github_name(repo.owner, repo.name)
                if found.ref.host.lower() == repo.host.lower()
                and found.github_installation_id is not None
            ]
        if len(found) != 1:
            # None, or (a stale registration) more than one org: no org to act for either way.
            raise _refused(
                f"{repo} is not a repository keepgreen reaches through its GitHub App, so a "
                "fork's workflow run cannot stand for a token there"
            )
        [repository] = found
        assert repository.github_installation_id is not None  # noqa: S101 (filtered above)
        where = Where(repository.github_installation_id, repository.ref.owner, repository.ref.name)
        return repository.org_id, where


def _refused(reason: str) -> Unauthenticated:
    return Unauthenticated(
        "unauthorized", f"{FORK_RUN_HEADER} is not accepted: {reason}; {_SEND_A_TOKEN}"
    )


__all__ = ["FORK_RUN_HEADER", "RUNNING", "ForkRuns", "WorkflowRuns", "parse_run_id"]
