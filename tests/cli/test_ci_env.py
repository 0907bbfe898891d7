"""CI detection: each provider's real variables, the overrides' precedence, and garbage values."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from keepgreen.core.ci_env import VARIABLES, CiInfo, CiPlatform, detect_ci

SHA = "3f7a9c1e5b2d4f6a8c0e1b3d5f7a9c1e5b2d4f6a"
OTHER_SHA = "b4e2d9f0c1a3b5d7e9f1a3c5e7b9d1f3a5c7e9b1"

GITHUB_PUSH = {
    "CI": "true",
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": SHA,
    "GITHUB_REF": "refs/heads/main",
    "GITHUB_REF_NAME": "main",
    "GITHUB_HEAD_REF": "",  # set, and empty, outside pull_request events
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/widgets",
    "GITHUB_RUN_ID": "9876543210",
    "GITHUB_RUN_ATTEMPT": "1",
    "GITHUB_WORKFLOW": "CI",
}


def test_github_actions_push() -> None:
    assert detect_ci(GITHUB_PUSH) == CiInfo(
        platform=CiPlatform.GITHUB_ACTIONS,
        commit_sha=SHA,
        branch="main",
        pr_number=None,
        job_url="https://github.com/acme/widgets/actions/runs/9876543210",
        run_id="9876543210-1",
    )


def test_github_actions_pull_request_rerun() -> None:
    env = {
        **GITHUB_PUSH,
        "GITHUB_REF": "refs/pull/42/merge",
        "GITHUB_REF_NAME": "42/merge",
        "GITHUB_HEAD_REF": "feature/login",
        "GITHUB_BASE_REF": "main",
        "GITHUB_RUN_ATTEMPT": "2",
    }

    info = detect_ci(env)

    assert (info.branch, info.pr_number, info.run_id) == ("feature/login", 42, "9876543210-2")


def test_github_actions_tag_uses_the_ref_name() -> None:
    env = {**GITHUB_PUSH, "GITHUB_REF": "refs/tags/v1.4.0", "GITHUB_REF_NAME": "v1.4.0"}
    assert detect_ci(env).branch == "v1.4.0"


def test_gitlab_merge_request_pipeline() -> None:
    env = {
        "CI": "true",
        "GITLAB_CI": "true",
        "CI_COMMIT_SHA": SHA,
        "CI_COMMIT_REF_NAME": "feature/login",
        "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "feature/login",
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
        "CI_MERGE_REQUEST_IID": "17",
        "CI_JOB_URL": "https://gitlab.com/acme/widgets/-/jobs/6543210987",
        "CI_PIPELINE_ID": "1234567890",
    }

    assert detect_ci(env) == CiInfo(
        platform=CiPlatform.GITLAB_CI,
        commit_sha=SHA,
        branch="feature/login",
        pr_number=17,
        job_url="https://gitlab.com/acme/widgets/-/jobs/6543210987",
        run_id="1234567890",
    )


def test_gitlab_branch_pipeline_has_no_merge_request() -> None:
    env = {
        "GITLAB_CI": "true",
        "CI_COMMIT_SHA": SHA,
        "CI_COMMIT_REF_NAME": "main",
        "CI_PIPELINE_ID": "1234567890",
    }
    info = detect_ci(env)
    assert (info.branch, info.pr_number) == ("main", None)


def test_buildkite_pull_request_build() -> None:
    env = {
        "BUILDKITE": "true",
        "BUILDKITE_COMMIT": SHA,
        "BUILDKITE_BRANCH": "feature/login",
        "BUILDKITE_PULL_REQUEST": "123",
        "BUILDKITE_BUILD_URL": "https://buildkite.com/acme/widgets/builds/4821",
        "BUILDKITE_JOB_ID": "0190a3c2-6f1d-4d7e-9b2a-5f0c8e7d6a41",
        "BUILDKITE_BUILD_ID": "0190a3c1-2b3c-4d5e-8f90-a1b2c3d4e5f6",
    }

    assert detect_ci(env) == CiInfo(
        platform=CiPlatform.BUILDKITE,
        commit_sha=SHA,
        branch="feature/login",
        pr_number=123,
        job_url=(
            "https://buildkite.com/acme/widgets/builds/4821#0190a3c2-6f1d-4d7e-9b2a-5f0c8e7d6a41"
        ),
        run_id="0190a3c1-2b3c-4d5e-8f90-a1b2c3d4e5f6",
    )


def test_buildkite_branch_build_says_false_for_the_pull_request() -> None:
    env = {
        "BUILDKITE": "true",
        "BUILDKITE_COMMIT": SHA,
        "BUILDKITE_BRANCH": "main",
        "BUILDKITE_PULL_REQUEST": "false",
    }
    assert detect_ci(env).pr_number is None


def test_circleci_pull_request_from_its_url() -> None:
    env = {
        "CI": "true",
        "CIRCLECI": "true",
        "CIRCLE_SHA1": SHA,
        "CIRCLE_BRANCH": "feature/login",
        "CIRCLE_PULL_REQUEST": "https://github.com/acme/widgets/pull/88",
        "CIRCLE_BUILD_URL": "https://circleci.com/gh/acme/widgets/4321",
        "CIRCLE_WORKFLOW_ID": "6a1f3c2e-9d4b-4e8a-b7c5-2f1e0d9c8b7a",
    }

    assert detect_ci(env) == CiInfo(
        platform=CiPlatform.CIRCLECI,
        commit_sha=SHA,
        branch="feature/login",
        pr_number=88,
        job_url="https://circleci.com/gh/acme/widgets/4321",
        run_id="6a1f3c2e-9d4b-4e8a-b7c5-2f1e0d9c8b7a",
    )


def test_circleci_fork_pull_request_number() -> None:
    env = {"CIRCLECI": "true", "CIRCLE_BRANCH": "pull/91", "CIRCLE_PR_NUMBER": "91"}
    assert detect_ci(env).pr_number == 91


def test_jenkins_branch_build_strips_the_remote() -> None:
    env = {
        "JENKINS_URL": "https://jenkins.acme.dev/",
        "GIT_COMMIT": SHA,
        "GIT_BRANCH": "origin/release/2.x",
        "BUILD_URL": "https://jenkins.acme.dev/job/widgets/412/",
        "BUILD_TAG": "jenkins-widgets-412",
    }

    assert detect_ci(env) == CiInfo(
        platform=CiPlatform.JENKINS,
        commit_sha=SHA,
        branch="release/2.x",
        pr_number=None,
        job_url="https://jenkins.acme.dev/job/widgets/412/",
        run_id="jenkins-widgets-412",
    )


def test_jenkins_multibranch_pull_request() -> None:
    env = {
        "JENKINS_URL": "https://jenkins.acme.dev/",
        "GIT_COMMIT": SHA,
        "BRANCH_NAME": "PR-17",
        "CHANGE_ID": "17",
        "CHANGE_BRANCH": "feature/login",
        "CHANGE_TARGET": "main",
        "BUILD_URL": "https://jenkins.acme.dev/job/widgets/job/PR-17/3/",
        "BUILD_TAG": "jenkins-widgets-PR-17-3",
    }
    info = detect_ci(env)
    assert (info.branch, info.pr_number) == ("feature/login", 17)


def test_no_ci_tells_nothing() -> None:
    assert detect_ci({"HOME": "/home/ada", "PATH": "/usr/bin", "CI": "true"}) == CiInfo()


def test_keepgreen_overrides_win_over_the_provider() -> None:
    env = {
        **GITHUB_PUSH,
        "KEEPGREEN_COMMIT_SHA": OTHER_SHA,
        "KEEPGREEN_BRANCH": "release",
        "KEEPGREEN_PR_NUMBER": "7",
        "KEEPGREEN_JOB_URL": "https://ci.acme.dev/jobs/1",
    }

    info = detect_ci(env)

    assert (info.commit_sha, info.branch, info.pr_number, info.job_url) == (
        OTHER_SHA,
        "release",
        7,
        "https://ci.acme.dev/jobs/1",
    )
    assert (info.platform, info.run_id) == (CiPlatform.GITHUB_ACTIONS, "9876543210-1")


def test_custom_ci_names_fill_only_what_the_provider_leaves_out() -> None:
    custom = {"COMMIT_BRANCH": "custom-branch", "PR_NUMBER": "5", "JOB_URL": "https://ci/job/5"}

    alone = detect_ci(custom)
    under_github = detect_ci({**GITHUB_PUSH, "GITHUB_REF": "refs/pull/42/merge", **custom})

    assert (alone.branch, alone.pr_number, alone.job_url) == (
        "custom-branch",
        5,
        "https://ci/job/5",
    )
    assert (under_github.pr_number, under_github.job_url) == (
        42,
        "https://github.com/acme/widgets/actions/runs/9876543210",
    )
    # On a pull_request event GitHub names the branch in GITHUB_HEAD_REF; here it is empty and
    # GITHUB_REF is no branch ref, so the custom name is the only branch there is.
    assert under_github.branch == "custom-branch"


@pytest.mark.parametrize(
    "garbage", ["false", "", "   ", "abc", "0", "-3", "12abc", "4.0", "\uff11\uff12"]
)
def test_a_pr_number_that_is_no_number_is_ignored(garbage: str) -> None:
    buildkite = {"BUILDKITE": "true", "BUILDKITE_PULL_REQUEST": garbage}

    assert detect_ci(buildkite).pr_number is None
    assert detect_ci({**buildkite, "KEEPGREEN_PR_NUMBER": garbage, "PR_NUMBER": "9"}).pr_number == 9


def test_a_pr_number_with_spaces_is_read() -> None:
    assert detect_ci({"KEEPGREEN_PR_NUMBER": " 12 "}).pr_number == 12


def test_a_commit_that_is_no_sha_is_ignored() -> None:
    # Buildkite says HEAD for a build started without a commit; git then has to tell.
    assert detect_ci({"BUILDKITE": "true", "BUILDKITE_COMMIT": "HEAD"}).commit_sha is None
    override_garbage = {**GITHUB_PUSH, "KEEPGREEN_COMMIT_SHA": "not-a-sha"}
    assert detect_ci(override_garbage).commit_sha == SHA


def test_blank_overrides_do_not_override() -> None:
    env = {**GITHUB_PUSH, "KEEPGREEN_BRANCH": "", "KEEPGREEN_JOB_URL": "  "}
    info = detect_ci(env)
    assert (info.branch, info.job_url) == (
        "main",
        "https://github.com/acme/widgets/actions/runs/9876543210",
    )


class RecordingEnv(Mapping[str, str]):
    """An environment that remembers every name read from it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("detect_ci must look names up, not scan the environment")

    def __len__(self) -> int:
        return len(self.values)


@pytest.mark.parametrize(
    "marker", ["GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "CIRCLECI", "JENKINS_URL", None]
)
def test_detect_ci_reads_only_the_variables_it_lists(marker: str | None) -> None:
    # The CLI tests scrub VARIABLES from their environment; a name missing there would leak
    # the CI that runs the tests into them.
    env = RecordingEnv({marker: "true"} if marker else {})

    detect_ci(env)

    assert env.read <= set(VARIABLES)
    if marker:
        assert marker in env.read
