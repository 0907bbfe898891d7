"""What the scheduler asks the outside world to do: data, carried out by one interpreter.

Every effect is idempotent when repeated (a crash between doing it and recording its result
repeats it): building a test commit rewrites the same branch, deleting a missing branch is fine,
starting CI for a run twice starts it once, and landing is a compare-and-swap that recognises a
landing it already made (`token`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from keepgreen.core.enums import MergeMethod
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import ChainLink


@dataclass(frozen=True, slots=True)
class BuildTestCommit:
    """Merge `prs` (number, head sha) in order onto `base_sha` and push it as `branch`.

    Answered by `TestCommitBuilt` or `TestCommitConflict`.
    """

    run_id: TestRunId
    base_sha: str
    prs: tuple[tuple[int, str], ...]
    branch: str


@dataclass(frozen=True, slots=True)
class DeleteTestBranch:
    """Delete a run's test branch once the run is over. No answer."""

    run_id: TestRunId
    branch: str


@dataclass(frozen=True, slots=True)
class StartCi:
    """Run the built-in CI on a run's test commit; it answers with a commit status. No answer."""

    run_id: TestRunId
    sha: str
    timeout_seconds: int


@dataclass(frozen=True, slots=True)
class CancelCi:
    """Stop the built-in CI of an abandoned run. No answer."""

    run_id: TestRunId


@dataclass(frozen=True, slots=True)
class Land:
    """Move the target branch by compare-and-swap from `expected_tip`, landing one PR.

    From a passed run: `link` is the PR's step of the run's test commit and `parent_commit`/
    `parent_tree` the step before it (None for the tree when unknown: a direct merge, whose
    parent is the tip itself). `exact` demands that the branch's tree equal the tested parent
    tree (one line of PRs); parallel lanes merge the tested change onto the current tip.
    Answered by `Landed` or `LandRefused`.
    """

    entry_id: PullRequestId
    number: int
    run_id: TestRunId | None
    target_branch: str
    expected_tip: str
    method: MergeMethod
    link: ChainLink
    parent_commit: str
    parent_tree: str | None
    exact: bool
    title: str
    author: str
    token: str


Effect: TypeAlias = BuildTestCommit | DeleteTestBranch | StartCi | CancelCi | Land
