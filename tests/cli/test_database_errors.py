"""A database keepgreen cannot open stops every command that opens it with one sentence.

Each test runs the real `keepgreen` command (`python -m keepgreen`) as an operator would, with a
KEEPGREEN_DATABASE_URL that cannot work, and checks what the operator reads: one line on stderr
naming the database (its password hidden) and the reason, exit code 2, no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from keepgreen.adapters.db.engine import DatabaseUnavailable, make_engine
from tests.cli.conftest import free_port

pytestmark = pytest.mark.slow

# A made-up password the output must never show.
PASSWORD = "pw-" + uuid.uuid4().hex[:12]
COMMAND_TIMEOUT_SECONDS = 60
PG_URL = os.environ.get("KEEPGREEN_TEST_DATABASE_URL")

# Every command that opens the database; each must fail the same way.
COMMANDS = {
    "serve": ["serve", "--port", "0"],
    "worker": ["worker"],
    "token create": ["token", "create", "--org", "acme"],
    "repo add": [
        *("repo", "add", "--org", "acme", "--host", "github.com"),
        *("--owner", "acme", "--name", "widgets", "--git-url", "."),
    ],
}


def run_keepgreen(
    args: list[str], *, database_url: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("KEEPGREEN_")}
    env["KEEPGREEN_DATABASE_URL"] = database_url
    env["KEEPGREEN_DATA_DIR"] = str(cwd / "data")
    return subprocess.run(
        [sys.executable, "-m", "keepgreen", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )


def assert_one_sentence(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The command exited 2 with one `error: ...` line holding every `expected` text, and
    never the password; that line.
    """
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert result.stdout == ""
    assert result.stderr.endswith("\n")
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: "), line
    for text in expected:
        assert text in line
    assert "Traceback" not in output
    assert PASSWORD not in output
    return line


def closed_port_url() -> str:
    return f"postgresql+psycopg://keepgreen:{PASSWORD}@127.0.0.1:{free_port()}/keepgreen"


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_database_server_that_is_down(command: list[str], tmp_path: Path) -> None:
    url = closed_port_url()

    line = assert_one_sentence(run_keepgreen(command, database_url=url, cwd=tmp_path))

    shown = make_url(url).render_as_string(hide_password=True)
    assert line == f"error: cannot connect to the database at {shown}: connection refused"


@pytest.mark.skipif(PG_URL is None, reason="needs KEEPGREEN_TEST_DATABASE_URL (a PostgreSQL)")
@pytest.mark.parametrize("command", ["serve", "repo add"])
def test_a_postgresql_database_that_does_not_exist(command: str, tmp_path: Path) -> None:
    # Every command opens the database the same way (the test above runs each one); two
    # suffice to show the server's own reason comes through.
    assert PG_URL is not None
    missing = f"kg_missing_{uuid.uuid4().hex[:8]}"
    url = make_url(PG_URL).set(database=missing, password=PASSWORD)

    result = run_keepgreen(
        COMMANDS[command], database_url=url.render_as_string(hide_password=False), cwd=tmp_path
    )

    line = assert_one_sentence(result, f'database "{missing}" does not exist')
    assert f"cannot connect to the database at {url.render_as_string()}: " in line
    assert ":***@" in line


def test_a_sqlite_path_whose_folder_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    url = f"sqlite:///{blocker}/keepgreen.db"

    line = assert_one_sentence(
        run_keepgreen(COMMANDS["token create"], database_url=url, cwd=tmp_path)
    )

    assert line == (
        f"error: cannot open the database at {url}: cannot create the folder {blocker}: "
        f"{blocker} is a file, not a folder"
    )


def test_a_sqlite_path_that_is_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    url = f"sqlite:///{folder}"

    line = assert_one_sentence(run_keepgreen(COMMANDS["worker"], database_url=url, cwd=tmp_path))

    assert line == f"error: cannot open the database at {url}: unable to open database file"


def test_a_data_dir_that_cannot_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = {name: value for name, value in os.environ.items() if not name.startswith("KEEPGREEN_")}
    env["KEEPGREEN_DATA_DIR"] = str(blocker / "data")

    result = subprocess.run(
        [sys.executable, "-m", "keepgreen", *COMMANDS["token create"]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )

    line = assert_one_sentence(result)
    assert line == (
        f"error: KEEPGREEN_DATA_DIR is {blocker / 'data'}, which cannot be created: "
        f"{blocker} is a file, not a folder"
    )


def test_a_url_keepgreen_cannot_parse(tmp_path: Path) -> None:
    url = f"postgresql://keepgreen:{PASSWORD}@db:port/keepgreen"

    line = assert_one_sentence(run_keepgreen(COMMANDS["serve"], database_url=url, cwd=tmp_path))

    assert line == (
        "error: KEEPGREEN_DATABASE_URL is not a database URL keepgreen can use "
        "(sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE)"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "is not a database URL keepgreen can use"),
        (
            f"mysql://keepgreen:{PASSWORD}@db/keepgreen",
            "names mysql, which keepgreen has no driver for",
        ),
        (
            f"postgresql+psycopg2://keepgreen:{PASSWORD}@db/k",
            "names postgresql+psycopg2, which keepgreen",
        ),
    ],
    ids=["not a url", "no driver", "another driver"],
)
def test_urls_keepgreen_cannot_use(url: str, expected: str) -> None:
    # In process: the same path as the command above, without a process per URL.
    with pytest.raises(DatabaseUnavailable) as raised:
        make_engine(url)

    message = str(raised.value)
    assert message.startswith("KEEPGREEN_DATABASE_URL ")
    assert expected in message
    assert PASSWORD not in message
