"""`keepgreen tests ...` against a real server: each command's effect read back through the API,
its --json, an unknown test and a missing org.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from typing import Any
from xml.sax.saxutils import quoteattr

import httpx
import pytest
from typer.testing import Result

from keepgreen.bootstrap import Container
from tests.cli.conftest import REPO_ARG, Cli
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.telemetry import sample
from tests.support.wire import REPO_JSON

SHA = "a" * 40
WIDE = {"COLUMNS": "250"}  # Rich folds table cells to the terminal; keep ids on one line


def case(name: str, *, failed: str | None = None) -> str:
    body = f"<failure message={quoteattr(failed)}>trace</failure>" if failed else ""
    return (
        f'<testcase classname="pkg.TestThing" name="{name}" file="tests/test_thing.py" '
        f'time="0.1">{body}</testcase>'
    )


class Flaky:
    """The flaky-test endpoints of the live server, for acme's github.com/acme/widgets."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli

    def upload(self, *cases: str) -> None:
        meta = {
            "repo": dict(REPO_JSON),
            "org_url_slug": "acme",
            "commit_sha": SHA,
            "branch": "main",
        }
        report = f'<testsuite name="suite">{"".join(cases)}</testsuite>'.encode()
        response = httpx.post(
            f"{self.cli.url}/flaky-tests/upload",
            headers={"x-api-token": self.cli.token},
            data={"metadata": json.dumps(meta)},
            files=[("file", ("report.xml", report, "application/xml"))],
        )
        assert response.status_code == 200, response.text

    def make_flaky(self, name: str) -> str:
        """A test that failed then passed on the same commit (flaky by pass-on-retry); its id."""
        self.upload(case(name, failed="flake"), case("test_ok"))
        self.upload(case(name), case("test_ok"))
        return str(self.details_by_name(name)["id"])

    def details_by_name(self, name: str) -> dict[str, Any]:
        tests = self.ok("list-unhealthy-tests", status="flaky", page_query={"page_size": 100})
        test: dict[str, Any] = next(t for t in tests["tests"] if t["name"] == name)
        return test

    def failing_id(self, name: str, clock: FakeClock) -> str:
        """The id of a test that failed in the last week (by the server's clock)."""
        end = clock.now + timedelta(minutes=1)
        window = {"start_time": (end - timedelta(days=7)).isoformat(), "end_time": end.isoformat()}
        tests = self.ok("list-failing-tests", page_query={"page_size": 100}, **window)["tests"]
        test: dict[str, Any] = next(t for t in tests if t["name"] == name)
        return str(test["id"])

    def quarantine_setting(self, test_id: str) -> str | None:
        """How a test is quarantined now, or None when it is not."""
        listed = self.ok("list-quarantined-tests", page_query={"page_size": 100})
        for entry in listed["quarantined_tests"]:
            if entry["test_case_id"] == test_id:
                setting: str = entry["quarantine_setting"]
                return setting
        return None

    def test(self, test_id: str) -> dict[str, Any]:
        test: dict[str, Any] = self.ok("get-test-details", test_id=test_id)["test"]
        return test

    def ok(self, verb: str, **fields: object) -> Any:
        return self.cli.api_json(f"flaky-tests/{verb}", org_url_slug="acme", **fields)


@pytest.fixture
def flaky(cli: Cli, registered_repo: GitRepo) -> Flaky:
    return Flaky(cli)


