"""The dashboard in a real browser: headless Chromium (Debian's, driven by Playwright) against a
running `keepgreen serve` with its worker, a real repository and the built-in CI runner.

One walk through, as a person would: sign in, see a run in progress, watch a PR merge without
reloading, cancel a PR, pause the queue, open a flaky test at its `html_url` and quarantine
it; another org's URL is a 404; a POST without the CSRF token is refused. Every page must log
no console error and pass axe-core with no serious or critical violation. Screenshots at 1280
and 390 pixels wide are saved under `test-artifacts/dashboard/` (or $KEEPGREEN_TEST_ARTIFACTS).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.cli.conftest import free_port
from tests.support.gitrepo import GitRepo

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("KEEPGREEN_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(
    os.environ.get("KEEPGREEN_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts")
)
WIDTHS = (1280, 390)
REPO_ARGS = ("--host", "github.com", "--owner", "acme", "--name", "widgets")
REPO_JSON = {"host": "github.com", "owner": "acme", "name": "widgets"}
QUEUE = "/acme/queues/github.com/acme/widgets/main"
START_SECONDS = 30.0
# What axe may find: anything "serious" or "critical" fails the test.
BLOCKING_IMPACTS = {"serious", "critical"}


def keepgreen(*args: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "keepgreen", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Site:
    """A `keepgreen serve` with its worker, on SQLite, with acme's repository and queue."""

    def __init__(self, tmp_path: Path) -> None:
        self.control = tmp_path / "control"
        self.control.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPGREEN_")}
        self.env |= {
            "KEEPGREEN_DATA_DIR": str(tmp_path / "data"),
            # The CI command may read the control directory (the sandbox shows it read-only).
            "KEEPGREEN_CI_READONLY_PATHS": str(self.control),
        }
        self.cwd = tmp_path
        self.repo = GitRepo(tmp_path / "widgets")
        self.repo.commit({"check.sh": self.check()}, "Add the check")
        self.token = keepgreen("token", "create", "--org", "acme", env=self.env, cwd=tmp_path)
        self.token = self.token.splitlines()[-1].strip()
        other = keepgreen("token", "create", "--org", "globex", env=self.env, cwd=tmp_path)
        self.other_token = other.splitlines()[-1].strip()
        keepgreen(
            "repo", "add", "--org", "acme", *REPO_ARGS, "--git-url", str(self.repo.path),
            "--ci-command", "sh check.sh", env=self.env, cwd=tmp_path,
        )  # fmt: skip
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (tmp_path / "serve.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "keepgreen", "serve", "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=tmp_path,
        )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/v1/openapi.json", timeout=1.0)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("keepgreen serve did not answer")
        self.api("createQueue", targetBranch="main")

    def check(self) -> str:
        """The CI command: waits until the test lets the run of the last PR stacked in it
        (the highest N of its `prN.txt`) finish (`release-N`), then passes, or fails when a
        PR adds `broken.txt`.
        """
        return (
            "n=$(ls pr*.txt | sed 's/^pr\\([0-9]*\\)[.]txt$/\\1/' | sort -n | tail -n 1)\n"
            f'while [ ! -e "{self.control}/release-$n" ]; do sleep 0.2; done\n'
            "test ! -e broken.txt\n"
        )

    def release(self, number: int) -> None:
        (self.control / f"release-{number}").touch()

    def api(self, verb: str, **fields: Any) -> Any:
        answer = httpx.post(
            f"{self.url}/v1/{verb}",
            json={"repo": REPO_JSON, **fields},
            headers={"x-api-token": self.token},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()

    def submit(self, number: int) -> None:
        self.repo.open_pr(number, {f"pr{number}.txt": f"{number}\n"}, title=f"PR {number}")
        self.api("submitPullRequest", targetBranch="main", pr={"number": number})

    def upload(self, report: str, job: int) -> None:
        metadata = (
            '{"repo":{"host":"github.com","owner":"acme","name":"widgets"},'
            f'"org_url_slug":"acme","commit_sha":"{"e" * 40}","branch":"main",'
            f'"job_url":"https://ci.example/{job}"}}'
        )
        answer = httpx.post(
            f"{self.url}/v1/flaky-tests/upload",
            headers={"x-api-token": self.token},
            files=[
                ("metadata", (None, metadata, "application/json")),
                ("file", ("junit.xml", report.encode(), "application/xml")),
            ],
            timeout=30,
        )
        assert answer.status_code == 200, answer.text

    def close(self) -> None:
        self.release_all()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def release_all(self) -> None:
        for number in range(1, 10):
            self.release(number)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    started = Site(tmp_path)
    yield started
    started.close()


@pytest.fixture
def chromium() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (see the README)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


class Watched:
    """A browser tab whose console errors and failed page scripts are collected."""

    def __init__(self, context: BrowserContext) -> None:
        self.page: Page = context.new_page()
        self.problems: list[str] = []
        self.page.on(
            "console",
            lambda message: self.problems.append(message.text) if message.type == "error" else None,
        )
        self.page.on("pageerror", lambda error: self.problems.append(str(error)))


def shoot(page: Page, name: str) -> None:
    """Screenshots of the page at both widths (the page is left at the first)."""
    folder = ARTIFACTS / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    for width in reversed(WIDTHS):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=True)
        # Nothing may stick out sideways at either width.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} at {width} px is {overflow} px too wide"


def accessible(page: Page, axe: Axe) -> None:
    results = axe.run(page)
    blocking = [
        (violation["id"], violation["impact"], [node["target"] for node in violation["nodes"]])
        for violation in results.response["violations"]
        if violation["impact"] in BLOCKING_IMPACTS
    ]
    assert blocking == [], blocking


