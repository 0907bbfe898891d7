"""GET /v1/getMergeQueueMetrics (trunk-v1-api.md §6): Prometheus text that follows queue activity.

The queue engine is not part of these tests: the states it would set, with their history lines,
are written through the unit of work at times taken from the test clock.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState, StateReason, TestRunKind
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support import store
from tests.support.gitrepo import GitRepo
from tests.support.store import entry_now, move_entry
from tests.support.wire import (
    Api,
    assert_error,
    get_queue,
    open_and_submit,
    pr_verb,
    repo_json,
    submitted,
    update_queue,
    worker_pass,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = ["60", "300", "600", "900", "1800", "3600", "5400", "7200", "+Inf"]
FAMILIES = {
    "mq_depth_current": "gauge",
    "mq_awaiting_mergeability": "gauge",
    "mq_testing_slots_active": "gauge",
    "mq_pr_conclusions_1h_total": "gauge",
    "mq_pr_restarts_1h_total": "gauge",
    "mq_pr_wait_duration_1h_seconds": "histogram",
    "mq_pr_test_duration_1h_seconds": "histogram",
    "mq_pr_time_in_queue_1h_seconds": "histogram",
}
# keepgreen's own families beside the interface's eight.
OWN_FAMILIES = {
    "mq_stalled_seconds": "gauge",
    "mq_batch_size_chosen": "gauge",
    "mq_speculation_depth_chosen": "gauge",
}
HISTOGRAMS = [name for name, kind in FAMILIES.items() if kind == "histogram"]
MAIN = {"repo": "acme/widgets", "branch": "main", "queue_type": "main"}
BISECTION = {**MAIN, "queue_type": "bisection"}
GADGETS = RepoRef("github.com", "acme", "gadgets")


# -- helpers ------------------------------------------------------------------------------------


def get_metrics(api: Api, **params: str) -> Any:
    return api.client.get(
        "/v1/getMergeQueueMetrics", params=params, headers={"x-api-token": api.token}
    )


def scrape(api: Api, **params: str) -> dict[str, Metric]:
    response = get_metrics(api, **params)
    assert response.status_code == 200, response.text
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(families: dict[str, Metric], sample: str, labels: dict[str, str]) -> float:
    """The value of the one sample named `sample` whose labels are exactly `labels`."""
    family = sample.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
    found = [s.value for s in families[family].samples if s.name == sample and s.labels == labels]
    assert len(found) == 1, (sample, labels, families[family].samples)
    return found[0]


def gauge(families: dict[str, Metric], name: str, labels: dict[str, str] = MAIN) -> float:
    return value(families, name, labels)


def buckets(families: dict[str, Metric], name: str, labels: dict[str, str] = MAIN) -> list[float]:
    return [value(families, f"{name}_bucket", {**labels, "le": le}) for le in BUCKETS]


def conclusions(families: dict[str, Metric]) -> dict[str, float]:
    return {
        kind: value(families, "mq_pr_conclusions_1h_total", {**MAIN, "conclusion": kind})
        for kind in ("merged", "failed", "cancelled")
    }


def first_bucket(families: dict[str, Metric], name: str) -> str:
    """The smallest `le` holding the one observation of a histogram."""
    counts = buckets(families, name)
    assert counts[-1] == 1, counts
    return BUCKETS[counts.index(1)]


def add_run(container: Container, clock: FakeClock, number: int, kind: TestRunKind) -> TestRunId:
    return store.add_run(container, tested=(number,), kind=kind, at=clock()).id


def admit(container: Container, clock: FakeClock, *numbers: int) -> None:
    """PRs `numbers`, submitted (`not_ready`, unread), admitted now: `pending`, as the worker's
    read of a ready PR writes them.
    """
    for number in numbers:
        move_entry(container, number, PrState.PENDING, clock(), StateReason.READY)


# -- format -------------------------------------------------------------------------------------


def test_content_type_is_prometheus_text_0_0_4(queue: Api) -> None:
    response = get_metrics(queue)
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE


def test_all_eight_families_are_exposed_with_their_types(queue: Api) -> None:
    """The interface's eight, and keepgreen's own beside them."""
    families = scrape(queue)
    assert {name: family.type for name, family in families.items()} == FAMILIES | OWN_FAMILIES


def test_every_series_is_labelled_with_repo_branch_and_queue_type(queue: Api) -> None:
    for family in scrape(queue).values():
        assert family.samples, family.name
        for sample in family.samples:
            assert {k: v for k, v in sample.labels.items() if k in MAIN} == {
                **MAIN,
                "queue_type": sample.labels["queue_type"],
            }
            assert sample.labels["queue_type"] in ("main", "bisection")


def test_main_series_exist_for_every_family(queue: Api) -> None:
    families = scrape(queue)
    for name in ("mq_depth_current", "mq_awaiting_mergeability", "mq_testing_slots_active"):
        assert gauge(families, name) == 0
    assert gauge(families, "mq_pr_restarts_1h_total") == 0
    assert gauge(families, "mq_testing_slots_active", BISECTION) == 0
    assert gauge(families, "mq_pr_restarts_1h_total", BISECTION) == 0


def test_all_three_conclusions_are_emitted_even_when_zero(queue: Api) -> None:
    assert conclusions(scrape(queue)) == {"merged": 0, "failed": 0, "cancelled": 0}


@pytest.mark.parametrize("name", HISTOGRAMS)
def test_histograms_have_the_documented_buckets_sum_and_count(queue: Api, name: str) -> None:
    family = scrape(queue)[name]
    bounds = [s.labels["le"] for s in family.samples if s.name == f"{name}_bucket"]
    main_bounds = [
        s.labels["le"]
        for s in family.samples
        if s.name == f"{name}_bucket" and s.labels["queue_type"] == "main"
    ]
    assert main_bounds == BUCKETS
    assert len(bounds) % len(BUCKETS) == 0
    assert value({name: family}, f"{name}_count", MAIN) == 0
    assert value({name: family}, f"{name}_sum", MAIN) == 0


def test_no_queue_means_no_series(api: Api) -> None:
    families = scrape(api)
    assert all(not family.samples for family in families.values())


# -- gauges -------------------------------------------------------------------------------------


def test_depth_counts_admitted_prs_and_awaiting_counts_not_ready(
    queue: Api, registered_repo: GitRepo
) -> None:
    """Submitted PRs await until the worker reads them; its pass admits PRs 1 and 2 (1 testing,
    2 pending: both in depth) and leaves PR 3, which conflicts with main, awaiting.
    """
    update_queue(queue, requiredStatuses=["ci"])  # nothing reports it: PR 1 stays testing
    open_and_submit(queue, registered_repo, 1)
    open_and_submit(queue, registered_repo, 2)
    registered_repo.open_pr(3, {"README.md": "from the PR\n"})
    registered_repo.commit({"README.md": "from main\n"}, "main moves on")
    submitted(queue, 3)
    families = scrape(queue)
    assert gauge(families, "mq_depth_current") == 0
    assert gauge(families, "mq_awaiting_mergeability") == 3
    worker_pass(queue)
    families = scrape(queue)
    assert gauge(families, "mq_depth_current") == 2
    assert gauge(families, "mq_awaiting_mergeability") == 1
    assert gauge(families, "mq_testing_slots_active") == 1


def test_a_paused_queue_holds_new_prs_as_awaiting(queue: Api, registered_repo: GitRepo) -> None:
    update_queue(queue, state="paused")
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)  # reads PR 1; the paused queue does not admit it
    families = scrape(queue)
    assert (gauge(families, "mq_depth_current"), gauge(families, "mq_awaiting_mergeability")) == (
        0,
        1,
    )


def test_stalled_seconds_count_once_stall_minutes_passed(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    """No worker runs here, so PR 1 never starts testing: the queue stalls stallMinutes after
    the PR came, and its seconds count from then; a paused queue is not stalled.
    """
    update_queue(queue, stallMinutes=10)
    open_and_submit(queue, registered_repo, 1)
    came = clock.now
    assert gauge(scrape(queue), "mq_stalled_seconds") == 0

    clock.advance(minutes=9)
    assert gauge(scrape(queue), "mq_stalled_seconds") == 0
    clock.advance(minutes=3)
    assert gauge(scrape(queue), "mq_stalled_seconds") == pytest.approx(
        (clock.now - came).total_seconds(), abs=1
    )
    assert "mq_stalled_seconds" not in {
        s.name for s in scrape(queue)["mq_stalled_seconds"].samples if s.labels == BISECTION
    }

    update_queue(queue, state="paused")
    assert gauge(scrape(queue), "mq_stalled_seconds") == 0


def test_the_chosen_batch_size_and_depth_are_the_settings_until_adapted(queue: Api) -> None:
    """Without batching a run tests one PR; with it, batchingMinSize until the queue adapts; the
    depth is the concurrency. getQueue's `chosen` says the same.
    """
    update_queue(queue, concurrency=6)
    assert gauge(scrape(queue), "mq_batch_size_chosen") == 1
    assert gauge(scrape(queue), "mq_speculation_depth_chosen") == 6

    update_queue(queue, batch=True, batchingMinSize=3, adaptiveBatchSize=True, adaptiveDepth=True)
    assert gauge(scrape(queue), "mq_batch_size_chosen") == 3
    chosen = get_queue(queue)["chosen"]
    assert (chosen["batchSize"], chosen["depth"], chosen["failureRate"]) == (3, 6, None)
    assert "until 20 PRs were tested" in chosen["why"]


def test_cancelled_prs_leave_depth_and_awaiting(queue: Api, registered_repo: GitRepo) -> None:
    """PR 1 read and admitted (testing), PR 2 submitted after the pass (unread, awaiting)."""
    update_queue(queue, requiredStatuses=["ci"])  # nothing reports it: PR 1 stays testing
    open_and_submit(queue, registered_repo, 1)
    worker_pass(queue)
    open_and_submit(queue, registered_repo, 2)
    families = scrape(queue)
    assert gauge(families, "mq_depth_current") == 1
    assert gauge(families, "mq_awaiting_mergeability") == 1
    for number in (1, 2):
        assert pr_verb(queue, "cancelPullRequest", number).status_code == 200
    families = scrape(queue)
    assert gauge(families, "mq_depth_current") == 0
    assert gauge(families, "mq_awaiting_mergeability") == 0


@pytest.mark.parametrize(
    ("kind", "slots", "other_slots"),
    [(TestRunKind.MAIN, MAIN, BISECTION), (TestRunKind.BISECTION, BISECTION, MAIN)],
    ids=["main", "bisection"],
)
def test_testing_prs_use_the_slots_of_their_runs_kind_and_stay_in_depth(
    queue: Api,
    registered_repo: GitRepo,
    container: Container,
    clock: FakeClock,
    kind: TestRunKind,
    slots: dict[str, str],
    other_slots: dict[str, str],
) -> None:
    for number in (1, 2, 3):
        open_and_submit(queue, registered_repo, number)
    admit(container, clock, 1, 2, 3)
    for number in (1, 2):
        run = add_run(container, clock, number, kind)
        move_entry(container, number, PrState.TESTING, clock(), StateReason.TESTS_STARTED, run)
    families = scrape(queue)
    assert gauge(families, "mq_testing_slots_active", slots) == 2
    assert gauge(families, "mq_testing_slots_active", other_slots) == 0
    assert gauge(families, "mq_depth_current") == 3


# -- rolling one-hour series --------------------------------------------------------------------


def test_a_merged_pr_is_measured_from_pending_to_merged(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    clock.advance(minutes=1)  # waiting to enter the queue is not measured
    admit(container, clock, 1)
    pending_at = entry_now(container, 1).state_changed_at
    run = add_run(container, clock, 1, TestRunKind.MAIN)
    started = pending_at + timedelta(minutes=2)
    move_entry(container, 1, PrState.TESTING, started, StateReason.TESTS_STARTED, run)
    move_entry(
        container, 1, PrState.MERGED, started + timedelta(minutes=10), StateReason.MERGED_BY_QUEUE
    )
    clock.advance(minutes=13)
    families = scrape(queue)

    assert first_bucket(families, "mq_pr_wait_duration_1h_seconds") == "300"
    assert value(families, "mq_pr_wait_duration_1h_seconds_sum", MAIN) == 120
    assert first_bucket(families, "mq_pr_test_duration_1h_seconds") == "600"
    assert value(families, "mq_pr_test_duration_1h_seconds_sum", MAIN) == 600
    assert first_bucket(families, "mq_pr_time_in_queue_1h_seconds") == "900"
    assert value(families, "mq_pr_time_in_queue_1h_seconds_sum", MAIN) == 720
    for name in HISTOGRAMS:
        assert value(families, f"{name}_count", MAIN) == 1
    assert conclusions(families) == {"merged": 1, "failed": 0, "cancelled": 0}
    assert gauge(families, "mq_depth_current") == 0
    assert value(families, "mq_pr_test_duration_1h_seconds_count", BISECTION) == 0


def test_time_waiting_to_enter_the_queue_is_excluded(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    update_queue(queue, state="paused")
    open_and_submit(queue, registered_repo, 1)  # not_ready while the queue is paused
    submitted_at = entry_now(container, 1).state_changed_at
    admitted = submitted_at + timedelta(minutes=30)
    move_entry(container, 1, PrState.PENDING, admitted, StateReason.READY)
    move_entry(
        container, 1, PrState.TESTING, admitted + timedelta(seconds=30), StateReason.TESTS_STARTED
    )
    move_entry(
        container, 1, PrState.FAILED, admitted + timedelta(minutes=5), StateReason.TESTS_FAILED
    )
    clock.advance(minutes=36)
    families = scrape(queue)
    assert value(families, "mq_pr_wait_duration_1h_seconds_sum", MAIN) == 30
    assert first_bucket(families, "mq_pr_wait_duration_1h_seconds") == "60"
    assert value(families, "mq_pr_time_in_queue_1h_seconds_sum", MAIN) == 300
    assert conclusions(families) == {"merged": 0, "failed": 1, "cancelled": 0}


def test_a_restart_through_the_api_is_counted(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    clock.advance(minutes=1)
    run = add_run(container, clock, 1, TestRunKind.MAIN)
    move_entry(container, 1, PrState.TESTING, clock(), StateReason.TESTS_STARTED, run)
    clock.advance(minutes=4)
    assert gauge(scrape(queue), "mq_pr_restarts_1h_total") == 0
    response = pr_verb(queue, "restartTestsOnPullRequest", 1)
    assert response.status_code == 200, response.text
    families = scrape(queue)
    assert gauge(families, "mq_pr_restarts_1h_total") == 1
    assert gauge(families, "mq_pr_restarts_1h_total", BISECTION) == 0
    assert value(families, "mq_pr_test_duration_1h_seconds_sum", MAIN) == pytest.approx(240, abs=1)
    assert first_bucket(families, "mq_pr_test_duration_1h_seconds") == "300"
    assert gauge(families, "mq_depth_current") == 1  # back to pending, still in the queue
    assert conclusions(families) == {"merged": 0, "failed": 0, "cancelled": 0}


def test_a_restart_of_a_bisection_run_is_counted_under_bisection(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    run = add_run(container, clock, 1, TestRunKind.BISECTION)
    started = clock()
    move_entry(container, 1, PrState.TESTING, started, StateReason.TESTS_STARTED, run)
    move_entry(
        container, 1, PrState.PENDING, started + timedelta(minutes=20), StateReason.PREEMPTED
    )
    clock.advance(minutes=21)
    families = scrape(queue)
    assert gauge(families, "mq_pr_restarts_1h_total", BISECTION) == 1
    assert gauge(families, "mq_pr_restarts_1h_total") == 0
    assert value(families, "mq_pr_test_duration_1h_seconds_sum", BISECTION) == 1200


def test_cancellations_count_for_one_hour(
    queue: Api, registered_repo: GitRepo, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    response = pr_verb(queue, "cancelPullRequest", 1)
    assert response.status_code == 200
    assert conclusions(scrape(queue))["cancelled"] == 1
    clock.advance(minutes=59)
    assert conclusions(scrape(queue))["cancelled"] == 1
    clock.advance(minutes=2)
    families = scrape(queue)
    assert conclusions(families)["cancelled"] == 0
    assert value(families, "mq_pr_time_in_queue_1h_seconds_count", MAIN) == 0


def test_old_conclusions_drop_out_while_recent_ones_stay(
    queue: Api, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    open_and_submit(queue, registered_repo, 1)
    open_and_submit(queue, registered_repo, 2)
    admit(container, clock, 1, 2)
    move_entry(container, 1, PrState.MERGED, clock(), StateReason.MERGED_BY_QUEUE)
    clock.advance(minutes=45)
    move_entry(container, 2, PrState.MERGED, clock(), StateReason.MERGED_BY_QUEUE)
    assert conclusions(scrape(queue))["merged"] == 2
    clock.advance(minutes=30)
    families = scrape(queue)
    assert conclusions(families)["merged"] == 1
    assert value(families, "mq_pr_time_in_queue_1h_seconds_count", MAIN) == 1


# -- filtering by repository --------------------------------------------------------------------


@pytest.fixture
def gadgets(container: Container, queue: Api, tmp_path: Path) -> GitRepo:
    """A second repository of acme, with a queue for `main` holding one PR, read and admitted
    by the worker's pass (testing: its run waits on the `ci` check, which nothing reports).
    """
    repo = GitRepo(tmp_path / "gadgets")
    container.admin.add_repository(
        org_slug="acme", ref=GADGETS, git_url=str(repo.path), ci_command=None
    )
    api = Api(queue.client, queue.token, repo_json(GADGETS))
    assert api.post("createQueue", targetBranch="main").status_code == 200
    assert api.post("updateQueue", targetBranch="main", requiredStatuses=["ci"]).status_code == 200
    open_and_submit(api, repo, 1)
    worker_pass(api)
    assert (
        api.post("getSubmittedPullRequest", targetBranch="main", pr={"number": 1}).json()["state"]
        == "testing"
    )
    return repo


def repos_in(families: dict[str, Metric]) -> set[str]:
    return {s.labels["repo"] for family in families.values() for s in family.samples}


def test_without_a_filter_every_repository_is_listed(queue: Api, gadgets: GitRepo) -> None:
    families = scrape(queue)
    assert repos_in(families) == {"acme/widgets", "acme/gadgets"}
    assert gauge(families, "mq_depth_current", {**MAIN, "repo": "acme/gadgets"}) == 1
    assert gauge(families, "mq_depth_current") == 0


def test_repo_and_repo_host_select_one_repository(queue: Api, gadgets: GitRepo) -> None:
    assert repos_in(scrape(queue, repo="acme/widgets", repoHost="github.com")) == {"acme/widgets"}
    only_gadgets = scrape(queue, repo="acme/gadgets", repoHost="github.com")
    assert repos_in(only_gadgets) == {"acme/gadgets"}
    assert gauge(only_gadgets, "mq_depth_current", {**MAIN, "repo": "acme/gadgets"}) == 1


def test_every_queue_of_a_repository_is_listed(queue: Api) -> None:
    assert queue.post("createQueue", targetBranch="release").status_code == 200
    families = scrape(queue, repo="acme/widgets", repoHost="github.com")
    branches = {s.labels["branch"] for s in families["mq_depth_current"].samples}
    assert branches == {"main", "release"}


@pytest.mark.parametrize(
    "params", [{"repo": "acme/widgets"}, {"repoHost": "github.com"}, {"repo": "", "repoHost": ""}]
)
def test_repo_and_repo_host_must_come_together(queue: Api, params: dict[str, str]) -> None:
    response = get_metrics(queue, **params)
    assert response.status_code == 400, response.text


@pytest.mark.parametrize("repo", ["widgets", "acme/widgets/extra", "/widgets", "acme/", "/"])
def test_repo_must_be_owner_slash_name(queue: Api, repo: str) -> None:
    response = get_metrics(queue, repo=repo, repoHost="github.com")
    assert response.status_code == 400, response.text


@pytest.mark.parametrize(
    ("repo", "host"), [("ac\x00me/widgets", "github.com"), ("acme/widgets", "git\x01hub.com")]
)
def test_control_characters_in_repo_or_host_are_400(queue: Api, repo: str, host: str) -> None:
    # PostgreSQL cannot even compare a NUL: refused before the db (was a 500 there).
    response = get_metrics(queue, repo=repo, repoHost=host)
    assert response.status_code == 400, response.text


@pytest.mark.parametrize(
    ("repo", "host"), [("acme/nothing", "github.com"), ("acme/widgets", "gitlab.com")]
)
def test_an_unknown_repository_is_404(queue: Api, repo: str, host: str) -> None:
    response = get_metrics(queue, repo=repo, repoHost=host)
    assert_error(response, 404, "repository_not_found")


def test_another_orgs_repository_is_404(queue: Api, other_token: str) -> None:
    other = Api(queue.client, other_token, queue.repo)
    response = get_metrics(other, repo="acme/widgets", repoHost="github.com")
    assert response.status_code == 404
