"""GET /metrics (the operator's), Bearer tokens on getMergeQueueMetrics, and the request
middleware: request ids, the access log, and the keepgreen_* counters that real traffic moves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.engine import QueueEngine
from keepgreen.app.ports import BuildConflict, CodeHostError, TestCommit
from keepgreen.bootstrap import Container
from keepgreen.core.model import Repository
from keepgreen.core.scheduler import UserCancelled
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.telemetry import (
    JUNIT,
    OPERATOR,
    OPERATOR_TOKEN,
    operator_container,
    operator_settings,
    post_junit,
    sample,
    scrape,
)
from tests.support.wire import REPO, REPO_JSON, Api, assert_error, open_and_submit, update_queue

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GET_MQ_METRICS = "/v1/getMergeQueueMetrics"


@pytest.fixture
def extra_settings(tmp_path: Path) -> dict[str, Any]:
    """The container's settings open GET /metrics with the operator's token."""
    return operator_settings(tmp_path)


@pytest.fixture
def scenario(
    container: Container, api: Api, registered_repo: GitRepo, clock: FakeClock
) -> Scenario:
    return Scenario(container=container, api=api, repo=registered_repo, clock=clock)


# -- GET /metrics: the operator's token, and only it ------------------------------------------


def test_metrics_answers_the_operator_token_with_the_service_metrics(client: TestClient) -> None:
    response = client.get("/metrics", headers=OPERATOR)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == METRICS_CONTENT_TYPE
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert "keepgreen_build_info" in names
    assert "keepgreen_http_requests" in names  # a counter's family, as the parser names it
    # Tenant data stays behind the org's token: no queue metrics here.
    assert not [name for name in names if name.startswith("mq_")]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer operator-token-0123456789abcdeX"},
        {"authorization": f"Basic {OPERATOR_TOKEN}"},
        {"authorization": "Bearer"},
        {"authorization": f"Bearer {OPERATOR_TOKEN} extra"},
        {"x-api-token": OPERATOR_TOKEN},
    ],
    ids=["none", "wrong", "basic", "no-token", "two-words", "x-api-token"],
)
def test_metrics_refuses_anything_but_the_operator_bearer_token(
    client: TestClient, headers: dict[str, str]
) -> None:
    response = client.get("/metrics", headers=headers)
    message = assert_error(response, 401, "unauthorized")
    assert "KEEPGREEN_METRICS_TOKEN_FILE" in message
    assert response.headers["www-authenticate"] == "Bearer"
    assert OPERATOR_TOKEN not in response.text


def test_org_tokens_do_not_open_metrics(client: TestClient, token: str) -> None:
    for headers in ({"authorization": f"Bearer {token}"}, {"x-api-token": token}):
        assert_error(client.get("/metrics", headers=headers), 401, "unauthorized")


def test_metrics_is_off_until_a_token_file_is_set(container: Container) -> None:
    """Secure by default: without KEEPGREEN_METRICS_TOKEN_FILE nobody gets in, and the error
    says which setting opens it.
    """
    unset = replace(container, metrics_token=None)
    with TestClient(create_app_for(unset)) as client:
        for headers in ({}, OPERATOR, {"authorization": "Bearer "}):
            response = client.get("/metrics", headers=headers)
            message = assert_error(response, 403, "metrics_disabled")
            assert "KEEPGREEN_METRICS_TOKEN_FILE" in message


def create_app_for(container: Container):  # type: ignore[no-untyped-def]
    from keepgreen.web.app import create_app

    return create_app(container=container)


def test_metrics_is_not_in_the_v1_openapi_document(client: TestClient) -> None:
    paths = client.get("/v1/openapi.json").json()["paths"]
    assert "/metrics" not in paths
    assert "/getMergeQueueMetrics" in paths


def test_the_operator_token_opens_nothing_under_v1(queue: Api) -> None:
    client = queue.client
    for headers in (OPERATOR, {"x-api-token": OPERATOR_TOKEN}):
        assert_error(client.get(GET_MQ_METRICS, headers=headers), 401, "unauthorized")
        response = client.post(
            "/v1/getQueue", json={"repo": REPO_JSON, "targetBranch": "main"}, headers=headers
        )
        assert_error(response, 401, "unauthorized")


# -- getMergeQueueMetrics: x-api-token or Bearer -------------------------------------------------


def families_of(text: str) -> dict[str, str]:
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def test_get_merge_queue_metrics_takes_the_org_token_as_bearer(queue: Api) -> None:
    """What a stock Prometheus sends (`authorization: credentials_file:`) works, with the same
    answer as x-api-token; the scheme is case-insensitive (RFC 9110).
    """
    by_header = queue.client.get(GET_MQ_METRICS, headers={"x-api-token": queue.token})
    assert by_header.status_code == 200
    for scheme in ("Bearer", "bearer"):
        response = queue.client.get(
            GET_MQ_METRICS, headers={"authorization": f"{scheme} {queue.token}"}
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == METRICS_CONTENT_TYPE
        assert families_of(response.text) == families_of(by_header.text)
        assert "mq_depth_current{" in response.text


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer",
        b"Bearer   ",
        b"Bearer kg_not-a-token",
        b"Token abc",
        b"Bearer a b",
        b"Bearer \xff\xfe\xfd",
        b"\xc3\xa9\xc3\xa9 \xc3\xa9",
    ],
)
def test_a_malformed_or_wrong_authorization_header_is_a_401_never_a_500(
    queue: Api, value: bytes
) -> None:
    response = queue.client.get(GET_MQ_METRICS, headers=[(b"authorization", value)])
    message = assert_error(response, 401, "unauthorized")
    assert "Bearer" in message


def test_x_api_token_decides_when_both_are_sent(queue: Api) -> None:
    headers = {"x-api-token": "kg_wrong", "authorization": f"Bearer {queue.token}"}
    assert_error(queue.client.get(GET_MQ_METRICS, headers=headers), 401)


def test_bearer_is_only_for_get_merge_queue_metrics(queue: Api) -> None:
    response = queue.client.post(
        "/v1/getQueue",
        json={"repo": REPO_JSON, "targetBranch": "main"},
        headers={"authorization": f"Bearer {queue.token}"},
    )
    assert_error(response, 401, "unauthorized")


def test_a_bearer_request_with_bad_parameters_is_a_400_naming_them(queue: Api) -> None:
    response = queue.client.get(
        GET_MQ_METRICS, params={"repo": "acme"}, headers={"authorization": f"Bearer {queue.token}"}
    )
    assert "repo" in assert_error(response, 400)


# -- request ids and the access log --------------------------------------------------------------


def test_each_answer_carries_a_request_id(client: TestClient) -> None:
    first = client.get("/v1/openapi.json").headers["x-request-id"]
    second = client.get("/no/such/path").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert re.fullmatch(r"[0-9a-f]{32}", second)
    assert first != second


def test_a_sane_incoming_request_id_is_kept_and_anything_else_replaced(client: TestClient) -> None:
    kept = "7f8c2e1a-trace.42:edge_1"
    response = client.get("/metrics", headers={"x-request-id": kept})
    assert response.headers["x-request-id"] == kept
    for bad in ("has space", "<script>", "x" * 129, ""):
        echoed = client.get("/metrics", headers={"x-request-id": bad}).headers["x-request-id"]
        assert echoed != bad
        assert re.fullmatch(r"[0-9a-f]{32}", echoed)


def test_one_access_line_per_request_with_no_secret_in_it(queue: Api) -> None:
    secret = "kg_secret-in-the-query"
    with capture_logs() as logs:
        response = queue.client.get(
            GET_MQ_METRICS,
            params={"repo": "acme/widgets", "repoHost": "github.com", "token": secret},
            headers={"x-api-token": queue.token, "x-request-id": "req-1", "cookie": "s=1"},
        )
        queue.client.get("/wp-admin/setup.php?password=hunter2")
    assert response.status_code == 200
    access = [entry for entry in logs if entry["event"] == "request"]
    assert access == [
        {
            "event": "request",
            "log_level": "info",
            "method": "GET",
            "route": GET_MQ_METRICS,
            "status": 200,
            "duration_ms": access[0]["duration_ms"],
            "request_id": "req-1",
        },
        {
            "event": "request",
            "log_level": "info",
            "method": "GET",
            "route": "unmatched",
            "status": 404,
            "duration_ms": access[1]["duration_ms"],
            "request_id": access[1]["request_id"],
        },
    ]
    assert all(isinstance(entry["duration_ms"], float) for entry in access)
    text = repr(logs)
    for leaked in (secret, queue.token, "hunter2", "wp-admin", "acme/widgets", "s=1"):
        assert leaked not in text


# -- HTTP metrics -------------------------------------------------------------------------------


def test_requests_are_counted_by_route_template_and_unknown_paths_share_one_label(
    queue: Api, container: Container
) -> None:
    client = queue.client
    for path in ("/nope", "/v1/nope/1", "/.env"):
        assert client.get(path).status_code == 404
    assert client.get("/v1/getQueue").status_code == 405
    update_queue(queue, concurrency=2)
    text = scrape(client)
    route_labels = set(re.findall(r'route="([^"]*)"', text))
    assert route_labels >= {"/v1/createQueue", "/v1/updateQueue", "/v1/getQueue", "unmatched"}
    assert not route_labels & {"/nope", "/v1/nope/1", "/.env"}
    counted = "keepgreen_http_requests_total"
    assert sample(container, counted, route="unmatched", method="GET", status="404") == 3
    assert sample(container, counted, route="/v1/getQueue", method="GET", status="405") == 1
    assert sample(container, counted, route="/v1/updateQueue", method="POST", status="200") == 1
    latency = "keepgreen_http_request_duration_seconds_count"
    assert sample(container, latency, route="/v1/createQueue", method="POST") == 1


def test_a_body_over_the_limit_is_counted_as_a_413(api: Api, container: Container) -> None:
    limit = container.settings.max_body_bytes
    response = api.client.post(
        "/v1/flaky-tests/upload",
        content=b"x" * (limit + 1),
        headers={"x-api-token": api.token, "content-type": "multipart/form-data; boundary=b"},
    )
    assert response.status_code == 413
    assert response.headers["x-request-id"]
    assert sum_of(container, "keepgreen_http_requests_total", status="413") == 1


def sum_of(container: Container, name: str, **labels: str) -> float:
    """The sum of every series of `name` whose labels include `labels`."""
    total = 0.0
    for family in container.telemetry.registry.collect():
        for sample_ in family.samples:
            if sample_.name == name and labels.items() <= sample_.labels.items():
                total += sample_.value
    return total


def test_no_series_names_an_org_a_repository_or_a_token(
    queue: Api, container: Container, registered_repo: GitRepo
) -> None:
    open_and_submit(queue, registered_repo, 1)
    container.worker.run_once()
    text = scrape(queue.client)
    for tenant in ("acme", "widgets", "github.com", queue.token, OPERATOR_TOKEN):
        assert tenant not in text
    labels = set(re.findall(r"[{,]([a-z_]+)=", text))
    assert not labels & {"org", "repo", "repository", "branch", "queue", "pr", "sha"}


# -- the queue's counters --------------------------------------------------------------------------


def test_a_merge_and_a_failure_move_their_counters(
    scenario: Scenario, container: Container
) -> None:
    """PR 1 passes and merges; PR 2 breaks the build and fails with tests_failed. Each is
    counted once, under its reason, and the runs, passes, git calls and effects behind them
    are counted too.
    """
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.pr(2, {"b.txt": "b\n"}, bad=True)
    scenario.submit(1)
    scenario.submit(2)
    assert sample(container, "keepgreen_prs_submitted_total") == 2
    passes_before = sample(container, "keepgreen_worker_pass_duration_seconds_count")
    git_before = sum_of(container, "keepgreen_git_call_duration_seconds_count")

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue"), 2: ("failed", "tests_failed")}
    assert sample(container, "keepgreen_prs_merged_total", reason="merged_by_queue") == 1
    assert sample(container, "keepgreen_prs_failed_total", reason="tests_failed") == 1
    assert sum_of(container, "keepgreen_prs_failed_total") == 1
    assert sum_of(container, "keepgreen_prs_cancelled_total") == 0
    started = sample(container, "keepgreen_test_runs_started_total", kind="main")
    finished = sum_of(container, "keepgreen_test_runs_finished_total", kind="main")
    assert started >= 2
    assert finished == started  # every run that started has ended
    finished_ok = "keepgreen_test_runs_finished_total"
    assert sample(container, finished_ok, kind="main", result="succeeded") >= 1
    assert sample(container, finished_ok, kind="main", result="failed") >= 1
    assert sample(container, "keepgreen_worker_pass_duration_seconds_count") > passes_before
    assert sample(container, "keepgreen_worker_passes_total", outcome="ok") > passes_before
    assert sum_of(container, "keepgreen_git_call_duration_seconds_count") > git_before
    assert sample(container, "keepgreen_effects_total", effect="Land", outcome="done") == 1
    assert (
        sample(container, "keepgreen_effects_total", effect="BuildTestCommit", outcome="done") >= 2
    )
    assert sample(container, "keepgreen_lease_changes_total", change="acquired") == 1

    scenario.pr(3, {"c.txt": "c\n"})
    scenario.submit(3)
    scenario.cancel(3)
    assert sample(container, "keepgreen_prs_cancelled_total", reason="canceled_by_user") == 1
    assert sample(container, "keepgreen_prs_submitted_total") == 3


def test_a_decision_is_counted_only_once_its_transaction_commits(
    scenario: Scenario, container: Container, clock: FakeClock
) -> None:
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.submit(1)
    engine = QueueEngine(clock=clock, telemetry=container.telemetry)
    cancelled = "keepgreen_prs_cancelled_total"
    with container.unit_of_work() as uow:
        queue = uow.queues.get(scenario.queue_row().id, lock=True)
        assert queue is not None
        engine.advance(uow, queue, UserCancelled(1))
        # Left without commit: rolled back, as when a lease is lost or a write conflicts.
    assert sample(container, cancelled, reason="canceled_by_user") == 0
    assert scenario.states()[1] != "cancelled"
    with container.unit_of_work() as uow:
        queue = uow.queues.get(scenario.queue_row().id, lock=True)
        assert queue is not None
        engine.advance(uow, queue, UserCancelled(1))
        assert sample(container, cancelled, reason="canceled_by_user") == 0
        uow.commit()
    assert sample(container, cancelled, reason="canceled_by_user") == 1


def test_a_refused_submit_counts_nothing(scenario: Scenario, container: Container) -> None:
    scenario.create_queue()
    scenario.set_state("draining")
    scenario.pr(1, {"a.txt": "a\n"})
    assert scenario.try_submit(1).status_code == 409
    assert sample(container, "keepgreen_prs_submitted_total") == 0


# -- uploads ------------------------------------------------------------------------------------


def test_uploads_count_their_size_their_results_and_refusals(
    api: Api, container: Container
) -> None:
    assert post_junit(api, JUNIT) == 200
    assert sample(container, "keepgreen_uploads_total", outcome="stored") == 1
    assert sample(container, "keepgreen_upload_size_bytes_sum") == len(JUNIT)
    assert sample(container, "keepgreen_upload_results_sum") == 3
    assert sample(container, "keepgreen_ingested_results_total") == 3
    assert sample(container, "keepgreen_ingested_tests_total", outcome="failed") == 1
    assert sample(container, "keepgreen_ingested_tests_total", outcome="skipped") == 1

    assert post_junit(api, b"<testsuite><testcase") == 400
    assert sample(container, "keepgreen_uploads_total", outcome="refused") == 1
    assert sample(container, "keepgreen_uploads_total", outcome="stored") == 1
    assert sample(container, "keepgreen_upload_size_bytes_count") == 1


# -- effects and their retries ---------------------------------------------------------------------


class FirstBuildFails(LocalGitHost):
    """The local code host, except that its first test-commit build fails (a git host that
    was away for a moment).
    """

    def __init__(self) -> None:
        super().__init__()
        self.builds = 0

    def build_test_commit(
        self, repo: Repository, *, base_sha: str, prs: Sequence[tuple[int, str]], branch: str
    ) -> TestCommit | BuildConflict:
        self.builds += 1
        if self.builds == 1:
            raise CodeHostError("the git host is away")
        return super().build_test_commit(repo, base_sha=base_sha, prs=prs, branch=branch)


def test_a_failed_effect_and_its_retry_are_counted(
    database_url: str, tmp_path: Path, clock: FakeClock, ci_control: Path, git_repo: GitRepo
) -> None:
    host = FirstBuildFails()
    built = operator_container(database_url, tmp_path, clock, ci_control, code_host=host)
    try:
        token = built.admin.create_token("acme")
        built.admin.add_repository(
            org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command=None
        )
        with TestClient(create_app_for(built)) as client:
            api = Api(client, token, dict(REPO_JSON))
            assert api.post("createQueue", targetBranch="main").status_code == 200
            update_queue(api, requiredStatuses=["ci"])
            open_and_submit(api, git_repo, 1)
            built.worker.run_once()
            effects = "keepgreen_effects_total"
            assert sample(built, effects, effect="BuildTestCommit", outcome="failed") == 1
            assert sample(built, effects, effect="BuildTestCommit", outcome="done") == 0
            assert sample(built, "keepgreen_effect_retries_total", effect="BuildTestCommit") == 0
            failures = "keepgreen_git_host_failures_total"
            assert sample(built, failures, kind="git_error") == 1
            assert sample(built, failures, kind="unreachable") == 0
            built.worker.run_once()
            assert sample(built, effects, effect="BuildTestCommit", outcome="done") == 1
            assert sample(built, "keepgreen_effect_retries_total", effect="BuildTestCommit") == 1
            assert host.builds == 2
    finally:
        built.close()
