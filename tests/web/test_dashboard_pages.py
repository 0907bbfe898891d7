"""The web dashboard through HTTP (no browser): sign-in and sessions, CSRF, the org in every
path, the security headers, and each page and action against the state it shows or changes.
The browser tests (tests/web/test_dashboard_browser.py) drive the same pages in Chromium.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from keepgreen.app.pull_requests import QueueTarget
from keepgreen.bootstrap import Container
from keepgreen.core.enums import CommitState, PrState, QueueState, StateReason, TestRunStatus
from keepgreen.core.flaky.quarantine import QuarantineOverride
from keepgreen.core.model import ChainLink
from keepgreen.web.pages.guard import CONTENT_SECURITY_POLICY, SESSION_COOKIE
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.store import add_run, entry_now, find_queue, move_entry
from tests.support.wire import REPO, Api, open_and_submit, worker_pass

QUEUE_PATH = "/acme/queues/github.com/acme/widgets/main"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, html
    return found.group(1)


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; the session's CSRF token (from the page it lands on)."""
    form = client.get("/-/sign-in")
    answer = client.post(
        "/-/sign-in",
        data={"csrf_token": csrf_of(form.text), "token": token},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    landed = client.get(answer.headers["location"])
    assert landed.status_code == 200, landed.text
    return csrf_of(landed.text)


def browser(client: TestClient) -> TestClient:
    """Another browser on the same app: its own cookie jar."""
    return TestClient(client.app)


@pytest.fixture
def queued(queue: Api, registered_repo: GitRepo) -> Api:
    """PRs 1 and 2 submitted to acme's `main` queue (no worker runs: they stay `not_ready`,
    unread, as the submit wrote them).
    """
    open_and_submit(queue, registered_repo, 1)
    open_and_submit(queue, registered_repo, 2)
    return queue


def read_and_admitted(queued: Api, container: Container) -> Any:
    """`queued` after the worker's pass, the queue requiring the `ci` check: PRs 1 and 2 read
    and admitted, PR 1 testing in the run the pass started (waiting on `ci`), PR 2 pending
    behind it. The run.
    """
    answer = queued.post("updateQueue", targetBranch="main", requiredStatuses=["ci"])
    assert answer.status_code == 200, answer.text
    worker_pass(queued)
    assert (entry_now(container, 1).state, entry_now(container, 2).state) == (
        PrState.TESTING,
        PrState.PENDING,
    )
    with container.unit_of_work() as uow:
        [run] = uow.test_runs.list_open(find_queue(uow).id)
    return run


def queue_state(container: Container) -> QueueState:
    return container.queues.get(queue_org(container), REPO, "main").queue.state


def queue_org(container: Container) -> Any:
    with container.unit_of_work() as uow:
        org = uow.orgs.get_by_slug("acme")
        assert org is not None
        return org.id


# -- sign-in and sessions ------------------------------------------------------------------------


def test_the_root_sends_a_stranger_to_sign_in_and_a_member_to_the_queues(
    client: TestClient, token: str
) -> None:
    first = client.get("/", follow_redirects=False)
    assert (first.status_code, first.headers["location"]) == (303, "/-/sign-in")
    sign_in(client, token)
    again = client.get("/", follow_redirects=False)
    assert (again.status_code, again.headers["location"]) == (303, "/acme/queues")


def test_sign_in_sets_an_httponly_samesite_cookie_and_keeps_no_token(
    client: TestClient, token: str, container: Container
) -> None:
    form = client.get("/-/sign-in")
    answer = client.post(
        "/-/sign-in",
        data={"csrf_token": csrf_of(form.text), "token": token},
        follow_redirects=False,
    )
    cookie = next(
        value
        for name, value in answer.headers.multi_items()
        if name == "set-cookie" and value.startswith(SESSION_COOKIE)
    )
    assert "HttpOnly" in cookie
    assert "samesite=lax" in cookie.lower()
    assert "Path=/" in cookie
    assert token not in cookie
    secret = answer.cookies[SESSION_COOKIE].partition(".")[0]
    with container.unit_of_work() as uow:
        # The database keeps a hash of the cookie's secret, not the secret.
        assert uow.web_sessions.find(secret) is None
        assert uow.web_sessions.find(hashlib.sha256(secret.encode()).hexdigest()) is not None


def test_a_wrong_token_is_refused_with_a_sentence_and_no_session(
    client: TestClient, token: str
) -> None:
    form = client.get("/-/sign-in")
    answer = client.post(
        "/-/sign-in", data={"csrf_token": csrf_of(form.text), "token": token + "x"}
    )
    assert answer.status_code == 401
    assert "not accepted" in answer.text
    assert SESSION_COOKIE not in answer.cookies
    assert client.get("/acme/queues", follow_redirects=False).status_code == 303


def test_sign_in_without_its_form_token_is_refused(client: TestClient, token: str) -> None:
    answer = client.post("/-/sign-in", data={"token": token})
    assert answer.status_code == 403
    assert client.get("/acme/queues", follow_redirects=False).status_code == 303


def test_a_page_without_a_session_goes_to_sign_in_and_comes_back(
    client: TestClient, token: str, registered_repo: GitRepo
) -> None:
    answer = client.get("/acme/flaky-tests?q=login", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/-/sign-in?next=%2Facme%2Fflaky-tests%3Fq%3Dlogin"
    form = client.get(answer.headers["location"])
    assert 'name="next" value="/acme/flaky-tests?q=login"' in form.text
    back = client.post(
        "/-/sign-in",
        data={"csrf_token": csrf_of(form.text), "token": token, "next": "/acme/flaky-tests?q=x"},
        follow_redirects=False,
    )
    assert back.headers["location"] == "/acme/flaky-tests?q=x"


@pytest.mark.parametrize("elsewhere", ["//evil.example/x", "https://evil.example/", "/\\evil"])
def test_sign_in_never_sends_the_browser_off_site(
    client: TestClient, token: str, elsewhere: str
) -> None:
    form = client.get("/-/sign-in")
    answer = client.post(
        "/-/sign-in",
        data={"csrf_token": csrf_of(form.text), "token": token, "next": elsewhere},
        follow_redirects=False,
    )
    assert answer.headers["location"] == "/acme/queues"


def test_a_signed_in_browser_can_sign_in_to_another_org(
    client: TestClient, token: str, other_token: str
) -> None:
    """The sign-in form carries its own token, not the current session's."""
    sign_in(client, token)
    sign_in(client, other_token)
    assert client.get("/", follow_redirects=False).headers["location"] == "/globex/queues"
    assert client.get("/acme/queues").status_code == 404


def test_sign_out_ends_the_session_even_for_a_copied_cookie(client: TestClient, token: str) -> None:
    csrf = sign_in(client, token)
    copied = client.cookies[SESSION_COOKIE]
    answer = client.post("/-/sign-out", data={"csrf_token": csrf}, follow_redirects=False)
    assert (answer.status_code, answer.headers["location"]) == (303, "/-/sign-in")
    other = browser(client)
    other.cookies.set(SESSION_COOKIE, copied)
    assert other.get("/acme/queues", follow_redirects=False).status_code == 303


def test_revoking_the_api_token_ends_its_sessions(client: TestClient, container: Container) -> None:
    issued = container.admin.issue_token("acme")
    sign_in(client, issued.secret)
    assert client.get("/acme/queues").status_code == 200
    container.admin.revoke_token(issued.info.id)
    assert client.get("/acme/queues", follow_redirects=False).status_code == 303


def test_a_session_ends_after_twelve_hours(
    client: TestClient, token: str, clock: FakeClock
) -> None:
    sign_in(client, token)
    clock.advance(hours=11, minutes=59)
    assert client.get("/acme/queues").status_code == 200
    clock.advance(minutes=2)
    assert client.get("/acme/queues", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("tamper", ["secret", "signature", "separator"])
def test_a_forged_or_altered_cookie_opens_nothing(
    client: TestClient, token: str, tamper: str
) -> None:
    sign_in(client, token)
    secret, _, signature = client.cookies[SESSION_COOKIE].partition(".")
    forged = {
        "secret": f"{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}.{signature}",
        "signature": f"{secret}.{signature[:-1]}{'A' if signature[-1] != 'A' else 'B'}",
        "separator": secret + signature,
    }[tamper]
    other = browser(client)
    other.cookies.set(SESSION_COOKIE, forged)
    assert other.get("/acme/queues", follow_redirects=False).status_code == 303


# -- one org's pages ---------------------------------------------------------------------------


def test_another_orgs_pages_are_404_as_if_they_did_not_exist(
    client: TestClient, other_token: str, queued: Api
) -> None:
    sign_in(client, other_token)  # globex
    for path in (
        "/acme/queues",
        QUEUE_PATH,
        f"{QUEUE_PATH}/pulls/1",
        "/acme/flaky-tests",
        "/nobody/queues",
    ):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "There is no such page." in answer.text
        assert "acme/widgets" not in answer.text


def test_another_orgs_actions_are_404_and_change_nothing(
    client: TestClient, other_token: str, queued: Api, container: Container
) -> None:
    csrf = sign_in(client, other_token)
    assert (
        client.post(f"{QUEUE_PATH}/state", data={"csrf_token": csrf, "action": "pause"}).status_code
        == 404
    )
    cancel = client.post(f"{QUEUE_PATH}/pulls/1/cancel", data={"csrf_token": csrf})
    assert cancel.status_code == 404
    assert queue_state(container) is QueueState.RUNNING
    entry = entry_now(container, 1)
    assert (entry.state, entry.state_reason) == (PrState.NOT_READY, StateReason.SUBMITTED)
    assert entry.is_submitted


def test_pages_carry_a_csp_without_inline_scripts_and_the_api_does_not(
    client: TestClient, token: str, queued: Api
) -> None:
    sign_in(client, token)
    page = client.get(QUEUE_PATH)
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    # No inline script or style anywhere in the page.
    assert not re.search(r"<script(?![^>]*\bsrc=)", page.text)
    assert " style=" not in page.text
    assert "<style" not in page.text
    api = queued.post("getQueue", targetBranch="main")
    assert "content-security-policy" not in api.headers


def test_pages_are_never_cached_and_static_files_are_for_an_hour(
    client: TestClient, token: str
) -> None:
    sign_in(client, token)
    assert client.get("/acme/queues").headers["cache-control"] == "no-store"
    static = client.get("/-/static/keepgreen.css")
    assert static.status_code == 200
    assert static.headers["cache-control"] == "public, max-age=3600"
    assert static.headers["x-content-type-options"] == "nosniff"


def test_errors_are_pages_for_pages_and_json_for_the_api(client: TestClient, token: str) -> None:
    sign_in(client, token)
    page = client.get("/acme/queues/github.com/acme/widgets/nowhere")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    api = client.post("/v1/getQueue", json={}, headers={"x-api-token": token})
    assert api.status_code == 400
    assert api.json()["error"]["code"]


# -- CSRF --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [None, "wrong", "header-of-another-session"])
def test_a_post_without_the_sessions_csrf_token_is_refused_and_changes_nothing(
    client: TestClient, token: str, queued: Api, container: Container, sent: str | None
) -> None:
    sign_in(client, token)
    data = {"action": "pause"}
    if sent == "wrong":
        data["csrf_token"] = "x" * 43
    if sent == "header-of-another-session":
        other = browser(client)
        data["csrf_token"] = sign_in(other, token)
    answer = client.post(f"{QUEUE_PATH}/state", data=data)
    assert answer.status_code == 403
    assert "refused" in answer.text
    assert queue_state(container) is QueueState.RUNNING


@pytest.mark.parametrize("extra_settings", [{"public_url": "https://kg.example.com"}])
def test_a_post_from_the_public_url_behind_a_proxy_is_accepted(
    client: TestClient, token: str, queued: Api, container: Container
) -> None:
    # The proxy speaks HTTPS to the browser (the cookies are Secure) and passes another host.
    behind = TestClient(client.app, base_url="https://10.0.0.7:8080")
    csrf = sign_in(behind, token)
    assert "Secure" in behind.get("/-/sign-in").headers["set-cookie"]
    answer = behind.post(
        f"{QUEUE_PATH}/state",
        data={"csrf_token": csrf, "action": "pause"},
        headers={"origin": "https://kg.example.com"},
    )
    assert answer.status_code == 200
    assert queue_state(container) is QueueState.PAUSED


def test_a_post_from_another_site_is_refused_even_with_the_token(
    client: TestClient, token: str, queued: Api, container: Container
) -> None:
    csrf = sign_in(client, token)
    answer = client.post(
        f"{QUEUE_PATH}/state",
        data={"csrf_token": csrf, "action": "pause"},
        headers={"origin": "https://evil.example"},
    )
    assert answer.status_code == 403
    assert queue_state(container) is QueueState.RUNNING


# -- the merge-queue pages ---------------------------------------------------------------------


def test_the_queues_page_lists_each_queue_with_its_counts(
    client: TestClient, token: str, queued: Api, container: Container, clock: FakeClock
) -> None:
    run = add_run(container, tested=(1,), at=clock())
    move_entry(container, 1, PrState.TESTING, clock(), StateReason.TESTS_STARTED, run.id)
    sign_in(client, token)
    page = client.get("/acme/queues").text
    row = page[page.index(f'href="{QUEUE_PATH}"') :]
    row = row[: row.index("</tr>")]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[1:5] == ["single", "1", "1", "0"], cells  # mode, testing, waiting, merged


def test_the_queue_page_shows_runs_waiting_prs_and_their_actions(
    client: TestClient, token: str, queued: Api, container: Container, clock: FakeClock
) -> None:
    run = read_and_admitted(queued, container)  # PR 1 testing, PR 2 waiting
    clock.advance(minutes=3)
    sign_in(client, token)
    page = client.get(QUEUE_PATH).text
    box = page[page.index(f"Test run {run.id[:8]}") :]
    box = box[: box.index("</article>")]
    assert f'href="{QUEUE_PATH}/pulls/1"' in box
    assert "3 min so far" in box
    table = page[page.index("Pull requests in queue order") :]
    assert table.index("#1</a>") < table.index("#2</a>")
    assert f'action="{QUEUE_PATH}/pulls/2/cancel"' in page
    assert f'action="{QUEUE_PATH}/pulls/1/restart"' in page  # testing: restartable
    assert f'action="{QUEUE_PATH}/pulls/2/restart"' not in page  # pending: not yet


def test_pause_resume_and_drain_from_the_page(
    client: TestClient, token: str, queued: Api, container: Container
) -> None:
    csrf = sign_in(client, token)
    for action, state in (
        ("pause", QueueState.PAUSED),
        ("resume", QueueState.RUNNING),
        ("drain", QueueState.DRAINING),
    ):
        answer = client.post(f"{QUEUE_PATH}/state", data={"csrf_token": csrf, "action": action})
        assert answer.status_code == 200, answer.text
        assert queue_state(container) is state
        assert 'role="status"' in answer.text  # the notice, and the banner when not running
    assert "Draining" in answer.text


def test_cancel_restart_and_priority_from_the_page(
    client: TestClient, token: str, queued: Api, container: Container, clock: FakeClock
) -> None:
    csrf = sign_in(client, token)
    answer = client.post(
        f"{QUEUE_PATH}/pulls/2/priority", data={"csrf_token": csrf, "priority": "urgent"}
    )
    assert answer.status_code == 200
    assert entry_now(container, 2).priority.name == "urgent"
    run = add_run(container, tested=(1,), at=clock())
    move_entry(container, 1, PrState.TESTING, clock(), StateReason.TESTS_STARTED, run.id)
    restart = client.post(
        f"{QUEUE_PATH}/pulls/1/restart", data={"csrf_token": csrf, "back": "pull"}
    )
    assert restart.status_code == 200
    assert restart.url.path == f"{QUEUE_PATH}/pulls/1"
    assert "restarted" in restart.text
    cancel = client.post(f"{QUEUE_PATH}/pulls/2/cancel", data={"csrf_token": csrf})
    assert cancel.status_code == 200
    assert entry_now(container, 2).state is PrState.CANCELLED
    again = client.post(f"{QUEUE_PATH}/pulls/2/cancel", data={"csrf_token": csrf})
    assert again.status_code in (404, 409)
    assert "#2" in again.text or "not" in again.text


def test_a_bad_action_value_is_a_400_page_and_changes_nothing(
    client: TestClient, token: str, queued: Api, container: Container
) -> None:
    csrf = sign_in(client, token)
    bad_state = client.post(f"{QUEUE_PATH}/state", data={"csrf_token": csrf, "action": "stop"})
    bad_priority = client.post(
        f"{QUEUE_PATH}/pulls/2/priority", data={"csrf_token": csrf, "priority": "999"}
    )
    assert (bad_state.status_code, bad_priority.status_code) == (400, 400)
    assert queue_state(container) is QueueState.RUNNING
    assert entry_now(container, 2).priority.name == "medium"


def test_the_live_part_answers_204_until_the_queue_changes(
    client: TestClient, token: str, queued: Api, container: Container
) -> None:
    read_and_admitted(queued, container)  # read: PR 2 has its title, and waits (pending)
    sign_in(client, token)
    first = client.get(f"{QUEUE_PATH}/live")
    version = re.search(r"/live\?v=([0-9a-f]+)", first.text)
    assert version, first.text
    assert f'action="{QUEUE_PATH}/pulls/2/cancel"' in first.text
    unchanged = client.get(f"{QUEUE_PATH}/live", params={"v": version.group(1)})
    assert unchanged.status_code == 204
    container.pull_requests.cancel(QueueTarget(queue_org(container), REPO, "main"), 2)
    changed = client.get(f"{QUEUE_PATH}/live", params={"v": version.group(1)})
    assert changed.status_code == 200
    assert f'action="{QUEUE_PATH}/pulls/2/cancel"' not in changed.text
    left = changed.text[changed.text.index("Left the queue") :]
    assert "#2</a> Change 2" in left
    assert "state-cancelled" in left


def test_the_pr_page_tells_its_timeline_and_links_its_run_log(
    client: TestClient, token: str, queued: Api, container: Container, clock: FakeClock
) -> None:
    sha = "c" * 40
    chain = tuple(ChainLink(n, f"{n}" * 40, "e" * 40, "f" * 40) for n in (5, 1, 2))
    run = add_run(
        container, tested=(1, 2), at=clock(), sha=sha, status=TestRunStatus.FAILED, chain=chain
    )
    # The worker's read admits PR 1, a run tests it, and it fails, as the engine writes them.
    move_entry(container, 1, PrState.PENDING, clock(), StateReason.READY)
    move_entry(container, 1, PrState.TESTING, clock(), StateReason.TESTS_STARTED, run.id)
    move_entry(container, 1, PrState.FAILED, clock(), StateReason.TESTS_FAILED, run.id)
    log_file = container.settings.data_dir / "ci" / "logs" / f"{run.id}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text("<script>alert(1)</script>\nFAILED test_thing\n")
    container.statuses.record(
        container_repo(container),
        sha=sha,
        context="keepgreen/ci",
        state=CommitState.FAILURE,
        target_url=log_file.as_uri(),
        description="exit code 1",
    )
    sign_in(client, token)
    page = client.get(f"{QUEUE_PATH}/pulls/1").text
    steps = re.findall(r'<li class="step step-([a-z_]+)">', page)
    assert steps == ["not_ready", "pending", "testing", "failed"]
    assert "testing on main + #5, with #2" in page  # on #5, in a batch with #2
    assert "its tests failed" in page
    assert f'href="{QUEUE_PATH}/runs/{run.id}/log"' in page
    assert "file://" not in page  # never a path on the server
    log = client.get(f"{QUEUE_PATH}/runs/{run.id}/log")
    assert log.status_code == 200
    assert log.headers["content-type"].startswith("text/plain")
    assert "FAILED test_thing" in log.text


def test_a_run_log_of_another_queue_or_none_is_404(
    client: TestClient,
    token: str,
    other_token: str,
    queued: Api,
    container: Container,
    clock: FakeClock,
) -> None:
    run = add_run(container, tested=(1,), at=clock())
    sign_in(client, token)
    assert client.get(f"{QUEUE_PATH}/runs/{run.id}/log").status_code == 404  # no log here
    assert client.get(f"{QUEUE_PATH}/runs/..%2F..%2Fkeepgreen.db/log").status_code == 404
    other = browser(client)
    sign_in(other, other_token)
    assert other.get(f"{QUEUE_PATH}/runs/{run.id}/log").status_code == 404


def container_repo(container: Container) -> Any:
    with container.unit_of_work() as uow:
        repository = uow.repositories.find(queue_org(container), REPO)
        assert repository is not None
        return repository


# -- the flaky-test pages ----------------------------------------------------------------------

FLAKY_REPORTS = [
    (
        b'<testsuite name="s"><testcase classname="c" name="test_flaky" file="tests/t.py">'
        b'<failure message="AssertionError: 3 != 4">trace</failure></testcase>'
        b'<testcase classname="c" name="test_fine" file="tests/t.py"/></testsuite>'
    ),
    (
        b'<testsuite name="s"><testcase classname="c" name="test_flaky" file="tests/t.py"/>'
        b'<testcase classname="c" name="test_fine" file="tests/t.py"/></testsuite>'
    ),
]


def upload(client: TestClient, token: str, report: bytes, job: int) -> None:
    metadata = (
        '{"repo":{"host":"github.com","owner":"acme","name":"widgets"},"org_url_slug":"acme",'
        f'"commit_sha":"{"d" * 40}","branch":"main","job_url":"https://ci/{job}"}}'
    )
    answer = client.post(
        "/v1/flaky-tests/upload",
        headers={"x-api-token": token},
        files=[
            ("metadata", (None, metadata, "application/json")),
            ("file", ("junit.xml", report, "application/xml")),
        ],
    )
    assert answer.status_code == 200, answer.text


@pytest.fixture
def flaky_html_url(client: TestClient, token: str, registered_repo: GitRepo) -> str:
    """test_flaky failed then passed on one commit: FLAKY. Its html_url, as the API gives it."""
    for job, report in enumerate(FLAKY_REPORTS):
        upload(client, token, report, job)
    listed = client.post(
        "/v1/flaky-tests/list-unhealthy-tests",
        headers={"x-api-token": token},
        json={
            "repo": {"host": "github.com", "owner": "acme", "name": "widgets"},
            "org_url_slug": "acme",
            "status": "FLAKY",
            "page_query": {"page_size": 10},
        },
    )
    (test,) = listed.json()["tests"]
    assert test["name"] == "test_flaky"
    return str(test["html_url"])


def test_a_tests_html_url_is_its_page(client: TestClient, token: str, flaky_html_url: str) -> None:
    sign_in(client, token)
    url = httpx.URL(flaky_html_url)
    page = client.get(url.raw_path.decode())
    assert page.status_code == 200
    assert "<h1>test_flaky</h1>" in page.text
    assert "50.0% over 7 days" in page.text
    assert "AssertionError: &lt;num&gt; != &lt;num&gt;" in page.text
    assert 'class="chart"' in page.text
    assert "1 failure in 2 runs" in page.text


def test_quarantine_from_the_tests_page(
    client: TestClient, token: str, flaky_html_url: str, container: Container
) -> None:
    csrf = sign_in(client, token)
    path = httpx.URL(flaky_html_url).raw_path.decode()
    test_id = path.split("/test/")[1].split("?")[0]
    assert "Quarantine is off for this repository" in client.get(path).text
    turned_on = client.post(
        "/v1/flaky-tests/update-settings",
        headers={"x-api-token": token},
        json={
            "repo": {"host": "github.com", "owner": "acme", "name": "widgets"},
            "org_url_slug": "acme",
            "settings": {"quarantine": {"enabled": True, "auto_quarantine_flaky": False}},
        },
    )
    assert turned_on.status_code == 200, turned_on.text
    assert "not quarantined automatically" in client.get(path).text
    assert "test_flaky" not in client.get("/acme/flaky-tests", params={"kind": "quarantined"}).text
    answer = client.post(
        f"/acme/flaky-tests/test/{test_id}/quarantine",
        data={"csrf_token": csrf, "repo": "github.com/acme/widgets", "override": "always"},
    )
    assert answer.status_code == 200
    assert 'value="always" checked' in answer.text
    details = container.flaky.details(queue_org(container), REPO, test_id)
    assert details.view.test.quarantine_override is QuarantineOverride.ALWAYS
    assert details.view.quarantined
    listed = client.get("/acme/flaky-tests", params={"kind": "quarantined"})
    assert "test_flaky" in listed.text


def test_a_broken_tests_page_follows_the_broken_quarantine_switch(
    client: TestClient, token: str, registered_repo: GitRepo
) -> None:
    sign_in(client, token)
    # Any failure makes a test broken: one upload is enough.
    any_failure = {
        "name": "any-failure",
        "classification": "broken",
        "failures": 1,
        "window_hours": 24,
        "resolution_hours": 24,
    }

    def turn_on(**switches: bool) -> None:
        settings = {
            "quarantine": {"enabled": True, **switches},
            "monitors": {"failure_count": [any_failure]},
        }
        answer = client.post(
            "/v1/flaky-tests/update-settings",
            headers={"x-api-token": token},
            json={"repo": REPO_JSON_FOR_FLAKY, "org_url_slug": "acme", "settings": settings},
        )
        assert answer.status_code == 200, answer.text

    turn_on()
    upload(client, token, FLAKY_REPORTS[0], 0)
    listed = client.post(
        "/v1/flaky-tests/list-unhealthy-tests",
        headers={"x-api-token": token},
        json={
            "repo": REPO_JSON_FOR_FLAKY,
            "org_url_slug": "acme",
            "status": "BROKEN",
            "page_query": {"page_size": 10},
        },
    )
    (test,) = listed.json()["tests"]
    path = httpx.URL(test["html_url"]).raw_path.decode()
    page = client.get(path).text
    assert "Broken tests are not quarantined automatically" in page
    assert '<span class="badge">quarantined</span>' not in page
    board = client.get("/acme/flaky-tests", params={"kind": "quarantined"}).text
    assert "test_flaky" not in board

    turn_on(auto_quarantine_broken=True)

    page = client.get(path).text
    assert "not quarantined automatically" not in page
    assert '<span class="badge">quarantined</span>' in page
    board = client.get("/acme/flaky-tests", params={"kind": "quarantined"}).text
    assert "test_flaky" in board


def test_the_flaky_list_filters_by_kind_owner_and_search(
    client: TestClient, token: str, flaky_html_url: str
) -> None:
    sign_in(client, token)
    assert "test_flaky" in client.get("/acme/flaky-tests").text
    assert (
        "test_flaky" in client.get("/acme/flaky-tests", params={"kind": "flaky", "q": "FLAK"}).text
    )
    assert "test_flaky" not in client.get("/acme/flaky-tests", params={"kind": "broken"}).text
    assert "test_flaky" not in client.get("/acme/flaky-tests", params={"q": "nothing"}).text
    assert "test_flaky" not in client.get("/acme/flaky-tests", params={"owner": "@team"}).text
    assert client.get("/acme/flaky-tests", params={"kind": "sideways"}).status_code == 400
    assert client.get("/acme/flaky-tests", params={"repo": "x/y"}).status_code == 404


def test_another_orgs_test_page_is_404(
    client: TestClient, other_token: str, flaky_html_url: str
) -> None:
    sign_in(client, other_token)
    path = httpx.URL(flaky_html_url).raw_path.decode().replace("/acme/", "/globex/", 1)
    assert client.get(path).status_code == 404


# -- analytics -----------------------------------------------------------------------------------


def merge_one(container: Container, clock: FakeClock) -> None:
    """PR 1 tests 10 minutes in a run and merges; PR 2 is cancelled."""
    run = add_run(container, tested=(1,), at=clock())
    move_entry(container, 1, PrState.TESTING, clock(), StateReason.TESTS_STARTED, run.id)
    clock.advance(minutes=10)
    move_entry(container, 1, PrState.MERGED, clock(), StateReason.MERGED_BY_QUEUE, run.id)
    move_entry(container, 2, PrState.CANCELLED, clock(), StateReason.CANCELED_BY_USER)
    clock.advance(minutes=1)


def test_the_analytics_api_gives_the_queues_figures(
    queued: Api, container: Container, clock: FakeClock
) -> None:
    merge_one(container, clock)
    answer = queued.post("getQueueAnalytics", targetBranch="main")
    assert answer.status_code == 200, answer.text
    figures = answer.json()
    assert figures["bucketSeconds"] == 3600
    assert len(figures["mergedPerBucket"]) == 24
    assert figures["merged"] == sum(figures["mergedPerBucket"]) == 1
    assert figures["testRuns"] == 1
    assert figures["testRunsPerMergedPr"] == 1.0
    testing = figures["timeInQueueSeconds"]["testing"]
    assert testing == {"p50": pytest.approx(600, abs=1), "p95": pytest.approx(600, abs=1)}
    left = {(row["state"], row["reason"]): row["count"] for row in figures["left"]}
    assert left == {("merged", "merged_by_queue"): 1, ("cancelled", "canceled_by_user"): 1}
    end = clock()
    week = queued.post(
        "getQueueAnalytics",
        targetBranch="main",
        startTime=(end - timedelta(days=7)).isoformat(),
        endTime=end.isoformat(),
    ).json()
    assert (week["bucketSeconds"], len(week["mergedPerBucket"]), week["merged"]) == (86400, 7, 1)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"),
        ("2025-01-01T00:00:00Z", None),
        (None, "0001-01-01T00:00:00Z"),  # 24 hours before it is beyond what a datetime holds
        ("9999-12-31T23:59:59Z", None),
    ],
)
def test_the_analytics_api_refuses_a_bad_period_with_a_400(
    queue: Api, start: str | None, end: str | None
) -> None:
    answer = queue.post("getQueueAnalytics", targetBranch="main", startTime=start, endTime=end)
    assert answer.status_code == 400
    assert "period" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (None, "0001-01-01T05:00:00Z"),
        ("0001-01-01T00:00:00Z", "0001-01-02T00:00:00Z"),
        (None, "9999-12-31T23:59:59Z"),
        ("9999-12-30T00:00:00Z", "9999-12-31T23:59:59.999999Z"),
    ],
)
def test_the_analytics_api_answers_for_the_first_and_last_days_a_datetime_holds(
    queue: Api, start: str | None, end: str
) -> None:
    answer = queue.post("getQueueAnalytics", targetBranch="main", startTime=start, endTime=end)
    assert answer.status_code == 200, answer.text
    figures = answer.json()
    assert figures["merged"] == 0
    assert figures["mergedPerBucket"] == [0] * len(figures["mergedPerBucket"])


