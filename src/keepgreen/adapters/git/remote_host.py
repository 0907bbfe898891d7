"""The code host for repositories on a git server, worked on through a bare mirror per repository.

Reads, test commits and landings happen in `<data dir>/git/mirrors/<repository id>.git` exactly as
the local host does them in a local repository. The mirror is brought up to date by fetches that
name exactly the refs the passes read: the host remembers, per repository, the branches and pull
requests it was asked about (each for `WANTED_SECONDS` after it was last asked), and fetches
them all in one `git fetch` at most once per fetch interval; a read of a ref it was not asked
about before fetches that ref at once. The server learns of keepgreen's work by pushes: test
branches by a forced push of keepgreen's own refs (made in the mirror, so never fetched), the
target branch only by `--force-with-lease` from the tip the queue tested on. The mirror keeps no
remote and no URL in its config: every network call names the URL and gets its credentials
from `credentials.remote_git_environment`.
"""

from __future__ import annotations

import fcntl
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from keepgreen.adapters.git import merging
from keepgreen.adapters.git.local_host import LocalGitHost, local_path
from keepgreen.adapters.git.merging import Git
from keepgreen.adapters.git.remote import (
    REMOTE_TIMEOUT_SECONDS,
    RemoteResult,
    failure,
    run_remote_git,
    scrub,
    server_said,
)
from keepgreen.app.ports import (
    BuildConflict,
    CodeHostError,
    Landing,
    LandResult,
    MergeHost,
    TestCommit,
)
from keepgreen.app.telemetry import GitResult, Telemetry
from keepgreen.core.enums import Mergeability
from keepgreen.core.git_urls import redact_url
from keepgreen.core.model import PullRequestInfo, Repository

# A pass reads a repository many times (each PR's head, the target's tip): one fetch serves them.
FETCH_INTERVAL_SECONDS = 1.0
# A branch or pull request no read asked about for this long is no longer fetched.
WANTED_SECONDS = 600.0
# How a fetch is kept cheap on a long history and many refs: no tags; negotiation starts from the
# mirror's copies of the wanted refs only (not from every test branch and old PR ref) and skips
# through history instead of walking it commit by commit; no check of which updates were forced
# (it walks history); no FETCH_HEAD, no gc. `--prune` is not used: with exact refspecs a ref gone
# from the server fails the fetch rather than being pruned, and is handled below.
_FETCH_OPTIONS = (
    "-c",
    "fetch.negotiationAlgorithm=skipping",
    "fetch",
    "--quiet",
    "--no-tags",
    "--no-write-fetch-head",
    "--no-auto-gc",
    "--no-show-forced-updates",
    "--no-recurse-submodules",
)
_GONE_ON_SERVER = "remote ref does not exist"
_SERVER_REJECTED = "[remote rejected]"
_MAX_SENTENCE = 500
# What git says (and then fetches nothing) when an exact refspec names a ref the server lacks.
_MISSING_REMOTE_REF = re.compile(r"couldn't find remote ref (\S+)", re.IGNORECASE)


def mirror_path(data_dir: Path, repository_id: str) -> Path:
    """Where keepgreen keeps the bare mirror of a repository on a git server."""
    return data_dir.absolute() / "git" / "mirrors" / f"{repository_id}.git"


def is_remote(repo: Repository) -> bool:
    """Whether the repository lives on a git server rather than on this machine's disk."""
    return local_path(repo.git_url) is None


@dataclass
class _Wanted:
    """What the reads of one repository asked of its server, and how fresh the mirror is.

    Times are the host's monotonic clock; a fetch's time is when it began, so a ref counts as
    no fresher than the server's state at that moment.
    """

    asked: dict[str, float] = field(default_factory=dict)  # ref -> when a read last asked
    fetched: dict[str, float] = field(default_factory=dict)  # ref -> its last fetch
    gone: set[str] = field(default_factory=set)  # refs the last fetch of them did not find
    all_fetched_at: float | None = None  # the last fetch of every wanted ref

    def ask(self, refs: Sequence[str], now: float, *, fresh: Callable[[str], bool]) -> None:
        """Note that `refs` are wanted from `now` on; a ref found gone is answered "gone"
        (and not wanted) until that answer is stale, so the reads that learn of it do not
        make every fetch ask for it again.
        """
        for ref in refs:
            if ref in self.gone and fresh(ref):
                continue
            self.gone.discard(ref)
            self.asked[ref] = now


