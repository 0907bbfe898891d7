"""setCommitStatus: what external CI reports about a commit, stored per (repo, sha, context)
with the last write winning; checked through the database.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from keepgreen.bootstrap import Container
from keepgreen.core.enums import CommitState
from keepgreen.core.model import CommitStatus, RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO, REPO_JSON, Api, assert_error, assert_invalid, repo_json

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER_SHA = "fedcba9876543210fedcba9876543210fedcba98"


def report(api: Api, **fields: object) -> Any:
    body: dict[str, object] = {"sha": SHA, "context": "ci/build", "state": "success", **fields}
    return api.post("setCommitStatus", body)


def reported(api: Api, **fields: object) -> None:
    response = report(api, **fields)
    assert response.status_code == 200, response.text
    assert response.json() == {}


def statuses(
    container: Container, token: str, sha: str = SHA, ref: RepoRef = REPO
) -> list[CommitStatus]:
    org_id = container.admin.authenticate(token)
    assert org_id is not None
    with container.unit_of_work() as uow:
        repository = uow.repositories.find(org_id, ref)
        assert repository is not None
        return list(uow.statuses.list_for_sha(repository.id, sha))


def by_context(container: Container, token: str, sha: str = SHA) -> dict[str, CommitState]:
    return {s.context: s.state for s in statuses(container, token, sha)}


def test_a_status_is_stored(api: Api, container: Container, clock: FakeClock) -> None:
    reported(
        api,
        state="failure",
        targetUrl="https://ci.example.com/run/7",
        description="2 tests failed",
    )
    [status] = statuses(container, api.token)
    assert (status.sha, status.context, status.state) == (SHA, "ci/build", CommitState.FAILURE)
    assert status.target_url == "https://ci.example.com/run/7"
    assert status.description == "2 tests failed"
    assert status.updated_at <= clock.now


def test_statuses_are_kept_per_context(api: Api, container: Container) -> None:
    reported(api, context="ci/build", state="success")
    reported(api, context="ci/test", state="pending")
    reported(api, context="lint", state="error")
    assert by_context(container, api.token) == {
        "ci/build": CommitState.SUCCESS,
        "ci/test": CommitState.PENDING,
        "lint": CommitState.ERROR,
    }


def test_statuses_are_kept_per_sha(api: Api, container: Container) -> None:
    reported(api, sha=SHA, state="success")
    reported(api, sha=OTHER_SHA, state="failure")
    assert by_context(container, api.token, SHA) == {"ci/build": CommitState.SUCCESS}
    assert by_context(container, api.token, OTHER_SHA) == {"ci/build": CommitState.FAILURE}


def test_the_last_write_per_context_wins(api: Api, container: Container) -> None:
    reported(api, state="pending", targetUrl="https://ci/1", description="running")
    reported(api, state="failure", targetUrl="https://ci/2", description="failed")
    reported(api, state="success", targetUrl="https://ci/3", description="passed")
    [status] = statuses(container, api.token)
    assert status.state is CommitState.SUCCESS
    assert (status.target_url, status.description) == ("https://ci/3", "passed")


def test_a_later_write_replaces_the_url_and_description(api: Api, container: Container) -> None:
    reported(api, state="pending", targetUrl="https://ci/1", description="running")
    reported(api, state="success")
    [status] = statuses(container, api.token)
    assert status.state is CommitState.SUCCESS
    assert (status.target_url, status.description) == (None, None)


def test_a_later_write_moves_the_update_time(
    api: Api, container: Container, clock: FakeClock
) -> None:
    reported(api, state="pending")
    [first] = statuses(container, api.token)
    clock.advance(minutes=5)
    reported(api, state="success")
    [second] = statuses(container, api.token)
    assert second.updated_at - first.updated_at >= timedelta(minutes=5)


def test_contexts_are_case_sensitive(api: Api, container: Container) -> None:
    reported(api, context="CI", state="success")
    reported(api, context="ci", state="failure")
    assert by_context(container, api.token) == {
        "CI": CommitState.SUCCESS,
        "ci": CommitState.FAILURE,
    }


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("SUCCESS", CommitState.SUCCESS),
        ("Failure", CommitState.FAILURE),
        ("eRRoR", CommitState.ERROR),
        ("PENDING", CommitState.PENDING),
        ("pending", CommitState.PENDING),
    ],
)
def test_states_are_accepted_in_any_case(
    api: Api, container: Container, sent: str, stored: CommitState
) -> None:
    reported(api, state=sent)
    assert by_context(container, api.token) == {"ci/build": stored}


def test_sha_is_stored_lowercase(api: Api, container: Container) -> None:
    reported(api, sha=SHA.upper(), state="failure")
    assert by_context(container, api.token, SHA) == {"ci/build": CommitState.FAILURE}
    assert statuses(container, api.token, SHA.upper()) == []


def test_upper_and_lower_case_shas_are_the_same_commit(api: Api, container: Container) -> None:
    reported(api, sha=SHA.upper(), state="pending")
    reported(api, sha=SHA, state="success")
    [status] = statuses(container, api.token)
    assert (status.sha, status.state) == (SHA, CommitState.SUCCESS)


def test_a_short_sha_is_accepted(api: Api, container: Container) -> None:
    reported(api, sha="ABCD")
    assert by_context(container, api.token, "abcd") == {"ci/build": CommitState.SUCCESS}


def test_a_sha256_commit_id_is_accepted(api: Api, container: Container) -> None:
    sha256 = "ab" * 32
    reported(api, sha=sha256)
    assert by_context(container, api.token, sha256) == {"ci/build": CommitState.SUCCESS}


def test_the_status_of_a_real_pr_head_is_stored(
    api: Api, container: Container, registered_repo: GitRepo
) -> None:
    sha = registered_repo.open_pr(1, {"a.txt": "a\n"})
    reported(api, sha=sha, context="keepgreen/ci")
    assert by_context(container, api.token, sha) == {"keepgreen/ci": CommitState.SUCCESS}


@pytest.mark.parametrize(
    "sha",
    ["xyz123", "g" * 40, "abc", "a" * 65, "", "12 34", "0x1234", SHA + "z", "-" * 8, "é" * 8],
)
def test_a_sha_that_is_not_hex_is_400(api: Api, container: Container, sha: str) -> None:
    assert_invalid(report(api, sha=sha), "sha")
    assert statuses(container, api.token, sha.lower()) == []


@pytest.mark.parametrize("context", ["", "   ", "ci\nbuild", "ci\x00", "\t", "x" * 256])
def test_a_bad_context_is_400(api: Api, container: Container, context: str) -> None:
    assert_invalid(report(api, context=context), "context")
    assert statuses(container, api.token) == []


@pytest.mark.parametrize("state", ["ok", "passed", "", "succeeded", "cancelled", "SUCCESS!"])
def test_an_unknown_state_is_400(api: Api, container: Container, state: str) -> None:
    assert_invalid(report(api, state=state), "state")
    assert statuses(container, api.token) == []


@pytest.mark.parametrize("field", ["sha", "context", "state", "repo"])
def test_a_missing_field_is_400_naming_it(api: Api, field: str) -> None:
    body = {"repo": REPO_JSON, "sha": SHA, "context": "ci", "state": "success"}
    del body[field]
    response = api.client.post("/v1/setCommitStatus", json=body, headers={"x-api-token": api.token})
    assert_invalid(response, field)


@pytest.mark.parametrize("field", ["targetUrl", "description"])
def test_an_over_long_url_or_description_is_400(api: Api, container: Container, field: str) -> None:
    assert_invalid(report(api, **{field: "x" * 4097}), field)
    assert statuses(container, api.token) == []


@pytest.mark.parametrize("field", ["targetUrl", "description"])
def test_a_url_or_description_of_the_maximum_length_is_stored(
    api: Api, container: Container, field: str
) -> None:
    reported(api, **{field: "x" * 4096})
    assert len(statuses(container, api.token)) == 1


def test_an_unknown_repo_is_404(api: Api) -> None:
    response = report(api, repo={**REPO_JSON, "name": "no-such-repo"})
    assert_error(response, 404, "repository_not_found")


def test_another_orgs_repo_is_404_and_nothing_is_stored(
    api: Api, container: Container, other_token: str
) -> None:
    theirs = Api(api.client, other_token, dict(REPO_JSON))
    response = report(theirs, state="failure")
    assert_error(response, 404, "repository_not_found")
    assert statuses(container, api.token) == []


def test_statuses_are_kept_per_repository(api: Api, container: Container, tmp_path: Path) -> None:
    other = RepoRef(REPO.host, REPO.owner, "gadgets")
    container.admin.add_repository(
        org_slug="acme", ref=other, git_url=str(GitRepo(tmp_path / "gadgets").path), ci_command=None
    )
    reported(api, state="success")
    reported(api, state="failure", repo=repo_json(other))
    assert by_context(container, api.token) == {"ci/build": CommitState.SUCCESS}
    assert [s.state for s in statuses(container, api.token, ref=other)] == [CommitState.FAILURE]


def test_no_token_is_401_and_nothing_is_stored(api: Api, container: Container) -> None:
    body = {"repo": REPO_JSON, "sha": SHA, "context": "ci", "state": "success"}
    response = api.client.post("/v1/setCommitStatus", json=body)
    assert_error(response, 401, "unauthorized")
    assert statuses(container, api.token) == []


@pytest.mark.parametrize("field", ["targetUrl", "description"])
def test_a_nul_in_a_url_or_description_is_400(api: Api, container: Container, field: str) -> None:
    assert_invalid(report(api, **{field: "x\x00y"}), field)
    assert statuses(container, api.token) == []


def test_unicode_in_a_description_is_kept(api: Api, container: Container) -> None:
    reported(api, description="✓ 12 tests — ok")
    [status] = statuses(container, api.token)
    assert status.description == "✓ 12 tests — ok"


def test_concurrent_first_reports_of_one_status_all_succeed(api: Api, container: Container) -> None:
    states = ["pending", "success", "failure", "error"] * 2
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda state: report(api, state=state), states))
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]
    [status] = statuses(container, api.token)
    assert status.state.value in states
