"""A bare repository a test's git server serves, seen from the server's side, and the
developer's clone whose main and PR heads are pushed to it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.gitrepo import GitRepo


class ServedRepository:
    """Reads of the served bare repository (`bare`) and the developers' push (`work`)."""

    work: GitRepo
    bare: Path
    # Where the server keeps pull request heads: `refs/pull/*` (GitHub) or
    # `refs/merge-requests/*` (GitLab); the developer's clone has them at refs/pull/N/head.
    pr_refs: str = "refs/pull"

    def publish(self) -> None:
        """The developers push: main and the PR heads reach the server."""
        self.work.git(
            "push", "-q", "--force", str(self.bare), "main:main", f"refs/pull/*:{self.pr_refs}/*"
        )

    def git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", f"--git-dir={self.bare}", *args], capture_output=True, text=True, check=True
        )
        return result.stdout.strip()

    def main_log(self) -> list[str]:
        return self.git("log", "--first-parent", "--format=%s", "main").splitlines()

    def main_files(self) -> set[str]:
        return set(self.git("ls-tree", "-r", "--name-only", "main").splitlines())

    def branches(self) -> list[str]:
        return self.git("for-each-ref", "--format=%(refname:short)", "refs/heads").split()
