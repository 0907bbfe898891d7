"""The requests the hosted service's public clients send, replayed over real HTTP against a
served keepgreen, and their answers read the way those clients read them: Trunk's Terraform
provider (a queue's life cycle, reading back every attribute it applied), Trunk's merge action
(submit, impacted targets as the uploader sends them, the PR by its branch), and a strict
client that validates every answer against the published document's schemas (required fields,
types, enums). Trunk's analytics CLI has its own replay in test_trunk_uploader.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from keepgreen.bootstrap import Container
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO_JSON

SPEC = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "trunk" / "trunk-openapi.json").read_text()
)


class Client:
    """A client of the v1 API as the public ones call it: POST, JSON, `x-api-token`, and any
    extra headers they send.
    """

    def __init__(self, url: str, token: str, **headers: str) -> None:
        self.url = url
        self.headers = {"x-api-token": token, "content-type": "application/json", **headers}

    def call(self, verb: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.url}/{verb}", content=json.dumps(body), headers=self.headers, timeout=30
        )

    def ok(self, verb: str, body: dict[str, Any]) -> Any:
        """A call that must answer 2xx, its body validated as a strict client validates it:
        against the published document's schema of that answer, when it has one.
        """
        response = self.call(verb, body)
        assert 200 <= response.status_code < 300, response.text
        schema = published_schema(f"/{verb}", response.status_code)
        answer = response.json() if response.content else None
        if schema is not None:
            errors = [
                error.message for error in jsonschema_rs.validator_for(schema).iter_errors(answer)
            ]
            assert errors == [], f"{verb}: {errors}"
        return answer


def published_schema(path: str, status: int) -> dict[str, Any] | None:
    answer = SPEC["paths"][path]["post"]["responses"].get(str(status), {})
    schema: dict[str, Any] | None = (
        answer.get("content", {}).get("application/json", {}).get("schema")
    )
    return schema


def queue(**fields: Any) -> dict[str, Any]:
    return {"repo": dict(REPO_JSON), "targetBranch": "main", **fields}


# What Trunk's Terraform provider applies for a `trunk_merge_queue` resource with every
# attribute set (its plan), as one updateQueue body.
TERRAFORM_PLAN = {
    "state": "running",
    "concurrency": 3,
    "testingTimeoutMinutes": 90,
    "pendingFailureDepth": 1,
    "canOptimisticallyMerge": True,
    "batch": True,
    "batchingMaxWaitTimeMinutes": 20160,
    "batchingMinSize": 2,
    "createPrsForTestingBranches": False,
    "commentsEnabled": True,
    "commandsEnabled": True,
    "statusCheckEnabled": True,
    "bisectionConcurrency": 2,
    "requiredStatuses": [],
    "directMergeMode": "always",
    "optimizationMode": "bisection_skip_redundant_tests",
    "mergeMethod": "squash",
    "extensionEnabled": True,
    "enqueueingLabel": "trunk-merge-queue-submit",
    "labelCommandsEnabled": True,
    "stateLabelsEnabled": False,
    "notReadyTimeoutHours": 24,
    "testBranchConstructionMode": "rename_temp_branch",
    "allowedBotSubmitters": ["renovate[bot]"],
    "batchingRules": [],
}


@pytest.fixture
def terraform(live_url: str, token: str, registered_repo: GitRepo) -> Client:
    return Client(live_url, token, **{"x-source": "terraform", "user-agent": "terraform-provider"})


def test_terraform_applies_a_queue_and_reads_back_every_attribute(terraform: Client) -> None:
    terraform.ok("createQueue", queue(mode="single", concurrency=1))
    applied = terraform.ok("updateQueue", queue(**TERRAFORM_PLAN))
    read = terraform.ok("getQueue", queue())
    # "Provider produced inconsistent result after apply" unless each attribute reads back.
    for name, planned in TERRAFORM_PLAN.items():
        assert applied[name] == planned, name
        assert read[name] == planned, name
    again = terraform.call("createQueue", queue(mode="single"))
    assert again.status_code == 409  # the provider imports the existing queue on 409


def test_terraform_destroys_a_queue_only_once_it_is_empty(
    terraform: Client, registered_repo: GitRepo
) -> None:
    terraform.ok("createQueue", queue())
    registered_repo.open_pr(4, {"four.txt": "4\n"})
    terraform.ok("submitPullRequest", queue(pr={"number": 4}))
    refused = terraform.call("deleteQueue", queue())
    assert refused.status_code == 400  # the provider shows its "drain the queue first" guidance
    terraform.ok("updateQueue", queue(state="draining"))
    terraform.ok("cancelPullRequest", queue(pr={"number": 4}))
    terraform.ok("deleteQueue", queue())
    assert terraform.call("getQueue", queue()).status_code == 404  # gone: removed from state


@pytest.fixture
def action(live_url: str, token: str, registered_repo: GitRepo, container: Container) -> Client:
    return Client(live_url, token)


def test_the_merge_action_submits_uploads_targets_and_follows_the_pr_by_branch(
    action: Client, registered_repo: GitRepo, container: Container
) -> None:
    """The submit answers before the PR is read; once the worker read it (its head, its
    branch), the action finds it by its branch, with the targets uploaded for its head.
    """
    action.ok("createQueue", queue(mode="parallel"))
    head = registered_repo.open_pr(7, {"seven.txt": "7\n"})  # branch pr-7
    # The uploader sends the PR number as a string, and "ALL" as a bare string.
    action.ok(
        "setImpactedTargets",
        queue(pr={"number": "7", "sha": head}, impactedTargets="ALL"),
    )
    assert action.ok("submitPullRequest", queue(pr={"number": 7}, priority="high")) == {}
    waiting = action.ok("getSubmittedPullRequest", queue(pr={"number": 7}))
    assert (waiting["state"], waiting["prSha"]) == ("not_ready", "")  # not read yet
    container.worker.run_once()  # as `keepgreen serve`'s worker, woken by the submit
    by_number = action.ok("getSubmittedPullRequest", queue(pr={"number": 7}))
    by_branch = action.ok("getSubmittedPullRequest", queue(pr={"branch": "pr-7"}))
    assert by_branch == by_number
    assert (by_number["prNumber"], by_number["prSha"], by_number["priorityName"]) == (
        7,
        head,
        "high",
    )
    assert by_number["readiness"]["hasImpactedTargets"] is True


def test_a_strict_client_reads_every_answer_by_the_published_schemas(
    action: Client, registered_repo: GitRepo
) -> None:
    """Each call's answer is validated by `Client.ok` against the document's schema."""
    action.ok("createQueue", queue())
    action.ok("updateQueue", queue(requiredStatuses=["ci/build"]))
    for number in (1, 2):
        registered_repo.open_pr(number, {f"{number}.txt": "x\n"})
        action.ok("submitPullRequest", queue(pr={"number": number}, noBatch=True))
    action.ok("getQueue", queue())
    action.ok("getSubmittedPullRequest", queue(pr={"number": 2}))
    action.ok("listPullRequests", queue())
    action.ok("cancelPullRequest", queue(pr={"number": 2}))
    listed = action.ok("listPullRequests", queue())
    assert {pr["prNumber"] for pr in listed["pullRequests"]} >= {1, 2}
