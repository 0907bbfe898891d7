"""What a benchmark's figures depend on: the machine, the versions, and what the database
takes on disk.
"""

from __future__ import annotations

import os
import platform
import sqlite3
from importlib import metadata
from pathlib import Path
from typing import Any

from lxml import etree


def database_bytes(url: str) -> dict[str, int]:
    """What the database takes on disk: SQLite's file and its write-ahead log, or the relations
    (tables, indexes, TOAST) of the PostgreSQL schema the URL's search_path names.
    """
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        wal = path.with_name(path.name + "-wal")
        return {"database": path.stat().st_size, "wal": wal.stat().st_size if wal.exists() else 0}
    from sqlalchemy import text

    from keepgreen.adapters.db.engine import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            size = connection.execute(
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
                )
            ).scalar()
    finally:
        engine.dispose()
    return {"schema": int(size or 0)}


def disk_use(url: str) -> str:
    return ", ".join(f"{name} {size / 2**30:.2f} GiB" for name, size in database_bytes(url).items())


def machine() -> dict[str, Any]:
    model = next(
        (
            line.partition(":")[2].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average": os.getloadavg(),
        "kernel": platform.release(),
    }


def versions(backend: str, url: str) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("keepgreen", "lxml", "SQLAlchemy", "fastapi", "uvicorn", "httpx"):
        found[package] = metadata.version(package)
    found["libxml2"] = ".".join(map(str, etree.LIBXML_VERSION))
    if backend == "sqlite":
        found["SQLite"] = sqlite3.sqlite_version  # the library the served process loads too
        return found
    from sqlalchemy import text

    from keepgreen.adapters.db.engine import make_engine

    engine = make_engine(url)
    with engine.connect() as connection:
        found["PostgreSQL"] = str(connection.execute(text("SHOW server_version")).scalar())
    engine.dispose()
    return found
