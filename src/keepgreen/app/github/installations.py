"""GitHub App installations: which org each belongs to, and the repositories they give.

An installation's repositories belong to the org linked to it (`keepgreen github link`), or
else to the org whose slug is the installation account's login. A repository that comes this
way needs no git URL or token: git reaches GitHub over HTTPS with the installation's token,
and a queue for its default branch is made with check runs and comments on.

The `installation` and `installation_repositories` webhooks call `sync` at once; the worker
calls it for every installation every few minutes as well, so a lost webhook delays a
repository but never loses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog

from keepgreen.app.admin import AdminService
from keepgreen.app.errors import Conflict, InvalidInput, KeepgreenError, NotFound
from keepgreen.app.github.api import GithubApi, GithubRefused, GithubRepo
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.app.queues import QueueService
from keepgreen.core.model import DEFAULT_GIT_USERNAME, GitAuth, GithubInstallation, RepoRef
from keepgreen.core.names import plain_name_problem

log = structlog.get_logger(__name__)


def github_host_name(api_url: str) -> str:
    """The `host` of repositories on the GitHub an API URL belongs to: `github.com` for
    api.github.com, the server's name for GitHub Enterprise Server (`HOST/api/v3`).
    """
    host = urlsplit(api_url).hostname or "github.com"
    return "github.com" if host == "api.github.com" else host


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one sync of an installation did."""

    installation_id: int
    org_slug: str | None  # None: not linked to an org (nothing added)
    added: tuple[str, ...] = ()  # owner/name of the repositories registered now
    removed: tuple[str, ...] = ()  # those the installation no longer gives
    failed: tuple[str, ...] = ()  # owner/name: why, for those that could not be registered


@dataclass(frozen=True, slots=True)
class InstallationInfo:
    installation: GithubInstallation
    org_slug: str | None
    repositories: tuple[str, ...]


