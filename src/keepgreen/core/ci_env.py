"""What a CI job says about itself in its environment: commit, branch, PR, job URL and run id.

`detect_ci` is pure: it reads only the mapping it is given (`keepgreen upload` gives it its own
environment; a bundle from Trunk's uploader, the variables that uploader captured). The first
usable value wins, in this order: keepgreen's own overrides (KEEPGREEN_COMMIT_SHA,
KEEPGREEN_BRANCH, KEEPGREEN_PR_NUMBER, KEEPGREEN_JOB_URL), then the CI provider's variables, then
the names Trunk reads from a custom CI (COMMIT_BRANCH, PR_NUMBER, JOB_URL). Explicit
command-line flags win over all of it; they are the caller's business. Empty strings and garbage
(a PR number "false", a commit "HEAD") count as unset, so the next source in line gets its turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

_T = TypeVar("_T")


class CiPlatform(StrEnum):
    """The CI providers recognised from their marker variable."""

    GITHUB_ACTIONS = "github-actions"  # GITHUB_ACTIONS=true
    GITLAB_CI = "gitlab-ci"  # GITLAB_CI=true
    BUILDKITE = "buildkite"  # BUILDKITE=true
    CIRCLECI = "circleci"  # CIRCLECI=true
    JENKINS = "jenkins"  # JENKINS_URL set


@dataclass(frozen=True, slots=True)
class CiInfo:
    """What the environment tells about the job; None wherever it tells nothing usable."""

    platform: CiPlatform | None = None
    commit_sha: str | None = None
    branch: str | None = None
    pr_number: int | None = None
    job_url: str | None = None
    run_id: str | None = None


# A full or abbreviated object name (SHA-1, or SHA-256 for repositories that use it). Buildkite
# may say "HEAD" before it resolves the commit; such a name is no commit sha.
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")
_PR_URL_NUMBER = re.compile(r"/(\d+)/?$")  # https://github.com/acme/widgets/pull/123
_GITHUB_PR_REF = re.compile(r"refs/pull/(\d+)/(?:merge|head)")

# Every variable detect_ci reads, so a caller (or a test) can tell what it depends on.
VARIABLES: tuple[str, ...] = (
    "KEEPGREEN_COMMIT_SHA",
    "KEEPGREEN_BRANCH",
    "KEEPGREEN_PR_NUMBER",
    "KEEPGREEN_JOB_URL",
    "COMMIT_BRANCH",
    "PR_NUMBER",
    "JOB_URL",
    "GITHUB_ACTIONS",
    "GITHUB_SHA",
    "GITHUB_HEAD_REF",
    "GITHUB_REF",
    "GITHUB_REF_NAME",
    "GITHUB_SERVER_URL",
    "GITHUB_REPOSITORY",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITLAB_CI",
    "CI_COMMIT_SHA",
    "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME",
    "CI_COMMIT_REF_NAME",
    "CI_MERGE_REQUEST_IID",
    "CI_JOB_URL",
    "CI_PIPELINE_ID",
    "BUILDKITE",
    "BUILDKITE_COMMIT",
    "BUILDKITE_BRANCH",
    "BUILDKITE_PULL_REQUEST",
    "BUILDKITE_BUILD_URL",
    "BUILDKITE_JOB_ID",
    "BUILDKITE_BUILD_ID",
    "CIRCLECI",
    "CIRCLE_SHA1",
    "CIRCLE_BRANCH",
    "CIRCLE_PULL_REQUEST",
    "CIRCLE_PR_NUMBER",
    "CIRCLE_BUILD_URL",
    "CIRCLE_WORKFLOW_ID",
    "JENKINS_URL",
    "GIT_COMMIT",
    "CHANGE_BRANCH",
    "GIT_BRANCH",
    "BRANCH_NAME",
    "CHANGE_ID",
    "BUILD_URL",
    "BUILD_TAG",
)


def detect_ci(env: Mapping[str, str]) -> CiInfo:
    """What `env` (an environment, such as os.environ) tells about the CI job running us."""
    provider = _provider(env)
    return CiInfo(
        platform=provider.platform,
        commit_sha=_first(_sha(_get(env, "KEEPGREEN_COMMIT_SHA")), provider.commit_sha),
        branch=_first(_get(env, "KEEPGREEN_BRANCH"), provider.branch, _get(env, "COMMIT_BRANCH")),
        pr_number=_first(
            _pr(_get(env, "KEEPGREEN_PR_NUMBER")), provider.pr_number, _pr(_get(env, "PR_NUMBER"))
        ),
        job_url=_first(_get(env, "KEEPGREEN_JOB_URL"), provider.job_url, _get(env, "JOB_URL")),
        run_id=provider.run_id,
    )


def _provider(env: Mapping[str, str]) -> CiInfo:
    """The provider's own view; the first marker found wins (jobs rarely carry two)."""
    if _is_true(env, "GITHUB_ACTIONS"):
        return _github_actions(env)
    if _is_true(env, "GITLAB_CI"):
        return _gitlab_ci(env)
    if _is_true(env, "BUILDKITE"):
        return _buildkite(env)
    if _is_true(env, "CIRCLECI"):
        return _circleci(env)
    if _get(env, "JENKINS_URL") is not None:
        return _jenkins(env)
    return CiInfo()


