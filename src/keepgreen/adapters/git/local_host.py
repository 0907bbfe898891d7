"""The built-in code host: pull request N of a repository is its ref `refs/pull/N/head`.

Reads go straight to the repository at `git_url` (a local path or file:// URL, bare or not).
Mergeability is computed without a work tree by `git merge-tree --write-tree` (git >= 2.38).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlparse

from keepgreen.app.ports import CodeHostError
from keepgreen.core.enums import Mergeability
from keepgreen.core.model import PullRequestInfo, Repository

_GIT_TIMEOUT_SECONDS = 60
_FIELD_SEPARATOR = "\x1f"


def local_path(git_url: str) -> Path | None:
    """The filesystem path of a local repository URL, or None for a network remote."""
    parsed = urlparse(git_url)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if "://" in git_url:
        return None
    # git's own rule: a colon before the first slash makes `host:path` an scp-like remote.
    colon, slash = git_url.find(":"), git_url.find("/")
    if colon != -1 and (slash == -1 or colon < slash):
        return None
    return Path(git_url)


class LocalGitHost:
    """The CodeHost port over repositories on this machine."""

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        git_dir = self._git_dir(repo)
        ref = f"refs/pull/{number}/head"
        result = self._git(git_dir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if result.returncode != 0:
            return None
        sha = result.stdout.strip()
        shown = self._git(
            git_dir, "show", "-s", f"--format=%s{_FIELD_SEPARATOR}%an", sha, check=True
        )
        title, _, author = shown.stdout.rstrip("\n").partition(_FIELD_SEPARATOR)
        return PullRequestInfo(number=number, head_sha=sha, title=title, author=author)

    def mergeability(self, repo: Repository, *, head_sha: str, target_branch: str) -> Mergeability:
        git_dir = self._git_dir(repo)
        target = self._git(
            git_dir, "rev-parse", "--verify", "--quiet", f"refs/heads/{target_branch}^{{commit}}"
        )
        if target.returncode != 0:
            return Mergeability.NOT_MERGEABLE
        merged = self._git(git_dir, "merge-tree", "--write-tree", target.stdout.strip(), head_sha)
        if merged.returncode == 0:
            return Mergeability.MERGEABLE
        if merged.returncode == 1:
            return Mergeability.NOT_MERGEABLE  # conflicts
        raise CodeHostError(f"git merge-tree failed in {git_dir}: {merged.stderr.strip()}")

    @staticmethod
    def _git_dir(repo: Repository) -> Path:
        path = local_path(repo.git_url)
        if path is None:
            raise CodeHostError(
                f"repository {repo.ref} lives at {repo.git_url!r}; the built-in code host "
                "reads local repositories only"
            )
        if (path / ".git").exists():
            path = path / ".git"
        if not (path / "HEAD").exists():
            raise CodeHostError(f"repository {repo.ref}: no git repository at {path}")
        return path

    @staticmethod
    def _git(git_dir: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(
                ["git", f"--git-dir={git_dir}", *args],
                capture_output=True,
                text=True,
                timeout=_GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise CodeHostError(f"git {args[0]} failed in {git_dir}: {error}") from error
        if check and result.returncode != 0:
            raise CodeHostError(f"git {args[0]} failed in {git_dir}: {result.stderr.strip()}")
        return result
