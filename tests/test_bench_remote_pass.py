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
        assert steady["git"] > 0, key
        if run["remote"]:
            # Each queue's pass asks the server what moved (however the host asks it).
            assert steady["network"] >= run["repos"], key
            assert steady["requests"] > 0, key
            assert steady["fetch_bytes"] > 0, key
        else:
            assert steady["network"] == 0, key
            assert steady["fetch_bytes"] == steady["push_bytes"] == steady["requests"] == 0
    # The remote test branch reached the server in the first pass.
    assert report["remote"]["rows"]["first pass"]["push_bytes"] > 0
