"""The long-running commands freeze what they built to start before they serve, so that the
garbage collector's full passes, which hold the interpreter, skip it (`keepgreen.cli.heap`).
Each runs in a process of its own, with only the call that would serve forever replaced.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Replaces what serves forever with a print of the objects frozen by then, then runs the CLI.
PROBE = textwrap.dedent(
    """
    import gc, sys
    import uvicorn
    from keepgreen.app.worker import Worker

    def report(*_args, **_kwargs):
        print("frozen", gc.get_freeze_count(), flush=True)

    uvicorn.run = report
    Worker.serve = report
    from keepgreen.cli.main import main
    sys.argv = ["keepgreen", *sys.argv[1:]]
    main()
    """
)


@pytest.mark.parametrize("command", [["serve", "--no-worker"], ["worker"], ["serve"]])
def test_a_long_running_command_freezes_what_it_built_before_it_serves(
    command: list[str], tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *command],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "KEEPGREEN_DATA_DIR": str(tmp_path / "data"),
            "KEEPGREEN_CI_SANDBOX": "none",
        },
    )
    assert result.returncode == 0, result.stderr
    counts = [
        int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("frozen")
    ]
    # What serves (the API, the worker, or both) found the modules, the app and the
    # container frozen: many thousands of objects.
    assert counts
    assert min(counts) > 10_000
