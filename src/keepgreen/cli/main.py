"""The `keepgreen` command: serve, worker, --version; operator commands (token, repo) and
the API client are registered from their modules."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated, Any

import typer

from keepgreen import __version__
from keepgreen.cli import admin, client, flaky, github, simulate, upload

if TYPE_CHECKING:
    from keepgreen.bootstrap import Container


def _log() -> Any:
    """The long-running commands' logger; structlog is imported by them alone, so that the
    client commands (`keepgreen upload` in every CI job) start without it.
    """
    import structlog

    return structlog.get_logger("keepgreen")


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


MAX_HTTP_WORKERS = 64


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Serve the API only, without the queue worker.")
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=MAX_HTTP_WORKERS,
            help="HTTP processes answering the API (one queue worker runs beside them).",
        ),
    ] = 1,
) -> None:
    """Run the HTTP API and the queue worker on the configured database."""
    import signal

    import uvicorn

    from keepgreen.cli.heap import freeze_what_started
    from keepgreen.web.app import create_app

    container = _container(configure_logs=True)
    url = container.settings.resolved_database_url()
    _log().info(
        "keepgreen serving",
        url=f"http://{host}:{port}/v1",
        dashboard=f"http://{host}:{port}/",
        database=_redact(url),
        worker=not no_worker,
        http_processes=workers,
    )
    # One HTTP process: its app, built before the worker starts so that what both built to
    # start is frozen together (`freeze_what_started`); several: each builds its own.
    api = create_app(container=container) if workers == 1 else None
    freeze_what_started()
    stop = threading.Event()
    thread = None
    if not no_worker:
        thread = threading.Thread(
            target=container.worker.serve, args=(stop,), name="keepgreen-worker", daemon=True
        )
        thread.start()
        _warn_about_the_sandbox(container)
    # uvicorn shuts down on SIGTERM, then raises the signal again with the handler that was
    # there before it: make that an exit through `finally`, so the worker hands its leases
    # back and its CI runs are stopped (the default handler would kill the process first).
    signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        # uvicorn leaves logging as configured (log_config=None); keepgreen writes the access
        # lines itself, with a request id and the latency.
        if api is not None:
            uvicorn.run(
                api,
                host=host,
                port=port,
                log_config=None,
                access_log=False,
            )
        else:
            # Each HTTP process builds its own app and container from the same settings (the
            # environment); this process keeps the queue worker and supervises them.
            uvicorn.run(
                "keepgreen.cli.http_process:http_app",
                factory=True,
                workers=workers,
                host=host,
                port=port,
                log_config=None,
                access_log=False,
            )
    finally:
        stop.set()
        container.worker.wake()
        if thread is not None:
            thread.join(timeout=10)
        container.close()


@app.command()
def worker(
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="Serve GET /metrics on this port (0: any free one); default "
            "KEEPGREEN_WORKER_METRICS_PORT, else no metrics port.",
        ),
    ] = None,
    metrics_host: Annotated[
        str | None,
        typer.Option(
            "--metrics-host",
            help="Interface of the metrics port; default KEEPGREEN_WORKER_METRICS_HOST "
            "(127.0.0.1).",
        ),
    ] = None,
) -> None:
    """Run the queue worker alone (several may run against one PostgreSQL)."""
    import signal

    from keepgreen.cli.heap import freeze_what_started
    from keepgreen.cli.metrics_port import MetricsPortError, MetricsServer, serve_metrics

    container = _container(configure_logs=True)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()
        container.worker.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    url = container.settings.resolved_database_url()
    _log().info("keepgreen worker", database=_redact(url))
    _warn_about_the_sandbox(container)
    metrics: MetricsServer | None = None
    port = container.settings.worker_metrics_port if metrics_port is None else metrics_port
    if port is not None:
        host = metrics_host or container.settings.worker_metrics_host
        try:
            metrics = serve_metrics(container, host=host, port=port)
        except MetricsPortError as error:
            typer.echo(f"error: {error}", err=True)
            container.close()
            raise typer.Exit(2) from error
        _log().info("worker metrics", url=metrics.url)
    freeze_what_started()
    try:
        container.worker.serve(stop)
    finally:
        if metrics is not None:
            metrics.stop()
        container.close()


def _container(*, configure_logs: bool = False) -> Container:
    """The container from the environment's settings; a bad setting is one sentence, exit 2.

    `configure_logs`: the long-running commands log (format and level from the settings)
    from before the database is opened, so that migrations and start-up problems show too.
    """
    from pydantic import ValidationError

    from keepgreen.bootstrap import bootstrap
    from keepgreen.logs import configure_logging
    from keepgreen.settings import Settings, SettingsError

    try:
        settings = Settings()
        if configure_logs:
            configure_logging(log_format=settings.log_format, level=settings.log_level)
        return bootstrap(settings)
    except ValidationError as error:
        # A setting keepgreen cannot work with: one sentence per setting, not pydantic's
        # report (the value is not repeated: it may be a secret).
        for problem in error.errors():
            name = "KEEPGREEN_" + "_".join(str(part) for part in problem["loc"]).upper()
            typer.echo(f"error: {name}: {problem['msg']}", err=True)
        raise typer.Exit(2) from error
    except SettingsError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


admin.register(app, open_container=_container)
github.register(app, open_container=_container)
simulate.register(app, open_container=_container)


def _exit_quietly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _warn_about_the_sandbox(container: Container) -> None:
    """Say at start when the built-in CI cannot box PR code (its runs would end `error`)."""
    problem = container.runner.sandbox_problem()
    if problem is not None:
        _log().warning("built-in CI runs will fail", problem=problem)


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    app()
