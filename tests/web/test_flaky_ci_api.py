"""CI runs end to end: Trunk's create-ci-run stores a run once per (provider, run id, job id,
attempt), refuses bad input naming the field, keeps to the token's org, and keepgreen's
list-ci-runs reads the runs back, on every backend.
"""

from __future__ import annotations

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO_JSON, assert_error

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER_SHA = "fedcba9876543210fedcba9876543210fedcba98"
PAGE = {"page_size": 100, "page_token": ""}

# The spec's required fields, as a CI job sends them.
MINIMAL: dict[str, Any] = {
    "ci_job_name": "test (ubuntu-latest)",
    "run_start": "2026-11-02T08:00:00Z",
    "run_end": "2026-11-02T08:12:30Z",
    "branch": "main",
    "sha": SHA,
    "attempt": 1,
}
# Every field of the spec.
FULL: dict[str, Any] = {
    **MINIMAL,
    "provider": "github",
    "run_conclusion": "failure",
    "run_conclusion_cause": "test",
    "providers_run_id": "7301234567",
    "providers_job_id": "20512345678",
}


class CiRuns:
    """The CI-run endpoints for one org's github.com/acme/widgets."""

    def __init__(self, client: TestClient, token: str, slug: str = "acme") -> None:
        self.client = client
        self.headers = {"x-api-token": token}
        self.slug = slug

    def create(self, **fields: Any) -> Any:
        body = {"repo": dict(REPO_JSON), "org_url_slug": self.slug, **fields}
        return self.client.post("/v1/flaky-ci/create-ci-run", headers=self.headers, json=body)

    def created(self, **fields: Any) -> str:
        response = self.create(**fields)
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"run_id"}
        run_id: str = body["run_id"]
        return run_id

    def listing(self, **fields: Any) -> Any:
        body = {"repo": dict(REPO_JSON), "org_url_slug": self.slug, "page_query": PAGE, **fields}
        return self.client.post("/v1/flaky-ci/list-ci-runs", headers=self.headers, json=body)

    def runs(self, **fields: Any) -> list[dict[str, Any]]:
        response = self.listing(**fields)
        assert response.status_code == 200, response.text
        runs: list[dict[str, Any]] = response.json()["ci_runs"]
        return runs


@pytest.fixture
def ci(client: TestClient, token: str, registered_repo: GitRepo) -> CiRuns:
    return CiRuns(client, token)


# -- create-ci-run ----------------------------------------------------------------------------


def test_a_run_with_every_field_is_stored_and_listed_as_sent(ci: CiRuns) -> None:
    run_id = ci.created(**FULL)
    assert uuid.UUID(run_id).version == 4  # keepgreen's ids: UUIDs made in Python
    (run,) = ci.runs()
    # First and last reported at once, by keepgreen's clock (the tests' starts at 09:00).
    reported_at, updated_at = run.pop("reported_at"), run.pop("updated_at")
    assert reported_at == updated_at
    assert reported_at.startswith("2026-11-02T09:00:00.")
    assert run == {
        "run_id": run_id,
        "ci_job_name": "test (ubuntu-latest)",
        "provider": "github",
        "providers_run_id": "7301234567",
        "providers_job_id": "20512345678",
        "attempt": 1,
        "branch": "main",
        "sha": SHA,
        "run_start": "2026-11-02T08:00:00.000Z",
        "run_end": "2026-11-02T08:12:30.000Z",
        "run_conclusion": "failure",
        "run_conclusion_cause": "test",
    }


def test_the_required_fields_alone_make_a_run(ci: CiRuns) -> None:
    run_id = ci.created(**MINIMAL)
    (run,) = ci.runs()
    assert run["run_id"] == run_id
    assert {key: run[key] for key in MINIMAL} == {
        **MINIMAL,
        "run_start": "2026-11-02T08:00:00.000Z",
        "run_end": "2026-11-02T08:12:30.000Z",
    }
    optional = (
        "provider",
        "providers_run_id",
        "providers_job_id",
        "run_conclusion",
        "run_conclusion_cause",
    )
    assert {key: run[key] for key in optional} == dict.fromkeys(optional)


