"""Orgs, API tokens and repositories: what an operator sets up, lists, changes and removes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from keepgreen.app.errors import Conflict, InvalidInput, NotFound
from keepgreen.app.ports import (
    Clock,
    CodeHostError,
    CredentialFileError,
    IdFactory,
    QuickReads,
    RefNameCheck,
    RepositoryLocator,
    RepositorySurvey,
    StoredToken,
    UnitOfWork,
    UnitOfWorkFactory,
)
from keepgreen.core.enums import PrState, QueueState
from keepgreen.core.git_urls import auth_problem, credentials_problem, redact_url
from keepgreen.core.ids import OrgId, RepositoryId, is_uuid
from keepgreen.core.model import (
    DEFAULT_PR_REFSPEC,
    DEFAULT_TEST_BRANCH_PREFIX,
    NO_AUTH,
    GitAuth,
    Org,
    RepoRef,
    Repository,
)
from keepgreen.core.names import (
    branch_prefix_problem,
    example_test_branch,
    plain_name_problem,
    pr_refspec_example,
    pr_refspec_problem,
    variable_name_problem,
)

TOKEN_PREFIX = "kg_"  # noqa: S105 (a prefix, not a secret)
_ACTIVE_STATES = frozenset(state for state in PrState if not state.is_terminal)


def hash_token(token: str) -> str:
    """The stored form of a token: sha256 hex. Tokens are 256 random bits, so no salt is needed."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


MAX_TOKEN_CHARS = 512


