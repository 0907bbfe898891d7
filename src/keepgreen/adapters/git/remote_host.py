"""The code host for repositories on a git server, worked on through a bare mirror per repository.

Reads, test commits and landings happen in `<data dir>/git/mirrors/<repository id>.git` exactly as
the local host does them in a local repository; the mirror is brought up to date by a fetch (at
most one per short interval) and the server learns of keepgreen's work by pushes: test branches
by a forced push of keepgreen's own refs, the target branch only by `--force-with-lease` from the
tip the queue tested on. The mirror keeps no remote and no URL in its config: every network call
names the URL and gets its credentials from `credentials.remote_git_environment`.
"""

from __future__ import annotations

import fcntl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
)
from keepgreen.app.ports import (
    BuildConflict,
    CodeHostError,
    Landing,
    LandResult,
    TestCommit,
)
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import Mergeability
from keepgreen.core.git_urls import redact_url
from keepgreen.core.model import PullRequestInfo, Repository

# Branches and PR heads; `--prune` drops what the server deleted.
FETCH_REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/pull/*/head:refs/pull/*/head")
# A pass reads a repository many times (each PR's head, the target's tip): one fetch serves them.
FETCH_INTERVAL_SECONDS = 1.0
_GONE_ON_SERVER = "remote ref does not exist"
_SERVER_REJECTED = "[remote rejected]"
_MAX_SENTENCE = 500


def mirror_path(data_dir: Path, repository_id: str) -> Path:
    """Where keepgreen keeps the bare mirror of a repository on a git server."""
    return data_dir.absolute() / "git" / "mirrors" / f"{repository_id}.git"


def is_remote(repo: Repository) -> bool:
    """Whether the repository lives on a git server rather than on this machine's disk."""
    return local_path(repo.git_url) is None


