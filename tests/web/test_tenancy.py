"""Tenancy on every write path: one org, using another org's public test ids, repository names
and PR numbers, changes only its own rows and learns nothing of the other's.

acme (the victim) has flaky-test data and a merge queue in github.com/acme/widgets and a second
repository github.com/acme/gadgets. globex (the other org) registered a repository under the
very same name github.com/acme/widgets, and knows acme's test ids (they are UUIDv5 of public
names). Whatever globex sends, acme's answers read the same before and after, and globex's
answers speak of globex's rows only (or are 404s).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState
from keepgreen.core.flaky.ids import make_test_id
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.store import entry_now, find_queue
from tests.support.wire import REPO, assert_error, repo_json

GADGETS = RepoRef("github.com", "acme", "gadgets")
SUITE = "suite"
CLASSNAME = "pkg.TestThing"
FILE = "tests/test_thing.py"


def junit_case(name: str, *, failed: str | None = None, custom_id: str | None = None) -> str:
    body = f"<failure message={quoteattr(failed)}>trace</failure>" if failed else ""
    given_id = f" id={quoteattr(custom_id)}" if custom_id else ""
    return (
        f'<testcase{given_id} classname="{CLASSNAME}" name="{name}" file="{FILE}" '
        f'time="0.1">{body}</testcase>'
    )


def report(*cases: str) -> bytes:
    return f'<testsuite name="{SUITE}">{"".join(cases)}</testsuite>'.encode()


def acme_test_id(name: str) -> str:
    """What anyone can compute from acme's public names: the id of acme's test `name`."""
    return make_test_id(
        "acme", "github.com/acme/widgets", file=FILE, classname=CLASSNAME, parent=SUITE, name=name
    )


class Tenant:
    """One org's token, with calls to API v1 about one of its repositories."""

    def __init__(self, client: TestClient, token: str, slug: str, repo: RepoRef = REPO) -> None:
        self.client = client
        self.headers = {"x-api-token": token}
        self.slug = slug
        self.repo = repo_json(repo)

    def post(self, verb: str, *, repo: RepoRef | None = None, **fields: Any) -> Any:
        body = {"repo": repo_json(repo) if repo else self.repo, **fields}
        return self.client.post(f"/v1/{verb}", headers=self.headers, json=body)

    def ok(self, verb: str, **fields: Any) -> Any:
        response = self.post(verb, **fields)
        assert response.status_code == 200, response.text
        return response.json()

    def flaky(self, path: str, **fields: Any) -> Any:
        return self.post(f"flaky-tests/{path}", org_url_slug=self.slug, **fields)

    def flaky_ok(self, path: str, **fields: Any) -> Any:
        return self.ok(f"flaky-tests/{path}", org_url_slug=self.slug, **fields)

    def upload(self, data: bytes, *, sha: str, repo: RepoRef | None = None, **metadata: Any) -> Any:
        meta = {
            "repo": repo_json(repo) if repo else self.repo,
            "org_url_slug": self.slug,
            "commit_sha": sha,
            "branch": "main",
            **metadata,
        }
        return self.client.post(
            "/v1/flaky-tests/upload",
            headers=self.headers,
            data={"metadata": json.dumps(meta)},
            files=[("file", ("report.xml", data, "application/xml"))],
        )

    def uploaded(self, data: bytes, *, sha: str) -> dict[str, Any]:
        response = self.upload(data, sha=sha)
        assert response.status_code == 200, response.text
        summary: dict[str, Any] = response.json()
        return summary


# -- acme's data ---------------------------------------------------------------------------------

VICTIM, RACY, FLAGGED = "test_victim", "test_racy", "test_flagged"
ACME_SHA = "a" * 40


