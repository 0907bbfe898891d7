"""Real git repositories for tests: a target branch and pull requests as refs/pull/N/head."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Ada Author",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Author",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


class GitRepo:
    """A repository with a work tree, driven with the git command line."""

    def __init__(self, path: Path, *, branch: str = "main") -> None:
        self.path = path
        self.branch = branch
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", branch)
        self.commit({"README.md": "hello\n"}, "initial commit")

    def git(self, *args: str, author: str | None = None) -> str:
        env = dict(_ENV)
        if author is not None:
            env["GIT_AUTHOR_NAME"] = author
        result = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return result.stdout.strip()

    def commit(self, files: dict[str, str], message: str, *, author: str | None = None) -> str:
        for name, content in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            self.git("add", name)
        self.git("commit", "-q", "-m", message, author=author)
        return self.git("rev-parse", "HEAD")

    def open_pr(
        self,
        number: int,
        files: dict[str, str],
        *,
        title: str | None = None,
        author: str = "Ada Author",
        base: str | None = None,
    ) -> str:
        """Commit `files` on a branch off `base` (default the target) and point the PR ref
        at it; returns the head sha.
        """
        start = base or self.branch
        self.git("checkout", "-q", "-B", f"pr-{number}", start)
        sha = self.commit(files, title or f"PR {number}", author=author)
        self.git("update-ref", f"refs/pull/{number}/head", sha)
        self.git("checkout", "-q", self.branch)
        return sha

    def tip(self, ref: str | None = None) -> str:
        return self.git("rev-parse", ref or self.branch)

    def add_to_pr(
        self,
        number: int,
        files: dict[str, str],
        message: str,
        *,
        author: str | None = None,
        date: str | None = None,
    ) -> str:
        """Commit `files` on top of PR `number` (opened with `open_pr`) and move its ref there;
        `date` sets the author date. Returns the new head sha.
        """
        self.git("checkout", "-q", f"pr-{number}")
        for name, content in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            self.git("add", name)
        self.git(
            "commit", "-q", "-m", message, *([f"--date={date}"] if date else []), author=author
        )
        sha = self.git("rev-parse", "HEAD")
        self.git("update-ref", f"refs/pull/{number}/head", sha)
        self.git("checkout", "-q", self.branch)
        return sha

    def tree(self, rev: str) -> str:
        return self.git("rev-parse", f"{rev}^{{tree}}")

    def parents(self, rev: str) -> list[str]:
        return self.git("rev-list", "--parents", "-n", "1", rev).split()[1:]

    def files(self, rev: str) -> dict[str, str]:
        """Every file of `rev`'s tree with its content (trailing newline dropped)."""
        names = self.git("ls-tree", "-r", "--name-only", rev).splitlines()
        return {name: self.git("show", f"{rev}:{name}") for name in names}

    def log(self, *args: str, fmt: str = "%s") -> list[str]:
        """One formatted line per commit `git log <args>` lists, newest first."""
        output = self.git("log", f"--format={fmt}", *args)
        return output.splitlines() if output else []

    def message(self, rev: str) -> str:
        return self.git("show", "-s", "--format=%B", rev)
