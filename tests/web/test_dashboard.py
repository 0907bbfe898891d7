"""The Grafana dashboard shipped in deploy/grafana: valid JSON, its data source a variable,
every query valid PromQL (promtool), and every metric a query names served by one of the two
metrics endpoints. And the README's scrape config and table of metrics, as written there.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.telemetry import operator_settings, scrape
from tests.support.wire import Api
from tests.web.test_metrics_lint import PROMTOOL, promtool_problems

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "keepgreen.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# A metric name in PromQL: the families of both endpoints and the process collectors.
METRIC_NAME = re.compile(r"\b(?:mq|keepgreen|process|python)_[A-Za-z0-9_]+\b")
# Grafana's variables, replaced by values PromQL accepts when the queries are checked.
VARIABLES = {"$__rate_interval": "5m", "$mq_job": ".*", "$job": ".*", "$repo": ".*"}


@pytest.fixture
def extra_settings(tmp_path: Path) -> dict[str, Any]:
    """The container's settings open GET /metrics with the operator's token."""
    return operator_settings(tmp_path)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def expressions() -> list[str]:
    """Every query, with Grafana's variables filled in."""
    found = []
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            found.append(expr)
    return found


def served_names(exposition: str) -> set[str]:
    """Every sample name an exposition can hold, from its TYPE lines (a histogram's family
    gives its _bucket, _sum and _count), so that families without samples count too.
    """
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, flags=re.MULTILINE):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def test_the_dashboard_takes_its_prometheus_as_a_variable() -> None:
    loaded = dashboard()
    variables = {variable["name"]: variable for variable in loaded["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for name in ("job", "mq_job", "repo"):
        assert variables[name]["datasource"] == DATASOURCE


def test_every_query_names_only_metrics_the_endpoints_serve(queue: Api) -> None:
    served = served_names(scrape(queue.client))
    response = queue.client.get("/v1/getMergeQueueMetrics", headers={"x-api-token": queue.token})
    assert response.status_code == 200
    served |= served_names(response.text)
    used: set[str] = set()
    for expr in expressions():
        names = set(METRIC_NAME.findall(expr))
        assert names, f"a query names no metric: {expr}"
        used |= names
    assert used - served == set()
    # Both endpoints are on the dashboard.
    assert {name for name in used if name.startswith("mq_")}
    assert {name for name in used if name.startswith("keepgreen_")}


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule (Grafana's variables filled in)."""
    promtool_problems("")  # fails with the install hint when promtool is missing
    rules = []
    for number, expr in enumerate(expressions()):
        rules.append({"record": f"dashboard:query_{number}", "expr": expr})
    path = tmp_path / "dashboard.rules.yml"
    # JSON is YAML: promtool reads it as a rules file.
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_the_readme_scrape_config_is_one_prometheus_accepts(tmp_path: Path) -> None:
    """The YAML block of README.md's "Metrics and dashboards", with its token files made."""
    promtool_problems("")  # fails with the install hint when promtool is missing
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(scrape_configs:.*?)```", readme, flags=re.DOTALL)
    assert len(blocks) == 1
    config = blocks[0].replace("/etc/prometheus/", f"{tmp_path}/")
    for name in re.findall(r"credentials_file: \S+/(\S+)", config):
        (tmp_path / name).write_text("kg_token\n")
    path = tmp_path / "prometheus.yml"
    path.write_text(config)
    result = subprocess.run(
        [PROMTOOL, "check", "config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert config.count("credentials_file:") == 2
    assert "metrics_path: /v1/getMergeQueueMetrics" in config
    assert "metrics_path: /metrics" in config


def test_the_readme_lists_every_service_metric_and_no_other(client: TestClient) -> None:
    """README.md's table of /metrics families and what /metrics serves cannot drift apart."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Metrics and dashboards") :]
    listed = {
        name
        for line in section.splitlines()
        if line.startswith("| `keepgreen_")
        for name in re.findall(r"`(keepgreen_[a-z_]+)`", line.split(" | ")[0])
    }
    served = {
        name for name, _kind in re.findall(r"^# TYPE (keepgreen_\S+) (\S+)$", scrape(client), re.M)
    }
    assert listed == served