@dataclass(frozen=True, slots=True)
class _Plan:
    refs: tuple[str, ...]  # what this fetch asks the server for
    tips: tuple[str, ...]  # the wanted refs: negotiation starts from the mirror's copies
    started: float
    everything: bool  # every wanted ref, not only the ones just asked about


class RemoteGitHost:
    """The MergeHost port over repositories on a git server (http(s)://, git://, ssh://, scp)."""

    def __init__(
        self,
        *,
        data_dir: Path,
        telemetry: Telemetry | None = None,
        fetch_interval: float = FETCH_INTERVAL_SECONDS,
        wanted_seconds: float = WANTED_SECONDS,
        timeout: float = REMOTE_TIMEOUT_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._data_dir = data_dir
        self._telemetry = telemetry
        self._fetch_interval = fetch_interval
        self._wanted_seconds = wanted_seconds
        self._timeout = timeout
        self._monotonic = monotonic
        self._wanted: dict[str, _Wanted] = {}
        self._wanted_lock = threading.Lock()
        # Per repository, the wanted refs as the last fetch left them in the mirror (None for
        # one the server lacks): a pass's reads resolve refs here, not by a git process each.
        # Dropped by every write to the mirror's refs; taken again after the next fetch.
        self._snapshots: dict[str, dict[str, str | None]] = {}
        # The mirror's reads are the local host's reads on the mirror's git dir.
        self._reads = _MirrorReads(self)

    @property
    def telemetry(self) -> Telemetry | None:
        return self._telemetry

    # -- reads ----------------------------------------------------------------------------

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        """The PR's head, title and author as the server has them; None when its ref is gone."""
        self._ensure(repo, [repo.pull_request_ref(number)])
        return self._reads.pull_request(repo, number)

    def pull_request_heads(
        self, repo: Repository, numbers: Sequence[int], *, fresh: bool = False
    ) -> dict[int, str | None]:
        """Each PR's head as the server has it (None: its ref is gone); `fresh`: fetched now,
        not as of the last fetch.
        """
        self._ensure(repo, [repo.pull_request_ref(number) for number in numbers], force=fresh)
        return self._reads.pull_request_heads(repo, numbers)

    def mergeability(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> Mergeability:
        """Whether `head_sha` merges cleanly onto the server's target tip."""
        self._ensure(repo, [f"refs/heads/{target_branch}"])
        return self._reads.mergeability(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        """The server's `refs/heads/<branch>` (as of the last fetch, at most an interval ago);
        None when the server has no such branch.
        """
        self._ensure(repo, [f"refs/heads/{branch}"])
        return self._reads.branch_tip(repo, branch)

    def is_up_to_date(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> bool:
        """Whether the server's target tip is an ancestor of (or equal to) `head_sha`."""
        self._ensure(repo, [f"refs/heads/{target_branch}"])
        return self._reads.is_up_to_date(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    def tree_of(self, repo: Repository, commit: str) -> str:
        """The tree id of `commit`, read in the mirror (fetched again once if it is missing)."""
        try:
            return self._reads.tree_of(repo, commit)
        except CodeHostError:
            self._ensure(repo, [], force=True)
            return self._reads.tree_of(repo, commit)

    # -- writes ---------------------------------------------------------------------------

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        """Build the test commit in the mirror (as the local host does) and push it to the
        server as `refs/heads/<branch>`, replacing what keepgreen pushed there before.
        """
        git = self.mirror(repo)
        heads = [repo.pull_request_ref(number) for number, _ in prs]
        with self._locked(repo):
            # The base and the heads were read through the mirror, so they are there, unless
            # another process asked for them: then fetch every wanted ref (the base's branch too).
            self._note(repo, heads)
            if not _has_commits(git, [base_sha, *(sha for _, sha in prs)]):
                self._fetch_wanted(repo, git, heads, force=True)
            self._forget_snapshot(repo)
            built = merging.build_test_commit(git, base_sha=base_sha, prs=prs, branch=branch)
            if isinstance(built, BuildConflict):
                return built
            tip = built.links[-1].commit if built.links else built.base_sha
            # Forced: a test branch is keepgreen's own, and building again replaces it.
            self._push(repo, [f"+{tip}:refs/heads/{branch}"])
        return built

    def delete_branch(self, repo: Repository, branch: str) -> None:
        """Delete `refs/heads/<branch>` on the server and in the mirror; already gone is fine."""
        git = self.mirror(repo)
        with self._locked(repo):
            self._forget_snapshot(repo)
            result = self._push(repo, [f":refs/heads/{branch}"], check=False)
            if result.returncode != 0 and _GONE_ON_SERVER not in result.stderr.lower():
                raise failure(repo.git_url, repo.auth, result.stderr)
            git.run("update-ref", "-d", f"refs/heads/{branch}", check=True)

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        """Build the landing commit in the mirror and move the server's target branch to it by
        `--force-with-lease` from the mirror's tip; a refused push fetches again and answers
        as the local host does for a branch that moved.
        """
        git = self.mirror(repo)
        target = f"refs/heads/{landing.target_branch}"
        with self._locked(repo):
            # The lease makes the push safe however old the mirror's tip is; fresh, it spares a
            # push that would be refused.
            self._fetch_wanted(repo, git, [target])

            def swap(git: Git, ref: str, new: str, old: str, reason: str) -> bool:
                result = self._push(
                    repo, [f"--force-with-lease={ref}:{old}", f"{new}:{ref}"], check=False
                )
                if result.returncode == 0:
                    # The mirror follows the server: only what it accepted moves the branch here.
                    self._forget_snapshot(repo)
                    git.update_ref(ref, new, reason=reason)
                    return True
                refusal = _refusal(result.stdout, ref)
                if refusal is None:
                    raise failure(repo.git_url, repo.auth, result.stderr)
                self._fetch_wanted(repo, git, [ref], force=True)
                # A branch that moved explains any refusal (the lease, or a ref lock lost to a
                # concurrent push); one still at `old` was refused by the server's own rule.
                if refusal.startswith(_SERVER_REJECTED) and git.resolve(ref) == old:
                    raise _Rejected(_rejection_sentence(repo, ref, refusal, result.stderr))
                return False

            try:
                return merging.land(git, landing, swap=swap)
            except _Rejected as rejected:
                # The server's own rule (a hook, a protected branch) said no: the lease held,
                # so trying again would be refused again. The PR leaves with the answer.
                return LandResult(None, "push_rejected", detail=str(rejected))

    # -- the mirror -----------------------------------------------------------------------

    def mirror(self, repo: Repository) -> Git:
        """The repository's mirror (made on first use), without fetching."""
        path = mirror_path(self._data_dir, str(repo.id))
        if not (path / "HEAD").is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            made = subprocess.run(
                ["git", "init", "--quiet", "--bare", str(path)],
                capture_output=True,
                text=True,
                timeout=merging.GIT_TIMEOUT_SECONDS,
                check=False,
            )
            if made.returncode != 0:
                raise CodeHostError(
                    f"repository {repo.ref}: the mirror {path} cannot be made: "
                    f"{made.stderr.strip()}"
                )
        return Git(path, telemetry=self._telemetry)

    def rebase_tree(self, repo: Repository, *, head_sha: str, onto: str, since: str) -> str | None:
        """The tree replaying the PR's commits (those of `head_sha` not in `since`) onto `onto`
        ends on, computed in the mirror; None when they do not replay cleanly.
        """
        git = self.mirror(repo)
        with self._locked(repo):
            return merging.replay_tree(git, head_sha=head_sha, onto=onto, since=since)

    def refresh(self, repo: Repository, refs: Sequence[str]) -> None:
        """Fetch `refs` now, with every other ref the queue wants (a branch moved by a call
        that is not a git push, such as a merge through GitHub's API).
        """
        self._ensure(repo, refs, force=True)

    def _ensure(self, repo: Repository, refs: Sequence[str], *, force: bool = False) -> Git:
        """The mirror, holding `refs` as the server had them at most a fetch interval ago
        (or all wanted refs fetched now, with `force`).
        """
        git = self.mirror(repo)
        if self._note(repo, refs) and not force:
            return git
        with self._locked(repo):
            self._fetch_wanted(repo, git, refs, force=force)
        return git

    def _note(self, repo: Repository, refs: Sequence[str]) -> bool:
        """Remember that `refs` are wanted; whether the mirror holds them all fresh."""
        now = self._monotonic()
        with self._wanted_lock:
            wanted = self._wanted.setdefault(str(repo.id), _Wanted())
            wanted.ask(refs, now, fresh=lambda ref: self._is_fresh(wanted, ref, now))
            return all(self._is_fresh(wanted, ref, now) for ref in refs)

    def _is_fresh(self, wanted: _Wanted, ref: str, now: float) -> bool:
        fetched = wanted.fetched.get(ref)
        return fetched is not None and now - fetched < self._fetch_interval

    def _fetch_wanted(
        self, repo: Repository, git: Git, refs: Sequence[str], *, force: bool = False
    ) -> None:
        """Fetch what is stale (the caller holds the mirror's lock): every wanted ref when the
        last such fetch is an interval old (or with `force`), else only the stale ones of `refs`.
        """
        now = self._monotonic()
        with self._wanted_lock:
            wanted = self._wanted.setdefault(str(repo.id), _Wanted())
            wanted.ask(refs, now, fresh=lambda ref: self._is_fresh(wanted, ref, now))
            if not force and all(self._is_fresh(wanted, ref, now) for ref in refs):
                return  # another thread fetched them while this one waited for the lock
            for ref, asked in list(wanted.asked.items()):
                if now - asked >= self._wanted_seconds:
                    del wanted.asked[ref]
                    wanted.fetched.pop(ref, None)
            for ref in [ref for ref in wanted.gone if not self._is_fresh(wanted, ref, now)]:
                wanted.gone.discard(ref)
                wanted.fetched.pop(ref, None)
            last = wanted.all_fetched_at
            everything = force or last is None or now - last >= self._fetch_interval
            stale = [
                ref for ref in refs if ref in wanted.asked and not self._is_fresh(wanted, ref, now)
            ]
            plan = _Plan(
                refs=tuple(sorted(wanted.asked)) if everything else tuple(stale),
                tips=tuple(sorted(wanted.asked)),
                started=now,
                everything=everything,
            )
        fetched, gone = self._fetch(repo, git, plan)
        with self._wanted_lock:
            wanted = self._wanted.setdefault(str(repo.id), _Wanted())
            if plan.everything or wanted.all_fetched_at is None:
                wanted.all_fetched_at = plan.started
            # A ref fetched alone goes stale with the others, so that one fetch serves them all.
            stamp = wanted.all_fetched_at
            for ref in fetched:
                wanted.fetched[ref] = stamp
                wanted.gone.discard(ref)
            for ref in gone:
                wanted.fetched[ref] = stamp
                wanted.gone.add(ref)
                wanted.asked.pop(ref, None)
            refs = sorted({*wanted.asked, *wanted.gone})
        self._take_snapshot(repo, git, refs)

    def _take_snapshot(self, repo: Repository, git: Git, refs: Sequence[str]) -> None:
        """Read `refs` from the mirror by one `git for-each-ref` (the caller holds its lock)."""
        if not refs:
            return  # (no pattern would list every ref)
        listed = git.run(
            "for-each-ref", "--format=%(objectname) %(refname)", *refs, check=True
        ).stdout
        found = dict(line.split(" ", 1)[::-1] for line in listed.splitlines() if " " in line)
        snapshot: dict[str, str | None] = {ref: found.get(ref) for ref in refs}
        with self._wanted_lock:
            self._snapshots[str(repo.id)] = snapshot

    def _forget_snapshot(self, repo: Repository) -> None:
        """The mirror's refs changed here: reads go to git until the next fetch."""
        with self._wanted_lock:
            self._snapshots.pop(str(repo.id), None)

    def snapshot(self, repo: Repository) -> dict[str, str | None] | None:
        """The refs the last fetch left in the mirror, unless the mirror changed since."""
        with self._wanted_lock:
            return self._snapshots.get(str(repo.id))

    def _fetch(self, repo: Repository, git: Git, plan: _Plan) -> tuple[list[str], list[str]]:
        """One `git fetch` of `plan.refs` into the same names in the mirror; the refs fetched,
        and those the server no longer has (deleted from the mirror too). A ref the server
        lacks fails a fetch as a whole, so it is dropped and the rest fetched again.
        """
        remaining, gone = list(plan.refs), []
        # Each tip as a glob matching exactly that ref: a tip the mirror lacks is then skipped
        # (with a warning) instead of failing the fetch.
        tips = [f"--negotiation-tip={_exact_glob(ref)}" for ref in plan.tips]
        while remaining:
            result = self._remote(
                "fetch",
                [
                    f"--git-dir={git.git_dir}",
                    *_FETCH_OPTIONS,
                    *tips,
                    repo.git_url,
                    *(f"+{ref}:{ref}" for ref in remaining),
                ],
                repo,
                check=False,
            )
            if result.returncode == 0:
                break
            found = _MISSING_REMOTE_REF.search(result.stderr)
            missing = found.group(1).strip("'\"") if found else None
            if missing not in remaining:
                raise failure(repo.git_url, repo.auth, result.stderr)
            remaining.remove(missing)
            gone.append(missing)
        if gone:
            # The mirror forgets them as the server did: reads answer "no such PR / branch".
            git.run(
                "update-ref", "--stdin", stdin="".join(f"delete {r}\n" for r in gone), check=True
            )
        return remaining, gone

    def _push(
        self, repo: Repository, refspecs: Sequence[str], *, check: bool = True
    ) -> RemoteResult:
        git_dir = mirror_path(self._data_dir, str(repo.id))
        result = self._remote(
            "push",
            [f"--git-dir={git_dir}", "push", "--porcelain", repo.git_url, *refspecs],
            repo,
            check=False,
        )
        if check and result.returncode != 0:
            # --porcelain tells a refusal (`[remote rejected] ...`) on stdout, the rest on stderr.
            raise failure(repo.git_url, repo.auth, f"{result.stderr}\n{result.stdout}")
        return result

    def _remote(
        self, operation: str, args: Sequence[str], repo: Repository, *, check: bool
    ) -> RemoteResult:
        """`run_remote_git`, counted and timed into telemetry as `operation`."""
        started = time.perf_counter()
        outcome: GitResult = "error"
        try:
            result = run_remote_git(
                args, url=repo.git_url, auth=repo.auth, timeout=self._timeout, check=check
            )
            outcome = "ok" if result.returncode == 0 else "exit_nonzero"
            return result
        except CodeHostError:
            outcome = "exit_nonzero"
            raise
        finally:
            if self._telemetry is not None:
                self._telemetry.git_call(operation, time.perf_counter() - started, outcome)

    @contextmanager
    def _locked(self, repo: Repository) -> Iterator[None]:
        """One fetch or push sequence at a time per mirror, across threads and processes."""
        lock_file = mirror_path(self._data_dir, str(repo.id)).with_suffix(".lock")
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        with lock_file.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _exact_glob(ref: str) -> str:
    """A glob matching `ref` alone: its last character as a bracket expression (refs hold no
    `[`, `*` or `?`, so the rest matches itself).
    """
    last = ref[-1]
    return f"{ref[:-1]}[{last}]" if last.isalnum() else f"{ref[:-1]}?"


def _has_commits(git: Git, shas: Sequence[str]) -> bool:
    """Whether the mirror holds every commit of `shas`, by one `git cat-file --batch-check`."""
    result = git.run("cat-file", "--batch-check", stdin="".join(f"{sha}\n" for sha in shas))
    lines = result.stdout.splitlines()
    return (
        result.returncode == 0
        and len(lines) == len(shas)
        and not any(line.endswith(" missing") for line in lines)
    )


def _refusal(porcelain: str, ref: str) -> str | None:
    """What `git push --porcelain` says of a refused `ref` (`[rejected] (stale info)` for a
    lease that no longer holds, `[remote rejected] (...)` for the server's own refusal); None
    when the push of `ref` was not refused.
    """
    for line in porcelain.splitlines():
        flag, _, rest = line.partition("\t")
        refspec, _, summary = rest.partition("\t")
        if flag == "!" and refspec.endswith(f":{ref}"):
            return summary.strip() or "[rejected]"
    return None


class _Rejected(Exception):
    """The server refused a landing push for a reason of its own (not the lease)."""


def _rejection_sentence(repo: Repository, ref: str, refusal: str, stderr: str) -> str:
    """One sentence: the server refused the push of `ref`, with its reason and what its hook
    printed (`remote:` lines), secrets taken out and cut to a readable length.
    """
    said = server_said(stderr, repo.auth)
    reason = refusal.removeprefix(_SERVER_REJECTED).strip(" ()") or "no reason given"
    sentence = f"git-url {redact_url(repo.git_url)} refused the push to {ref}: {reason}"
    if said:
        sentence += f"; the server said: {said}"
    sentence = scrub(sentence, repo.auth)
    return sentence if len(sentence) <= _MAX_SENTENCE else sentence[: _MAX_SENTENCE - 1] + "…"


class _MirrorReads(LocalGitHost):
    """The local host's reads, done in a remote repository's mirror (fetched by the host)."""

    def __init__(self, host: RemoteGitHost) -> None:
        super().__init__()
        self._host = host

    def _open(self, repo: Repository) -> Git:
        git = self._host.mirror(repo)  # the host fetched what the read needs
        snapshot = self._host.snapshot(repo)
        if snapshot is None:
            return git
        return _SnapshotGit(git.git_dir, snapshot, telemetry=self._host.telemetry)


class _SnapshotGit(Git):
    """The mirror, whose wanted refs resolve from the host's snapshot of them."""

    def __init__(
        self, git_dir: Path, refs: dict[str, str | None], *, telemetry: Telemetry | None
    ) -> None:
        super().__init__(git_dir, telemetry=telemetry)
        self._refs = refs

    def resolve(self, rev: str) -> str | None:
        if rev in self._refs:
            return self._refs[rev]
        return super().resolve(rev)

    def resolve_many(self, revs: Sequence[str]) -> dict[str, str | None]:
        known = {rev: self._refs[rev] for rev in revs if rev in self._refs}
        return known | super().resolve_many([rev for rev in revs if rev not in known])


class CodeHosts:
    """The MergeHost port over every repository: local ones by the local host, those on a git
    server by the remote host, those that came through the GitHub App by `github` (when the
    App is configured).
    """

    def __init__(
        self, *, local: LocalGitHost, remote: RemoteGitHost, github: MergeHost | None = None
    ) -> None:
        self._local = local
        self._remote = remote
        self._github = github

    def _for(self, repo: Repository) -> MergeHost:
        if self._github is not None and repo.github_installation_id is not None:
            return self._github
        return self._remote if is_remote(repo) else self._local

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        return self._for(repo).pull_request(repo, number)

    def pull_request_heads(
        self, repo: Repository, numbers: Sequence[int], *, fresh: bool = False
    ) -> Mapping[int, str | None]:
        return self._for(repo).pull_request_heads(repo, numbers, fresh=fresh)

    def mergeability(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> Mergeability:
        return self._for(repo).mergeability(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        return self._for(repo).branch_tip(repo, branch)

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        return self._for(repo).build_test_commit(repo, base_sha=base_sha, prs=prs, branch=branch)

    def delete_branch(self, repo: Repository, branch: str) -> None:
        self._for(repo).delete_branch(repo, branch)

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        return self._for(repo).land(repo, landing)

    def is_up_to_date(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> bool:
        return self._for(repo).is_up_to_date(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    def tree_of(self, repo: Repository, commit: str) -> str:
        return self._for(repo).tree_of(repo, commit)


__all__ = ["CodeHosts", "RemoteGitHost", "is_remote", "mirror_path"]
