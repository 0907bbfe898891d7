"""Uploads of Trunk's uploader as use cases: what a bundle's meta.json makes of the upload
(commit, branch, PR, job), and the signed upload URLs (forged, altered, expired).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from keepgreen.app.errors import Forbidden, InvalidInput
from keepgreen.app.flaky.bundles import BundleMeta, upload_metadata
from keepgreen.app.flaky.upload_links import UploadGrant, UploadLinks
from keepgreen.core.ids import OrgId, RepositoryId
from tests.support.trunk_uploader import GITHUB_PR_ENVS, SHA
from tests.support.wire import REPO

KEY = "trunk-bundle:5b0c"


def meta(**changes: object) -> BundleMeta:
    base = BundleMeta(
        org="acme",
        repo=REPO,
        head_sha=SHA,
        head_branch="refs/remotes/pull/12/merge",
        use_uncloned_repo=False,
        envs=GITHUB_PR_ENVS,
        variant="",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def metadata(given: BundleMeta, codeowners: str | None = None):  # type: ignore[no-untyped-def]
    return upload_metadata(given, ref=REPO, key=KEY, codeowners=codeowners)


# -- commit, branch, PR, job -----------------------------------------------------------------


def test_a_github_pull_request_run_is_the_prs_head_branch_and_number() -> None:
    stored = metadata(meta(), codeowners="* @acme\n")
    assert stored.commit_sha == SHA  # the head the uploader resolved, not GITHUB_SHA's merge
    assert (stored.branch, stored.pr_number) == ("feature/speedup", 12)
    assert stored.job_url == "https://github.com/acme/widgets/actions/runs/9949497745"
    assert stored.run_id == "9949497745-1"
    assert (stored.idempotency_key, stored.codeowners, stored.org_url_slug) == (
        KEY,
        "* @acme\n",
        "acme",
    )


def test_a_push_is_its_branch() -> None:
    push = {**GITHUB_PR_ENVS, "GITHUB_REF": "refs/heads/main", "GITHUB_HEAD_REF": ""}
    stored = metadata(meta(envs=push, head_branch="refs/heads/main"))
    assert (stored.branch, stored.pr_number) == ("main", None)


@pytest.mark.parametrize(
    ("git_named", "branch"),
    [
        ("refs/heads/release/2.0", "release/2.0"),
        ("refs/remotes/origin/main", "main"),
        ("refs/remotes/pull/12/merge", "pull/12/merge"),
        ("origin/main", "main"),
        ("main", "main"),
    ],
)
def test_without_ci_variables_the_branch_is_the_one_git_named(git_named: str, branch: str) -> None:
    assert metadata(meta(envs={}, head_branch=git_named)).branch == branch


def test_a_branch_given_by_hand_wins_with_an_uncloned_repo() -> None:
    given = meta(head_branch="hotfix", use_uncloned_repo=True)
    assert metadata(given).branch == "hotfix"


def test_trunk_pr_number_wins_over_the_cis() -> None:
    assert metadata(meta(envs={**GITHUB_PR_ENVS, "TRUNK_PR_NUMBER": "77"})).pr_number == 77


def test_the_commit_is_the_cis_when_the_uploader_found_none() -> None:
    assert metadata(meta(head_sha="")).commit_sha == "f" * 40


@pytest.mark.parametrize(
    "envs",
    [
        {"TRUNK_PR_NUMBER": "9" * 5000},
        {"TRUNK_PR_NUMBER": "3000000000"},
        {"CUSTOM": "true", "PR_NUMBER": "9" * 5000},
        {"BUILDKITE": "true", "BUILDKITE_PULL_REQUEST": "99999999999999999999"},
    ],
    ids=["a 5000-digit TRUNK_PR_NUMBER", "past 32 bits", "custom CI", "buildkite"],
)
def test_a_pr_number_no_column_holds_is_none(envs: dict[str, str]) -> None:
    assert metadata(meta(envs=envs, head_branch="main")).pr_number is None


def test_job_urls_and_run_ids_too_long_or_not_printable_are_dropped_not_cut() -> None:
    envs = {"CUSTOM": "true", "JOB_URL": "https://ci.example.com/" + "x" * 2000}
    assert metadata(meta(envs=envs, head_branch="main")).job_url is None
    envs = {"CUSTOM": "true", "JOB_URL": "https://ci.example.com/\x1b[31m"}
    assert metadata(meta(envs=envs, head_branch="main")).job_url is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"head_sha": "HEAD", "envs": {}}, "repo_head_sha"),
        ({"head_sha": "abc", "envs": {}}, "repo_head_sha"),
        ({"head_branch": "", "envs": {}}, "names no branch"),
        ({"head_branch": "refs/heads/a..b", "envs": {}}, "must not contain '..'"),
        ({"head_branch": "x" * 300, "envs": {}}, "at most 255"),
        ({"variant": "v" * 65}, "variant"),
        ({"variant": "linux\n"}, "variant"),
    ],
    ids=["not a sha", "too short", "no branch", "dots", "long branch", "long variant", "newline"],
)
def test_a_bundle_whose_facts_cannot_be_stored_is_a_400(
    changes: dict[str, object], problem: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        metadata(meta(**changes))
    assert refused.value.code == "invalid_bundle"
    assert problem in refused.value.message


# -- upload URLs -----------------------------------------------------------------------------

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
GRANT = UploadGrant(
    bundle_id="0f6c2b9e-1d3a-4c55-9e61-0d0b9a1c2e3f",
    org_id=OrgId("org-1"),
    repository_id=RepositoryId("repo-1"),
    ref=REPO,
    expires_at=NOW + timedelta(hours=1),
)


def test_a_signed_token_carries_its_grant_until_it_expires() -> None:
    links = UploadLinks(b"k" * 32)
    token = links.sign(GRANT)
    assert token.replace("-", "").replace("_", "").replace(".", "").isalnum()  # URL-safe
    assert links.verify(token, now=NOW) == GRANT
    assert links.verify(token, now=GRANT.expires_at - timedelta(seconds=1)) == GRANT
    with pytest.raises(Forbidden) as expired:
        links.verify(token, now=GRANT.expires_at)
    assert expired.value.code == "upload_url_expired"


def forged(token: str) -> list[str]:
    payload, signature = token.split(".")
    return [
        f"{payload[:-2]}AA.{signature}",  # the payload changed under the same signature
        f"{payload}.{signature[:-2]}AA",  # the signature changed
        payload,  # no signature
        f"{payload}.",
        ".",
        "",
        f"{payload}.{signature}.{signature}",
        "!" * 100,
        f"{payload}.{signature}" + "A" * 5000,
    ]


@pytest.mark.parametrize("index", range(9))
def test_an_altered_token_is_refused(index: int) -> None:
    links = UploadLinks(b"k" * 32)
    with pytest.raises(Forbidden) as refused:
        links.verify(forged(links.sign(GRANT))[index], now=NOW)
    assert refused.value.code == "upload_url_invalid"


def test_a_token_of_another_installation_is_refused() -> None:
    theirs = UploadLinks(b"t" * 32).sign(GRANT)
    with pytest.raises(Forbidden):
        UploadLinks(b"k" * 32).verify(theirs, now=NOW)