class GithubInstallations:
    """Links installations to orgs and keeps their repositories registered."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        api: GithubApi,
        admin: AdminService,
        queues: QueueService,
        clock: Clock,
        host_name: str,
    ) -> None:
        self._uow = uow
        self._api = api
        self._admin = admin
        self._queues = queues
        self._clock = clock
        self._host_name = host_name

    def link(self, installation_id: int, org_slug: str) -> SyncResult:
        """Give installation `installation_id`'s repositories to org `org_slug` (made if new),
        then register them. Raises NotFound when GitHub knows no such installation.
        """
        if installation_id <= 0:
            raise InvalidInput("invalid_field", "the installation id is a positive number")
        problem = plain_name_problem(org_slug)
        if problem is not None:
            raise InvalidInput("invalid_field", f"org {problem}")
        try:
            account = self._api.installation_account(installation_id)
        except GithubRefused as refused:
            if refused.status != 404:
                raise
            raise NotFound(
                "installation_not_found",
                f"GitHub knows no installation {installation_id} of this App (the number is "
                "in the installation's settings URL on GitHub)",
            ) from None
        self._admin.ensure_org(org_slug)
        with self._uow() as uow:
            org = uow.orgs.get_by_slug(org_slug)
            assert org is not None  # noqa: S101 - made just above
            known = uow.github_installations.get(installation_id)
            uow.github_installations.save(
                GithubInstallation(
                    id=installation_id,
                    account=account,
                    org_id=org.id,
                    created_at=known.created_at if known else self._clock(),
                    linked=True,
                )
            )
            uow.commit()
        log.info("github installation linked", installation=installation_id, org=org_slug)
        return self.sync(installation_id)

    def all(self) -> list[InstallationInfo]:
        """Every installation keepgreen knows, with its org and repositories."""
        with self._uow() as uow:
            slugs = {org.id: org.slug for org in uow.orgs.list_all()}
            return [
                InstallationInfo(
                    installation,
                    None if installation.org_id is None else slugs.get(installation.org_id),
                    tuple(
                        f"{repo.ref.owner}/{repo.ref.name}"
                        for repo in uow.github_installations.repositories(installation.id)
                    ),
                )
                for installation in uow.github_installations.list_all()
            ]

    def installed(self, installation_id: int, account: str) -> SyncResult:
        """The App was installed (or its webhook arrived again): remember the installation,
        linked by name to the org whose slug is `account` when there is one, and sync it.
        """
        with self._uow() as uow:
            known = uow.github_installations.get(installation_id)
            if known is None or not known.linked:
                org = uow.orgs.get_by_slug(account) or uow.orgs.get_by_slug(account.lower())
                uow.github_installations.save(
                    GithubInstallation(
                        id=installation_id,
                        account=account,
                        org_id=org.id if org else None,
                        created_at=known.created_at if known else self._clock(),
                    )
                )
                uow.commit()
        return self.sync(installation_id)

    def uninstalled(self, installation_id: int) -> None:
        """The App was uninstalled: forget the installation. Its repositories stay, with their
        queues and history; their queues wait (GitHub refuses the App) until it is installed
        again, when `sync` gives them back their installation.
        """
        with self._uow() as uow:
            uow.github_installations.delete(installation_id)
            uow.commit()
        log.warning("github app uninstalled", installation=installation_id)

    def sync_all(self) -> list[SyncResult]:
        """Sync every installation keepgreen knows (the worker's periodic chore)."""
        with self._uow() as uow:
            ids = [installation.id for installation in uow.github_installations.list_all()]
        results = []
        for installation_id in ids:
            try:
                results.append(self.sync(installation_id))
            except KeepgreenError as error:  # this one waits for the next round; others go on
                log.warning("github installation sync failed", installation=installation_id,
                            error=str(error))  # fmt: skip
        return results

    def sync(self, installation_id: int) -> SyncResult:
        """Register the repositories the installation gives that are not registered yet, move
        repositories of a former installation of the same name to it, and remove those it
        no longer gives.
        """
        with self._uow() as uow:
            installation = uow.github_installations.get(installation_id)
            if installation is None:
                raise NotFound(
                    "installation_not_found",
                    f"GitHub App installation {installation_id} is not known to keepgreen",
                )
            org = None if installation.org_id is None else uow.orgs.get(installation.org_id)
            registered = {
                (repo.ref.owner.lower(), repo.ref.name.lower()): repo
                for repo in uow.github_installations.repositories(installation_id)
            }
        if org is None:
            log.warning(
                "github installation not linked to an org; its repositories wait",
                installation=installation_id,
                account=installation.account,
                hint=f"keepgreen github link --installation {installation_id} --org SLUG",
            )
            return SyncResult(installation_id, None)
        given = self._api.installation_repositories(installation_id)
        added: list[str] = []
        failed: list[str] = []
        for repo in given:
            if (repo.owner.lower(), repo.name.lower()) in registered:
                continue
            problem = self._register(installation_id, org.slug, repo)
            if problem is None:
                added.append(f"{repo.owner}/{repo.name}")
            else:
                failed.append(f"{repo.owner}/{repo.name}: {problem}")
        names = {(repo.owner.lower(), repo.name.lower()) for repo in given}
        removed = [
            f"{repo.ref.owner}/{repo.ref.name}"
            for key, repo in registered.items()
            if key not in names and self._remove(repo.ref, org.slug)
        ]
        if added or removed or failed:
            log.info(
                "github installation synced",
                installation=installation_id,
                org=org.slug,
                added=added,
                removed=removed,
                failed=failed,
            )
        return SyncResult(installation_id, org.slug, tuple(added), tuple(removed), tuple(failed))

    def _register(self, installation_id: int, org_slug: str, repo: GithubRepo) -> str | None:
        """Register one repository and a queue on its default branch; what went wrong, if."""
        ref = RepoRef(self._host_name, repo.owner, repo.name)
        auth = GitAuth(
            token_file=self._api.git_token_file(installation_id), username=DEFAULT_GIT_USERNAME
        )
        try:
            registration = self._admin.register_repository(
                org_slug=org_slug,
                ref=ref,
                git_url=repo.clone_url,
                ci_command=None,
                auth=auth,
                github_installation_id=installation_id,
            )
        except Conflict as clash:
            # Registered already: by hand, or through an installation since removed. The App
            # takes the org's own registration over, so that its PRs can be queued from
            # GitHub; another org's registration of the same repository is left alone.
            try:
                self._admin.adopt_for_github(
                    ref,
                    org_slug=org_slug,
                    installation_id=installation_id,
                    auth=auth,
                    git_url=repo.clone_url,
                )
            except NotFound:
                return str(clash)
            return None
        except KeepgreenError as error:
            return str(error)
        org_id = registration.info.repository.org_id
        try:
            self._queues.create(org_id, ref, repo.default_branch, feedback_on_pull_requests=True)
        except Conflict:
            pass  # a queue for the default branch is there already
        except KeepgreenError as error:
            return f"registered, but no queue for {repo.default_branch!r}: {error}"
        return None

    def _remove(self, ref: RepoRef, org_slug: str) -> bool:
        try:
            self._admin.remove_repository(ref, org_slug=org_slug, force=True)
        except NotFound:
            return False
        return True


__all__ = ["GithubInstallations", "InstallationInfo", "SyncResult", "github_host_name"]