@pytest.fixture
def acme(
    client: TestClient, token: str, registered_repo: GitRepo, container: Container, tmp_path: Path
) -> Tenant:
    """acme with three tests: test_victim healthy, always quarantined, with a ticket;
    test_racy flaky (passed on retry); test_flagged flagged flaky by hand; quarantining on.
    """
    container.admin.add_repository(
        org_slug="acme",
        ref=GADGETS,
        git_url=str(GitRepo(tmp_path / "gadgets").path),
        ci_command=None,
    )
    tenant = Tenant(client, token, "acme")
    tenant.uploaded(
        report(junit_case(VICTIM), junit_case(RACY, failed="racy timeout"), junit_case(FLAGGED)),
        sha=ACME_SHA,
    )
    tenant.uploaded(report(junit_case(VICTIM), junit_case(RACY), junit_case(FLAGGED)), sha=ACME_SHA)
    tenant.flaky_ok("update-settings", settings={"quarantine": {"enabled": True}})
    victim = acme_test_id(VICTIM)
    tenant.flaky_ok("set-quarantine-override", test_id=victim, setting="ALWAYS_QUARANTINE")
    tenant.ok(
        "flaky-tests/link-ticket-to-test-case", test_case_id=victim, external_ticket_id="ACME-1"
    )
    tenant.flaky_ok("flag-test", test_id=acme_test_id(FLAGGED), flaky=True, reason="acme saw it")
    return tenant


@pytest.fixture
def globex_repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "globex")


@pytest.fixture
def globex(
    client: TestClient, other_token: str, container: Container, globex_repo: GitRepo
) -> Tenant:
    """globex, with its own repository registered as github.com/acme/widgets too."""
    container.admin.add_repository(
        org_slug="globex", ref=REPO, git_url=str(globex_repo.path), ci_command=None
    )
    return Tenant(client, other_token, "globex")


def flaky_view(tenant: Tenant, ids: list[str], window: dict[str, str]) -> dict[str, Any]:
    """Everything the flaky-test read API says about a repository's tests `ids`."""
    page = {"page_size": 100, "page_token": ""}
    return {
        "details": {
            test_id: tenant.flaky("get-test-details", test_id=test_id).json() for test_id in ids
        },
        "flaky": tenant.flaky_ok("list-unhealthy-tests", status="FLAKY", page_query=page),
        "broken": tenant.flaky_ok("list-unhealthy-tests", status="BROKEN", page_query=page),
        "failing": tenant.flaky_ok("list-failing-tests", page_query=page, **window),
        "quarantined": tenant.flaky_ok("list-quarantined-tests", page_query=page),
        "settings": tenant.flaky_ok("get-settings"),
        "quarantine_config": tenant.ok(
            "metrics/getQuarantineConfig",
            orgUrlSlug=tenant.slug,
            testIdentifiers=[{"id": test_id} for test_id in ids],
        ),
    }


def window_of(clock: FakeClock) -> dict[str, str]:
    end = clock.now + timedelta(hours=1)
    return {"start_time": (end - timedelta(days=7)).isoformat(), "end_time": end.isoformat()}


# -- flaky tests -----------------------------------------------------------------------------------


def test_acme_test_ids_are_what_anyone_computes(acme: Tenant) -> None:
    for name in (VICTIM, RACY, FLAGGED):
        details = acme.flaky_ok("get-test-details", test_id=acme_test_id(name))
        assert details["test"]["name"] == name


def test_uploads_naming_another_orgs_test_ids_store_into_the_uploaders_own_tests(
    acme: Tenant, globex: Tenant, clock: FakeClock
) -> None:
    victim, racy, flagged = (acme_test_id(name) for name in (VICTIM, RACY, FLAGGED))
    ids = [victim, racy, flagged]
    window = window_of(clock)
    before = flaky_view(acme, ids, window)
    assert before["details"][victim]["test"]["quarantined"] is True

    globex.flaky_ok("update-settings", settings={"quarantine": {"enabled": True}})
    injected = report(
        junit_case("injected", failed="injected by org A", custom_id=victim),
        junit_case("also_injected", failed="injected by org A", custom_id=racy),
        junit_case("passing", custom_id=flagged),
    )
    for run in range(3):
        summary = globex.uploaded(injected, sha=f"{run:040x}")
        clock.advance(minutes=20)
        # The answer speaks of globex's own tests: its names, its (unset) quarantine.
        assert summary["quarantine_enabled"] is True
        assert sorted((f["test_id"], f["name"], f["quarantined"]) for f in summary["failures"]) == (
            sorted([(victim, "injected", False), (racy, "also_injected", False)])
        )
    globex.client.app.state.container.housekeeping.sweep()

    assert flaky_view(acme, ids, window) == before
    # globex got tests of its own under those ids, with what it sent.
    own = globex.flaky_ok("get-test-details", test_id=victim)["test"]
    assert own["name"] == "injected"
    assert own["status"]["value"] == "broken"
    assert own["failure_rate_last_7d"] == 1.0
    assert [f["summary"] for f in own["most_common_failures"]] == ["injected by org A"]
    assert own["quarantined"] is False
    assert own.get("ticket") is None
    assert globex.flaky_ok("get-test-details", test_id=flagged)["test"]["status"]["value"] == (
        "healthy"
    )


