"""Test commits and landings made with git plumbing alone: no work tree, no user identity."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from keepgreen.app.ports import BuildConflict, CodeHostError, Landing, LandResult, TestCommit
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import MergeMethod
from keepgreen.core.model import ChainLink

GIT_TIMEOUT_SECONDS = 60
LAND_TRAILER = "Keepgreen-Land"

# Inherited variables that would point git at another object store or ref namespace, or lend
# keepgreen's commits someone else's identity or dates (e.g. when started from a git hook).
_SCRUBBED_ENV = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_COMMON_DIR",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
    }
)
# A trailer line as git reads one: a token, a colon, a value.
# A commit's id as git prints it (SHA-1, or SHA-256 in a repository that uses it).
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_TRAILER_LINE = re.compile(r"[A-Za-z0-9-]+:\s")
# `Name <email> <seconds> <tz>` of an author header.
_IDENT = re.compile(r"(?P<name>.*?) ?<(?P<email>[^<>]*)> (?P<date>\d+ [+-]\d{4})")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a commit is by; `date` is git's raw `<seconds> <tz>`, None for now."""

    name: str
    email: str
    date: str | None = None


KEEPGREEN = Identity("keepgreen", "keepgreen@localhost")


@dataclass(frozen=True, slots=True)
class CommitObject:
    """The parts of a commit object that landing reads or copies."""

    tree: str
    parents: tuple[str, ...]
    author: Identity
    encoding: str | None
    message: str


