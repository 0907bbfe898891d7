"""bench/flaky_scale.py runs end to end at --quick scale on SQLite and prints every row of its
table with a figure and its reference (not a timed test: only that the benchmark works and
measures what it says).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROWS = (
    "ingest_rate",
    "ingest_vs_iterparse",
    "upload_fifty",
    "upload_fifty_cli",
    "shards_10",
    "shards_50",
    "getqueue",
    "rss",
    "upload_stored",
    "list_failing",
    "list_quarantined",
)

pytestmark = pytest.mark.slow


def test_quick_run_on_sqlite_prints_every_row_beside_its_reference(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "flaky_scale.py"), "--backend", "sqlite",
         "--quick", "--json", str(figures)],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answer = json.loads(figures.read_text())
    rows = answer["rows"]
    assert list(rows) == list(ROWS)
    table = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    for key in ROWS:
        row = rows[key]
        assert row["measured"], (key, row["keepgreen"])
        assert row["ratio"] > 0, key
        assert row["reference"], key
        # The table has the row: its label, keepgreen's figure, the reference and the target.
        (line,) = [line for line in table if line.startswith(f"| {row['label']} |")]
        for cell in (row["keepgreen"], row["reference"], row["target"]):
            assert cell.replace("|", "/") in line, key
    assert answer["machine"]["nproc"] >= 1
    assert "SQLite" in answer["versions"]
    assert "machine: nproc" in result.stdout

    # Every shard got an answer, what was stored was read back through the API and is what
    # the answers said; the 50 were all stored in the end (retried when refused), none twice.
    for key, count in (("shards_10", 10), ("shards_50", 50)):
        shards = rows[key]["figures"]
        assert sum(shards["codes"].values()) == count, key
        assert shards["stored_matches_answers"], key
        assert shards["one_after_another_stored"] == shards["expected"], key
    many = rows["shards_50"]["figures"]
    assert many.get("stored_after_retries", many["stored"]) == many["expected"]
    assert many.get("duplicated", 0) == 0
    assert many["503_without_retry_after"] == 0
    # The quarantined listing lists what the benchmark quarantined.
    scale = answer["scale"]
    assert rows["list_quarantined"]["figures"]["total_rows"] >= scale["quarantined"]
    assert rows["upload_stored"]["figures"]["stored"] >= scale["stored"]
    assert rows["rss"]["figures"]["peak_kib"] >= rows["rss"]["figures"]["idle_kib"]

    # The SQL of both listings, each SELECT with its plan.
    assert set(answer["plans"]) == {"list-failing-tests", "list-quarantined-tests"}
    for statements in answer["plans"].values():
        assert any("test_" in statement["sql"] for statement in statements)
        assert all(statement["plan"] for statement in statements)
    assert "EXPLAIN QUERY PLAN of the SELECTs of list-failing-tests" in result.stdout
