"""Containers with an operator's /metrics token, and reading what they recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from keepgreen.app.ports import MergeHost
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.settings import Settings
from tests.conftest import FakeClock
from tests.support.wire import Api

OPERATOR_TOKEN = "operator-token-0123456789abcdef"
OPERATOR = {"authorization": f"Bearer {OPERATOR_TOKEN}"}


def operator_settings(tmp_path: Path) -> dict[str, Any]:
    """KEEPGREEN_METRICS_TOKEN_FILE naming a file that holds OPERATOR_TOKEN: the settings that
    open GET /metrics (a module's `extra_settings`).
    """
    token_file = tmp_path / "metrics.token"
    token_file.write_text(OPERATOR_TOKEN + "\n")
    return {"metrics_token_file": token_file}


def operator_container(
    database_url: str,
    tmp_path: Path,
    clock: FakeClock,
    ci_control: Path,
    *,
    code_host: MergeHost | None = None,
) -> Container:
    """The tests' container (tests/conftest.py) with KEEPGREEN_METRICS_TOKEN_FILE set."""
    settings = Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        ci_readonly_paths=str(ci_control),
        git_retry_max_seconds=0.0,  # as tests/conftest.py: passes follow each other at once
        **operator_settings(tmp_path),
    )
    return bootstrap(settings, clock=clock, run_migrations=False, code_host=code_host)


def sample(container: Container, name: str, **labels: str) -> float:
    """A sample's value on the container's registry (0 when the series does not exist yet)."""
    value = container.telemetry.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def scrape(client: Any) -> str:
    """GET /metrics with the operator's token."""
    response = client.get("/metrics", headers=OPERATOR)
    assert response.status_code == 200, response.text
    return str(response.text)


JUNIT = b"""<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="unit" tests="3">
    <testcase classname="tests.test_a" name="test_one" file="tests/test_a.py" time="0.1"/>
    <testcase classname="tests.test_a" name="test_two" file="tests/test_a.py" time="0.1">
      <failure message="boom">assert 1 == 2</failure>
    </testcase>
    <testcase classname="tests.test_a" name="test_three" file="tests/test_a.py" time="0.1">
      <skipped/>
    </testcase>
  </testsuite>
</testsuites>
"""


def post_junit(api: Api, report: bytes) -> int:
    """Upload one JUnit report for a commit of main; the status code."""
    metadata = {
        "repo": api.repo,
        "org_url_slug": "acme",
        "commit_sha": "a" * 40,
        "branch": "main",
    }
    response = api.client.post(
        "/v1/flaky-tests/upload",
        files=[
            ("metadata", (None, json.dumps(metadata), "application/json")),
            ("file", ("junit.xml", report, "application/xml")),
        ],
        headers={"x-api-token": api.token},
    )
    return int(response.status_code)