def test_another_org_cannot_reach_tests_it_does_not_have(
    acme: Tenant, globex: Tenant, clock: FakeClock
) -> None:
    victim, racy, flagged = (acme_test_id(name) for name in (VICTIM, RACY, FLAGGED))
    ids = [victim, racy, flagged]
    window = window_of(clock)
    before = flaky_view(acme, ids, window)

    for test_id in ids:
        # globex's repository of the same name has no such test...
        assert_error(globex.flaky("get-test-details", test_id=test_id), 404, "test_not_found")
        assert_error(
            globex.post(
                "flaky-tests/link-ticket-to-test-case",
                test_case_id=test_id,
                external_ticket_id="GLOBEX-1",
            ),
            404,
            "test_not_found",
        )
        assert_error(
            globex.flaky("set-quarantine-override", test_id=test_id, setting="NEVER_QUARANTINE"),
            404,
            "test_not_found",
        )
        assert_error(globex.flaky("flag-test", test_id=test_id, flaky=False), 404, "test_not_found")
        # ... and acme's other repository is not globex's.
        assert_error(
            globex.flaky("get-test-details", test_id=test_id, repo=GADGETS),
            404,
            "repository_not_found",
        )
        assert_error(
            globex.post(
                "flaky-tests/link-ticket-to-test-case",
                repo=GADGETS,
                test_case_id=test_id,
                external_ticket_id="GLOBEX-1",
            ),
            404,
            "repository_not_found",
        )
        assert_error(
            globex.flaky("set-quarantine-override", repo=GADGETS, test_id=test_id, setting=None),
            404,
            "repository_not_found",
        )
        assert_error(
            globex.flaky("flag-test", repo=GADGETS, test_id=test_id, flaky=True),
            404,
            "repository_not_found",
        )
    assert_error(
        globex.flaky("update-settings", repo=GADGETS, settings={"quarantine": {"enabled": False}}),
        404,
        "repository_not_found",
    )
    assert_error(globex.upload(report(junit_case(VICTIM)), sha="b" * 40, repo=GADGETS), 404)
    assert_error(
        globex.upload(report(junit_case(VICTIM)), sha="b" * 40, org_url_slug="acme"),
        404,
        "org_not_found",
    )
    # Asking which of acme's ids are quarantined tells globex about its own repository only.
    globex.flaky_ok("update-settings", settings={"quarantine": {"enabled": True}})
    config = globex.ok(
        "metrics/getQuarantineConfig",
        orgUrlSlug="globex",
        testIdentifiers=[{"id": test_id} for test_id in ids],
    )
    assert config == {"isDisabled": False, "testIds": []}

    assert flaky_view(acme, ids, window) == before


