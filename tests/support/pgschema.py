"""Throwaway PostgreSQL schemas, so test sessions and tests never share tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.engine import make_url

from keepgreen.adapters.db.engine import make_engine


@contextmanager
def fresh_schema(server_url: str, *, prefix: str) -> Iterator[str]:
    """Create an empty schema on `server_url`; yield a URL whose search_path is that schema;
    drop the schema afterwards.
    """
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = make_engine(server_url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