def run_tests_cmd(cli: Cli, *args: str) -> Result:
    """`keepgreen tests ARGS --repo ... --org acme`, which must succeed."""
    result = cli("tests", *args, "--repo", REPO_ARG, "--org", "acme", env=WIDE)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def assert_error(result: Result, code: int, message: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == ""


# -- list -----------------------------------------------------------------------------------------


def test_list_shows_the_flaky_tests_across_every_page(flaky: Flaky, cli: Cli) -> None:
    ids = {name: flaky.make_flaky(name) for name in ("test_racy", "test_timing", "test_order")}

    result = run_tests_cmd(cli, "list", "--page-size", "1")

    for name, test_id in ids.items():
        assert name in result.stdout
        assert test_id in result.stdout
    assert "test_ok" not in result.stdout
    assert "pkg.TestThing / suite" in result.stdout
    assert "tests/test_thing.py" in result.stdout


def test_list_json_is_every_test_of_every_page(flaky: Flaky, cli: Cli) -> None:
    ids = {flaky.make_flaky(name) for name in ("test_racy", "test_timing")}

    result = run_tests_cmd(cli, "list", "--page-size", "1", "--json")

    data = json.loads(result.stdout)
    assert set(data) == {"tests"}
    assert {test["id"] for test in data["tests"]} == ids
    assert {test["status"]["value"] for test in data["tests"]} == {"flaky"}


def test_list_of_no_broken_tests_says_so(flaky: Flaky, cli: Cli) -> None:
    flaky.make_flaky("test_racy")
    result = run_tests_cmd(cli, "list", "--status", "broken")
    assert result.stdout == "No broken tests in github.com/acme/widgets.\n"


# -- show -----------------------------------------------------------------------------------------


def test_show_gives_fields_rates_failures_and_history(flaky: Flaky, cli: Cli) -> None:
    test_id = flaky.make_flaky("test_racy")

    result = run_tests_cmd(cli, "show", test_id)

    out = result.stdout
    assert "Test test_racy" in out
    assert test_id in out
    assert "50.0%" in out  # one failure in two runs
    assert "Most common failures" in out
    assert "flake" in out
    assert "Status history" in out


def test_show_json_is_the_api_answer(flaky: Flaky, cli: Cli) -> None:
    test_id = flaky.make_flaky("test_racy")
    data = json.loads(run_tests_cmd(cli, "show", test_id, "--json").stdout)
    assert set(data) == {"test", "status_history"}
    assert data["test"]["id"] == test_id
    assert data["test"]["name"] == "test_racy"


def test_show_links_to_the_server_the_client_reached(flaky: Flaky, cli: Cli) -> None:
    # The live server runs on a free port, never 8080: its links must name that port.
    test_id = flaky.make_flaky("test_racy")
    data = json.loads(run_tests_cmd(cli, "show", test_id, "--json").stdout)
    base = cli.url.removesuffix("/v1")
    assert data["test"]["html_url"] == (
        f"{base}/acme/flaky-tests/test/{test_id}?repo=acme%2Fwidgets"
    )


def test_show_of_an_unknown_test_reports_the_servers_message(flaky: Flaky, cli: Cli) -> None:
    unknown = str(uuid.uuid4())
    message = cli.api_error(
        "flaky-tests/get-test-details", 404, org_url_slug="acme", test_id=unknown
    )
    result = cli("tests", "show", unknown, "--repo", REPO_ARG, "--org", "acme")
    assert_error(result, 1, message)
    assert unknown in message


# -- quarantine -----------------------------------------------------------------------------------


def test_quarantine_never_then_always_then_auto(flaky: Flaky, cli: Cli) -> None:
    test_id = flaky.make_flaky("test_racy")
    run_tests_cmd(cli, "settings", "--quarantine")
    assert flaky.test(test_id)["quarantined"] is True  # auto-quarantined as flaky

    result = run_tests_cmd(cli, "quarantine", test_id, "--never")
    assert result.stdout == f"Test {test_id} in github.com/acme/widgets is never quarantined.\n"
    assert flaky.test(test_id)["quarantined"] is False

    run_tests_cmd(cli, "quarantine", test_id, "--always")
    assert flaky.quarantine_setting(test_id) == "ALWAYS_QUARANTINE"

    data = json.loads(run_tests_cmd(cli, "quarantine", test_id, "--auto", "--json").stdout)
    assert data == {}
    assert flaky.quarantine_setting(test_id) == "AUTO_QUARANTINE"


def test_quarantine_needs_exactly_one_choice(flaky: Flaky, cli: Cli) -> None:
    test_id = flaky.make_flaky("test_racy")
    message = "give exactly one of --always, --never and --auto"
    for choices in ((), ("--always", "--never")):
        result = cli("tests", "quarantine", test_id, *choices, "--repo", REPO_ARG, "--org", "acme")
        assert_error(result, 2, message)


def test_quarantine_of_an_unknown_test(flaky: Flaky, cli: Cli) -> None:
    unknown = str(uuid.uuid4())
    message = cli.api_error(
        "flaky-tests/set-quarantine-override",
        404,
        org_url_slug="acme",
        test_id=unknown,
        setting="ALWAYS_QUARANTINE",
    )
    result = cli("tests", "quarantine", unknown, "--always", "--repo", REPO_ARG, "--org", "acme")
    assert_error(result, 1, message)


# -- flag -----------------------------------------------------------------------------------------


def test_flag_marks_a_healthy_test_flaky_and_remove_takes_it_off(
    flaky: Flaky, cli: Cli, clock: FakeClock
) -> None:
    flaky.upload(case("test_once", failed="boom"))  # one failure: not flaky, not broken
    test_id = flaky.failing_id("test_once", clock)
    assert flaky.test(test_id)["status"]["value"] == "healthy"

    result = run_tests_cmd(cli, "flag", test_id, "--reason", "seen racing on CI")

    assert result.stdout == f"Flagged test {test_id} in github.com/acme/widgets as flaky.\n"
    status = flaky.test(test_id)["status"]
    assert status["value"] == "flaky"
    assert "seen racing on CI" in status["reason"]

    data = json.loads(run_tests_cmd(cli, "flag", test_id, "--remove", "--json").stdout)
    assert data == {}
    assert flaky.test(test_id)["status"]["value"] == "healthy"


def test_flag_of_an_unknown_test(flaky: Flaky, cli: Cli) -> None:
    unknown = str(uuid.uuid4())
    message = cli.api_error(
        "flaky-tests/flag-test", 404, org_url_slug="acme", test_id=unknown, flaky=True
    )
    result = cli("tests", "flag", unknown, "--repo", REPO_ARG, "--org", "acme")
    assert_error(result, 1, message)


# -- settings -------------------------------------------------------------------------------------


def test_settings_switch_quarantine_and_keep_the_rest(flaky: Flaky, cli: Cli) -> None:
    # Broken tests quarantined too (not the default): switching quarantine on keeps that.
    switches = {"enabled": False, "auto_quarantine_broken": True}
    before = flaky.ok("update-settings", settings={"quarantine": switches})["settings"]
    assert before["quarantine"]["enabled"] is False

    result = run_tests_cmd(cli, "settings", "--quarantine")

    assert "Flaky-test settings of github.com/acme/widgets" in result.stdout
    shown = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "auto-quarantine flaky on" in shown
    assert "auto-quarantine broken on" in shown
    after = flaky.ok("get-settings")["settings"]
    assert after == {**before, "quarantine": {**before["quarantine"], "enabled": True}}

    data = json.loads(run_tests_cmd(cli, "settings", "--no-quarantine", "--json").stdout)
    assert data["settings"]["quarantine"]["enabled"] is False
    assert flaky.ok("get-settings")["settings"] == before


# Far from the defaults in every part, so that a switch that loses or resets anything shows.
CUSTOM_SETTINGS = {
    "quarantine": {"enabled": True, "auto_quarantine_flaky": True, "auto_quarantine_broken": False},
    "monitors": {
        "failing_streak": None,
        "failure_rate": [
            {
                "name": "flaky-on-main",
                "classification": "flaky",
                "activation": 0.3,
                "window_hours": 24,
                "min_sample": 4,
                "branches": ["main"],
            }
        ],
    },
    "ticket_url_template": "https://acme.atlassian.net/browse/{id}",
}


def shown_lines(result: Result) -> list[str]:
    """The command's output lines, each with its runs of spaces as one (Rich pads columns)."""
    return [" ".join(line.split()) for line in result.stdout.splitlines()]


def updates_answered(container: Container, *, at_least: float) -> float:
    """How many update-settings requests the server has answered, once `at_least` have been
    (or after a few seconds): it counts one just after its answer goes out, so the count can
    trail the client by a moment.
    """
    labels = {"route": "/v1/flaky-tests/update-settings", "method": "POST", "status": "200"}
    deadline = time.monotonic() + 5
    while (count := sample(container, "keepgreen_http_requests_total", **labels)) < at_least:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return count


@pytest.mark.parametrize("status", ["flaky", "broken"])
def test_settings_switch_one_auto_quarantine_each_way_and_keep_the_rest(
    flaky: Flaky, cli: Cli, status: str
) -> None:
    before = flaky.ok("update-settings", settings=CUSTOM_SETTINGS)["settings"]
    switch = f"auto_quarantine_{status}"
    was = before["quarantine"][switch]  # flaky starts on, broken off: each goes both ways

    for value in (not was, was):
        flag = f"--{'' if value else 'no-'}auto-quarantine-{status}"
        result = run_tests_cmd(cli, "settings", flag)

        assert f"auto-quarantine {status} {'on' if value else 'off'}" in shown_lines(result)
        after = flaky.ok("get-settings")["settings"]
        assert after == {**before, "quarantine": {**before["quarantine"], switch: value}}

    assert flaky.ok("get-settings")["settings"] == before


def test_settings_switches_combine_in_one_update(
    flaky: Flaky, cli: Cli, container: Container
) -> None:
    before = flaky.ok("update-settings", settings=CUSTOM_SETTINGS)["settings"]
    updates = updates_answered(container, at_least=1)
    switches = ("--no-quarantine", "--no-auto-quarantine-flaky", "--auto-quarantine-broken")

    data = json.loads(run_tests_cmd(cli, "settings", *switches, "--json").stdout)

    wanted = {"enabled": False, "auto_quarantine_flaky": False, "auto_quarantine_broken": True}
    assert data["settings"] == {**before, "quarantine": wanted}
    assert flaky.ok("get-settings")["settings"] == data["settings"]
    assert updates_answered(container, at_least=updates + 1) == updates + 1

    shown = shown_lines(run_tests_cmd(cli, "settings"))
    for line in ("quarantine off", "auto-quarantine flaky off", "auto-quarantine broken on"):
        assert line in shown
    assert "ticket URL template https://acme.atlassian.net/browse/{id}" in shown


# -- the org --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("show", "00000000-0000-0000-0000-000000000000"),
        ("quarantine", "00000000-0000-0000-0000-000000000000", "--auto"),
        ("flag", "00000000-0000-0000-0000-000000000000"),
        ("settings",),
    ],
)
def test_every_command_needs_an_org(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli("tests", *args, "--repo", REPO_ARG, env={"KEEPGREEN_ORG": None})
    assert_error(result, 2, "no org: pass --org SLUG or set KEEPGREEN_ORG (the API token's org)")


def test_the_org_comes_from_keepgreen_org(flaky: Flaky, cli: Cli) -> None:
    flaky.make_flaky("test_racy")
    result = cli("tests", "list", "--repo", REPO_ARG, env={"KEEPGREEN_ORG": "acme", **WIDE})
    assert result.exit_code == 0, result.stderr
    assert "test_racy" in result.stdout


def test_another_orgs_slug_is_the_servers_404(flaky: Flaky, cli: Cli) -> None:
    message = cli.api_error("flaky-tests/get-settings", 404, org_url_slug="globex")
    result = cli("tests", "settings", "--repo", REPO_ARG, "--org", "globex")
    assert_error(result, 1, message)
