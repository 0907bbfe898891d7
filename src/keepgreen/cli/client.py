"""API client commands (submit, cancel, status, queue ...): thin wrappers over HTTP API v1."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the client commands to the `keepgreen` app."""