def _github_actions(env: Mapping[str, str]) -> CiInfo:
    ref = _get(env, "GITHUB_REF")
    pr_match = _GITHUB_PR_REF.fullmatch(ref or "")
    # GITHUB_HEAD_REF is the PR's source branch, set (non-empty) on pull_request events only;
    # on a push GITHUB_REF is refs/heads/<branch>; for a tag GITHUB_REF_NAME is the tag.
    branch_ref = ref.removeprefix("refs/heads/") if ref and ref.startswith("refs/heads/") else None
    server, repository = _get(env, "GITHUB_SERVER_URL"), _get(env, "GITHUB_REPOSITORY")
    run_id, attempt = _get(env, "GITHUB_RUN_ID"), _get(env, "GITHUB_RUN_ATTEMPT")
    job_url = None
    if server and repository and run_id:
        job_url = f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}"
    return CiInfo(
        platform=CiPlatform.GITHUB_ACTIONS,
        commit_sha=_sha(_get(env, "GITHUB_SHA")),
        branch=_first(
            _get(env, "GITHUB_HEAD_REF"),
            branch_ref,
            None if pr_match else _get(env, "GITHUB_REF_NAME"),
        ),
        pr_number=_pr(pr_match.group(1)) if pr_match else None,
        job_url=job_url,
        # A re-run keeps GITHUB_RUN_ID and counts GITHUB_RUN_ATTEMPT up: each attempt is a run.
        run_id=f"{run_id}-{attempt}" if run_id and attempt else run_id,
    )


def _gitlab_ci(env: Mapping[str, str]) -> CiInfo:
    return CiInfo(
        platform=CiPlatform.GITLAB_CI,
        commit_sha=_sha(_get(env, "CI_COMMIT_SHA")),
        branch=_first(
            _get(env, "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME"), _get(env, "CI_COMMIT_REF_NAME")
        ),
        pr_number=_pr(_get(env, "CI_MERGE_REQUEST_IID")),
        job_url=_get(env, "CI_JOB_URL"),
        run_id=_get(env, "CI_PIPELINE_ID"),
    )


def _buildkite(env: Mapping[str, str]) -> CiInfo:
    build_url, job_id = _get(env, "BUILDKITE_BUILD_URL"), _get(env, "BUILDKITE_JOB_ID")
    job_url = f"{build_url}#{job_id}" if build_url and job_id else build_url
    return CiInfo(
        platform=CiPlatform.BUILDKITE,
        commit_sha=_sha(_get(env, "BUILDKITE_COMMIT")),
        branch=_get(env, "BUILDKITE_BRANCH"),
        pr_number=_pr(_get(env, "BUILDKITE_PULL_REQUEST")),  # "false" outside PR builds
        job_url=job_url,
        run_id=_get(env, "BUILDKITE_BUILD_ID"),
    )


def _circleci(env: Mapping[str, str]) -> CiInfo:
    pr_url = _get(env, "CIRCLE_PULL_REQUEST")
    url_match = _PR_URL_NUMBER.search(pr_url or "")
    return CiInfo(
        platform=CiPlatform.CIRCLECI,
        commit_sha=_sha(_get(env, "CIRCLE_SHA1")),
        branch=_get(env, "CIRCLE_BRANCH"),
        # CIRCLE_PR_NUMBER is set for PRs from forks only; the URL is set for every PR.
        pr_number=_first(
            _pr(url_match.group(1)) if url_match else None, _pr(_get(env, "CIRCLE_PR_NUMBER"))
        ),
        job_url=_get(env, "CIRCLE_BUILD_URL"),
        run_id=_get(env, "CIRCLE_WORKFLOW_ID"),
    )


def _jenkins(env: Mapping[str, str]) -> CiInfo:
    git_branch = _get(env, "GIT_BRANCH")
    return CiInfo(
        platform=CiPlatform.JENKINS,
        commit_sha=_sha(_get(env, "GIT_COMMIT")),
        # CHANGE_BRANCH is a multibranch PR build's source branch; GIT_BRANCH is the git
        # plugin's remote-tracking name ("origin/main"); BRANCH_NAME the multibranch job's.
        branch=_first(
            _get(env, "CHANGE_BRANCH"),
            git_branch.removeprefix("origin/") if git_branch else None,
            _get(env, "BRANCH_NAME"),
        ),
        pr_number=_pr(_get(env, "CHANGE_ID")),
        job_url=_get(env, "BUILD_URL"),
        run_id=_get(env, "BUILD_TAG"),
    )


def _first(*values: _T | None) -> _T | None:
    """The first value that is not None."""
    return next((value for value in values if value is not None), None)


def _get(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value stripped, or None when unset or blank."""
    value = env.get(name, "").strip()
    return value or None


def _is_true(env: Mapping[str, str], name: str) -> bool:
    return (_get(env, name) or "").lower() == "true"


def _sha(value: str | None) -> str | None:
    return value if value is not None and _SHA.fullmatch(value) else None


def _pr(value: str | None) -> int | None:
    """A positive PR number; None for "false", "", "abc", "0" and the like."""
    # More than twenty digits is no PR number (and a long enough digit string is more than
    # Python converts to an int).
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 20:
        return None
    number = int(value)
    return number if number > 0 else None
