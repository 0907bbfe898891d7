"""The `keepgreen` command: serve, operator commands (token, repo) and the API client."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated

import typer

from keepgreen.cli import client, flaky, upload

if TYPE_CHECKING:
    from keepgreen.bootstrap import Container

app = typer.Typer(
    name="keepgreen",
    help="keepgreen: a self-hosted merge queue and flaky-test service.",
    no_args_is_help=True,
    add_completion=False,
)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
repo_app = typer.Typer(help="Repositories.", no_args_is_help=True)
app.add_typer(token_app, name="token")
app.add_typer(repo_app, name="repo")
client.register(app)
upload.register(app)
flaky.register(app)


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
    import logging
    import signal

    from keepgreen.cli.metrics_port import MetricsPortError, MetricsServer, serve_metrics

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
        typer.echo(f"keepgreen worker: metrics on {metrics.url}", err=True)
    try:
        container.worker.serve(stop)
    finally:
        if metrics is not None:
            metrics.stop()
        container.close()


@token_app.command("create")
def token_create(
    org: Annotated[str, typer.Option("--org", help="Org slug; created if it does not exist.")],
) -> None:
    """Create an API token for an org and print it alone on the last line."""
    container = _container()
    try:
        token = container.admin.create_token(org)
    finally:
        container.close()
    typer.echo(f"Created a token for org {org!r}. It is shown once; keep it secret:", err=True)
    typer.echo(token)


@repo_app.command("add")
def repo_add(
    org: Annotated[str, typer.Option("--org", help="Org slug; created if it does not exist.")],
    host: Annotated[str, typer.Option("--host", help="Repository host, e.g. github.com.")],
    owner: Annotated[str, typer.Option("--owner", help="Repository owner.")],
    name: Annotated[str, typer.Option("--name", help="Repository name.")],
    git_url: Annotated[str, typer.Option("--git-url", help="Local path or git remote URL.")],
    ci_command: Annotated[
        str | None, typer.Option("--ci-command", help="Shell command the built-in CI runs.")
    ] = None,
    ci_env: Annotated[
        list[str] | None,
        typer.Option(
            "--ci-env",
            help="A variable of keepgreen's environment the CI command gets (repeatable; "
            "never KEEPGREEN_*).",
        ),
    ] = None,
) -> None:
    """Register a repository with an org."""
    from keepgreen.app.errors import KeepgreenError
    from keepgreen.core.model import RepoRef

    container = _container()
    try:
        repository = container.admin.add_repository(
            org_slug=org,
            ref=RepoRef(host, owner, name),
            git_url=git_url,
            ci_command=ci_command,
            ci_env=ci_env or (),
        )
    except KeepgreenError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(1) from error
    finally:
        container.close()
    typer.echo(f"Registered {repository.ref} ({repository.git_url}) with org {org!r}.")


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
