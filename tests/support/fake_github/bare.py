"""The fake GitHub's repositories on disk: bare git repositories written with plumbing commands,
and the three ways GitHub lands a pull request (merge commit, squash, rebase).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

# Files given to the controller: text or bytes to write, None to delete.
Files = Mapping[str, str | bytes | None]

# GitHub commits merges as itself; authors of test commits are given per commit.
GITHUB_IDENTITY = ("GitHub", "noreply@github.com")


class MergeConflict(Exception):
    """The pull request's changes do not apply to its base without conflicts."""


@dataclass(frozen=True)
class Person:
    """An author or committer line of a commit."""

    name: str
    email: str
    date: str  # ISO-8601, as the API shows it


@dataclass(frozen=True)
class CommitInfo:
    """What `git cat-file commit` says about a commit."""

    sha: str
    tree: str
    parents: list[str]
    author: Person
    committer: Person
    message: str


class BareRepository:
    """A bare repository driven with git's command line; every write names its author."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def init(self, *, default_branch: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "--bare", "-b", default_branch)
        # GitHub keeps every object pushed to it; a gc during a test would only cost time.
        self.git("config", "gc.auto", "0")

    def git(
        self,
        *args: str,
        input_bytes: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        cwd: Path | None = None,
    ) -> str:
        """Run git on this repository (or in `cwd`, a work tree of it); its stdout, stripped."""
        full_env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.path),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": GITHUB_IDENTITY[0],
            "GIT_AUTHOR_EMAIL": GITHUB_IDENTITY[1],
            "GIT_COMMITTER_NAME": GITHUB_IDENTITY[0],
            "GIT_COMMITTER_EMAIL": GITHUB_IDENTITY[1],
            **(env or {}),
        }
        location = ["-C", str(cwd)] if cwd else ["--git-dir", str(self.path)]
        result = subprocess.run(
            ["git", *location, *args],
            input=input_bytes,
            capture_output=True,
            env=full_env,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"git {' '.join(args)} exited {result.returncode}: {result.stderr.decode()}"
            )
        return result.stdout.decode().strip()

    def resolve(self, ref: str) -> str | None:
        """The commit `ref` names, or None when it names nothing."""
        sha = self.git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False)
        return sha or None

    def update_ref(self, ref: str, sha: str, *, old: str | None = None) -> None:
        """Point `ref` at `sha`; with `old`, only if it still points there (compare and swap)."""
        self.git("update-ref", ref, sha, *([old] if old else []))

    def delete_ref(self, ref: str) -> None:
        self.git("update-ref", "-d", ref)

    def commit_files(
        self, *, parent: str | None, files: Files, message: str, author: tuple[str, str]
    ) -> str:
        """A new commit: `parent`'s tree with `files` written or deleted; not on any ref."""
        with tempfile.TemporaryDirectory(prefix="fakegh-index-") as scratch:
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            if parent:
                self.git("read-tree", parent, env=env)
            for name, content in files.items():
                if content is None:
                    self.git("update-index", "--force-remove", name, env=env)
                    continue
                data = content.encode() if isinstance(content, str) else content
                blob = self.git("hash-object", "-w", "--stdin", input_bytes=data)
                self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", env=env)
            tree = self.git("write-tree", env=env)
        return self.commit_tree(tree, [parent] if parent else [], message, author=author)

    def commit_tree(
        self,
        tree: str,
        parents: list[str],
        message: str,
        *,
        author: tuple[str, str] = GITHUB_IDENTITY,
    ) -> str:
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        return self.git(
            "commit-tree",
            tree,
            *parent_args,
            input_bytes=message.encode(),
            env={"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1]},
        )

    def merge_tree(self, base: str, head: str) -> str:
        """The tree of merging `head` into `base`, as GitHub computes it; MergeConflict when
        they conflict.
        """
        result = subprocess.run(
            ["git", "--git-dir", str(self.path), "merge-tree", "--write-tree", base, head],
            capture_output=True,
            env={"PATH": os.environ["PATH"], "HOME": str(self.path), "GIT_CONFIG_NOSYSTEM": "1"},
            check=False,
        )
        if result.returncode == 1:
            raise MergeConflict(result.stdout.decode().split("\n", 1)[-1].strip())
        if result.returncode != 0:
            raise RuntimeError(f"git merge-tree exited {result.returncode}: {result.stderr!r}")
        return result.stdout.decode().split("\n", 1)[0].strip()

    def commits_between(self, base: str, head: str) -> list[str]:
        """The commits of `head` not in `base`, oldest first (what a rebase replays)."""
        listed = self.git("rev-list", "--reverse", "--topo-order", "--no-merges", f"{base}..{head}")
        return listed.split()

    def rebase(self, base: str, commits: list[str]) -> str:
        """Replay `commits` on `base` in order, committed by GitHub with their own authors;
        the last new commit, or MergeConflict when one does not apply.
        """
        scratch = Path(tempfile.mkdtemp(prefix="fakegh-rebase-"))
        worktree = scratch / "tree"
        self.git("worktree", "add", "-q", "--detach", str(worktree), base)
        try:
            for commit in commits:
                picked = subprocess.run(
                    ["git", "-C", str(worktree), "cherry-pick", "--allow-empty", commit],
                    capture_output=True,
                    env={
                        "PATH": os.environ["PATH"],
                        "HOME": str(self.path),
                        "GIT_CONFIG_NOSYSTEM": "1",
                        "GIT_COMMITTER_NAME": GITHUB_IDENTITY[0],
                        "GIT_COMMITTER_EMAIL": GITHUB_IDENTITY[1],
                    },
                    check=False,
                )
                if picked.returncode != 0:
                    raise MergeConflict(picked.stdout.decode().strip())
            return self.git("rev-parse", "HEAD", cwd=worktree)
        finally:
            self.git("worktree", "remove", "--force", str(worktree), check=False)
            self.git("worktree", "prune", check=False)
            shutil.rmtree(scratch, ignore_errors=True)

    def commit_info(self, sha: str) -> CommitInfo | None:
        """The commit `sha` (a full or abbreviated id), or None when there is no such commit."""
        full = self.resolve(sha)
        if full is None:
            return None
        raw = self.git(
            "show", "-s", "--format=%T%n%P%n%an%n%ae%n%aI%n%cn%n%ce%n%cI%n%B", full
        ).split("\n", 8)
        tree, parents, an, ae, ad, cn, ce, cd = raw[:8]
        return CommitInfo(
            sha=full,
            tree=tree,
            parents=parents.split(),
            author=Person(an, ae, _utc(ad)),
            committer=Person(cn, ce, _utc(cd)),
            message=raw[8] if len(raw) > 8 else "",
        )

    def heads(self) -> dict[str, str]:
        """Every branch and the commit it points at."""
        listed = self.git("for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads")
        return dict(line.split(" ", 1) for line in listed.splitlines() if line)


def _utc(iso: str) -> str:
    """git's `2024-01-02T03:04:05+00:00` as GitHub's `2024-01-02T03:04:05Z` (all in UTC)."""
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