class Git:
    """Git on one repository (by its git dir) with a fixed environment and a timeout.

    Every git process keepgreen's code host starts goes through `run`, which times it into
    `telemetry` (by subcommand) when given.
    """

    def __init__(self, git_dir: Path, *, telemetry: Telemetry | None = None) -> None:
        self.git_dir = git_dir
        self._telemetry = telemetry

    def run(
        self,
        *args: str,
        config: Sequence[str] = (),
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run `git <args>`; a failure to run, a timeout, or (with `check`) a non-zero exit is a
        CodeHostError. `config` entries are `key=value` for `-c`.
        """
        full_env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        # The system config is the host's business, not the queue's; commits get their
        # identities from the environment only, so no user.name is needed anywhere.
        full_env["GIT_CONFIG_NOSYSTEM"] = "1"
        full_env["GIT_COMMITTER_NAME"] = KEEPGREEN.name
        full_env["GIT_COMMITTER_EMAIL"] = KEEPGREEN.email
        full_env.update(env or {})
        options = [arg for entry in config for arg in ("-c", entry)]
        started = time.perf_counter()
        try:
            result = subprocess.run(
                ["git", f"--git-dir={self.git_dir}", *options, *args],
                input=stdin,
                capture_output=True,
                # Commit messages are copied byte for byte even when they are not UTF-8.
                encoding="utf-8",
                errors="surrogateescape",
                env=full_env,
                timeout=GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            if self._telemetry is not None:
                timed_out = isinstance(error, subprocess.TimeoutExpired)
                self._telemetry.git_call(
                    args[0], time.perf_counter() - started, "timeout" if timed_out else "error"
                )
            raise CodeHostError(f"git {args[0]} failed in {self.git_dir}: {error}") from error
        if self._telemetry is not None:
            self._telemetry.git_call(
                args[0],
                time.perf_counter() - started,
                "ok" if result.returncode == 0 else "exit_nonzero",
            )
        if check and result.returncode != 0:
            raise self.error(args[0], result)
        return result

    def error(self, command: str, result: subprocess.CompletedProcess[str]) -> CodeHostError:
        """The CodeHostError for an unexpected exit of `git <command>`."""
        return CodeHostError(
            f"git {command} failed in {self.git_dir} (exit {result.returncode}): "
            f"{result.stderr.strip()}"
        )

    def resolve(self, rev: str) -> str | None:
        """The commit `rev` names; None when it names none."""
        result = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        return result.stdout.strip() if result.returncode == 0 else None

    def resolve_many(self, revs: Sequence[str]) -> dict[str, str | None]:
        """`resolve` of each of `revs`, by one git process however many they are."""
        if not revs:
            return {}
        result = self.run(
            "cat-file",
            "--batch-check=%(objectname)",
            stdin="".join(f"{rev}^{{commit}}\n" for rev in revs),
            check=True,
        )
        lines = result.stdout.splitlines()
        if len(lines) != len(revs):
            raise CodeHostError(f"git cat-file answered {len(lines)} lines for {len(revs)} refs")
        # A commit's id, or `<rev>^{commit} missing` (or `ambiguous`) for one that names none.
        return {
            rev: (line if _OBJECT_ID.fullmatch(line) else None)
            for rev, line in zip(revs, lines, strict=True)
        }

    def commit(self, sha: str) -> CommitObject:
        """The commit object `sha`, read raw so that its message can be copied exactly."""
        found = self.find_commit(sha)
        if found is None:
            raise CodeHostError(f"commit {sha} is missing or unreadable in {self.git_dir}")
        return found

    def find_commit(self, sha: str) -> CommitObject | None:
        """The commit object `sha`; None when it is not a readable commit."""
        result = self.run("cat-file", "commit", sha)
        if result.returncode != 0:
            return None
        header, _, message = result.stdout.partition("\n\n")
        fields: dict[str, str] = {}
        parents: list[str] = []
        for line in header.split("\n"):
            if line.startswith(" "):
                continue  # continuation of a multi-line header (gpgsig, mergetag)
            key, _, value = line.partition(" ")
            if key == "parent":
                parents.append(value)
            else:
                fields.setdefault(key, value)
        ident = _IDENT.fullmatch(fields.get("author", ""))
        if "tree" not in fields or ident is None:
            return None
        author = Identity(ident["name"], ident["email"], f"@{ident['date']}")
        return CommitObject(fields["tree"], tuple(parents), author, fields.get("encoding"), message)

    def merge(self, ours: str, theirs: str, *, base: str | None = None) -> str | None:
        """The tree of merging commit `theirs` into commit `ours`; None on conflict.

        With `base`, the three-way merge takes `base` as the merge base instead of the one git
        would compute from the histories.
        """
        if base is not None:
            # git 2.39 has no `merge-tree --merge-base` (2.40 added it). Stand-in commits with
            # the same trees whose only parent is `base` make `base` their one merge base, and
            # the merge of two trees over one base is all that `--merge-base` would do.
            ours = self.commit_tree(f"{ours}^{{tree}}", [base], "merge base stand-in\n")
            theirs = self.commit_tree(f"{theirs}^{{tree}}", [base], "merge base stand-in\n")
        result = self.run("merge-tree", "--write-tree", ours, theirs)
        if result.returncode == 0:
            return result.stdout.split("\n", 1)[0].strip()
        if result.returncode == 1:
            return None  # conflicts
        raise self.error("merge-tree", result)

    def commit_tree(
        self,
        tree: str,
        parents: Sequence[str],
        message: str,
        *,
        author: Identity = KEEPGREEN,
        encoding: str | None = None,
    ) -> str:
        """A new commit of `tree` on `parents`, committed by keepgreen; returns its sha.

        The message goes in as it is (through stdin, so git neither completes nor strips it).
        """
        env = {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email}
        if author.date is not None:
            env["GIT_AUTHOR_DATE"] = author.date
        # A message in another encoding keeps its `encoding` header, as the original had it.
        config = [f"i18n.commitEncoding={encoding}"] if encoding else []
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        result = self.run(
            "commit-tree",
            "--no-gpg-sign",
            tree,
            *parent_args,
            config=config,
            env=env,
            stdin=message,
            check=True,
        )
        return result.stdout.strip()

    def update_ref(self, ref: str, new: str, *, old: str | None = None, reason: str) -> bool:
        """Point `ref` at `new`; with `old`, only if it is at `old` now. False when it was not."""
        old_args = [old] if old is not None else []
        return self.run("update-ref", "-m", reason, ref, new, *old_args).returncode == 0

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether `ancestor` is `descendant` or one of its ancestors."""
        result = self.run("merge-base", "--is-ancestor", ancestor, descendant)
        if result.returncode in (0, 1):
            return result.returncode == 0
        raise self.error("merge-base", result)


def build_test_commit(
    git: Git, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
) -> TestCommit | BuildConflict:
    """Merge each PR in order onto `base_sha` and point `refs/heads/<branch>` at the result.

    A conflict leaves every ref as it was.
    """
    current = base_sha
    links: list[ChainLink] = []
    for number, head_sha in prs:
        tree = git.merge(current, head_sha)
        if tree is None:
            return BuildConflict(number)
        current = git.commit_tree(tree, [current, head_sha], f"Merging {head_sha} into {branch}\n")
        links.append(ChainLink(number=number, head_sha=head_sha, commit=current, tree=tree))
    # No old value: a test branch belongs to keepgreen alone, and building again replaces it.
    if not git.update_ref(f"refs/heads/{branch}", current, reason="keepgreen: test commit"):
        raise CodeHostError(f"could not point test branch {branch!r} at {current}")
    return TestCommit(base_sha=base_sha, links=tuple(links))


# Moves `ref` from `old` to `new` and says whether it did: (git, ref, new, old, reason) -> bool.
Swap = Callable[[Git, str, str, str, str], bool]


def local_swap(git: Git, ref: str, new: str, old: str, reason: str) -> bool:
    """The compare-and-swap of a ref in `git` itself."""
    return git.update_ref(ref, new, old=old, reason=reason)


def land(git: Git, landing: Landing, *, swap: Swap = local_swap) -> LandResult:
    """Land `landing` by compare-and-swap on its target branch; see MergeHost.land.

    `swap` moves the branch; when it refuses, the branch is read again from `git` (so a
    remote swap must have brought `git` up to date with the server before answering).
    """
    ref = f"refs/heads/{landing.target_branch}"
    tip = git.resolve(ref)
    if tip is None:
        return LandResult(None, "target_moved")
    if tip != landing.expected_tip:
        return _already_landed(git, tip, landing)

    tip_commit = git.commit(tip)
    if tip == landing.parent_commit or tip_commit.tree == landing.parent_tree:
        tree = landing.link.tree
    elif landing.exact:
        return LandResult(None, "tree_mismatch")
    else:
        # Parallel lanes: the PR's tested change (parent -> link) merged onto what the branch
        # holds now, so unrelated lanes' landings are kept.
        merged = git.merge(tip, landing.link.commit, base=landing.parent_commit)
        if merged is None:
            return LandResult(None, "conflict")
        tree = merged

    made = _new_tip(git, landing, tip=tip, tree=tree)
    if isinstance(made, LandResult):
        return made
    reason = f"keepgreen: land #{landing.link.number} ({landing.method.value})"
    if swap(git, ref, made, tip, reason):
        return LandResult(made)
    now = git.resolve(ref)
    if now is None:
        return LandResult(None, "target_moved")
    if now == tip:
        # The branch did not move, so the swap failed for another reason (a stale lock file,
        # a broken ref): not something the queue can decide on.
        raise CodeHostError(f"could not move {ref} from {tip} to {made} in {git.git_dir}")
    return _already_landed(git, now, landing)


def _already_landed(git: Git, tip: str, landing: Landing) -> LandResult:
    """The branch is not where the landing expected it: done already, or moved by others."""
    if tip == landing.link.commit:
        return LandResult(tip)  # a fast-forward merge_commit landing leaves no trailer
    if _trailer(landing.token) in git.commit(tip).message.splitlines():
        return LandResult(tip)
    return LandResult(None, "target_moved")


def _new_tip(git: Git, landing: Landing, *, tip: str, tree: str) -> str | LandResult:
    """The commit the branch should move to from `tip`, holding `tree`; a LandResult when the
    method cannot produce `tree`.
    """
    link = landing.link
    trailer = _trailer(landing.token)
    match landing.method:
        case MergeMethod.MERGE_COMMIT:
            if tip == landing.parent_commit:
                tested = git.commit(link.commit)
                # Only a commit that sits on the tip and holds the tree lands as it is; a
                # malformed landing must neither drop commits nor land another tree.
                if tested.parents[:1] == (tip,) and tested.tree == tree:
                    return link.commit
            message = f"Merge pull request #{link.number}: {landing.title}\n\n{trailer}\n"
            return git.commit_tree(tree, [tip, link.head_sha], message)
        case MergeMethod.SQUASH:
            message = f"{landing.title} (#{link.number})\n\n{trailer}\n"
            return git.commit_tree(tree, [tip], message, author=_pr_author(git, landing))
        case MergeMethod.REBASE:
            return _replay(git, landing, tip=tip, tree=tree)


def _pr_author(git: Git, landing: Landing) -> Identity:
    """The PR head commit's author (its name and email; the date is the landing's), or the
    landing's author name when the head cannot be read.
    """
    head = git.find_commit(landing.link.head_sha)
    if head is not None and head.author.name:
        return Identity(head.author.name, head.author.email)
    name = landing.author.strip() or KEEPGREEN.name
    local_part = re.sub(r"[^A-Za-z0-9._+-]+", ".", name).strip(".") or "unknown"
    return Identity(name, f"{local_part}@localhost")


def _replay(git: Git, landing: Landing, *, tip: str, tree: str) -> str | LandResult:
    """The PR's own commits replayed one by one onto `tip`, authors and messages kept; the last
    one carries the landing trailer. Refuses unless the replay ends on exactly `tree`.
    """
    listed = git.run(
        "rev-list",
        "--reverse",
        "--no-merges",
        landing.link.head_sha,
        "--not",
        landing.parent_commit,
        check=True,
    )
    commits = listed.stdout.split()
    if not commits:
        return LandResult(None, "tree_mismatch")  # nothing of the PR's own to land
    current = tip
    for index, sha in enumerate(commits):
        original = git.commit(sha)
        if len(original.parents) != 1:
            return LandResult(None, "conflict")  # a root commit has no change to replay
        merged = git.merge(current, sha, base=original.parents[0])
        if merged is None:
            return LandResult(None, "conflict")
        message = original.message
        if index == len(commits) - 1:
            if merged != tree:
                # The tree that lands must be the tree that was tested.
                return LandResult(None, "tree_mismatch")
            message = _with_trailer(message, _trailer(landing.token))
        current = git.commit_tree(
            merged, [current], message, author=original.author, encoding=original.encoding
        )
    return current


def replay_tree(git: Git, *, head_sha: str, onto: str, since: str) -> str | None:
    """The tree a rebase merge ends on: the commits of `head_sha` that `since` lacks, replayed
    one by one onto `onto` (as `_replay` does, with stand-in commits: only the tree matters);
    None when one of them does not apply or is not a plain commit.
    """
    listed = git.run("rev-list", "--reverse", "--no-merges", head_sha, "--not", since, check=True)
    current, tree = onto, None
    for sha in listed.stdout.split():
        original = git.commit(sha)
        if len(original.parents) != 1:
            return None
        tree = git.merge(current, sha, base=original.parents[0])
        if tree is None:
            return None
        current = git.commit_tree(tree, [current], "rebase stand-in\n")
    return tree


def _trailer(token: str) -> str:
    return f"{LAND_TRAILER}: {token}"


def _with_trailer(message: str, trailer: str) -> str:
    """`message` with `trailer` added to its trailer block (a new last paragraph if none)."""
    body = message.rstrip("\n")
    if not body:
        return f"{trailer}\n"
    paragraphs = body.split("\n\n")
    last = paragraphs[-1].split("\n")
    # The first paragraph is the subject, never trailers (git's rule too).
    if len(paragraphs) > 1 and all(_TRAILER_LINE.match(line) for line in last):
        return f"{body}\n{trailer}\n"
    return f"{body}\n\n{trailer}\n"
