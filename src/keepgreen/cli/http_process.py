"""One HTTP process of `keepgreen serve --workers N`: uvicorn starts N of these (each a fresh
interpreter) and calls `http_app` in each. The queue worker stays in the supervising process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI


def http_app() -> FastAPI:
    """The API app with a container of its own, built from the environment's settings (the
    supervising process checked them, and applied the migrations, before starting this one).
    """
    from keepgreen.cli.heap import freeze_what_started
    from keepgreen.logs import configure_logging
    from keepgreen.settings import Settings
    from keepgreen.web.app import create_app

    settings = Settings()
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    api = create_app(settings)
    freeze_what_started()
    return api
