"""Two more public clients' requests, replayed over real HTTP against a served keepgreen and
their answers read the way those clients read them (test_client_contracts.py has the others).

Trunk's documentation examples: the curl examples of the v1 API reference page (trunk-io/docs
`merge-queue/reference/merge.md` at 2f379064c227704bec70e14b97ceddebdab5c64d): createQueue
`{mode: "single", concurrency: 5}`, updateQueue with the settings example (concurrency 10,
testingTimeoutMinutes 120, pendingFailureDepth 2, canOptimisticallyMerge, batch, batchingMinSize 3,
batchingMaxWaitTimeMinutes 15) and with `state` PAUSED / RUNNING / DRAINING (the docs'
UPPERCASE values), getQueue, submitPullRequest / getSubmittedPullRequest / cancelPullRequest of
PR 1234, deleteQueue; the older reference page's submit with `priority: "medium"`
(docs.trunk.io/apis/merge); the Impacted Targets page's setImpactedTargets body
(`impactedTargets: ["a", "b", "c"]`, headers Content-Type and x-api-token); the spec's bodies
of restartTestsOnPullRequest and getMergeQueueTestingDetails (`testRunId`, the UUID at the end
of the test branch's name); and the metrics page's `GET /getMergeQueueMetrics?repo=
<owner/name>&repoHost=<host>`. Each is sent as documented: POST (GET for metrics),
`Content-Type: application/json`, `x-api-token`; the docs' placeholders (your-org/your-repo)
become the test repository.

PostHog's Trunk.io data-warehouse source (github.com/PostHog/posthog,
`products/warehouse_sources/backend/temporal/data_imports/sources/trunk_io/trunk_io.py` at
2832cc5bb065c2a3dc327304512536bc46807a6e, with `settings.py` and `canonical_descriptions.py`
beside it). Every call is a POST of JSON with the token in `x-api-token`, redirects refused:
  - credentials check: /flaky-tests/list-quarantined-tests with `page_query {page_size: 1,
    page_token: ""}`; 200 is valid, 401 means a bad token;
  - UnhealthyTests: /flaky-tests/list-unhealthy-tests once per status, FLAKY then BROKEN;
  - QuarantinedTests: /flaky-tests/list-quarantined-tests;
  - FailingTests: /flaky-tests/list-failing-tests over 7-day windows (`start_time`/`end_time`
    as `%Y-%m-%dT%H:%M:%SZ`) from 30 days back (or from the last synced window end) to now;
  - MergeQueuePullRequests: /listPullRequests `{repo, targetBranch, take: 100}`, `cursor`
    only once a `nextCursor` came back (absent: the last page), `since` on incremental runs.
The flaky-test endpoints are paged with `page_query {page_size: 100, page_token}` until
`page.next_page_token` is empty; rows are read from `tests` / `quarantined_tests` /
`pullRequests`, keyed by `id` (quarantined tests: name, parent, file, classname, variant).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from keepgreen.bootstrap import Container
from tests.cli.test_client_contracts import Client, queue
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO_JSON, assert_error, parse_iso

# -- Trunk's documentation examples -------------------------------------------------------------

DOCS_PR = 1234  # the docs' example PR number
# createQueue's example body (beyond repo and targetBranch).
DOCS_CREATE_QUEUE = {"mode": "single", "concurrency": 5}
# updateQueue's "Update queue settings (concurrency, batching, timeouts)" example.
DOCS_QUEUE_SETTINGS = {
    "concurrency": 10,
    "testingTimeoutMinutes": 120,
    "pendingFailureDepth": 2,
    "canOptimisticallyMerge": True,
    "batch": True,
    "batchingMinSize": 3,
    "batchingMaxWaitTimeMinutes": 15,
}
# The PR states the docs list for getSubmittedPullRequest (in their older UPPERCASE).
DOCS_PR_STATES = {
    "NOT_READY",
    "PENDING",
    "TESTING",
    "TESTS_PASSED",
    "MERGED",
    "FAILED",
    "CANCELLED",
    "PENDING_FAILURE",
}
# The fields of an enqueued PR in getQueue's example answer.
DOCS_ENQUEUED_FIELDS = {
    "state": str,
    "stateChangedAt": str,
    "priorityValue": int,
    "priorityName": str,
    "skipTheLine": bool,
    "prNumber": int,
    "prTitle": str,
    "prSha": str,
    "prBaseBranch": str,
    "prAuthor": str,
}
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture
def docs(live_url: str, token: str, registered_repo: GitRepo) -> Client:
    """A docs reader's curl: POST, `Content-Type: application/json`, `x-api-token`."""
    return Client(live_url, token)


