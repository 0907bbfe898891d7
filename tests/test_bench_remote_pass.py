"""bench/remote_pass.py runs end to end at smoke size and reports every row with its figures
(not a timed test: only that the benchmark works and measures what it says).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("remote", "local", "remote short", "remote long", "local short", "local long")
ROWS = (
    "register (all repositories)",
    "first pass",
    "steady pass (median)",
    "steady pass (slowest)",
)
CHANGE_ROWS = (
    "pass after a queued PR's head pushed to",
    "pass after main moved (foreign push)",
    "pass after an unrelated 1 MiB branch pushed",
    "pass after that",
)
FIGURES = ("seconds", "git", "network", "fetch_bytes", "push_bytes", "requests", "child_cpu")


@pytest.mark.slow
def test_quick_run_reports_every_row_with_numbers() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "remote_pass.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)  # stdout is the JSON alone: logs go to stderr

    assert answer["settings"]["passes"] == 2
    assert answer["credential_helper_seconds"] > 0
    report = answer["runs"]
    assert set(report) == set(RUNS)
    for key in RUNS:
        run = report[key]
        rows = run["rows"]
        history = key not in ("remote", "local")
        expected = {*ROWS, f"submit ({run['repos'] * run['prs']} PRs)"}
        assert set(rows) == expected | (set(CHANGE_ROWS) if history else set()), key
        assert len(run["steady"]) == 2  # --quick: two steady passes
        for name, cost in rows.items():
            for figure in FIGURES:
                assert isinstance(cost[figure], int | float), (key, name, figure)
                assert cost[figure] >= 0, (key, name, figure)
            assert all(isinstance(n, int) for n in cost["processes"].values()), (key, name)
        # The steady state measured: one PR of each queue testing, the others waiting.
        assert run["states"] == {"testing": run["repos"], "pending": run["repos"] * 2}, key
        steady = rows["steady pass (median)"]
        assert steady["git"] > 0, key  # a pass reads each queue's PRs
        first = rows["first pass"]
        # The submit asks nothing of git: the worker's first pass reads the PRs submitted.
        submits = rows[f"submit ({run['repos'] * run['prs']} PRs)"]
        assert submits["git"] == 0, key
        assert submits["fetch_bytes"] == submits["requests"] == 0, key
        assert first["git"] > steady["git"], key
        if run["remote"]:
            # keepgreen read the server in the first pass (how often it fetches is the host's
            # business), pushed each queue's test branch there, and pushes nothing while the
            # runs wait.
            assert first["network"] > 0, key
            assert first["fetch_bytes"] > 0, key
            assert first["processes"].get("push", 0) >= run["repos"], key
            assert first["push_bytes"] > 0, key
            assert steady["push_bytes"] == 0, key
        else:
            for cost in (first, steady):
                assert cost["network"] == 0, key
                assert cost["fetch_bytes"] == cost["push_bytes"] == cost["requests"] == 0, key
