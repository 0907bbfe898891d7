"""Effects to and from JSON, for the outbox table."""

from __future__ import annotations

from typing import Any, assert_never

from keepgreen.core.enums import MergeMethod
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import ChainLink
from keepgreen.core.scheduler import (
    BuildTestCommit,
    CancelCi,
    DeleteTestBranch,
    Effect,
    Land,
    StartCi,
)


def effect_to_payload(effect: Effect) -> tuple[str, dict[str, Any]]:
    """The outbox row's `kind` and JSON `payload` for an effect."""
    match effect:
        case BuildTestCommit():
            return "build_test_commit", {
                "run_id": effect.run_id,
                "base_sha": effect.base_sha,
                "prs": [[number, sha] for number, sha in effect.prs],
                "branch": effect.branch,
            }
        case DeleteTestBranch():
            return "delete_test_branch", {"run_id": effect.run_id, "branch": effect.branch}
        case StartCi():
            return "start_ci", {
                "run_id": effect.run_id,
                "sha": effect.sha,
                "timeout_seconds": effect.timeout_seconds,
            }
        case CancelCi():
            return "cancel_ci", {"run_id": effect.run_id}
        case Land():
            link = effect.link
            return "land", {
                "entry_id": effect.entry_id,
                "number": effect.number,
                "run_id": effect.run_id,
                "target_branch": effect.target_branch,
                "expected_tip": effect.expected_tip,
                "method": effect.method.value,
                "link": [link.number, link.head_sha, link.commit, link.tree],
                "parent_commit": effect.parent_commit,
                "parent_tree": effect.parent_tree,
                "exact": effect.exact,
                "title": effect.title,
                "author": effect.author,
                "token": effect.token,
            }
        case _:
            assert_never(effect)


def effect_from_payload(kind: str, payload: dict[str, Any]) -> Effect:
    """The effect an outbox row holds; an unknown kind is a bug (or a newer writer)."""
    if kind == "build_test_commit":
        return BuildTestCommit(
            TestRunId(payload["run_id"]),
            payload["base_sha"],
            tuple((int(number), str(sha)) for number, sha in payload["prs"]),
            payload["branch"],
        )
    if kind == "delete_test_branch":
        return DeleteTestBranch(TestRunId(payload["run_id"]), payload["branch"])
    if kind == "start_ci":
        return StartCi(
            TestRunId(payload["run_id"]), payload["sha"], int(payload["timeout_seconds"])
        )
    if kind == "cancel_ci":
        return CancelCi(TestRunId(payload["run_id"]))
    if kind == "land":
        number, head_sha, commit, tree = payload["link"]
        run_id = payload["run_id"]
        return Land(
            entry_id=PullRequestId(payload["entry_id"]),
            number=int(payload["number"]),
            run_id=None if run_id is None else TestRunId(run_id),
            target_branch=payload["target_branch"],
            expected_tip=payload["expected_tip"],
            method=MergeMethod(payload["method"]),
            link=ChainLink(int(number), str(head_sha), str(commit), str(tree)),
            parent_commit=payload["parent_commit"],
            parent_tree=payload["parent_tree"],
            exact=bool(payload["exact"]),
            title=payload["title"],
            author=payload["author"],
            token=payload["token"],
        )
    msg = f"unknown effect kind {kind!r} in the outbox"
    raise ValueError(msg)
