"""The `keepgreen` command: serve, worker, --version; operator commands (token, repo) and
the API client are registered from their modules."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated

import typer

from keepgreen import __version__
from keepgreen.cli import admin, client, flaky, upload

if TYPE_CHECKING:
    from keepgreen.bootstrap import Container

app = typer.Typer(
    name="keepgreen",
    help="keepgreen: a self-hosted merge queue and flaky-test service.",
    no_args_is_help=True,
    add_completion=False,
)
client.register(app)
upload.register(app)
flaky.register(app)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"keepgreen {__version__}")
        raise typer.Exit


@app.callback()
def _options(
    _version: Annotated[
        bool | None,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = None,
) -> None:
    """keepgreen: a self-hosted merge queue and flaky-test service."""


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Serve the API only, without the queue worker.")
    ] = False,
) -> None:
    """Run the HTTP API and the queue worker on the configured database."""
    import uvicorn

    from keepgreen.web.app import create_app

    container = _container()
    url = container.settings.resolved_database_url()
    typer.echo(f"keepgreen serving http://{host}:{port}/v1 on {_redact(url)}", err=True)
    stop = threading.Event()
    thread = None
    if not no_worker:
        thread = threading.Thread(
            target=container.worker.serve, args=(stop,), name="keepgreen-worker", daemon=True
        )
        thread.start()
        typer.echo("keepgreen: queue worker running", err=True)
        _warn_about_the_sandbox(container)
    try:
        uvicorn.run(create_app(container=container), host=host, port=port, log_level="info")
    finally:
        stop.set()
        container.worker.wake()
        if thread is not None:
            thread.join(timeout=10)
        container.close()


@app.command()
def worker() -> None:
    """Run the queue worker alone (several may run against one PostgreSQL)."""
    import logging
    import signal

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # alembic announces each of its plugins at INFO on every start: noise in a worker's log.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    container = _container()
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()
        container.worker.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    url = container.settings.resolved_database_url()
    typer.echo(f"keepgreen worker on {_redact(url)}", err=True)
    _warn_about_the_sandbox(container)
    try:
        container.worker.serve(stop)
    finally:
        container.close()


def _container() -> Container:
    from pydantic import ValidationError

    from keepgreen.bootstrap import bootstrap
    from keepgreen.settings import Settings, SettingsError

    try:
        return bootstrap(Settings())
    except (ValidationError, SettingsError) as error:
        # A setting keepgreen cannot work with: one sentence, not a traceback.
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


admin.register(app, open_container=_container)


def _warn_about_the_sandbox(container: Container) -> None:
    """Say at start when the built-in CI cannot box PR code (its runs would end `error`)."""
    problem = container.runner.sandbox_problem()
    if problem is not None:
        typer.echo(f"keepgreen: warning: built-in CI runs will fail: {problem}", err=True)


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    app()
