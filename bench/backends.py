"""The databases a benchmark runs on: a fresh SQLite file, and a fresh PostgreSQL schema when
KEEPGREEN_TEST_DATABASE_URL is set (dropped afterwards).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text

from keepgreen.adapters.db.engine import make_engine


@contextmanager
def postgresql_schema(url: str) -> Iterator[str]:
    schema = f"kg_bench_{uuid.uuid4().hex[:8]}"
    admin = make_engine(url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def backends(work: Path) -> Iterator[tuple[str, str, Path]]:
    """(name, database URL, working directory) for each backend, one after the other."""
    (work / "sqlite").mkdir()
    yield "sqlite", f"sqlite:///{work / 'sqlite' / 'kg.db'}", work / "sqlite"
    pg = os.environ.get("KEEPGREEN_TEST_DATABASE_URL")
    if pg:
        (work / "pg").mkdir()
        with postgresql_schema(pg) as url:
            yield "postgresql", url, work / "pg"


def empty_repository(path: Path) -> Path:
    """An empty git repository at `path`: what a registration needs when a benchmark reads no
    git (repositories are checked to be there when registered).
    """
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path
