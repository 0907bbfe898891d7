"""Alembic environment: runs against the engine the app passes in, or KEEPGREEN_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine

from keepgreen.adapters.db.engine import make_engine
from keepgreen.adapters.db.tables import Base
from keepgreen.settings import Settings

config = context.config


def _engine() -> Engine:
    engine = config.attributes.get("engine")
    if isinstance(engine, Engine):
        return engine
    return make_engine(Settings().resolved_database_url())


def run_migrations_online() -> None:
    engine = _engine()
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