def test_the_analytics_page_shows_the_same_figures(
    client: TestClient, token: str, queued: Api, container: Container, clock: FakeClock
) -> None:
    merge_one(container, clock)
    sign_in(client, token)
    page = client.get(f"{QUEUE_PATH}/analytics", params={"period": "7d"})
    assert page.status_code == 200
    assert "<strong>1</strong> pull request merged" in page.text
    assert "per day" in page.text
    testing = page.text[page.text.index('<th scope="row">testing</th>') :]
    assert testing.startswith('<th scope="row">testing</th><td>10 min</td><td>10 min</td>')
    assert "canceled by user" in page.text
    assert client.get(f"{QUEUE_PATH}/analytics", params={"period": "1y"}).status_code == 400


# -- settings ------------------------------------------------------------------------------------


def settings_form(client: TestClient, path: str) -> dict[str, str]:
    """Every field of a settings form as the page filled it in (selected options, values)."""
    html = client.get(path).text
    inputs = re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', html)
    form: dict[str, str] = dict(inputs)
    for name, body in re.findall(r'<select[^>]*name="([^"]+)">(.*?)</select>', html, re.S):
        selected = re.search(r'<option value="([^"]*)" selected>', body)
        assert selected, name
        form[name] = selected.group(1)
    for name, text in re.findall(r'<textarea[^>]*name="([^"]+)"[^>]*>(.*?)</textarea>', html, re.S):
        form[name] = text.replace("&#34;", '"').replace("&quot;", '"')
    return form


