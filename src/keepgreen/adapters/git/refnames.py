"""The RefNameCheck port: `git check-ref-format` says whether git takes a name as a ref."""

from __future__ import annotations

import os
import subprocess

from keepgreen.app.ports import CodeHostError

_TIMEOUT_SECONDS = 10.0


def is_valid_ref_name(name: str, /, *, branch: bool = False) -> bool:
    """Whether git takes `name` as a full ref name, or with `branch` as a branch name.

    git runs outside any repository (in `/`, with no repository variables), so `--branch`
    judges the name itself and never expands `@{-1}` against a repository it stands in.
    """
    if name.startswith("-"):
        return False  # git would read it as an option
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GIT_") or key == "GIT_EXEC_PATH"
    }
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CEILING_DIRECTORIES"] = "/"
    try:
        result = subprocess.run(
            ["git", "check-ref-format", *(["--branch"] if branch else []), name],
            capture_output=True,
            cwd="/",
            env=env,
            timeout=_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CodeHostError(f"git check-ref-format cannot be run: {error}") from error
    return result.returncode == 0
