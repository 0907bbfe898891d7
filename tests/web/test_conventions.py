"""The conventions every endpoint of API v1 follows (ARCHITECTURE.md "HTTP API v1 conventions"):
auth, org isolation, body limit, input validation, enum casing, write-verb bodies, OpenAPI,
and JSON errors. Status codes are asserted exactly, so a 500 never passes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from tests.support.gitrepo import GitRepo
from tests.support.wire import (
    REPO,
    REPO_JSON,
    Api,
    assert_error,
    assert_invalid,
    get_pr,
    get_queue,
    pr_verb,
    queue_body,
    submitted,
    worker_pass,
)

MIB = 1024 * 1024
LIMIT = 20 * MIB
SHA = "0123456789abcdef0123456789abcdef01234567"

# Every POST endpoint with a body that is valid for acme's repository, its `main` queue and PR 1.
POST_BODIES: dict[str, dict[str, Any]] = {
    "submitPullRequest": {"targetBranch": "main", "pr": {"number": 1}},
    "cancelPullRequest": {"targetBranch": "main", "pr": {"number": 1}},
    "restartTestsOnPullRequest": {"targetBranch": "main", "pr": {"number": 1}},
    "setImpactedTargets": {
        "targetBranch": "main",
        "pr": {"number": 1, "sha": SHA},
        "impactedTargets": ["//a"],
    },
    "getSubmittedPullRequest": {"targetBranch": "main", "pr": {"number": 1}},
    "listPullRequests": {"targetBranch": "main"},
    "getMergeQueueTestingDetails": {"targetBranch": "main", "testRunId": str(uuid.uuid4())},
    "createQueue": {"targetBranch": "release"},
    "updateQueue": {"targetBranch": "main", "concurrency": 2},
    "getQueue": {"targetBranch": "main"},
    "getQueueAnalytics": {"targetBranch": "main"},
    "deleteQueue": {"targetBranch": "main"},
    "setCommitStatus": {"sha": SHA, "context": "ci", "state": "success"},
}
POST_VERBS = list(POST_BODIES)
METRICS = "getMergeQueueMetrics"
ALL_VERBS = [*POST_VERBS, METRICS]


def body_of(verb: str) -> dict[str, Any]:
    return {"repo": dict(REPO_JSON), **POST_BODIES[verb]}


def call(client: TestClient, verb: str, headers: dict[str, str]) -> Any:
    if verb == METRICS:
        params = {"repo": "acme/widgets", "repoHost": "github.com"}
        return client.get(f"/v1/{verb}", params=params, headers=headers)
    return client.post(f"/v1/{verb}", json=body_of(verb), headers=headers)


def post_raw(client: TestClient, verb: str, content: Any, token: str | None) -> Any:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["x-api-token"] = token
    return client.post(f"/v1/{verb}", content=content, headers=headers)


@pytest.fixture
def with_pr(queue: Api, registered_repo: GitRepo) -> Api:
    """acme's `main` queue with PR 1 open in git and submitted: in the queue, `not_ready` and
    unread until a worker pass reads it (no pass runs here).
    """
    registered_repo.open_pr(1, {"one.txt": "1\n"}, title="One")
    submitted(queue, 1)
    return queue


# -- authentication and org isolation ------------------------------------------------------------


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_no_token_is_401(with_pr: Api, verb: str) -> None:
    assert_error(call(with_pr.client, verb, {}), 401, "unauthorized")


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_wrong_token_is_401(with_pr: Api, verb: str) -> None:
    response = call(with_pr.client, verb, {"x-api-token": with_pr.token + "x"})
    assert_error(response, 401, "unauthorized")


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_empty_token_is_401(with_pr: Api, verb: str) -> None:
    assert_error(call(with_pr.client, verb, {"x-api-token": ""}), 401, "unauthorized")


@pytest.mark.parametrize("verb", POST_VERBS)
@pytest.mark.parametrize("content", [b"{not json", b'{"repo": 5}'], ids=repr)
def test_401_wins_over_a_bad_body(client: TestClient, verb: str, content: bytes) -> None:
    assert_error(post_raw(client, verb, content, None), 401, "unauthorized")


@pytest.mark.parametrize("content", [b"[]", b'"text"', b"", b"\xff", b"{}"], ids=repr)
def test_401_wins_over_any_bad_body(client: TestClient, content: bytes) -> None:
    assert_error(post_raw(client, "submitPullRequest", content, None), 401, "unauthorized")


@pytest.mark.parametrize("verb", POST_VERBS)
def test_401_wins_over_a_bad_body_with_a_wrong_token(
    client: TestClient, verb: str, token: str
) -> None:
    assert_error(post_raw(client, verb, b"{not json", "kg_wrong"), 401, "unauthorized")


def test_metrics_401_wins_over_bad_parameters(client: TestClient) -> None:
    response = client.get(f"/v1/{METRICS}", params={"repo": "no-slash"})
    assert_error(response, 401, "unauthorized")


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_another_orgs_token_gets_404_for_acmes_repo(
    with_pr: Api, other_token: str, verb: str
) -> None:
    response = call(with_pr.client, verb, {"x-api-token": other_token})
    assert_error(response, 404, "repository_not_found")


@pytest.mark.parametrize("part", ["host", "owner", "name"])
@pytest.mark.parametrize("verb", ALL_VERBS)
def test_a_control_character_in_the_repo_is_400(with_pr: Api, verb: str, part: str) -> None:
    headers = {"x-api-token": with_pr.token}
    if verb == METRICS:
        parts = {**REPO_JSON, part: REPO_JSON[part][:2] + "\x00" + REPO_JSON[part][2:]}
        params = {"repo": f"{parts['owner']}/{parts['name']}", "repoHost": parts["host"]}
        response = with_pr.client.get(f"/v1/{verb}", params=params, headers=headers)
        assert_invalid(response, "repoHost" if part == "host" else "repo")
    else:
        repo = {**REPO_JSON, part: REPO_JSON[part] + "\x00"}
        body = {**body_of(verb), "repo": repo}
        response = with_pr.client.post(f"/v1/{verb}", json=body, headers=headers)
        assert_invalid(response, f"repo.{part}")


def test_another_orgs_token_changes_nothing(with_pr: Api, other_token: str) -> None:
    for verb in ("cancelPullRequest", "updateQueue", "deleteQueue"):
        assert call(with_pr.client, verb, {"x-api-token": other_token}).status_code == 404
    body = get_queue(with_pr)
    assert body["concurrency"] == 1
    assert body["enqueuedPullRequests"] == []  # PR 1 is unread (not_ready), so not listed
    pr = get_pr(with_pr, 1)
    assert (pr["state"], pr["isCurrentlySubmittedToQueue"]) == ("not_ready", True)


def test_another_org_may_register_a_repo_of_the_same_name(
    with_pr: Api, other_token: str, container: Container, tmp_path: Path
) -> None:
    other = GitRepo(tmp_path / "globex-widgets")
    container.admin.add_repository(
        org_slug="globex", ref=REPO, git_url=str(other.path), ci_command=None
    )
    theirs = Api(with_pr.client, other_token, dict(REPO_JSON))
    assert theirs.post("getQueue", targetBranch="main").status_code == 404
    assert theirs.post("createQueue", targetBranch="main", concurrency=3).status_code == 200
    assert get_queue(theirs)["enqueuedPullRequests"] == []
    assert get_queue(with_pr)["concurrency"] == 1


def test_metrics_without_a_repo_only_show_the_tokens_org(with_pr: Api, other_token: str) -> None:
    mine = with_pr.client.get(f"/v1/{METRICS}", headers={"x-api-token": with_pr.token})
    theirs = with_pr.client.get(f"/v1/{METRICS}", headers={"x-api-token": other_token})
    assert mine.status_code == 200
    assert theirs.status_code == 200
    assert 'repo="acme/widgets"' in mine.text
    assert "acme/widgets" not in theirs.text


# -- body size limit -----------------------------------------------------------------------------


def padded_body(size: int) -> bytes:
    """A valid getQueue body of exactly `size` bytes (an ignored field carries the padding)."""
    head = json.dumps(queue_body(padding="")).encode()
    filler = size - len(head)
    assert filler >= 0
    return head[:-2] + b"x" * filler + head[-2:]


def chunks(data: bytes, size: int = MIB) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("verb", POST_VERBS)
def test_body_over_20_mib_with_content_length_is_413(queue: Api, verb: str) -> None:
    response = post_raw(queue.client, verb, b" " * (LIMIT + 1), queue.token)
    assert_error(response, 413, "payload_too_large")


def test_body_over_20_mib_streamed_without_content_length_is_413(queue: Api) -> None:
    body = padded_body(LIMIT + 1)
    response = post_raw(queue.client, "getQueue", chunks(body), queue.token)
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_error(response, 413, "payload_too_large")


def test_body_over_20_mib_is_413_even_without_a_token(client: TestClient) -> None:
    response = post_raw(client, "getQueue", b" " * (LIMIT + 1), None)
    assert_error(response, 413, "payload_too_large")


def test_body_of_exactly_20_mib_is_accepted(queue: Api) -> None:
    response = post_raw(queue.client, "getQueue", padded_body(LIMIT), queue.token)
    assert response.status_code == 200, response.text[:200]
    assert response.json()["branch"] == "main"


def test_streamed_body_of_exactly_20_mib_is_accepted(queue: Api) -> None:
    response = post_raw(queue.client, "getQueue", chunks(padded_body(LIMIT)), queue.token)
    assert response.status_code == 200, response.text[:200]


def test_the_server_keeps_working_after_a_413(queue: Api) -> None:
    post_raw(queue.client, "getQueue", chunks(padded_body(LIMIT + 1)), queue.token)
    assert queue.post("getQueue", targetBranch="main").status_code == 200


# -- malformed bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize("verb", POST_VERBS)
def test_malformed_json_is_400(queue: Api, verb: str) -> None:
    response = post_raw(queue.client, verb, b'{"repo": {"host": ', queue.token)
    assert_error(response, 400, "malformed_json")


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe", b"\xff", b'{"a": "\xe9"}', b"{}}", b"{'repo': 1}", b'{"a": 1,}'],
    ids=repr,
)
def test_malformed_json_of_any_kind_is_400(queue: Api, content: bytes) -> None:
    assert_error(post_raw(queue.client, "getQueue", content, queue.token), 400, "malformed_json")


@pytest.mark.parametrize("verb", POST_VERBS)
@pytest.mark.parametrize("content", [b"[]", b'"main"'], ids=repr)
def test_a_body_that_is_not_an_object_is_400(queue: Api, verb: str, content: bytes) -> None:
    assert_error(post_raw(queue.client, verb, content, queue.token), 400)


@pytest.mark.parametrize("content", [b"[{}]", b"42", b"null", b"true", b'["repo"]'], ids=repr)
def test_a_json_value_that_is_not_an_object_is_400(queue: Api, content: bytes) -> None:
    response = post_raw(queue.client, "updateQueue", content, queue.token)
    assert_error(response, 400)
    assert response.json()["error"]["message"] == "the request body must be a JSON object"


@pytest.mark.parametrize("verb", ["getQueue", "updateQueue", "setImpactedTargets"])
def test_deeply_nested_json_is_400(queue: Api, verb: str) -> None:
    content = b'{"repo": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    message = assert_error(
        post_raw(queue.client, verb, content, queue.token), 400, "malformed_json"
    )
    assert message.startswith("the request body is nested too deeply")


def test_json_nested_as_deep_as_the_parser_reads_is_400(queue: Api) -> None:
    # 900 levels parse; validation then refuses the list where a string belongs.
    body = b'{"repo": {"host": "h", "owner": "o", "name": "n"}, "targetBranch": "main", '
    body += b'"requiredStatuses": ' + b"[" * 900 + b"]" * 900 + b"}"
    message = assert_error(post_raw(queue.client, "updateQueue", body, queue.token), 400)
    assert message.startswith("requiredStatuses")


def test_401_wins_over_deeply_nested_json(client: TestClient) -> None:
    content = b'{"repo": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert_error(post_raw(client, "getQueue", content, None), 401, "unauthorized")


@pytest.mark.parametrize("verb", POST_VERBS)
def test_an_empty_body_is_400(queue: Api, verb: str) -> None:
    assert_error(post_raw(queue.client, verb, b"", queue.token), 400)


@pytest.mark.parametrize("verb", POST_VERBS)
def test_missing_repo_is_400_naming_it(queue: Api, verb: str) -> None:
    body = POST_BODIES[verb]
    response = queue.client.post(f"/v1/{verb}", json=body, headers={"x-api-token": queue.token})
    assert_invalid(response, "repo")


def test_a_non_json_content_type_is_refused(queue: Api) -> None:
    response = queue.client.post(
        "/v1/getQueue",
        content=json.dumps(body_of("getQueue")),
        headers={"x-api-token": queue.token, "content-type": "text/plain"},
    )
    assert response.status_code in (400, 415), response.text
    assert_error(response, response.status_code)


# -- wrong types ---------------------------------------------------------------------------------


# (verb, fields sent, the field the 400 names); checked with the other lists below.
WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("createQueue", {"concurrency": "3"}, "concurrency"),
    ("createQueue", {"concurrency": 1.5}, "concurrency"),
    ("createQueue", {"concurrency": True}, "concurrency"),
    ("createQueue", {"concurrency": None, "mode": 3}, "mode"),
    ("createQueue", {"targetBranch": {"name": "main"}}, "targetBranch"),
    ("createQueue", {"targetBranch": 5}, "targetBranch"),
    ("createQueue", {"targetBranch": None}, "targetBranch"),
    ("createQueue", {"repo": "acme/widgets"}, "repo"),
    ("createQueue", {"repo": {**REPO_JSON, "host": 5}}, "repo.host"),
    ("createQueue", {"repo": {"host": "github.com", "owner": "acme"}}, "repo.name"),
    ("createQueue", {"repo": {**REPO_JSON, "owner": ""}}, "repo.owner"),
    ("submitPullRequest", {"noBatch": "true"}, "noBatch"),
    ("submitPullRequest", {"noBatch": 1}, "noBatch"),
    ("submitPullRequest", {"skipTheLine": "false"}, "skipTheLine"),
    ("submitPullRequest", {"pr": {"number": True}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": 1.5}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": "one"}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": "1.0"}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": None}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": [1]}}, "pr.number"),
    ("submitPullRequest", {"pr": {}}, "pr.number"),
    ("submitPullRequest", {"pr": 1}, "pr"),
    ("submitPullRequest", {"priority": 1.5}, "priority"),
    ("submitPullRequest", {"priority": True}, "priority"),
    ("submitPullRequest", {"priority": [1]}, "priority"),
    ("updateQueue", {"batch": "yes"}, "batch"),
    ("updateQueue", {"batch": 0}, "batch"),
    ("updateQueue", {"testingTimeoutMinutes": "60"}, "testingTimeoutMinutes"),
    ("updateQueue", {"pendingFailureDepth": 1.5}, "pendingFailureDepth"),
    ("updateQueue", {"requiredStatuses": "ci"}, "requiredStatuses"),
    ("updateQueue", {"requiredStatuses": ["ci", 5]}, "requiredStatuses"),
    ("updateQueue", {"requiredStatuses": [""]}, "requiredStatuses"),
    ("updateQueue", {"deleteRequiredStatuses": "true"}, "deleteRequiredStatuses"),
    ("updateQueue", {"state": 1}, "state"),
    ("listPullRequests", {"take": "10"}, "take"),
    ("listPullRequests", {"since": "yesterday"}, "since"),
    ("setImpactedTargets", {"impactedTargets": {"a": 1}}, "impactedTargets"),
    ("setImpactedTargets", {"impactedTargets": [1, 2]}, "impactedTargets"),
    ("setImpactedTargets", {"impactedTargets": "SOME"}, "impactedTargets"),
    ("setImpactedTargets", {"pr": {"number": 1}}, "pr.sha"),
    ("getMergeQueueTestingDetails", {"testRunId": 5}, "testRunId"),
    ("setCommitStatus", {"context": ["ci"]}, "context"),
    ("setCommitStatus", {"sha": 1234567}, "sha"),
]


# -- enums ---------------------------------------------------------------------------------------


UNKNOWN_ENUMS: list[tuple[str, dict[str, Any], str]] = [
    ("createQueue", {"mode": "serial"}, "mode"),
    ("createQueue", {"mode": ""}, "mode"),
    ("updateQueue", {"state": "stopped"}, "state"),
    ("updateQueue", {"mode": "graph"}, "mode"),
    ("updateQueue", {"mergeMethod": "fast_forward"}, "mergeMethod"),
    ("updateQueue", {"mergeMethod": "merge commit"}, "mergeMethod"),
    ("updateQueue", {"directMergeMode": "sometimes"}, "directMergeMode"),
    ("updateQueue", {"optimizationMode": "max"}, "optimizationMode"),
    ("listPullRequests", {"state": "done"}, "state"),
    ("setCommitStatus", {"state": "ok"}, "state"),
    ("submitPullRequest", {"priority": "critical"}, "priority"),
    ("submitPullRequest", {"priority": ""}, "priority"),
]


def test_enums_in_upper_case_are_answered_lowercase(api: Api) -> None:
    assert api.post("createQueue", targetBranch="main", mode="PARALLEL").status_code == 200
    answered = api.post(
        "updateQueue", targetBranch="main", state="PAUSED", mergeMethod="REBASE"
    ).json()
    assert (answered["mode"], answered["state"], answered["mergeMethod"]) == (
        "parallel",
        "paused",
        "rebase",
    )


def test_pr_state_filter_in_mixed_case(with_pr: Api) -> None:
    response = with_pr.post("listPullRequests", targetBranch="main", state="NoT_rEaDy")
    assert response.status_code == 200, response.text
    assert [(p["prNumber"], p["state"]) for p in response.json()["pullRequests"]] == [
        (1, "not_ready")
    ]
    response = with_pr.post("listPullRequests", targetBranch="main", state="PeNdInG")
    assert response.status_code == 200, response.text
    assert response.json()["pullRequests"] == []


def test_priority_name_in_upper_case_is_answered_lowercase(with_pr: Api) -> None:
    submitted(with_pr, 1, priority="HIGH")
    pr = get_pr(with_pr, 1)
    assert (pr["priorityName"], pr["priorityValue"]) == ("high", 10)


# -- numbers and their bounds --------------------------------------------------------------------


OUT_OF_RANGE: list[tuple[str, dict[str, Any], str]] = [
    ("submitPullRequest", {"pr": {"number": -1}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": 2**40}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": 2**32}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": 10**30}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": "-1"}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": "4294967296"}}, "pr.number"),
    ("submitPullRequest", {"pr": {"number": "1" * 40}}, "pr.number"),
    ("getSubmittedPullRequest", {"pr": {"number": -1}}, "pr.number"),
    ("cancelPullRequest", {"pr": {"number": 2**40}}, "pr.number"),
    ("setImpactedTargets", {"pr": {"number": 0, "sha": SHA}}, "pr.number"),
    ("createQueue", {"concurrency": 0}, "concurrency"),
    ("createQueue", {"concurrency": -3}, "concurrency"),
    ("createQueue", {"concurrency": 10**12}, "concurrency"),
    ("updateQueue", {"concurrency": 0}, "concurrency"),
    ("updateQueue", {"concurrency": 10**12}, "concurrency"),
    ("updateQueue", {"bisectionConcurrency": 0}, "bisectionConcurrency"),
    ("updateQueue", {"testingTimeoutMinutes": -1}, "testingTimeoutMinutes"),
    ("updateQueue", {"testingTimeoutMinutes": 10**9}, "testingTimeoutMinutes"),
    ("updateQueue", {"pendingFailureDepth": -1}, "pendingFailureDepth"),
    ("updateQueue", {"batchingMinSize": 0}, "batchingMinSize"),
    ("updateQueue", {"batchingMaxWaitTimeMinutes": -5}, "batchingMaxWaitTimeMinutes"),
    ("submitPullRequest", {"priority": 4_294_967_296}, "priority"),
    ("submitPullRequest", {"priority": -1}, "priority"),
    ("submitPullRequest", {"priority": "4294967296"}, "priority"),
    ("submitPullRequest", {"priority": 2**70}, "priority"),
    ("listPullRequests", {"take": 0}, "take"),
    ("listPullRequests", {"take": 101}, "take"),
]


@pytest.mark.parametrize(
    ("verb", "fields", "field"),
    [
        *(pytest.param(*case, id=f"wrongly-typed-{case[2]}") for case in WRONG_TYPES),
        *(pytest.param(*case, id=f"unknown-enum-{case[2]}") for case in UNKNOWN_ENUMS),
        *(pytest.param(*case, id=f"out-of-range-{case[2]}") for case in OUT_OF_RANGE),
    ],
)
def test_a_wrongly_typed_unknown_or_out_of_range_field_is_400_naming_it(
    with_pr: Api, verb: str, fields: dict[str, Any], field: str
) -> None:
    response = with_pr.client.post(
        f"/v1/{verb}", json={**body_of(verb), **fields}, headers={"x-api-token": with_pr.token}
    )
    assert_invalid(response, field)


@pytest.mark.parametrize("content", [b"1e400", b"-1e400", b"NaN", b"Infinity"])
def test_non_finite_numbers_are_400(with_pr: Api, content: bytes) -> None:
    body = json.dumps(body_of("createQueue")).encode()[:-1] + b', "concurrency": ' + content + b"}"
    assert_invalid(post_raw(with_pr.client, "createQueue", body, with_pr.token), "concurrency")


def test_a_huge_integer_literal_is_400(with_pr: Api) -> None:
    body = json.dumps(body_of("submitPullRequest")).encode().replace(b'"number": 1', b'"number": ')
    body = body.replace(b'"number": ', b'"number": ' + b"9" * 5000)
    response = post_raw(with_pr.client, "submitPullRequest", body, with_pr.token)
    assert response.status_code == 400, response.text


def test_the_largest_pr_number_is_accepted(with_pr: Api) -> None:
    """2**32 - 1 passes validation: the submit takes it unread, and the worker's pass, which
    finds no such PR in git, cancels it as `pr_not_found`.
    """
    largest = 2**32 - 1
    submitted(with_pr, largest)
    pr = get_pr(with_pr, largest)
    assert (pr["prNumber"], pr["state"], pr["prSha"]) == (largest, "not_ready", "")
    worker_pass(with_pr)
    pr = get_pr(with_pr, largest)
    assert (pr["state"], pr["isCurrentlySubmittedToQueue"]) == ("cancelled", False)
    assert pr["explanation"]["reasonCode"] == "pr_not_found"


@pytest.mark.parametrize("number", ["1", " 1 ", "0001"])
def test_pr_number_as_a_numeric_string_works(
    queue: Api, registered_repo: GitRepo, number: str
) -> None:
    registered_repo.open_pr(1, {"one.txt": "1\n"})
    submitted(queue, number)
    assert get_pr(queue, number)["prNumber"] == 1


def test_priority_as_a_numeric_string_works(with_pr: Api) -> None:
    submitted(with_pr, 1, priority="42")
    pr = get_pr(with_pr, 1)
    assert pr["priorityValue"] == 42


# -- leniency and answers ------------------------------------------------------------------------


def test_unknown_fields_are_ignored(api: Api, registered_repo: GitRepo) -> None:
    registered_repo.open_pr(1, {"one.txt": "1\n"})
    extra = {"enqueueingLabel": "x", "someFutureField": {"nested": [1, 2]}}
    assert api.post("createQueue", targetBranch="main", **extra).status_code == 200
    response = api.post(
        "submitPullRequest",
        targetBranch="main",
        pr={"number": 1, "sha": "whatever", "title": 3},
        repo={**REPO_JSON, "id": 99},
        **extra,
    )
    assert response.status_code == 200, response.text
    answered = api.post("updateQueue", targetBranch="main", mergeQueueBanner=True, **extra)
    assert answered.status_code == 200, answered.text
    assert "mergeQueueBanner" not in answered.json()
    assert "someFutureField" not in answered.json()


def test_x_source_header_is_ignored(queue: Api) -> None:
    response = queue.client.post(
        "/v1/getQueue",
        json=body_of("getQueue"),
        headers={"x-api-token": queue.token, "x-source": "terraform"},
    )
    assert response.status_code == 200


def test_write_verbs_answer_exactly_an_empty_object(queue: Api, registered_repo: GitRepo) -> None:
    sha = registered_repo.open_pr(1, {"one.txt": "1\n"})
    calls: list[tuple[str, dict[str, Any]]] = [
        ("createQueue", {"targetBranch": "release"}),
        ("submitPullRequest", {"targetBranch": "main", "pr": {"number": 1}}),
        (
            "setImpactedTargets",
            {"targetBranch": "main", "pr": {"number": 1, "sha": sha}, "impactedTargets": "ALL"},
        ),
        ("setCommitStatus", {"sha": sha, "context": "ci", "state": "pending"}),
        ("cancelPullRequest", {"targetBranch": "main", "pr": {"number": 1}}),
        ("deleteQueue", {"targetBranch": "release"}),
    ]
    for verb, body in calls:
        response = queue.post(verb, body)
        assert response.status_code == 200, (verb, response.text)
        assert response.headers["content-type"] == "application/json"
        assert response.content == b"{}", verb


# -- OpenAPI, unknown paths, methods -------------------------------------------------------------

PATHS = {f"/{verb}" for verb in ALL_VERBS}
FLAKY_PATHS = {
    f"/flaky-tests/{verb}"
    for verb in (
        "upload",
        "list-failing-tests",
        "list-unhealthy-tests",
        "get-test-details",
        "list-quarantined-tests",
        "link-ticket-to-test-case",
        "set-quarantine-override",
        "flag-test",
        "get-settings",
        "update-settings",
    )
} | {"/metrics/getQuarantineConfig", "/flaky-ci/create-ci-run", "/flaky-ci/list-ci-runs"}
# Trunk's uploader: where it asks to upload, the signed URL it PUTs its bundle to (no token: the
# signature is the authorisation), and its telemetry.
UPLOADER_PATHS = {
    "/metrics/createBundleUpload",
    "/flaky-tests/bundles/{token}",
    "/flakytests-cli/upload-metrics",
}


@pytest.mark.parametrize("url", ["/v1/openapi.json", "/openapi.json"])
def test_openapi_document_lists_every_path(client: TestClient, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert len(PATHS) == 14  # the merge-queue interface's 13, and keepgreen's getQueueAnalytics
    assert set(document["paths"]) == PATHS | FLAKY_PATHS | UPLOADER_PATHS
    assert document["servers"] == [{"url": "/v1"}]


def test_openapi_document_uses_the_right_methods(client: TestClient) -> None:
    paths = client.get("/v1/openapi.json").json()["paths"]
    assert set(paths[f"/{METRICS}"]) == {"get"}
    for verb in POST_VERBS:
        assert set(paths[f"/{verb}"]) == {"post"}, verb
    assert set(paths["/flaky-tests/bundles/{token}"]) == {"put"}
    # The PUT carries no API token, as the pre-signed S3 URL it stands in for carries none.
    assert "security" not in paths["/flaky-tests/bundles/{token}"]["put"]


def test_openapi_document_declares_the_token_header(client: TestClient) -> None:
    schemes = client.get("/openapi.json").json()["components"]["securitySchemes"]
    assert {"type": "apiKey", "in": "header", "name": "x-api-token"} in [
        {k: v for k, v in scheme.items() if k in ("type", "in", "name")}
        for scheme in schemes.values()
    ]


@pytest.mark.parametrize("path", ["/v1/noSuchEndpoint", "/v1/getQueue/extra", "/v1"])
def test_unknown_path_is_404_json(client: TestClient, token: str, path: str) -> None:
    response = client.post(path, json={}, headers={"x-api-token": token})
    assert_error(response, 404, "not_found")
    assert_error(client.get(path), 404, "not_found")


@pytest.mark.parametrize("path", ["/nope", "/v2/getQueue", "/acme"])
def test_outside_the_api_an_api_client_gets_json_and_a_browser_a_page(
    client: TestClient, token: str, path: str
) -> None:
    """Paths outside /v1 are the dashboard's: a call with a token still gets the API's JSON."""
    response = client.post(path, json={}, headers={"x-api-token": token})
    assert_error(response, 404, "not_found")
    page = client.get(path)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")


def test_wrong_method_is_405_json(client: TestClient, token: str) -> None:
    response = client.get("/v1/getQueue", headers={"x-api-token": token})
    assert_error(response, 405, "method_not_allowed")
    response = client.post(f"/v1/{METRICS}", json={}, headers={"x-api-token": token})
    assert_error(response, 405, "method_not_allowed")


# -- values at the edge of what the database holds -----------------------------------------------


@pytest.mark.parametrize(
    ("since", "listed"),
    [
        pytest.param("9999-12-31T23:59:59-23:59", [], id="end-of-time-lists-nothing"),
        pytest.param("9999-12-31T23:59:59.999999Z", [], id="end-of-time-utc-lists-nothing"),
        pytest.param("0001-01-01T00:00:00+23:59", [1], id="start-of-time-lists-concluded"),
        pytest.param("0001-01-01T00:00:00Z", [1], id="start-of-time-utc-lists-concluded"),
    ],
)
def test_a_since_at_either_end_of_time(with_pr: Api, since: str, listed: list[int]) -> None:
    assert pr_verb(with_pr, "cancelPullRequest", 1).status_code == 200
    response = with_pr.post("listPullRequests", targetBranch="main", since=since)
    assert response.status_code == 200, response.text
    assert [p["prNumber"] for p in response.json()["pullRequests"]] == listed


# -- text that is not Unicode (issue 10) -------------------------------------------------------

SURROGATE = "\ud800"


def string_leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every string in a JSON value."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from string_leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from string_leaves(item, (*path, index))


def with_leaf(value: Any, path: tuple[Any, ...], leaf: str) -> Any:
    if not path:
        return leaf
    copy = json.loads(json.dumps(value))
    copy[path[0]] = with_leaf(value[path[0]], path[1:], leaf)
    return copy


def post_escaped(api: Api, verb: str, body: dict[str, Any]) -> Any:
    # json.dumps escapes the surrogate (`"\ud800"`), as any JSON client sends it.
    return post_raw(api.client, verb, json.dumps(body).encode(), api.token)


@pytest.mark.parametrize("verb", POST_VERBS)
def test_a_lone_surrogate_in_any_string_of_a_body_is_a_400_naming_it(
    with_pr: Api, verb: str
) -> None:
    body = body_of(verb)
    for path in string_leaves(body):
        field = ".".join(str(part) for part in path if not isinstance(part, int))
        response = post_escaped(with_pr, verb, with_leaf(body, path, f"x{SURROGATE}"))
        message = assert_error(response, 400, "invalid_request")
        assert message.startswith(f"{field}: "), (verb, path, message)
        assert "lone surrogate" in message


@pytest.mark.parametrize(
    ("verb", "fields", "message"),
    [
        ("getQueue", {"targetBranch": SURROGATE}, "targetBranch: must be valid Unicode text"),
        (
            "updateQueue",
            {"targetBranch": "main", "requiredStatuses": ["ci", f"lint{SURROGATE}"]},
            "requiredStatuses: item 1 must be valid Unicode text",
        ),
        (
            "setCommitStatus",
            {"sha": SHA, "context": f"ci{SURROGATE}", "state": "success"},
            "context: must be valid Unicode text",
        ),
        (
            "setCommitStatus",
            {"sha": SHA, "context": "ci", "state": "success", "description": SURROGATE},
            "description: must be valid Unicode text",
        ),
        (
            "setImpactedTargets",
            {
                "targetBranch": "main",
                "pr": {"number": 1, "sha": SHA},
                "impactedTargets": ["//a", SURROGATE],
            },
            "impactedTargets: item 1 must be valid Unicode text",
        ),
    ],
)
def test_the_issues_lone_surrogates_are_a_400(
    with_pr: Api, verb: str, fields: dict[str, Any], message: str
) -> None:
    response = post_escaped(with_pr, verb, {"repo": dict(REPO_JSON), **fields})

    assert assert_error(response, 400, "invalid_request").startswith(message)
    assert "lone surrogate (\\ud800)" in response.json()["error"]["message"]


def test_nothing_was_stored_from_a_refused_surrogate(with_pr: Api) -> None:
    body = {"repo": dict(REPO_JSON), "targetBranch": "main", "requiredStatuses": [SURROGATE]}
    assert_error(post_escaped(with_pr, "updateQueue", body), 400)

    assert get_queue(with_pr)["requiredStatuses"] == []


def test_a_surrogate_in_metrics_query_parameters_is_not_a_500(with_pr: Api) -> None:
    # Percent-decoding replaces what is not UTF-8, so a query cannot carry a lone surrogate;
    # the encoded bytes of one are refused as a name like any other bad byte.
    response = with_pr.client.get(
        "/v1/getMergeQueueMetrics?repo=acme/wid%ED%A0%80&repoHost=github.com",
        headers={"x-api-token": with_pr.token},
    )
    assert response.status_code in (400, 404), response.text
    assert_error(response, response.status_code)


def request_models() -> list[type[Any]]:
    from keepgreen.web import flaky_schemas, schemas  # noqa: F401 (every request model)

    found, pending = [], [schemas.Request]
    while pending:
        model = pending.pop()
        found.append(model)
        pending.extend(model.__subclasses__())
    return found


def test_every_field_of_every_request_model_refuses_a_lone_surrogate() -> None:
    # One shared validator covers every field, so a field added later is covered too.
    from pydantic import ValidationError

    checked = 0
    for model in request_models():
        for name in model.model_fields:
            for value in (SURROGATE, ["ok", SURROGATE]):
                with pytest.raises(ValidationError) as caught:
                    model.model_validate({name: value})
                [error] = [e for e in caught.value.errors() if e["loc"] == (name,)]
                assert "lone surrogate" in error["msg"], (model, name)
                checked += 1
    assert checked > 100