def pr_body(number: int = DOCS_PR) -> dict[str, Any]:
    """The body of the docs' PR examples (submit, get, cancel, restart)."""
    return queue(pr={"number": number})


def run_branch(repo: GitRepo, number: int) -> tuple[str, str]:
    """The test run id and commit of PR `number`'s test branch, as CI sees it pushed: the docs
    take `testRunId` from the UUID at the end of `<prefix>/pr-<N>/<uuid>`.
    """
    listed = repo.git("for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    pattern = re.compile(rf"^[\w.-]+/pr-{number}/(?P<run>[0-9a-f-]{{36}}) (?P<sha>[0-9a-f]{{40}})$")
    (found,) = [match for line in listed.splitlines() if (match := pattern.match(line))]
    return str(uuid.UUID(found["run"])), found["sha"]


def ci_reports(live_url: str, token: str, sha: str, state: str) -> None:
    """CI reporting the queue's required check `ci` on a test commit (keepgreen's own verb)."""
    response = httpx.post(
        f"{live_url}/setCommitStatus",
        json={
            "repo": dict(REPO_JSON),
            "sha": sha,
            "context": "ci",
            "state": state,
            "targetUrl": "https://ci.example.com/runs/1",
        },
        headers={"x-api-token": token},
    )
    assert response.status_code == 200, response.text


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus text exposition."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        raw_labels, value = line[len(name) + 1 :].rsplit("} ", 1)
        found = dict(re.findall(r'(\w+)="([^"]*)"', raw_labels))
        if found == labels:
            return float(value)
    raise AssertionError(f"no sample {name}{labels} in:\n{text}")


