"""bench/github_requests.py runs end to end at smoke size and reports both runs with their
figures (not a timed test: only that the benchmark works and counts what it says).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_the_benchmark_merges_every_pr_and_counts_the_requests() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "github_requests.py"), "--prs", "2",
         "--idle-passes", "1", "--json"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with_feedback, reference = json.loads(result.stdout)
    assert (with_feedback["feedback"], reference["feedback"]) == (True, False)
    for run in (with_feedback, reference):
        assert run["merged"] == run["prs"] == 2
        assert run["violations"] == 0
        assert run["requests"] == sum(run["by_operation"].values())
        assert run["by_operation"]["pulls/merge"] == 2
    # The check run and the comment are what the reference does not send.
    assert "checks/create" in with_feedback["by_operation"]
    assert "checks/create" not in reference["by_operation"]
    assert with_feedback["requests"] > reference["requests"]