def presented_hash(token: str) -> str | None:
    """The hash a presented secret is looked up by; None for one no token can be."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    return hash_token(token)


def live_token(uow: UnitOfWork, token: str) -> StoredToken | None:
    """The stored token a secret is, if it is live (not revoked); its hash is compared in
    constant time.
    """
    candidate = presented_hash(token)
    if candidate is None:
        return None
    stored = uow.tokens.find_by_hash(candidate)
    if stored is None or not hmac.compare_digest(stored.token_hash, candidate):
        return None
    return None if stored.revoked_at is not None else stored


def default_token_name(token_id: str) -> str:
    """The name of a token created without one (migration 0007 named older tokens alike)."""
    return f"token-{token_id[:8]}"


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token as it is shown: never its secret, nor the secret's hash."""

    id: str
    org: str
    name: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token: `secret` is shown once, then only its hash is kept."""

    info: TokenInfo
    secret: str

    def __repr__(self) -> str:
        return f"IssuedToken(info={self.info!r}, secret='***')"


@dataclass(frozen=True, slots=True)
class Revocation:
    token: TokenInfo
    already: bool  # the token had been revoked before; nothing changed


@dataclass(frozen=True, slots=True)
class QueueSummary:
    branch: str
    state: QueueState
    active_prs: int  # pull requests neither merged, failed nor cancelled


@dataclass(frozen=True, slots=True)
class RepositoryInfo:
    """A registered repository as the operator sees it; `git_url` is shown redacted."""

    repository: Repository
    org: str
    queues: tuple[QueueSummary, ...]

    @property
    def git_url(self) -> str:
        return redact_url(self.repository.git_url)

    @property
    def has_credentials_in_url(self) -> bool:
        """Stored by an older keepgreen with credentials inside the URL."""
        return self.git_url != self.repository.git_url


@dataclass(frozen=True, slots=True)
class Registration:
    """What `add_repository` or a git change of `update_repository` stored and found."""

    info: RepositoryInfo
    survey: RepositorySurvey | None  # None when an update left the git URL and credentials be


@dataclass(frozen=True, slots=True)
class RepositoryChanges:
    """An update: None leaves a value as it is. `auth` fields that are set replace the stored
    ones, after `clear_auth` dropped them all; `clear_ci_command` removes the CI command.
    """

    git_url: str | None = None
    ci_command: str | None = None
    clear_ci_command: bool = False
    ci_env: tuple[str, ...] | None = None
    auth: GitAuth = NO_AUTH
    clear_auth: bool = False
    pr_refspec: str | None = None
    test_branch_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class Removal:
    ref: RepoRef
    org: str
    queues: tuple[str, ...]  # the branches of the queues removed
    active_prs: int  # pull requests forgotten while still in a queue (only with force)


class AdminService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        clock: Clock,
        new_id: IdFactory,
        locate: RepositoryLocator,
        check_ref: RefNameCheck,
        quick: QuickReads,
    ) -> None:
        self._uow = uow
        self._quick = quick
        self._locate = locate
        self._check_ref = check_ref
        self._clock = clock
        self._new_id = new_id

    # -- tokens -----------------------------------------------------------------------------------

    def create_token(self, org_slug: str, *, name: str | None = None) -> str:
        """Create the org if it is new and a token for it; returns the secret (shown once)."""
        return self.issue_token(org_slug, name=name).secret

    def issue_token(self, org_slug: str, *, name: str | None = None) -> IssuedToken:
        """Like `create_token`, with the new token's id and name beside its secret."""
        if name is not None:
            problem = plain_name_problem(name)
            if problem is not None:
                raise InvalidInput("invalid_field", f"name {problem}")
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token_id = self._new_id()
        with self._uow() as uow:
            org = self._ensure_org(uow, org_slug)
            stored = StoredToken(
                id=token_id,
                org_id=org.id,
                token_hash=hash_token(secret),
                created_at=self._clock(),
                name=name.strip() if name is not None else default_token_name(token_id),
            )
            uow.tokens.add(stored)
            uow.commit()
        return IssuedToken(_token_info(stored, org.slug), secret)

    def list_tokens(self, *, org_slug: str | None = None) -> list[TokenInfo]:
        """Every token (of one org when `org_slug` is given), oldest first, revoked ones too."""
        with self._uow(read_only=True) as uow:
            slugs = {org.id: org.slug for org in uow.orgs.list_all()}
            org_id = None if org_slug is None else self._existing_org(uow, org_slug).id
            tokens = uow.tokens.list(org_id)
        return [_token_info(token, slugs.get(token.org_id, "?")) for token in tokens]

    def revoke_token(self, token_id: str) -> Revocation:
        """Refuse the token from now on; revoking a revoked token changes nothing."""
        token_id = token_id.strip()
        if token_id.startswith(TOKEN_PREFIX):
            # Someone passed the secret itself: do not repeat it, say what is wanted.
            raise InvalidInput(
                "invalid_field",
                "TOKEN_ID is a token's id, not its secret; `keepgreen token list` shows the ids",
            )
        if not is_uuid(token_id):
            raise InvalidInput(
                "invalid_field", "TOKEN_ID must be a token id as `keepgreen token list` shows it"
            )
        with self._uow() as uow:
            stored = uow.tokens.get(token_id)
            if stored is None:
                raise NotFound("token_not_found", f"no token has the id {token_id}")
            already = stored.revoked_at is not None
            if not already:
                uow.tokens.revoke(token_id, self._clock())
                stored = uow.tokens.get(token_id)
                assert stored is not None  # noqa: S101 (revoking keeps the row)
            org = uow.orgs.get(stored.org_id)
            uow.commit()
        return Revocation(_token_info(stored, org.slug if org else "?"), already=already)

    def org_slug(self, org_id: OrgId, *, claimed: str | None = None) -> str:
        """The org's slug; a different `claimed` slug (a request's org_url_slug) is a 404,
        since a token sees its own org only.
        """
        with self._uow(read_only=True) as uow:
            org = uow.orgs.get(org_id)
        if org is None or (claimed is not None and claimed != org.slug):
            raise NotFound(
                "org_not_found", f"organization {claimed!r} is not the API token's organization"
            )
        return org.slug

    def authenticate(self, token: str) -> OrgId | None:
        """The org of a live token, or None. The hash is compared in constant time.

        Read from the database at every call (no cache), so a revoked token is refused from
        the very next request on; one statement, outside any unit of work.
        """
        candidate = presented_hash(token)
        if candidate is None:
            return None
        found = self._quick.live_token(candidate)
        if found is None or not hmac.compare_digest(found[1], candidate):
            return None
        return found[0]

    # -- repositories -----------------------------------------------------------------------------

    def add_repository(
        self,
        *,
        org_slug: str,
        ref: RepoRef,
        git_url: str,
        ci_command: str | None,
        ci_env: Sequence[str] = (),
        auth: GitAuth = NO_AUTH,
        pr_refspec: str | None = None,
        test_branch_prefix: str | None = None,
    ) -> Repository:
        """Register a repository with an org (created if new); see `register_repository`."""
        return self.register_repository(
            org_slug=org_slug,
            ref=ref,
            git_url=git_url,
            ci_command=ci_command,
            ci_env=ci_env,
            auth=auth,
            pr_refspec=pr_refspec,
            test_branch_prefix=test_branch_prefix,
        ).info.repository

    def register_repository(
        self,
        *,
        org_slug: str,
        ref: RepoRef,
        git_url: str,
        ci_command: str | None,
        ci_env: Sequence[str] = (),
        auth: GitAuth = NO_AUTH,
        pr_refspec: str | None = None,
        test_branch_prefix: str | None = None,
        github_installation_id: int | None = None,
    ) -> Registration:
        """Register a repository with an org (created if new), once its git data can be read.

        The git URL must lead to a git repository (a local one is stored as its absolute path)
        that no other registration uses: two orgs on one repository would each see the
        other's pull requests and move the other's branches. Credentials never go in the URL;
        `auth` names the files that hold them. `pr_refspec` names pull request N's ref
        (`{number}` standing for N) and `test_branch_prefix` begins the test branches' names;
        None takes the defaults. 409 if `ref` or the repository is registered already; 400 for
        a bad name, credentials in the URL, an unusable credential file, a repository that
        cannot be read, a reserved variable, or a PR refspec or prefix git would not take.
        """
        for field, value in (("host", ref.host), ("owner", ref.owner), ("name", ref.name)):
            problem = plain_name_problem(value)
            if problem is not None:
                raise InvalidInput("invalid_field", f"{field} {problem}")
        variables = _checked_variables(ci_env)
        refspec = self._checked_pr_refspec(DEFAULT_PR_REFSPEC if pr_refspec is None else pr_refspec)
        prefix = self._checked_prefix(
            DEFAULT_TEST_BRANCH_PREFIX if test_branch_prefix is None else test_branch_prefix
        )
        survey = self._survey(git_url, auth, refspec)
        with self._uow() as uow:
            org = self._ensure_org(uow, org_slug)
            if uow.repositories.find(org.id, ref) is not None:
                raise Conflict("repository_exists", f"repository {ref} is already registered")
            _refuse_used_location(uow, survey.location, git_url, org_id=org.id)
            repository = Repository(
                id=RepositoryId(self._new_id()),
                org_id=org.id,
                ref=ref,
                git_url=survey.location,
                ci_command=ci_command or None,
                created_at=self._clock(),
                ci_env=variables,
                auth=survey.auth,
                pr_refspec=refspec,
                test_branch_prefix=prefix,
                github_installation_id=github_installation_id,
            )
            uow.repositories.add(repository)
            uow.commit()
        return Registration(RepositoryInfo(repository, org.slug, ()), survey)

    def ensure_org(self, slug: str) -> None:
        """Make org `slug` unless it exists (400 for a bad slug)."""
        with self._uow() as uow:
            self._ensure_org(uow, slug)
            uow.commit()

    def adopt_for_github(
        self, ref: RepoRef, *, org_slug: str, installation_id: int, auth: GitAuth, git_url: str
    ) -> None:
        """Hand org `org_slug`'s repository `ref` to GitHub App installation `installation_id`:
        git goes to `git_url` with the installation's token from now on. 404 when the org has
        no such repository (another org's is never taken).
        """
        with self._uow() as uow:
            repository, _ = self._find(uow, ref, org_slug)
            uow.repositories.save(
                replace(
                    repository,
                    github_installation_id=installation_id,
                    auth=auth,
                    git_url=git_url,
                )
            )
            uow.commit()

    def list_repositories(self, *, org_slug: str | None = None) -> list[RepositoryInfo]:
        """Every registered repository (of one org when `org_slug` is given), by reference."""
        with self._uow(read_only=True) as uow:
            slugs = {org.id: org.slug for org in uow.orgs.list_all()}
            if org_slug is None:
                repositories = uow.repositories.list_all()
            else:
                repositories = uow.repositories.list_for_org(self._existing_org(uow, org_slug).id)
            return [
                RepositoryInfo(repo, slugs.get(repo.org_id, "?"), _queues(uow, repo.id))
                for repo in repositories
            ]

    def show_repository(self, ref: RepoRef, *, org_slug: str | None = None) -> RepositoryInfo:
        """One repository; without `org_slug`, `ref` must name one repository of one org."""
        with self._uow(read_only=True) as uow:
            repository, org = self._find(uow, ref, org_slug)
            return RepositoryInfo(repository, org.slug, _queues(uow, repository.id))

    def update_repository(
        self, ref: RepoRef, changes: RepositoryChanges, *, org_slug: str | None = None
    ) -> Registration:
        """Change a repository's git URL, credentials, PR refspec, test branch prefix or CI
        settings.

        A new URL, new credentials or a new PR refspec are checked as at registration (the
        repository must be readable with them, and no other registration may use the URL), so
        the stored repository always passed the checks it would pass today. A new test branch
        prefix names the runs made from then on: an open run keeps the branch name it was
        given (stored on the run), so its branch is still deleted when it ends.
        """
        refspec = (
            None if changes.pr_refspec is None else (self._checked_pr_refspec(changes.pr_refspec))
        )
        prefix = (
            None
            if changes.test_branch_prefix is None
            else (self._checked_prefix(changes.test_branch_prefix))
        )
        with self._uow(read_only=True) as uow:
            current, _ = self._find(uow, ref, org_slug)
        auth = NO_AUTH if changes.clear_auth else current.auth
        auth = GitAuth(
            token_file=changes.auth.token_file or auth.token_file,
            username=changes.auth.username or auth.username,
            ssh_key_file=changes.auth.ssh_key_file or auth.ssh_key_file,
            ssh_known_hosts=changes.auth.ssh_known_hosts or auth.ssh_known_hosts,
        )
        git_url = current.git_url if changes.git_url is None else changes.git_url
        refspec = current.pr_refspec if refspec is None else refspec
        survey = None
        if changes.git_url is not None or auth != current.auth or refspec != current.pr_refspec:
            survey = self._survey(git_url, auth, refspec)
        updated = replace(
            current,
            git_url=current.git_url if survey is None else survey.location,
            auth=current.auth if survey is None else survey.auth,
            pr_refspec=refspec,
            test_branch_prefix=current.test_branch_prefix if prefix is None else prefix,
            ci_command=None
            if changes.clear_ci_command
            else (changes.ci_command or current.ci_command),
            ci_env=current.ci_env if changes.ci_env is None else _checked_variables(changes.ci_env),
        )
        with self._uow() as uow:
            repository, org = self._find(uow, ref, org_slug)
            if repository.id != current.id:
                raise Conflict(
                    "concurrent_write", "the repository changed during the update; retry it"
                )
            if survey is not None:
                _refuse_used_location(
                    uow, survey.location, git_url, org_id=org.id, itself=repository.id
                )
            uow.repositories.save(updated)
            info = RepositoryInfo(updated, org.slug, _queues(uow, updated.id))
            uow.commit()
        return Registration(info, survey)

    def remove_repository(
        self, ref: RepoRef, *, org_slug: str | None = None, force: bool = False
    ) -> Removal:
        """Remove a repository with its queues, pull requests, test runs, statuses and flaky
        test data. While a queue holds pull requests that are not merged, failed or
        cancelled, that is a 409 unless `force`, which forgets them (a built-in CI command
        still running ends on its own; its result is dropped).
        """
        with self._uow() as uow:
            repository, org = self._find(uow, ref, org_slug)
            queues = uow.queues.list_for_repositories([repository.id])
            # Lock the queues, so that no submission slips in between the count and the delete.
            for queue in queues:
                uow.queues.get(queue.id, lock=True)
            active = uow.entries.list_for_queues([q.id for q in queues], states=_ACTIVE_STATES)
            if active and not force:
                busy = sorted({q.branch for q in queues for e in active if e.queue_id == q.id})
                raise Conflict(
                    "repository_busy",
                    f"repository {ref} has {len(active)} pull request(s) still in its queues "
                    f"({', '.join(busy)}); cancel them first, or remove it with --force",
                )
            uow.repositories.delete(repository.id)
            uow.commit()
        return Removal(ref, org.slug, tuple(q.branch for q in queues), len(active))

    # -- helpers ----------------------------------------------------------------------------------

    def _checked_pr_refspec(self, refspec: str) -> str:
        """`refspec` when it names one ref per pull request that git takes; else a 400."""
        problem = pr_refspec_problem(refspec)
        if problem is None and not self._check_ref(pr_refspec_example(refspec)):
            problem = (
                f"is not a valid git ref name once {{number}} is replaced (git check-ref-format "
                f"refuses {pr_refspec_example(refspec)!r})"
            )
        if problem is not None:
            raise InvalidInput("invalid_field", f"pr-refspec {refspec!r} {problem}")
        return refspec

    def _checked_prefix(self, prefix: str) -> str:
        """`prefix` when git takes the test branch names made with it; else a 400."""
        problem = branch_prefix_problem(prefix)
        if problem is None and not self._check_ref(example_test_branch(prefix), branch=True):
            problem = (
                "does not make valid branch names (git check-ref-format --branch refuses "
                f"{example_test_branch(prefix)!r})"
            )
        if problem is not None:
            raise InvalidInput("invalid_field", f"test-branch-prefix {prefix!r} {problem}")
        return prefix

    def _survey(self, git_url: str, auth: GitAuth, pr_refspec: str) -> RepositorySurvey:
        """Check the URL and credentials, then read the repository; each refusal a 400."""
        if not git_url.strip():
            raise InvalidInput("invalid_field", "git-url must not be empty")
        problem = credentials_problem(git_url) or auth_problem(git_url, auth)
        if problem is not None:
            raise InvalidInput("invalid_git_url", problem)
        try:
            return self._locate(git_url, auth=auth, pr_refspec=pr_refspec)
        except CredentialFileError as error:
            raise InvalidInput("invalid_git_auth", str(error)) from error
        except CodeHostError as error:
            message = str(error)
            if not message.startswith("git-url "):
                message = f"git-url {message}"
            raise InvalidInput("invalid_git_url", message) from error

    def _find(self, uow: UnitOfWork, ref: RepoRef, org_slug: str | None) -> tuple[Repository, Org]:
        if org_slug is not None:
            org = self._existing_org(uow, org_slug)
            repository = uow.repositories.find(org.id, ref)
            if repository is None:
                raise NotFound(
                    "repository_not_found",
                    f"repository {ref} is not registered with org {org_slug!r}",
                )
            return repository, org
        found = list(uow.repositories.with_ref(ref))
        if not found:
            raise NotFound("repository_not_found", f"repository {ref} is not registered")
        orgs = [uow.orgs.get(repository.org_id) for repository in found]
        if len(found) > 1:
            names = ", ".join(sorted(org.slug for org in orgs if org is not None))
            raise InvalidInput(
                "ambiguous_repository",
                f"repository {ref} is registered by several orgs ({names}); say which with --org",
            )
        only = orgs[0]
        assert only is not None  # noqa: S101 (a repository's org is a foreign key)
        return found[0], only

    def _existing_org(self, uow: UnitOfWork, slug: str) -> Org:
        org = uow.orgs.get_by_slug(slug)
        if org is None:
            raise NotFound("org_not_found", f"org {slug!r} does not exist")
        return org

    def _ensure_org(self, uow: UnitOfWork, slug: str) -> Org:
        problem = plain_name_problem(slug)
        if problem is not None:
            raise InvalidInput("invalid_field", f"org {problem}")
        org = uow.orgs.get_by_slug(slug)
        if org is None:
            org = Org(OrgId(self._new_id()), slug, self._clock())
            uow.orgs.add(org)
        return org