def test_docs_examples_create_configure_submit_cancel_pause_and_delete_a_queue(
    docs: Client, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> None:
    """The reference page's examples in a reader's order, each answered 2xx, and what a
    reader relies on read back: the settings example's values, the PR's documented fields,
    the UPPERCASE states taken, the queue gone once deleted.
    """
    assert docs.ok("createQueue", queue(**DOCS_CREATE_QUEUE)) == {}
    created = docs.ok("getQueue", queue())
    assert (created["state"], created["mode"], created["concurrency"]) == ("running", "single", 5)
    assert (created["branch"], created["enqueuedPullRequests"]) == ("main", [])

    updated = docs.ok("updateQueue", queue(**DOCS_QUEUE_SETTINGS))
    read = docs.ok("getQueue", queue())
    for name, value in DOCS_QUEUE_SETTINGS.items():
        assert updated[name] == value, name
        assert read[name] == value, name
    assert read["mode"] == "single"  # what the example leaves out is left as it was
    # The check a run waits for, which the docs leave to branch protection (without one, a
    # queue fails its PRs: "No required statuses").
    docs.ok("updateQueue", queue(requiredStatuses=["ci"]))

    head = registered_repo.open_pr(
        DOCS_PR, {"auth.py": "login()\n"}, title="Add user authentication", author="octocat"
    )
    docs.ok("submitPullRequest", pr_body())
    waiting = docs.ok("getSubmittedPullRequest", pr_body())
    assert waiting["state"].upper() in DOCS_PR_STATES
    assert (waiting["state"], waiting["prNumber"]) == ("not_ready", DOCS_PR)  # not read yet
    assert isinstance(waiting["readiness"], dict)
    assert (waiting["priorityName"], waiting["priorityValue"]) == ("medium", 100)

    container.worker.run_once()  # reads the PR; batching (min 3, 15 min) holds it pending
    submitted = docs.ok("getSubmittedPullRequest", pr_body())
    assert (submitted["state"], submitted["prSha"]) == ("pending", head)
    assert submitted["isCurrentlySubmittedToQueue"] is True
    assert submitted["readiness"]["doesBaseBranchMatch"] is True
    # getQueue's example answer is of the older shape (testingTimeoutMins, isBatching, RUNNING,
    # priorityName "default"); its PR's fields are the ones the current spec kept.
    (listed,) = docs.ok("getQueue", queue())["enqueuedPullRequests"]
    for name, kind in DOCS_ENQUEUED_FIELDS.items():
        assert isinstance(listed[name], kind), name
    assert listed["state"].upper() in DOCS_PR_STATES
    parse_iso(listed["stateChangedAt"])
    assert (listed["prNumber"], listed["prTitle"], listed["prAuthor"]) == (
        DOCS_PR,
        "Add user authentication",
        "octocat",
    )
    assert (listed["prSha"], listed["prBaseBranch"], listed["skipTheLine"]) == (head, "main", False)

    docs.ok("cancelPullRequest", pr_body())
    cancelled = docs.ok("getSubmittedPullRequest", pr_body())
    assert (cancelled["state"], cancelled["isCurrentlySubmittedToQueue"]) == ("cancelled", False)
    assert docs.ok("getQueue", queue())["enqueuedPullRequests"] == []
    clock.advance(minutes=16)  # past the batching wait: nothing is left to test
    container.worker.run_once()
    assert docs.ok("getSubmittedPullRequest", pr_body())["state"] == "cancelled"

    # "To pause the queue, set state to PAUSED. To resume, set it to RUNNING. To drain ...,
    # set it to DRAINING." The answer and getQueue say it in the current spec's lowercase.
    for documented in ("PAUSED", "RUNNING", "DRAINING"):
        answered = docs.ok("updateQueue", queue(state=documented))
        assert answered["state"] == documented.lower()
        read = docs.ok("getQueue", queue())
        assert read["state"] == documented.lower()
        assert read["concurrency"] == DOCS_QUEUE_SETTINGS["concurrency"]  # settings kept

    assert docs.ok("deleteQueue", queue()) == {}
    assert_error(docs.call("getQueue", queue()), 404)


def test_docs_examples_for_a_parallel_queue_impacted_targets_testing_details_and_restart(
    docs: Client, registered_repo: GitRepo, container: Container, live_url: str, token: str
) -> None:
    """A parallel queue: the PR waits for its impacted targets (the guide's upload admits
    it), the testing details of its run by the UUID of the test branch, a restart (a new
    run; the old one cancelled), a merge verified by the new run, and the metrics page's
    scrape counting it.
    """
    docs.ok("createQueue", queue(mode="parallel", concurrency=5))  # the example, mode parallel
    docs.ok("updateQueue", queue(requiredStatuses=["ci"]))  # as branch protection would
    head = registered_repo.open_pr(DOCS_PR, {"auth.py": "login()\n"}, title="Add auth")

    # The older reference page's submit example, with its priority name.
    docs.ok("submitPullRequest", queue(pr={"number": DOCS_PR}, priority="medium"))
    container.worker.run_once()
    waiting = docs.ok("getSubmittedPullRequest", pr_body())
    assert waiting["state"] == "not_ready"
    assert waiting["readiness"]["requiresImpactedTargets"] is True
    assert waiting["readiness"]["hasImpactedTargets"] is False

    # The older API page's example as it is (another PR, a short sha); then this PR's head
    # with that page's special value, IMPACTS_ALL, and with the Impacted Targets page's list:
    # the last upload wins.
    docs.ok(
        "setImpactedTargets",
        queue(pr={"number": 1, "sha": "1234567890abcdef"}, impactedTargets=["services_backend"]),
    )
    docs.ok(
        "setImpactedTargets",
        queue(pr={"number": DOCS_PR, "sha": head}, impactedTargets="IMPACTS_ALL"),
    )
    docs.ok(
        "setImpactedTargets",
        queue(pr={"number": DOCS_PR, "sha": head}, impactedTargets=["a", "b", "c"]),
    )
    container.worker.run_once()
    testing = docs.ok("getSubmittedPullRequest", pr_body())
    assert testing["state"] == "testing"
    assert testing["readiness"] == {
        "hasImpactedTargets": True,
        "requiresImpactedTargets": True,
        "doesBaseBranchMatch": True,
        "gitHubMergeability": "mergeable",
    }

    first_run, first_sha = run_branch(registered_repo, DOCS_PR)
    details = docs.ok("getMergeQueueTestingDetails", queue(testRunId=first_run))
    assert details["testBranch"].endswith(f"/pr-{DOCS_PR}/{first_run}")
    assert (details["testBranchSha"], details["status"]) == (first_sha, "in_progress")
    assert (details["requiredStatuses"], details["requiredStatusesSource"]) == (
        ["ci"],
        "merge_instance",
    )
    assert details["testedPullRequests"] == [
        {
            "prNumber": DOCS_PR,
            "prUrl": f"https://github.com/acme/widgets/pull/{DOCS_PR}",
            "title": "Add auth",
        }
    ]
    assert sorted(details["impactedTargets"]) == ["a", "b", "c"]
    assert sorted(details["impactedTargetsForTestedPrs"]) == ["a", "b", "c"]
    assert (details["checkSuites"], details["statusChecks"], details["dependentPrs"]) == (
        [],
        [],
        [],
    )

    docs.ok("restartTestsOnPullRequest", pr_body())
    container.worker.run_once()
    second_run, second_sha = run_branch(registered_repo, DOCS_PR)
    assert second_run != first_run
    assert docs.ok("getMergeQueueTestingDetails", queue(testRunId=first_run))["status"] == (
        "cancelled"
    )
    assert docs.ok("getSubmittedPullRequest", pr_body())["state"] == "testing"

    ci_reports(live_url, token, second_sha, "success")
    container.worker.run_once()
    merged = docs.ok("getSubmittedPullRequest", pr_body())
    assert (merged["state"], merged["verifiedByTestRun"]) == ("merged", second_run)
    assert merged["isCurrentlySubmittedToQueue"] is False
    passed = docs.ok("getMergeQueueTestingDetails", queue(testRunId=second_run))
    assert passed["status"] == "succeeded"
    assert passed["statusChecks"] == [
        {"context": "ci", "url": "https://ci.example.com/runs/1", "state": "SUCCESS"}
    ]

    scraped = httpx.get(
        f"{live_url}/getMergeQueueMetrics",
        params={"repo": "acme/widgets", "repoHost": "github.com"},
        headers={"x-api-token": token},
    )
    assert scraped.status_code == 200, scraped.text
    assert scraped.headers["content-type"] == METRICS_CONTENT_TYPE
    labels = {"repo": "acme/widgets", "branch": "main", "queue_type": "main"}
    assert metric(scraped.text, "mq_depth_current", **labels) == 0
    assert metric(scraped.text, "mq_pr_conclusions_1h_total", **labels, conclusion="merged") == 1
    assert metric(scraped.text, "mq_pr_restarts_1h_total", **labels) == 1


# -- PostHog's Trunk.io source ----------------------------------------------------------------

ORG_SLUG = "acme"
PAGE_SIZE = 100  # settings.PAGE_SIZE: page_query.page_size of every flaky-test listing
MERGE_QUEUE_PAGE_SIZE = 100  # settings.MERGE_QUEUE_PAGE_SIZE: listPullRequests' take
UNHEALTHY_STATUSES = ("FLAKY", "BROKEN")
FAILING_TESTS_WINDOW_DAYS = 7
FAILING_TESTS_DEFAULT_LOOKBACK_DAYS = 30
MAX_PAGES = 50  # a guard against a token that never runs out
# The columns the source describes for each table (canonical_descriptions.py), with the types
# its rows are loaded as (a column's type is inferred from the rows: one row's null or other type
# would split or break it).
TEST_COLUMNS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "repository": dict,
    "html_url": str,
    "name": str,
    "variant": str,
    "status": dict,
    "file_path": str,
    "parent": str,
    "classname": str,
    "codeowners": list,
    "pull_requests_impacted_last_7d": int,
    "quarantined": bool,
}
FAILING_COLUMNS = {
    **TEST_COLUMNS,
    "most_common_failures": list,
    "failure_rate_last_7d": (int, float),
    "failure_rate_last_24h": (int, float),
}
QUARANTINED_COLUMNS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "parent": str,
    "file": str,
    "classname": str,
    "status": str,
    "codeowners": list,
    "quarantine_setting": str,
    "quarantined_at": str,
    "status_last_updated_at": str,
    "test_case_id": str,
    "variant": str,
}
PULL_REQUEST_COLUMNS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "state": str,
    "stateChangedAt": str,
    "priorityValue": int,
    "priorityName": str,
    "usedDefaultPriorityName": str,
    "skipTheLine": bool,
    "noBatch": bool,
    "prNumber": int,
    "prTitle": str,
    "prSha": str,
    "prBaseBranch": str,
    "prAuthor": str,
}
PR_STATES = {
    "not_ready",
    "pending",
    "testing",
    "tests_passed",
    "merged",
    "failed",
    "cancelled",
    "pending_failure",
}


