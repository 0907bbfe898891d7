"""Orgs, API tokens and repository registration (the operator's CLI commands)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from keepgreen.app.errors import Conflict, InvalidInput, NotFound
from keepgreen.app.ports import (
    Clock,
    CodeHostError,
    IdFactory,
    RepositoryLocator,
    StoredToken,
    UnitOfWork,
    UnitOfWorkFactory,
)
from keepgreen.core.ids import OrgId, RepositoryId
from keepgreen.core.model import Org, RepoRef, Repository
from keepgreen.core.names import plain_name_problem, variable_name_problem

TOKEN_PREFIX = "kg_"  # noqa: S105 (a prefix, not a secret)


def hash_token(token: str) -> str:
    """The stored form of a token: sha256 hex. Tokens are 256 random bits, so no salt is needed."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class AdminService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        clock: Clock,
        new_id: IdFactory,
        locate: RepositoryLocator,
    ) -> None:
        self._uow = uow
        self._locate = locate
        self._clock = clock
        self._new_id = new_id

    def create_token(self, org_slug: str) -> str:
        """Create the org if it is new and a token for it; returns the secret (shown once)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._uow() as uow:
            org = self._ensure_org(uow, org_slug)
            uow.tokens.add(StoredToken(self._new_id(), org.id, hash_token(token), self._clock()))
            uow.commit()
        return token

    def org_slug(self, org_id: OrgId, *, claimed: str | None = None) -> str:
        """The org's slug; a different `claimed` slug (a request's org_url_slug) is a 404,
        since a token sees its own org only.
        """
        with self._uow() as uow:
            org = uow.orgs.get(org_id)
        if org is None or (claimed is not None and claimed != org.slug):
            raise NotFound(
                "org_not_found", f"organization {claimed!r} is not the API token's organization"
            )
        return org.slug

    def authenticate(self, token: str) -> OrgId | None:
        """The org of a token, or None. The hash is compared in constant time."""
        if not token or len(token) > 512:
            return None
        candidate = hash_token(token)
        with self._uow() as uow:
            stored = uow.tokens.find_by_hash(candidate)
        if stored is None or not hmac.compare_digest(stored.token_hash, candidate):
            return None
        return stored.org_id

    def add_repository(
        self,
        *,
        org_slug: str,
        ref: RepoRef,
        git_url: str,
        ci_command: str | None,
        ci_env: Sequence[str] = (),
    ) -> Repository:
        """Register a repository with an org (created if new).

        The git URL must lead to a git repository (a local one is stored as its absolute path)
        that no other registration uses: two orgs on one repository would each see the
        other's pull requests and move the other's branches. 409 if `ref` or the repository is
        registered already; 400 for a bad name, a missing repository or a reserved variable.
        """
        for field, value in (("host", ref.host), ("owner", ref.owner), ("name", ref.name)):
            problem = plain_name_problem(value)
            if problem is not None:
                raise InvalidInput("invalid_field", f"{field} {problem}")
        if not git_url.strip():
            raise InvalidInput("invalid_field", "git-url must not be empty")
        variables = _checked_variables(ci_env)
        try:
            location = self._locate(git_url)
        except CodeHostError as error:
            raise InvalidInput("invalid_git_url", f"git-url {error}") from error
        with self._uow() as uow:
            org = self._ensure_org(uow, org_slug)
            if uow.repositories.find(org.id, ref) is not None:
                raise Conflict("repository_exists", f"repository {ref} is already registered")
            for other in uow.repositories.using_git_url(location):
                if other.org_id != org.id:
                    raise Conflict(
                        "git_url_in_use",
                        f"{git_url} is already registered by another organization",
                    )
                raise Conflict("git_url_in_use", f"{git_url} is already registered as {other.ref}")
            repository = Repository(
                id=RepositoryId(self._new_id()),
                org_id=org.id,
                ref=ref,
                git_url=location,
                ci_command=ci_command or None,
                created_at=self._clock(),
                ci_env=variables,
            )
            uow.repositories.add(repository)
            uow.commit()
        return repository

    def _ensure_org(self, uow: UnitOfWork, slug: str) -> Org:
        problem = plain_name_problem(slug)
        if problem is not None:
            raise InvalidInput("invalid_field", f"org {problem}")
        org = uow.orgs.get_by_slug(slug)
        if org is None:
            org = Org(OrgId(self._new_id()), slug, self._clock())
            uow.orgs.add(org)
        return org


def _checked_variables(names: Sequence[str]) -> tuple[str, ...]:
    """A repository's `ci_env`, each name checked, duplicates dropped, order kept."""
    for name in names:
        problem = variable_name_problem(name)
        if problem is not None:
            raise InvalidInput("invalid_field", f"ci-env {name!r} {problem}")
    return tuple(dict.fromkeys(names))
