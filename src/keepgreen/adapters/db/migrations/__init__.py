"""Alembic migrations of keepgreen's schema (script_location keepgreen.adapters.db:migrations)."""