def test_values_are_answered_in_their_stored_form(ci: CiRuns) -> None:
    """Enums in any case, an upper-case sha, times in any zone, attempt 0 and its maximum."""
    ci.created(
        **{
            **FULL,
            "provider": "GitLab",
            "run_conclusion": "SUCCESS",
            "run_conclusion_cause": "CI",
            "sha": SHA.upper(),
            "run_start": "2026-11-02T10:00:00.123456+02:00",
            "run_end": "2026-11-02T08:30:00",  # no zone: UTC
            "attempt": 4294967295,
        }
    )
    ci.created(**{**MINIMAL, "attempt": 0, "ci_job_name": "lint"})
    first, second = ci.runs()
    assert (first["provider"], first["run_conclusion"], first["run_conclusion_cause"]) == (
        "gitlab",
        "success",
        "ci",
    )
    assert first["sha"] == SHA
    assert (first["run_start"], first["run_end"]) == (
        "2026-11-02T08:00:00.123Z",
        "2026-11-02T08:30:00.000Z",
    )
    assert first["attempt"] == 4294967295
    assert (second["ci_job_name"], second["attempt"]) == ("lint", 0)


def test_a_run_reported_again_is_the_same_run_with_the_new_fields(ci: CiRuns) -> None:
    started = {**FULL, "run_end": FULL["run_start"]}
    del started["run_conclusion"], started["run_conclusion_cause"]
    run_id = ci.created(**started)
    # The end of the run, reported with the same provider, run id, job id and attempt.
    assert ci.created(**FULL) == run_id
    (run,) = ci.runs()
    assert (run["run_end"], run["run_conclusion"], run["run_conclusion_cause"]) == (
        "2026-11-02T08:12:30.000Z",
        "failure",
        "test",
    )
    assert run["updated_at"] > run["reported_at"]
    # A late copy of the first report changes the times back, and keeps the conclusion.
    assert ci.created(**started) == run_id
    (run,) = ci.runs()
    assert (run["run_end"], run["run_conclusion"], run["run_conclusion_cause"]) == (
        "2026-11-02T08:00:00.000Z",
        "failure",
        "test",
    )
    # The provider in another case is the same provider.
    assert ci.created(**{**FULL, "provider": "GITHUB"}) == run_id
    assert len(ci.runs()) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"attempt": 2},
        {"providers_job_id": "20512345679"},
        {"providers_job_id": None},
        {"provider": "buildkite"},
        {"provider": None},
        {"providers_run_id": "7301234568"},
    ],
)
def test_another_attempt_job_provider_or_run_is_another_run(
    ci: CiRuns, change: dict[str, Any]
) -> None:
    first = ci.created(**FULL)
    second = ci.created(**{**FULL, **change})
    assert second != first
    assert {run["run_id"] for run in ci.runs()} == {first, second}


@pytest.mark.parametrize("run_id", [None, ""])
def test_without_a_providers_run_id_every_report_is_a_run_of_its_own(
    ci: CiRuns, run_id: str | None
) -> None:
    body = {**FULL, "providers_run_id": run_id}
    ids = {ci.created(**body), ci.created(**body)}
    assert len(ids) == 2
    assert [run["providers_run_id"] for run in ci.runs()] == [None, None]