def test_queue_settings_change_what_updatequeue_changes(
    client: TestClient, token: str, queue: Api
) -> None:
    sign_in(client, token)
    form = settings_form(client, f"{QUEUE_PATH}/settings")
    assert (form["concurrency"], form["batch"], form["mergeMethod"]) == ("1", "false", "squash")
    saved = client.post(
        f"{QUEUE_PATH}/settings",
        data={**form, "concurrency": "3", "batch": "true", "requiredStatuses": "ci/build\nlint"},
    )
    assert saved.status_code == 200
    assert "The settings were saved." in saved.text
    config = queue.post("getQueue", targetBranch="main").json()
    assert (config["concurrency"], config["batch"]) == (3, True)
    assert config["requiredStatuses"] == ["ci/build", "lint"]
    assert config["mergeMethod"].lower() == "squash"  # untouched


def test_queue_settings_refuse_what_the_api_refuses_with_its_words(
    client: TestClient, token: str, queue: Api
) -> None:
    sign_in(client, token)
    form = settings_form(client, f"{QUEUE_PATH}/settings")
    page = client.post(f"{QUEUE_PATH}/settings", data={**form, "concurrency": "0"})
    api = queue.post("updateQueue", targetBranch="main", concurrency=0)
    assert (page.status_code, api.status_code) == (400, 400)
    assert f"Not saved: {api.json()['error']['message']}" in page.text
    assert 'value="0"' in page.text  # what was sent stays in the form
    assert queue.post("getQueue", targetBranch="main").json()["concurrency"] == 1