def _refuse_used_location(
    uow: UnitOfWork,
    location: str,
    git_url: str,
    *,
    org_id: OrgId,
    itself: RepositoryId | None = None,
) -> None:
    """409 when another registration uses the git data at `location`."""
    shown = redact_url(git_url)
    for other in uow.repositories.using_git_url(location):
        if other.id == itself:
            continue
        if other.org_id != org_id:
            raise Conflict(
                "git_url_in_use", f"{shown} is already registered by another organization"
            )
        raise Conflict("git_url_in_use", f"{shown} is already registered as {other.ref}")


def _queues(uow: UnitOfWork, repository_id: RepositoryId) -> tuple[QueueSummary, ...]:
    queues = uow.queues.list_for_repositories([repository_id])
    active = uow.entries.list_for_queues([q.id for q in queues], states=_ACTIVE_STATES)
    return tuple(
        QueueSummary(q.branch, q.state, sum(1 for e in active if e.queue_id == q.id))
        for q in queues
    )


def _token_info(token: StoredToken, org: str) -> TokenInfo:
    return TokenInfo(token.id, org, token.name, token.created_at, token.revoked_at)


def _checked_variables(names: Sequence[str]) -> tuple[str, ...]:
    """A repository's `ci_env`, each name checked, duplicates dropped, order kept."""
    for name in names:
        problem = variable_name_problem(name)
        if problem is not None:
            raise InvalidInput("invalid_field", f"ci-env {name!r} {problem}")
    return tuple(dict.fromkeys(names))