class RemoteGitHost:
    """The MergeHost port over repositories on a git server (http(s)://, git://, ssh://, scp)."""

    def __init__(
        self,
        *,
        data_dir: Path,
        telemetry: Telemetry | None = None,
        fetch_interval: float = FETCH_INTERVAL_SECONDS,
        timeout: float = REMOTE_TIMEOUT_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._data_dir = data_dir
        self._telemetry = telemetry
        self._fetch_interval = fetch_interval
        self._timeout = timeout
        self._monotonic = monotonic
        self._fetched_at: dict[str, float] = {}
        self._fetched_lock = threading.Lock()
        # The mirror's reads are the local host's reads on the mirror's git dir.
        self._reads = _MirrorReads(self)

    # -- reads ----------------------------------------------------------------------------

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        """The PR's head, title and author as the server has them; None when its ref is gone."""
        return self._reads.pull_request(repo, number)

    def mergeability(self, repo: Repository, *, head_sha: str, target_branch: str) -> Mergeability:
        """Whether `head_sha` merges cleanly onto the server's target tip."""
        return self._reads.mergeability(repo, head_sha=head_sha, target_branch=target_branch)

    def branch_tip(self, repo: Repository, branch: str) -> str | None:
        """The server's `refs/heads/<branch>` (as of the last fetch, at most an interval ago)."""
        return self._reads.branch_tip(repo, branch)

    def is_up_to_date(self, repo: Repository, *, head_sha: str, target_branch: str) -> bool:
        """Whether the server's target tip is an ancestor of (or equal to) `head_sha`."""
        return self._reads.is_up_to_date(repo, head_sha=head_sha, target_branch=target_branch)

    def tree_of(self, repo: Repository, commit: str) -> str:
        """The tree id of `commit`, read in the mirror."""
        return self._reads.tree_of(repo, commit)

    # -- writes ---------------------------------------------------------------------------

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        """Build the test commit in the mirror (as the local host does) and push it to the
        server as `refs/heads/<branch>`, replacing what keepgreen pushed there before.
        """
        git = self.mirror(repo)
        with self._locked(repo):
            self._fetch_if_stale(repo, git)  # the base and the heads must be in the mirror
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
            result = self._push(repo, [f":refs/heads/{branch}"], check=False)
            if result.returncode != 0 and _GONE_ON_SERVER not in result.stderr.lower():
                raise failure(repo.git_url, repo.auth, result.stderr)
            git.run("update-ref", "-d", f"refs/heads/{branch}", check=True)

    def land(self, repo: Repository, landing: Landing) -> LandResult:
        """Build the landing commit in the mirror and move the server's target branch to it by
        `--force-with-lease` from the tip read just before; a refused push re-reads the server
        and answers as the local host does for a branch that moved.
        """
        git = self.mirror(repo)
        with self._locked(repo):
            self._fetch(repo, git)

            def swap(git: Git, ref: str, new: str, old: str, reason: str) -> bool:
                result = self._push(
                    repo, [f"--force-with-lease={ref}:{old}", f"{new}:{ref}"], check=False
                )
                if result.returncode == 0:
                    # The mirror follows the server: only what it accepted moves the branch here.
                    git.update_ref(ref, new, reason=reason)
                    return True
                refusal = _refusal(result.stdout, ref)
                if refusal is None:
                    raise failure(repo.git_url, repo.auth, result.stderr)
                self._fetch(repo, git)
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

    def synced(self, repo: Repository) -> Git:
        """The mirror, fetched from the server unless it was within the fetch interval."""
        git = self.mirror(repo)
        with self._locked(repo):
            self._fetch_if_stale(repo, git)
        return git

    def _fetch_if_stale(self, repo: Repository, git: Git) -> None:
        with self._fetched_lock:
            last = self._fetched_at.get(str(repo.id))
        if last is None or self._monotonic() - last >= self._fetch_interval:
            self._fetch(repo, git)

    def _fetch(self, repo: Repository, git: Git) -> None:
        run_remote_git(
            [
                f"--git-dir={git.git_dir}",
                "fetch",
                "--quiet",
                "--prune",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-auto-gc",
                repo.git_url,
                *FETCH_REFSPECS,
            ],
            url=repo.git_url,
            auth=repo.auth,
            timeout=self._timeout,
        )
        with self._fetched_lock:
            self._fetched_at[str(repo.id)] = self._monotonic()

    def _push(
        self, repo: Repository, refspecs: Sequence[str], *, check: bool = True
    ) -> RemoteResult:
        git_dir = mirror_path(self._data_dir, str(repo.id))
        return run_remote_git(
            [f"--git-dir={git_dir}", "push", "--porcelain", repo.git_url, *refspecs],
            url=repo.git_url,
            auth=repo.auth,
            timeout=self._timeout,
            check=check,
        )

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
    said = " ".join(
        line.removeprefix("remote:").strip()
        for line in stderr.splitlines()
        if line.startswith("remote:") and line.removeprefix("remote:").strip()
    )
    reason = refusal.removeprefix(_SERVER_REJECTED).strip(" ()") or "no reason given"
    sentence = f"git-url {redact_url(repo.git_url)} refused the push to {ref}: {reason}"
    if said:
        sentence += f"; the server said: {said}"
    sentence = scrub(sentence, repo.auth)
    return sentence if len(sentence) <= _MAX_SENTENCE else sentence[: _MAX_SENTENCE - 1] + "…"


class _MirrorReads(LocalGitHost):
    """The local host's reads, done in a remote repository's freshly fetched mirror."""

    def __init__(self, host: RemoteGitHost) -> None:
        super().__init__()
        self._host = host

    def _open(self, repo: Repository) -> Git:
        return self._host.synced(repo)


class CodeHosts:
    """The MergeHost port over every repository: local ones by the local host, those on a git
    server by the remote host.
    """

    def __init__(self, *, local: LocalGitHost, remote: RemoteGitHost) -> None:
        self._local = local
        self._remote = remote

    def _for(self, repo: Repository) -> LocalGitHost | RemoteGitHost:
        return self._remote if is_remote(repo) else self._local

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        return self._for(repo).pull_request(repo, number)

    def mergeability(self, repo: Repository, *, head_sha: str, target_branch: str) -> Mergeability:
        return self._for(repo).mergeability(repo, head_sha=head_sha, target_branch=target_branch)

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

    def is_up_to_date(self, repo: Repository, *, head_sha: str, target_branch: str) -> bool:
        return self._for(repo).is_up_to_date(repo, head_sha=head_sha, target_branch=target_branch)

    def tree_of(self, repo: Repository, commit: str) -> str:
        return self._for(repo).tree_of(repo, commit)


__all__ = ["CodeHosts", "RemoteGitHost", "is_remote", "mirror_path"]