def rfc3339(moment: datetime) -> str:
    """How the source writes times: UTC, whole seconds, a Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def assert_columns(row: dict[str, Any], columns: dict[str, type | tuple[type, ...]]) -> None:
    for name, kind in columns.items():
        assert name in row, f"{name} missing from {row}"
        value = row[name]
        assert isinstance(value, kind), f"{name}: {value!r}"
        assert not isinstance(value, bool) or kind is bool, f"{name}: {value!r}"


class PostHogTrunkSource:
    """The requests PostHog's Trunk.io source sends, as it sends and pages them; every call
    must answer 2xx (its REST client raises otherwise) and is checked against the published
    document's schema of the answer (`Client.ok`). `sent` keeps every body sent, in order.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        repo: dict[str, str] | None = None,
        org_url_slug: str = ORG_SLUG,
    ) -> None:
        self.client = Client(url, token)
        self.repo, self.org_url_slug = repo or dict(REPO_JSON), org_url_slug
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        self.sent.append((path, json.loads(json.dumps(body))))
        return self.client.ok(path, body)

    def _page_query_walk(
        self, path: str, body: dict[str, Any], rows: str
    ) -> list[list[dict[str, Any]]]:
        pages: list[list[dict[str, Any]]] = []
        token = ""
        for _ in range(MAX_PAGES):
            answer = self._post(
                path, {**body, "page_query": {"page_size": PAGE_SIZE, "page_token": token}}
            )
            if answer[rows]:  # the source passes on only pages with rows
                pages.append(answer[rows])
            token = (answer.get("page") or {}).get("next_page_token") or ""
            if not token:
                return pages
        raise AssertionError(f"{path}: more than {MAX_PAGES} pages")

    def _flaky_body(self) -> dict[str, Any]:
        return {"repo": dict(self.repo), "org_url_slug": self.org_url_slug}

    def unhealthy_tests(self) -> dict[str, list[list[dict[str, Any]]]]:
        """The pages of each status, FLAKY then BROKEN."""
        return {
            status: self._page_query_walk(
                "flaky-tests/list-unhealthy-tests",
                {**self._flaky_body(), "status": status},
                "tests",
            )
            for status in UNHEALTHY_STATUSES
        }

    def quarantined_tests(self) -> list[list[dict[str, Any]]]:
        return self._page_query_walk(
            "flaky-tests/list-quarantined-tests", self._flaky_body(), "quarantined_tests"
        )

    def failing_tests(
        self, now: datetime, last_synced: str | None = None
    ) -> list[list[dict[str, Any]]]:
        """7-day windows from `last_synced` (an incremental run) or 30 days back, to `now`;
        each row stamped `synced_through` (its window's end), as the source stamps it.
        """
        start = (
            datetime.fromisoformat(last_synced)
            if last_synced
            else now - timedelta(days=FAILING_TESTS_DEFAULT_LOOKBACK_DAYS)
        )
        pages: list[list[dict[str, Any]]] = []
        while start < now:
            end = min(start + timedelta(days=FAILING_TESTS_WINDOW_DAYS), now)
            body = {**self._flaky_body(), "start_time": rfc3339(start), "end_time": rfc3339(end)}
            walked = self._page_query_walk("flaky-tests/list-failing-tests", body, "tests")
            pages.extend(
                [{**row, "synced_through": rfc3339(end)} for row in page] for page in walked
            )
            start = end
        return pages

    def merge_queue_pull_requests(
        self, target_branch: str, since: str | None = None
    ) -> list[list[dict[str, Any]]]:
        body: dict[str, Any] = {"repo": dict(self.repo), "targetBranch": target_branch}
        if since is not None:
            body["since"] = since
        pages: list[list[dict[str, Any]]] = []
        cursor = ""
        for _ in range(MAX_PAGES):
            page_body = {**body, "take": MERGE_QUEUE_PAGE_SIZE}
            if cursor:
                page_body["cursor"] = cursor
            answer = self._post("listPullRequests", page_body)
            if answer["pullRequests"]:
                pages.append(answer["pullRequests"])
            cursor = answer.get("nextCursor") or ""
            if not cursor:
                return pages
        raise AssertionError(f"listPullRequests: more than {MAX_PAGES} pages")

    def validate_credentials(self) -> int:
        """The status of the source's credentials check (200: valid; 401: bad token)."""
        return self.client.call(
            "flaky-tests/list-quarantined-tests",
            {**self._flaky_body(), "page_query": {"page_size": 1, "page_token": ""}},
        ).status_code