def sign_in(page: Page, site: Site, token: str) -> None:
    page.goto(site.url + "/")
    expect(page).to_have_url(f"{site.url}/-/sign-in")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def test_the_dashboard_in_chromium(site: Site, chromium: Browser) -> None:
    axe = Axe()
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    tab = Watched(context)
    page = tab.page

    site.submit(1)
    site.submit(2)
    sign_in(page, site, site.token)
    expect(page).to_have_url(f"{site.url}/acme/queues")
    expect(page.get_by_role("link", name="acme/widgets · main")).to_be_visible()
    accessible(page, axe)
    shoot(page, "queues")

    # The queue page, as the worker tests PR 1: its run shows up without a reload.
    page.get_by_role("link", name="acme/widgets · main").click()
    run_box = page.locator("article.run-in_progress").filter(has_text="#1")
    expect(run_box).to_be_visible(timeout=20_000)
    expect(run_box.get_by_role("link", name="keepgreen/ci")).to_be_visible(timeout=20_000)
    accessible(page, axe)
    shoot(page, "queue")

    # PR 1 passes: the page moves it to merged by itself.
    page.evaluate("window.keptAcrossUpdates = 'yes'")  # gone if the page reloaded
    site.release(1)
    left = page.locator("ul.left li").filter(has_text="#1")
    expect(left).to_contain_text("merged", timeout=30_000)
    assert page.evaluate("window.keptAcrossUpdates") == "yes"

    # Cancel PR 2 from its row (it is testing now, or waiting).
    page.get_by_role("button", name="Cancel #2").click()
    expect(page.get_by_role("status").first).to_contain_text("cancelled")
    expect(page.locator("ul.left li").filter(has_text="#2")).to_contain_text("cancelled")

    # Pause the queue.
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".banner")).to_contain_text("Paused")
    assert site.api("getQueue", targetBranch="main")["state"].upper() == "PAUSED"

    # The PR page of #1: its timeline in words, its run and its CI log through keepgreen.
    page.goto(f"{site.url}{QUEUE}/pulls/1")
    expect(page.locator("ol.timeline")).to_contain_text("testing on main")
    expect(page.locator("ol.timeline")).to_contain_text("merged by the queue")
    accessible(page, axe)
    shoot(page, "pull-request")
    log_path = page.get_by_role("link", name="keepgreen/ci").first.get_attribute("href")
    assert log_path is not None
    log = context.request.get(site.url + log_path)
    assert log.status == 200
    assert "keepgreen: running sh check.sh" in log.text()

    # A flaky test, opened at the html_url the API gives, then quarantined.
    site.upload(_report(failed=True), job=1)
    site.upload(_report(failed=False), job=2)
    listed = httpx.post(
        f"{site.url}/v1/flaky-tests/list-unhealthy-tests",
        headers={"x-api-token": site.token},
        json={
            "repo": REPO_JSON,
            "org_url_slug": "acme",
            "status": "FLAKY",
            "page_query": {"page_size": 10},
        },
    ).json()
    html_url = listed["tests"][0]["html_url"]
    httpx.post(
        f"{site.url}/v1/flaky-tests/update-settings",
        headers={"x-api-token": site.token},
        json={
            "repo": REPO_JSON,
            "org_url_slug": "acme",
            "settings": {"quarantine": {"enabled": True, "auto_quarantine_flaky": False}},
        },
    ).raise_for_status()
    page.goto(html_url.replace("http://localhost", "http://127.0.0.1"))
    expect(page.get_by_role("heading", level=1)).to_have_text("test_racy")
    accessible(page, axe)
    page.get_by_label("Always quarantine").check()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").first).to_contain_text("quarantine setting was changed")
    expect(page.locator(".badge")).to_have_text("quarantined")
    shoot(page, "flaky-test")
    page.goto(f"{site.url}/acme/flaky-tests")
    expect(page.get_by_role("link", name="test_racy")).to_be_visible()
    accessible(page, axe)
    shoot(page, "flaky-tests")

    # The queue's analytics and settings: the batch size changed from the page.
    page.goto(f"{site.url}{QUEUE}/analytics?period=7d")
    expect(page.locator("main")).to_contain_text("merged.")
    accessible(page, axe)
    shoot(page, "analytics")
    page.goto(f"{site.url}{QUEUE}/settings")
    page.get_by_role("spinbutton", name="Batch size batchingMinSize").fill("7")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").first).to_contain_text("The settings were saved.")
    assert site.api("getQueue", targetBranch="main")["batchingMinSize"] == 7
    accessible(page, axe)
    shoot(page, "settings")

    # A POST without the CSRF token, with the session cookie: refused, nothing changes.
    refused = context.request.post(f"{site.url}{QUEUE}/state", form={"action": "resume"})
    assert refused.status == 403
    assert site.api("getQueue", targetBranch="main")["state"].upper() == "PAUSED"

    assert tab.problems == []

    # Another org's session sees none of it.
    stranger = chromium.new_context()
    other = stranger.new_page()
    sign_in(other, site, site.other_token)
    expect(other).to_have_url(f"{site.url}/globex/queues")
    answer = other.goto(f"{site.url}{QUEUE}")
    assert answer is not None
    assert answer.status == 404
    expect(other.get_by_role("alert")).to_have_text("There is no such page.")
    stranger.close()
    context.close()


def _report(*, failed: bool) -> str:
    body = '<failure message="TimeoutError: 30 s">trace</failure>' if failed else ""
    return (
        '<testsuite name="s"><testcase classname="tests.test_api" name="test_racy" '
        f'file="tests/test_api.py">{body}</testcase></testsuite>'
    )