def test_manage_writes_on_a_shared_id_change_only_the_callers_test(
    acme: Tenant, globex: Tenant, clock: FakeClock
) -> None:
    victim, racy, flagged = (acme_test_id(name) for name in (VICTIM, RACY, FLAGGED))
    ids = [victim, racy, flagged]
    window = window_of(clock)
    before = flaky_view(acme, ids, window)
    globex.uploaded(
        report(*(junit_case(f"globex_{n}", custom_id=i) for n, i in enumerate(ids))), sha="c" * 40
    )

    globex.flaky_ok(
        "update-settings",
        settings={
            "quarantine": {"enabled": True, "auto_quarantine_flaky": False},
            "ticket_url_template": "https://globex.example/{id}",
        },
    )
    globex.ok(
        "flaky-tests/link-ticket-to-test-case", test_case_id=victim, external_ticket_id="GLX-9"
    )
    globex.flaky_ok("set-quarantine-override", test_id=victim, setting="NEVER_QUARANTINE")
    globex.flaky_ok("set-quarantine-override", test_id=racy, setting="ALWAYS_QUARANTINE")
    globex.flaky_ok("flag-test", test_id=flagged, flaky=False)
    globex.flaky_ok("flag-test", test_id=victim, flaky=True, reason="globex says so")

    assert flaky_view(acme, ids, window) == before
    own = {test_id: globex.flaky_ok("get-test-details", test_id=test_id) for test_id in ids}
    assert own[victim]["test"]["ticket"] == {"html_url": "https://globex.example/GLX-9"}
    assert own[victim]["test"]["status"]["reason"] == "Manually flagged as flaky: globex says so"
    assert own[victim]["test"]["quarantined"] is False
    assert own[racy]["test"]["quarantined"] is True
    assert own[racy]["test"]["status"]["value"] == "healthy"
    assert [change["value"] for change in own[victim]["status_history"]] == ["flaky"]
    assert own[flagged]["status_history"] == []
    config = globex.ok(
        "metrics/getQuarantineConfig",
        orgUrlSlug="globex",
        testIdentifiers=[{"id": test_id} for test_id in ids],
    )
    assert config == {"isDisabled": False, "testIds": [racy]}


# -- CI runs ---------------------------------------------------------------------------------------

CI_RUN = {
    "ci_job_name": "test",
    "run_start": "2026-11-02T08:00:00Z",
    "run_end": "2026-11-02T08:10:00Z",
    "branch": "main",
    "sha": ACME_SHA,
    "attempt": 1,
    "provider": "github",
    "providers_run_id": "7301",
    "providers_job_id": "2051",
}


def ci_runs(tenant: Tenant, repo: RepoRef | None = None) -> Any:
    page = {"page_size": 100, "page_token": ""}
    return tenant.post(
        "flaky-ci/list-ci-runs", repo=repo, org_url_slug=tenant.slug, page_query=page
    )


def test_ci_runs_reported_with_another_orgs_provider_ids_are_the_reporters_own(
    acme: Tenant, globex: Tenant
) -> None:
    acme_run = acme.ok("flaky-ci/create-ci-run", org_url_slug="acme", **CI_RUN)["run_id"]
    before = ci_runs(acme).json()
    assert [run["run_id"] for run in before["ci_runs"]] == [acme_run]

    # The very same run, as globex reports it into its own github.com/acme/widgets: a run of
    # globex's, however alike; acme's run is neither found nor changed by it.
    globex_report = {**CI_RUN, "run_end": "2026-11-02T09:00:00Z", "run_conclusion": "failure"}
    globex_run = globex.ok("flaky-ci/create-ci-run", org_url_slug="globex", **globex_report)
    assert globex_run["run_id"] != acme_run
    listed = ci_runs(globex).json()["ci_runs"]
    assert [(run["run_id"], run["run_conclusion"]) for run in listed] == [
        (globex_run["run_id"], "failure")
    ]
    # acme's other repository, and acme's org, are out of globex's reach.
    for reach in (
        globex.post("flaky-ci/create-ci-run", repo=GADGETS, org_url_slug="globex", **CI_RUN),
        ci_runs(globex, GADGETS),
    ):
        assert_error(reach, 404, "repository_not_found")
    assert_error(globex.post("flaky-ci/create-ci-run", org_url_slug="acme", **CI_RUN), 404)

    assert ci_runs(acme).json() == before


# -- the merge queue -------------------------------------------------------------------------------