def test_reports_of_one_run_at_the_same_moment_store_it_once(
    ci: CiRuns, container: Container
) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: ci.create(**FULL), range(8)))
    assert [answer.status_code for answer in answers] == [200] * 8, [a.text for a in answers]
    assert len({answer.json()["run_id"] for answer in answers}) == 1
    assert len(ci.runs()) == 1


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", [*MINIMAL, "repo", "org_url_slug"])
def test_each_required_field_is_required(
    client: TestClient, token: str, registered_repo: GitRepo, field: str
) -> None:
    body = {"repo": dict(REPO_JSON), "org_url_slug": "acme", **MINIMAL}
    del body[field]
    response = client.post("/v1/flaky-ci/create-ci-run", headers={"x-api-token": token}, json=body)
    assert assert_error(response, 400, "invalid_request") == f"{field} is required"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"provider": "teamcity"}, "provider"),
        ({"provider": 3}, "provider"),
        ({"run_conclusion": "neutral"}, "run_conclusion"),
        ({"run_conclusion_cause": "flaky"}, "run_conclusion_cause"),
        ({"attempt": -1}, "attempt"),
        ({"attempt": 4294967296}, "attempt"),
        ({"attempt": 1.5}, "attempt"),
        ({"attempt": "1"}, "attempt"),
        ({"attempt": True}, "attempt"),
        ({"sha": "not-a-sha"}, "sha"),
        ({"sha": "abc"}, "sha"),
        ({"sha": "a" * 65}, "sha"),
        ({"branch": "bad..branch"}, "branch"),
        ({"branch": ""}, "branch"),
        ({"branch": "b" * 256}, "branch"),
        ({"ci_job_name": ""}, "ci_job_name"),
        ({"ci_job_name": "j" * 256}, "ci_job_name"),
        ({"ci_job_name": "line\nbreak"}, "ci_job_name"),
        ({"providers_run_id": "r" * 256}, "providers_run_id"),
        ({"providers_job_id": "j" * 256}, "providers_job_id"),
        ({"providers_job_id": 20512345678}, "providers_job_id"),
        ({"run_start": "yesterday"}, "run_start"),
        ({"run_start": "1969-12-31T23:59:59Z"}, "run_start"),
        ({"run_end": "9999-12-31T23:59:59-23:59"}, "run_end"),
        ({"org_url_slug": ""}, "org_url_slug"),
        ({"repo": {"host": "github.com", "owner": "acme"}}, "repo.name"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(
    ci: CiRuns, change: dict[str, Any], field: str
) -> None:
    message = assert_error(ci.create(**{**FULL, **change}), 400)
    assert message.startswith(field), message
    assert ci.runs() == []


def test_a_run_cannot_end_before_it_starts(ci: CiRuns) -> None:
    response = ci.create(**{**FULL, "run_end": "2026-11-02T07:59:59.999Z"})
    assert assert_error(response, 400, "invalid_field") == "run_end must not be before run_start"
    # The same instant in another zone is not before.
    assert ci.create(**{**FULL, "run_end": "2026-11-02T09:00:00+01:00"}).status_code == 200


def test_a_body_that_is_not_a_json_object_is_a_400(ci: CiRuns) -> None:
    for content in (b"{", b"[]", b'"run"'):
        response = ci.client.post(
            "/v1/flaky-ci/create-ci-run",
            headers={**ci.headers, "content-type": "application/json"},
            content=content,
        )
        assert_error(response, 400)


# -- tokens and orgs --------------------------------------------------------------------------


def test_both_endpoints_need_a_token(ci: CiRuns, client: TestClient) -> None:
    for path, body in (("create-ci-run", FULL), ("list-ci-runs", {"page_query": PAGE})):
        full = {"repo": dict(REPO_JSON), "org_url_slug": "acme", **body}
        for headers in ({}, {"x-api-token": "kg_not-a-token"}):
            response = client.post(f"/v1/flaky-ci/{path}", headers=headers, json=full)
            assert_error(response, 401, "unauthorized")
        # Authentication comes before input: a bad body without a token is a 401 too.
        assert_error(client.post(f"/v1/flaky-ci/{path}", json={}), 401, "unauthorized")
    assert ci.runs() == []


def test_another_orgs_token_can_neither_write_nor_read_the_orgs_runs(
    ci: CiRuns, client: TestClient, other_token: str
) -> None:
    ci.created(**FULL)
    before = ci.runs()
    # As acme: its slug is not the token's org.
    as_acme = CiRuns(client, other_token, slug="acme")
    assert_error(as_acme.create(**FULL), 404, "org_not_found")
    assert_error(as_acme.listing(), 404, "org_not_found")
    # As itself: the repository is not one of globex's.
    as_globex = CiRuns(client, other_token, slug="globex")
    assert_error(as_globex.create(**FULL), 404, "repository_not_found")
    assert_error(as_globex.listing(), 404, "repository_not_found")
    assert ci.runs() == before


def test_org_url_slug_must_be_the_tokens_org(ci: CiRuns) -> None:
    as_other = CiRuns(ci.client, ci.headers["x-api-token"], slug="globex")
    assert_error(as_other.create(**FULL), 404, "org_not_found")
    assert_error(as_other.listing(), 404, "org_not_found")
    assert ci.runs() == []


def test_an_unknown_repository_is_a_404(ci: CiRuns) -> None:
    other = {"host": "github.com", "owner": "acme", "name": "gizmos"}
    assert_error(ci.create(**FULL, repo=other), 404, "repository_not_found")
    assert_error(ci.listing(repo=other), 404, "repository_not_found")


# -- list-ci-runs -----------------------------------------------------------------------------


def test_the_listing_filters_by_branch_and_commit_latest_start_first(ci: CiRuns) -> None:
    def run(job: str, *, branch: str, sha: str, hour: int) -> str:
        times = {"run_start": f"2026-11-02T{hour:02d}:00Z", "run_end": f"2026-11-02T{hour:02d}:30Z"}
        return ci.created(**{**MINIMAL, "ci_job_name": job, "branch": branch, "sha": sha, **times})

    main_early = run("a", branch="main", sha=SHA, hour=1)
    feature = run("b", branch="feature/x", sha=OTHER_SHA, hour=2)
    main_late = run("c", branch="main", sha=OTHER_SHA, hour=3)

    def ids(**fields: Any) -> list[str]:
        return [run["run_id"] for run in ci.runs(**fields)]

    assert ids() == [main_late, feature, main_early]
    assert ids(branch="main") == [main_late, main_early]
    assert ids(sha=OTHER_SHA.upper()) == [main_late, feature]
    assert ids(branch="main", sha=SHA) == [main_early]
    assert ids(branch="release") == []


def test_the_listing_pages_both_ways_with_its_own_tokens(ci: CiRuns) -> None:
    made = [
        ci.created(**{**MINIMAL, "attempt": attempt, "run_start": f"2026-11-02T0{attempt}:00:00Z"})
        for attempt in range(5)
    ]
    newest_first = list(reversed(made))
    seen: list[str] = []
    pages: list[dict[str, Any]] = []
    token = ""
    while True:
        response = ci.listing(page_query={"page_size": 2, "page_token": token})
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body["page"])
        seen += [run["run_id"] for run in body["ci_runs"]]
        token = body["page"]["next_page_token"]
        if not token:
            break
    assert seen == newest_first
    assert [page["page_index"] for page in pages] == [0, 1, 2]
    assert {(page["total_rows"], page["total_pages"]) for page in pages} == {(5, 3)}
    back = ci.listing(page_query={"page_size": 2, "page_token": pages[2]["prev_page_token"]})
    assert [run["run_id"] for run in back.json()["ci_runs"]] == newest_first[2:4]
    # A token is bound to its listing: its filters, its page size, its endpoint.
    next_token = pages[0]["next_page_token"]
    for response in (
        ci.listing(branch="main", page_query={"page_size": 2, "page_token": next_token}),
        ci.listing(page_query={"page_size": 3, "page_token": next_token}),
        ci.client.post(
            "/v1/flaky-tests/list-quarantined-tests",
            headers=ci.headers,
            json={
                "repo": dict(REPO_JSON),
                "org_url_slug": "acme",
                "page_query": {"page_size": 2, "page_token": next_token},
            },
        ),
    ):
        assert "page_token" in assert_error(response, 400)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"page_query": {}}, "page_size"),
        ({"page_query": {"page_size": 0}}, "page_size"),
        ({"page_query": {"page_size": 101}}, "page_size"),
        ({"page_query": {"page_size": 5, "page_token": "forged"}}, "page_token"),
        ({"sha": "zzz"}, "sha"),
        ({"branch": "a..b"}, "branch"),
    ],
)
def test_bad_listing_queries_are_a_400_naming_the_field(
    ci: CiRuns, fields: dict[str, Any], field: str
) -> None:
    assert field in assert_error(ci.listing(**fields), 400)


