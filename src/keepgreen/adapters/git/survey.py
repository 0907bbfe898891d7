"""The RepositoryLocator port: before a registration, read the repository's refs and say what
is there (branches, where HEAD points, pull request refs as the PR refspec names them); a local
repository with git in place, a remote one with `git ls-remote` and the repository's credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from keepgreen.adapters.git.credentials import checked_auth
from keepgreen.adapters.git.local_host import locate_repository
from keepgreen.adapters.git.merging import Git
from keepgreen.adapters.git.remote import REMOTE_TIMEOUT_SECONDS, run_remote_git
from keepgreen.app.ports import CodeHostError, RepositorySurvey
from keepgreen.core.git_urls import GitUrlKind, git_url_kind, redact_url
from keepgreen.core.model import DEFAULT_PR_REFSPEC, GitAuth
from keepgreen.core.names import PR_NUMBER_FIELD

_BRANCH_PREFIX = "refs/heads/"


class RepositorySurveyor:
    """Reads a repository's refs at its git URL; `timeout` bounds a remote's answer."""

    def __init__(self, *, timeout: float = REMOTE_TIMEOUT_SECONDS) -> None:
        self._timeout = timeout

    def __call__(
        self, git_url: str, /, *, auth: GitAuth, pr_refspec: str = DEFAULT_PR_REFSPEC
    ) -> RepositorySurvey:
        if git_url.startswith("-"):
            raise CodeHostError("it starts with '-', which git would read as an option")
        kind = git_url_kind(git_url)
        if kind is GitUrlKind.UNSUPPORTED:
            raise CodeHostError(
                f"{redact_url(git_url)} is neither a local path nor an https://, http://, "
                "ssh://, git:// or user@host:path URL"
            )
        checked = checked_auth(auth)
        if kind is GitUrlKind.LOCAL:
            location = locate_repository(git_url)
            refs, head = _local_refs(Path(location))
        else:
            location = git_url
            refs, head = self._remote_refs(git_url, checked)
        return summarize(location, checked, refs, head, pr_refspec=pr_refspec)

    def _remote_refs(self, url: str, auth: GitAuth) -> tuple[list[str], str | None]:
        # `--symref` adds `ref: refs/heads/main<TAB>HEAD` when the server tells where HEAD is.
        result = run_remote_git(
            ["ls-remote", "--symref", "--", url], url=url, auth=auth, timeout=self._timeout
        )
        refs, head = [], None
        for line in result.stdout.splitlines():
            target, _, name = line.partition("\t")
            if target.startswith("ref: ") and name == "HEAD":
                head = target.removeprefix("ref: ")
            elif name:
                refs.append(name)
        return refs, head


def _local_refs(path: Path) -> tuple[list[str], str | None]:
    git_dir = path / ".git" if (path / ".git").exists() else path
    git = Git(git_dir)
    listed = git.run("for-each-ref", "--format=%(refname)", check=True).stdout.splitlines()
    head = git.run("symbolic-ref", "--quiet", "HEAD")
    return listed, (head.stdout.strip() or None) if head.returncode == 0 else None


def summarize(
    location: str,
    auth: GitAuth,
    refs: Iterable[str],
    head: str | None,
    *,
    pr_refspec: str = DEFAULT_PR_REFSPEC,
) -> RepositorySurvey:
    """Count branches and the pull request refs `pr_refspec` names; HEAD's branch is the
    default one.
    """
    before, _, after = pr_refspec.partition(PR_NUMBER_FIELD)
    pull_request_ref = re.compile(re.escape(before) + r"[0-9]+" + re.escape(after))
    names = set(refs)
    branches = {name for name in names if name.startswith(_BRANCH_PREFIX)}
    default = head.removeprefix(_BRANCH_PREFIX) if head and head in branches else None
    return RepositorySurvey(
        location=location,
        auth=auth,
        branches=len(branches),
        default_branch=default,
        pull_requests=sum(1 for name in names if pull_request_ref.fullmatch(name)),
    )