def test_merge_queue_writes_with_another_orgs_names_and_numbers_stay_in_the_callers_org(
    acme: Tenant,
    globex: Tenant,
    registered_repo: GitRepo,
    container: Container,
    globex_repo: GitRepo,
) -> None:
    # acme: a queue on main with PR 1 queued and PR 2 testing in a run with a status and targets.
    # The worker's pass reads both and tests PR 2 first (it is of higher priority); its run
    # waits on ci/build.
    acme.ok("createQueue", targetBranch="main")
    acme.ok("updateQueue", targetBranch="main", requiredStatuses=["ci/build"])
    shas = {
        number: registered_repo.open_pr(number, {f"acme{number}.txt": "x\n"}) for number in (1, 2)
    }
    acme.ok("submitPullRequest", targetBranch="main", pr={"number": 1})
    acme.ok("submitPullRequest", targetBranch="main", pr={"number": 2}, priority="high")
    container.worker.run_once()
    assert (entry_now(container, 1).state, entry_now(container, 2).state) == (
        PrState.PENDING,
        PrState.TESTING,
    )
    with container.unit_of_work() as uow:
        [run] = uow.test_runs.list_open(find_queue(uow).id)
    assert run.sha is not None
    acme.ok("setCommitStatus", sha=run.sha, context="ci/build", state="pending")
    acme.ok(
        "setImpactedTargets",
        targetBranch="main",
        pr={"number": 2, "sha": shas[2]},
        impactedTargets=["//acme:lib"],
    )

    def acme_view() -> dict[str, Any]:
        return {
            "queue": acme.ok("getQueue", targetBranch="main"),
            "prs": acme.ok("listPullRequests", targetBranch="main"),
            "pr1": acme.ok("getSubmittedPullRequest", targetBranch="main", pr={"number": 1}),
            "pr2": acme.ok("getSubmittedPullRequest", targetBranch="main", pr={"number": 2}),
            "run": acme.ok("getMergeQueueTestingDetails", targetBranch="main", testRunId=run.id),
            "gadgets": acme.post("getQueue", repo=GADGETS, targetBranch="main").json(),
        }

    before = acme_view()
    assert before["run"]["statusChecks"][0]["state"] == "PENDING"
    assert before["run"]["impactedTargets"] == ["//acme:lib"]

    # globex, before it has a queue of its own: acme's PRs, runs and shas are unknown to it.
    pr2 = {"number": 2, "sha": shas[2]}
    for verb, fields in [
        ("cancelPullRequest", {"pr": {"number": 1}}),
        ("restartTestsOnPullRequest", {"pr": {"number": 2}}),
        ("setImpactedTargets", {"pr": pr2, "impactedTargets": "ALL"}),
        ("submitPullRequest", {"pr": {"number": 1}}),
        ("getMergeQueueTestingDetails", {"testRunId": run.id}),
        ("updateQueue", {"state": "paused"}),
        ("deleteQueue", {}),
    ]:
        assert_error(globex.post(verb, targetBranch="main", **fields), 404, "queue_not_found")
        assert_error(
            globex.post(verb, repo=GADGETS, targetBranch="main", **fields),
            404,
            "repository_not_found",
        )
    assert_error(
        globex.post(
            "setCommitStatus", repo=GADGETS, sha=run.sha, context="ci/build", state="error"
        ),
        404,
        "repository_not_found",
    )
    assert_error(globex.post("createQueue", repo=GADGETS, targetBranch="main"), 404)

    # globex with a queue and a PR 1 of its own, in its repository of the same name.
    globex_repo.open_pr(1, {"globex.txt": "g\n"})
    globex.ok("createQueue", targetBranch="main")
    globex.ok("submitPullRequest", targetBranch="main", pr={"number": 1})
    globex.ok("setCommitStatus", sha=run.sha, context="ci/build", state="failure")
    globex.ok("setCommitStatus", sha=shas[1], context="ci/build", state="failure")
    globex.ok("setImpactedTargets", targetBranch="main", pr=pr2, impactedTargets="ALL")
    assert_error(
        globex.post("restartTestsOnPullRequest", targetBranch="main", pr={"number": 2}), 404
    )
    assert_error(
        globex.post("getMergeQueueTestingDetails", targetBranch="main", testRunId=run.id),
        404,
        "test_run_not_found",
    )
    globex.ok("updateQueue", targetBranch="main", state="paused", requiredStatuses=["globex/ci"])
    globex.ok("cancelPullRequest", targetBranch="main", pr={"number": 1})
    globex.ok("deleteQueue", targetBranch="main")

    assert acme_view() == before