def test_an_empty_listing_has_an_empty_page(ci: CiRuns) -> None:
    response = ci.listing()
    assert response.json() == {
        "ci_runs": [],
        "page": {
            "total_rows": 0,
            "total_pages": 0,
            "next_page_token": "",
            "prev_page_token": "",
            "last_page_token": "",
            "page_index": 0,
        },
    }


# -- the README -------------------------------------------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(marker: str) -> str:
    """The fenced block of README.md right after the `<!-- marker -->` line."""
    found = re.search(
        rf"^<!-- {marker} -->\n```\w+\n(.*?)^```$",
        README.read_text(encoding="utf-8"),
        re.MULTILINE | re.DOTALL,
    )
    assert found is not None, marker
    return found.group(1)


def shape(value: Any) -> Any:
    """The keys and JSON types of `value`, all the way down (a list by its first item)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def test_the_readme_example_is_stored_and_listed_in_the_shape_the_readme_shows(
    ci: CiRuns, container: Container
) -> None:
    example = readme_block("ci-run-example")
    body = json.loads(example[example.index("-d '") + 4 : example.rindex("'")])
    assert body["repo"] == REPO_JSON
    assert body.keys() >= {*FULL, "repo", "org_url_slug"}  # every field, as documented
    response = ci.client.post("/v1/flaky-ci/create-ci-run", headers=ci.headers, json=body)
    assert response.status_code == 200, response.text
    documented = json.loads(readme_block("ci-runs-answer"))
    answer = ci.listing(page_query={"page_size": 1}).json()
    assert shape(answer) == shape(documented)
    run = answer["ci_runs"][0]
    assert run["run_id"] == response.json()["run_id"]
    unchanging = {
        key: run[key] for key in run if key not in ("run_id", "reported_at", "updated_at")
    }
    assert unchanging == {key: documented["ci_runs"][0][key] for key in unchanging}