@pytest.fixture
def posthog(live_url: str, token: str, registered_repo: GitRepo) -> PostHogTrunkSource:
    return PostHogTrunkSource(live_url, token)


def junit(*cases: tuple[str, bool]) -> bytes:
    """A JUnit report of (name, failed) testcases in one suite."""
    failure = '<failure message="boom">trace</failure>'
    body = "".join(
        f'<testcase classname="widgets.TestGears" name="{name}" file="tests/test_gears.py" '
        f'time="0.1">{failure if failed else ""}</testcase>'
        for name, failed in cases
    )
    return f'<testsuite name="gears">{body}</testsuite>'.encode()


def upload(live_url: str, token: str, report: bytes, *, sha: str, run_id: str) -> None:
    """One CI job's results, uploaded on main."""
    metadata = {
        "repo": dict(REPO_JSON),
        "org_url_slug": ORG_SLUG,
        "commit_sha": sha,
        "branch": "main",
        "run_id": run_id,
    }
    response = httpx.post(
        f"{live_url}/flaky-tests/upload",
        data={"metadata": json.dumps(metadata)},
        files=[("file", ("junit.xml", report, "application/xml"))],
        headers={"x-api-token": token},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def flaky_post(live_url: str, token: str, path: str, **fields: Any) -> Any:
    response = httpx.post(
        f"{live_url}/flaky-tests/{path}",
        json={"repo": dict(REPO_JSON), "org_url_slug": ORG_SLUG, **fields},
        headers={"x-api-token": token},
    )
    assert response.status_code == 200, response.text
    return response.json()


RACY = [f"test_racy_{i:03d}" for i in range(105)]  # more than one page of PAGE_SIZE
STEADY = [f"test_steady_{i:02d}" for i in range(50)]


@pytest.fixture
def flaky_history(live_url: str, token: str, registered_repo: GitRepo, clock: FakeClock) -> str:
    """105 tests that failed then passed on one commit (flaky), one failing on main in three
    runs in a row (broken), 50 always passing; quarantine on (flaky tests automatically) and
    the broken test quarantined by hand. Returns the broken test's id.
    """
    steady = [(name, False) for name in STEADY]
    sha = "a" * 40
    upload(live_url, token, junit(*[(n, True) for n in RACY], *steady), sha=sha, run_id="1")
    upload(live_url, token, junit(*[(n, False) for n in RACY], *steady), sha=sha, run_id="2")
    for run in range(3):
        clock.advance(minutes=10)
        report = junit(("test_dead", True), *steady)
        upload(live_url, token, report, sha=f"{run + 1:040x}", run_id=f"dead-{run}")
    flaky_post(live_url, token, "update-settings", settings={"quarantine": {"enabled": True}})
    broken = flaky_post(
        live_url, token, "list-unhealthy-tests", status="BROKEN", page_query={"page_size": 10}
    )
    (dead,) = broken["tests"]
    flaky_post(
        live_url, token, "set-quarantine-override", test_id=dead["id"], setting="ALWAYS_QUARANTINE"
    )
    clock.advance(minutes=1)
    return str(dead["id"])


def test_posthog_checks_its_credentials_with_a_one_row_quarantine_listing(
    posthog: PostHogTrunkSource, live_url: str, token: str, other_token: str
) -> None:
    """200 passes the source's check; 401 is its "check your API token" message; any other
    status fails it too ("Trunk.io API returned HTTP <status>").
    """
    assert posthog.validate_credentials() == 200
    assert PostHogTrunkSource(live_url, "not-a-token").validate_credentials() == 401
    # Details that name no repository of the token's org must not pass the check.
    unknown_repo = {**REPO_JSON, "name": "no-such-repo"}
    assert PostHogTrunkSource(live_url, token, repo=unknown_repo).validate_credentials() == 404
    assert PostHogTrunkSource(live_url, token, org_url_slug="globex").validate_credentials() == 404
    assert PostHogTrunkSource(live_url, other_token).validate_credentials() == 404


def test_posthog_syncs_unhealthy_tests_both_statuses_every_page(
    posthog: PostHogTrunkSource, flaky_history: str
) -> None:
    pages = posthog.unhealthy_tests()
    assert [len(page) for page in pages["FLAKY"]] == [100, 5]
    assert [len(page) for page in pages["BROKEN"]] == [1]
    flaky_bodies = [b for p, b in posthog.sent if b.get("status") == "FLAKY"]
    assert flaky_bodies[0]["page_query"] == {"page_size": 100, "page_token": ""}
    assert flaky_bodies[1]["page_query"]["page_token"] != ""
    rows = [row for status in UNHEALTHY_STATUSES for page in pages[status] for row in page]
    assert len({row["id"] for row in rows}) == len(rows) == 106  # the table's primary key
    for status in UNHEALTHY_STATUSES:
        for row in (row for page in pages[status] for row in page):
            assert_columns(row, TEST_COLUMNS)
            assert row["status"]["value"] == status.lower()
            assert isinstance(row["status"]["reason"], str)
            parse_iso(row["status"]["timestamp"])
            assert row["quarantined"] is True
            assert "ticket" not in row  # no ticket linked: absent, never an empty object
    assert {row["name"] for row in rows} == {*RACY, "test_dead"}


def test_posthog_syncs_quarantined_tests_keyed_by_their_identity(
    posthog: PostHogTrunkSource, flaky_history: str
) -> None:
    pages = posthog.quarantined_tests()
    assert [len(page) for page in pages] == [100, 6]
    rows = [row for page in pages for row in page]
    keys = {(r["name"], r["parent"], r["file"], r["classname"], r["variant"]) for r in rows}
    assert len(keys) == len(rows)  # the table's primary key
    for row in rows:
        assert_columns(row, QUARANTINED_COLUMNS)
        parse_iso(row["quarantined_at"])
        parse_iso(row["status_last_updated_at"])
    settings = {row["name"]: (row["status"], row["quarantine_setting"]) for row in rows}
    assert settings["test_dead"] == ("BROKEN", "ALWAYS_QUARANTINE")
    assert {settings[name] for name in RACY} == {("FLAKY", "AUTO_QUARANTINE")}
    assert {row["test_case_id"] for row in rows if row["name"] == "test_dead"} == {flaky_history}


def test_posthog_syncs_failing_tests_in_seven_day_windows_then_incrementally(
    posthog: PostHogTrunkSource, flaky_history: str, live_url: str, token: str, clock: FakeClock
) -> None:
    now = clock.now
    pages = posthog.failing_tests(now)
    windows = [(b["start_time"], b["end_time"]) for p, b in posthog.sent if "start_time" in b]
    assert windows[0][0] == rfc3339(now - timedelta(days=30))
    assert windows[-1][1] == rfc3339(now)
    assert len(set(windows)) == 5  # 7 + 7 + 7 + 7 + 2 days
    rows = [row for page in pages for row in page]
    assert [len(page) for page in pages] == [100, 6]  # the last window's two pages
    assert len({row["id"] for row in rows}) == len(rows)  # the table's primary key
    assert {row["name"] for row in rows} == {*RACY, "test_dead"}
    for row in rows:
        assert_columns(row, FAILING_COLUMNS)
        assert 0 <= row["failure_rate_last_7d"] <= 1
        for failure in row["most_common_failures"]:
            assert isinstance(failure["summary"], str)
            assert isinstance(failure["occurrence_count"], int)
    watermark = max(row["synced_through"] for row in rows)

    clock.advance(hours=2)
    report = junit(("test_dead", True), ("test_steady_00", False))
    upload(live_url, token, report, sha="d" * 40, run_id="later")
    clock.advance(minutes=1)
    later = posthog.failing_tests(clock.now, last_synced=watermark)
    assert [[row["name"] for row in page] for page in later] == [["test_dead"]]


def open_prs(repo: GitRepo, numbers: range) -> None:
    """Open PRs `numbers` in one `git fast-import`: each adds a file on the target's tip."""
    base, lines = repo.tip(), []
    for number in numbers:
        message, content = f"PR {number}", f"{number}\n"
        lines += [
            f"commit refs/pull/{number}/head",
            "author Ada Author <ada@example.com> 1793000000 +0000",
            "committer Ada Author <ada@example.com> 1793000000 +0000",
            f"data {len(message)}",
            message,
            f"from {base}",
            f"M 100644 inline change-{number}.txt",
            f"data {len(content)}",
            content,
        ]
    subprocess.run(
        ["git", "-C", str(repo.path), "fast-import", "--quiet"],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        check=True,
    )


@pytest.fixture
def merge_queue(
    live_url: str, token: str, registered_repo: GitRepo, container: Container, clock: FakeClock
) -> Client:
    """A queue of 102 PRs: 1 merged, 2 failed, 3 cancelled, 4 and 5 testing, 6-101 pending, 102
    submitted but not read yet (not_ready).
    """
    client = Client(live_url, token)
    client.ok("createQueue", queue(mode="single", concurrency=2))
    client.ok("updateQueue", queue(requiredStatuses=["ci"]))
    open_prs(registered_repo, range(1, 102))
    for number in range(1, 6):  # in order: these are the first five in the queue
        client.ok("submitPullRequest", pr_body(number))
    with ThreadPoolExecutor(max_workers=8) as pool:  # the rest all at once
        list(
            pool.map(lambda number: client.ok("submitPullRequest", pr_body(number)), range(6, 102))
        )
    container.worker.run_once()  # reads 100 of them (at most 100 a pass), starts 1 and 2
    container.worker.run_once()  # reads the last one
    ci_reports(live_url, token, run_branch(registered_repo, 1)[1], "success")
    container.worker.run_once()
    ci_reports(live_url, token, run_branch(registered_repo, 2)[1], "failure")
    container.worker.run_once()
    client.ok("cancelPullRequest", pr_body(3))
    container.worker.run_once()
    open_prs(registered_repo, range(102, 103))
    client.ok("submitPullRequest", pr_body(102))
    return client


def test_posthog_syncs_merge_queue_pull_requests_by_cursor_then_since(
    posthog: PostHogTrunkSource,
    merge_queue: Client,
    registered_repo: GitRepo,
    container: Container,
    clock: FakeClock,
    live_url: str,
    token: str,
) -> None:
    clock.advance(minutes=5)
    synced_through = rfc3339(clock.now)  # the run's start, stamped on its rows
    pages = posthog.merge_queue_pull_requests("main")
    assert [len(page) for page in pages] == [100, 2]
    first, second = (body for path, body in posthog.sent if path == "listPullRequests")
    assert first == {"repo": dict(REPO_JSON), "targetBranch": "main", "take": 100}
    uuid.UUID(second["cursor"])  # the spec types the cursor as a UUID, and so does the source
    rows = [row for page in pages for row in page]
    assert len({row["id"] for row in rows}) == len(rows)  # the table's primary key
    for row in rows:
        assert_columns(row, PULL_REQUEST_COLUMNS)
        assert row["state"] in PR_STATES
        parse_iso(row["stateChangedAt"])
    states = {row["prNumber"]: row["state"] for row in rows}
    assert states == {
        1: "merged",
        2: "failed",
        3: "cancelled",
        4: "testing",
        5: "testing",
        **dict.fromkeys(range(6, 102), "pending"),
        102: "not_ready",
    }
    read = {row["prNumber"]: row for row in rows}
    assert read[1]["prSha"] == registered_repo.tip("refs/pull/1/head")
    assert (read[102]["prSha"], read[102]["prTitle"]) == ("", "")  # submitted, not read yet

    # The next run is incremental: `since` the last run's stamp, PRs concluded since then.
    clock.advance(minutes=5)
    ci_reports(live_url, token, run_branch(registered_repo, 4)[1], "success")
    container.worker.run_once()
    merge_queue.ok("cancelPullRequest", pr_body(60))
    posthog.sent.clear()
    later = posthog.merge_queue_pull_requests("main", since=synced_through)
    assert posthog.sent == [
        (
            "listPullRequests",
            {"repo": dict(REPO_JSON), "targetBranch": "main", "since": synced_through, "take": 100},
        )
    ]
    assert sorted((row["prNumber"], row["state"]) for page in later for row in page) == [
        (4, "merged"),
        (60, "cancelled"),
    ]
