"""What API v1 looks like on the wire, shared by the web and CLI tests: the test repository's
reference, a client bound to a token, the documented key sets and timestamp format, the JSON
error shape, and the calls most tests make (submit a PR, read it, read or update the queue).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi.testclient import TestClient

from keepgreen.core.model import RepoRef
from tests.support.gitrepo import GitRepo

REPO = RepoRef("github.com", "acme", "widgets")


def repo_json(ref: RepoRef) -> dict[str, str]:
    """A repository reference as the API takes it."""
    return {"host": ref.host, "owner": ref.owner, "name": ref.name}


REPO_JSON = repo_json(REPO)


def queue_body(**fields: object) -> dict[str, object]:
    """A request body about the `main` queue of `REPO`, with `fields` added or replaced."""
    return {"repo": dict(REPO_JSON), "targetBranch": "main", **fields}


@dataclass(frozen=True)
class Api:
    """A client bound to a token, posting to /v1 with the repo reference filled in."""

    client: TestClient
    token: str
    repo: dict[str, str]

    def post(self, verb: str, body: dict[str, object] | None = None, **fields: object):  # type: ignore[no-untyped-def]
        payload: dict[str, object] = {"repo": self.repo, **(body or {}), **fields}
        return self.client.post(f"/v1/{verb}", json=payload, headers={"x-api-token": self.token})


# -- documented shapes ---------------------------------------------------------------------------

# Timestamps are ISO 8601 in UTC with milliseconds and a `Z`.
ISO_MILLIS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

# The required fields of the updateQueue response (trunk-v1-api.md §2.8); getQueue adds the PRs.
CONFIG_KEYS = {
    "state",
    "branch",
    "concurrency",
    "testingTimeoutMinutes",
    "mode",
    "canOptimisticallyMerge",
    "pendingFailureDepth",
    "batch",
    "batchingMaxWaitTimeMinutes",
    "batchingMinSize",
    "createPrsForTestingBranches",
    "commentsEnabled",
    "commandsEnabled",
    "statusCheckEnabled",
    "bisectionConcurrency",
    "requiredStatuses",
    "directMergeMode",
    "optimizationMode",
    "mergeMethod",
    # Beyond the published spec: what the hosted service answers as well.
    "notReadyTimeoutHours",
    "enqueueingLabel",
    "labelCommandsEnabled",
    "allowedBotSubmitters",
    "stateLabelsEnabled",
    "extensionEnabled",
    "testBranchConstructionMode",
    "batchingRules",
}
# keepgreen's own settings beside the interface's, in updateQueue's and getQueue's answers.
OWN_CONFIG_KEYS = {
    "checkStartTimeoutMinutes",
    "adaptiveTestingTimeout",
    "stallMinutes",
    "acceptSkippedChecks",
    "maxRetries",
    "flakyFailures",
    "bisectBesideQueue",
    "adaptiveBatchSize",
    "adaptiveDepth",
}
# A PR as getQueue and listPullRequests list it.
ENQUEUED_KEYS = {
    "id",
    "state",
    "stateChangedAt",
    "priorityValue",
    "priorityName",
    "usedDefaultPriorityName",
    "skipTheLine",
    "noBatch",
    "prNumber",
    "prTitle",
    "prSha",
    "prBaseBranch",
    "prAuthor",
}
# A PR as getSubmittedPullRequest describes it.
SUBMITTED_KEYS = ENQUEUED_KEYS | {
    "readiness",
    "forceEnqueued",
    "isCurrentlySubmittedToQueue",
    "verifiedByTestRun",
}
# keepgreen's own fields beside the interface's: git server incidents, what a queue waits on,
# whether it is stalled and since when.
OWN_SUBMITTED_KEYS = {"incidents", "explanation"}
OWN_QUEUE_KEYS = {"waitingOn", "stateReason", "stalledSince", "incidents", "chosen"}
READINESS_KEYS = {
    "hasImpactedTargets",
    "requiresImpactedTargets",
    "doesBaseBranchMatch",
    "gitHubMergeability",
}


def parse_iso(text: str) -> datetime:
    """A timestamp of the API, checked to have the documented format."""
    assert ISO_MILLIS_Z.match(text), text
    return datetime.fromisoformat(text)


def assert_error(response: Any, status: int, code: str | None = None) -> str:
    """The JSON error shape with `status` (and `code` when given); returns the message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    if code is not None:
        assert body["error"]["code"] == code
    message = body["error"]["message"]
    assert isinstance(message, str)
    assert message
    return message


def assert_invalid(response: Any, field: str) -> None:
    """A 400 whose message names `field`."""
    message = assert_error(response, 400)
    assert field in message, message


# -- calls ---------------------------------------------------------------------------------------


def submit(api: Api, number: int | str, **fields: object) -> Any:
    """submitPullRequest of PR `number` to `main`; the response, whatever it is."""
    return api.post("submitPullRequest", targetBranch="main", pr={"number": number}, **fields)


def submitted(api: Api, number: int | str, **fields: object) -> None:
    """submitPullRequest of PR `number` to `main`, which must answer 200 `{}`."""
    response = submit(api, number, **fields)
    assert response.status_code == 200, response.text
    assert response.json() == {}


def open_and_submit(api: Api, repo: GitRepo, number: int, **fields: object) -> str:
    """Open PR `number` ("Change N", one new file) in git and submit it; its head sha."""
    sha = repo.open_pr(number, {f"pr{number}.txt": f"{number}\n"}, title=f"Change {number}")
    submitted(api, number, **fields)
    return sha


def worker_pass(api: Api) -> None:
    """One pass of the worker of the app `api` talks to, as `keepgreen serve` runs when a
    submit wakes it: it reads the PRs submitted since (the submit does not wait on git; until
    then a PR is `not_ready` with `prSha` ""), admits those that are ready, starts the runs
    the queue has room for and carries out the rest of its outbox.
    """
    api.client.app.state.container.worker.run_once()


def pr_verb(api: Api, verb: str, number: int | str) -> Any:
    """A verb that takes only the queue and a PR (cancel, restart, get); the response."""
    return api.post(verb, targetBranch="main", pr={"number": number})


def get_pr(api: Api, number: int | str) -> dict[str, Any]:
    """getSubmittedPullRequest of PR `number` in `main`, which must answer 200."""
    response = pr_verb(api, "getSubmittedPullRequest", number)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def get_queue(api: Api, branch: str = "main") -> dict[str, Any]:
    """getQueue of `branch`, which must answer 200."""
    response = api.post("getQueue", targetBranch=branch)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def enqueued_numbers(api: Api) -> list[int]:
    """The numbers of the PRs getQueue lists for `main`, in queue order."""
    return [pr["prNumber"] for pr in get_queue(api)["enqueuedPullRequests"]]


def update_queue(api: Api, **fields: object) -> dict[str, Any]:
    """updateQueue of `main`, which must answer 200; the configuration it answers."""
    response = api.post("updateQueue", targetBranch="main", **fields)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body