def test_flaky_settings_change_what_update_settings_changes(
    client: TestClient, token: str, registered_repo: GitRepo
) -> None:
    sign_in(client, token)
    path = "/acme/flaky-tests/settings?repo=github.com%2Facme%2Fwidgets"
    form = settings_form(client, path)
    assert (form["enabled"], form["auto_quarantine_broken"]) == ("false", "false")
    saved = client.post(
        "/acme/flaky-tests/settings",
        data={
            **form,
            "enabled": "true",
            "auto_quarantine_broken": "true",
            "ticket_url_template": "https://t.example/{id}",
        },
    )
    assert saved.status_code == 200
    assert "The settings were saved." in saved.text
    stored = client.post(
        "/v1/flaky-tests/get-settings",
        headers={"x-api-token": token},
        json={"repo": REPO_JSON_FOR_FLAKY, "org_url_slug": "acme"},
    ).json()["settings"]
    assert stored["quarantine"] == {
        "enabled": True,
        "auto_quarantine_flaky": True,
        "auto_quarantine_broken": True,
    }
    assert stored["ticket_url_template"] == "https://t.example/{id}"
    assert settings_form(client, path)["auto_quarantine_broken"] == "true"
    refused = client.post(
        "/acme/flaky-tests/settings", data={**form, "ticket_url_template": "ftp://x"}
    )
    assert refused.status_code == 400
    assert "Not saved: settings.ticket_url_template" in refused.text
    broken = client.post("/acme/flaky-tests/settings", data={**form, "monitors": "{"})
    assert broken.status_code == 400
    assert "not JSON" in broken.text


REPO_JSON_FOR_FLAKY = {"host": "github.com", "owner": "acme", "name": "widgets"}


def test_a_pr_waiting_to_be_read_shows_as_such_and_can_be_cancelled_from_the_queue_page(
    client: TestClient, token: str, queued: Api, container: Container
) -> None:
    """PRs 1 and 2 are submitted and not read yet: the queue page lists them under "Not ready
    yet" as being read, each with its Cancel button, which takes the PR out.
    """
    csrf = sign_in(client, token)
    page = client.get(QUEUE_PATH).text
    waiting = page[page.index("Not ready yet") : page.index("Left the queue")]
    assert waiting.count("(being read)") == 2
    assert f'action="{QUEUE_PATH}/pulls/2/cancel"' in waiting
    cancel = client.post(f"{QUEUE_PATH}/pulls/2/cancel", data={"csrf_token": csrf})
    assert cancel.status_code == 200
    assert entry_now(container, 2).state is PrState.CANCELLED
    after = cancel.text[cancel.text.index("Not ready yet") : cancel.text.index("Left the queue")]
    assert f'action="{QUEUE_PATH}/pulls/2/cancel"' not in after
    assert f'action="{QUEUE_PATH}/pulls/1/cancel"' in after
