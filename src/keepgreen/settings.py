"""Configuration from the environment (prefix KEEPGREEN_)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATA_DIR = Path("./keepgreen-data")
MAX_BODY_BYTES = 20 * 1024 * 1024  # the interface's 20 MiB request limit
MIN_METRICS_TOKEN_LENGTH = 16
MAX_METRICS_TOKEN_LENGTH = 512


class SettingsError(ValueError):
    """A setting keepgreen cannot work with; the message names it and says why."""


class Settings(BaseSettings):
    """Everything keepgreen reads from its environment; see the README's Configuration table."""

    model_config = SettingsConfigDict(env_prefix="KEEPGREEN_", extra="ignore")

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _lowercase(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    database_url: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    url: str = "http://127.0.0.1:8080/v1"
    token: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    # How many built-in CI commands run at once on this machine (each queue's concurrency
    # bounds its own runs; this bounds them all).
    ci_parallel: int = 4
    # How PR code run by the built-in CI is boxed: `bwrap` (bubblewrap: no network, no
    # keepgreen environment, files of its own run only), or `none` for a machine isolated by
    # other means (a throwaway VM or container per worker).
    ci_sandbox: Literal["bwrap", "none"] = "bwrap"
    # Extra host paths the box shows read-only (toolchains outside /usr), separated by ':'.
    ci_readonly_paths: str = ""
    # Seconds between worker passes when nothing wakes it.
    worker_poll_seconds: float = 1.0
    # A queue's lease lasts this long unrenewed (the heartbeat renews it every
    # worker_heartbeat_seconds): how long a dead worker's queues and CI runs wait for another.
    worker_lease_seconds: float = 5.0
    worker_heartbeat_seconds: float = 1.0
    # Beside the API in one process (`keepgreen serve`): after a pass during which the API
    # answered requests, the worker rests this many times the processor time the pass took
    # (at most 5 s), leaving a busy API at least ratio / (1 + ratio) of the interpreter they
    # share. 0: the worker never rests.
    worker_api_rest_ratio: Annotated[float, Field(ge=0, le=100)] = 2.0
    # A queue whose git server fails is tried again after 1, 2, 4, ... seconds, at most this
    # many (0: at every pass); the worker goes on with the other queues meanwhile.
    git_retry_max_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # Where people reach this keepgreen: the base of the `html_url`s the flaky-test API gives.
    # Unset, each answer uses the scheme, host and port its request came to (set it behind a
    # proxy that rewrites the Host header).
    public_url: str | None = None
    # Flaky-test uploads stored at once by one `keepgreen serve` process, and how long one
    # more waits for its turn before it is answered 503 with Retry-After (the CLI then waits
    # and sends it again; it is stored once).
    upload_concurrency: Annotated[int, Field(ge=1, le=64)] = 2
    upload_queue_seconds: Annotated[float, Field(ge=0, le=3600)] = 120.0
    # Raw flaky-test results are kept this many days; the rollups the API reads, this many.
    result_retention_days: int = 30
    rollup_retention_days: int = 90
    # Seconds between the worker's flaky-test sweeps (monitors recovering, retention).
    flaky_sweep_seconds: float = 60.0
    # Logs go to stderr: `console` (one readable line per event) or `json` (one JSON object
    # per line, for a log shipper), at this level and above.
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # A file holding the bearer token that opens GET /metrics (Prometheus sends it from its
    # `authorization: credentials_file:`). Unset: /metrics refuses every request.
    metrics_token_file: Path | None = None
    # `keepgreen worker` serves GET /metrics on this port when set (it has no API otherwise).
    worker_metrics_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    worker_metrics_host: str = "127.0.0.1"
    # keepgreen as a GitHub App: its id, the files of its private key and of its webhook
    # secret, and the REST API's base (GitHub Enterprise Server: https://HOST/api/v3).
    # Without a webhook secret, POST /webhooks/github answers 404.
    github_app_id: Annotated[int, Field(ge=1)] | None = None
    github_private_key_file: Path | None = None
    github_webhook_secret_file: Path | None = None
    github_api_url: str = "https://api.github.com"
    # The App's OAuth client (its "Client ID" and a client secret): set, the dashboard offers
    # "Sign in with GitHub" to the members of the installations linked to keepgreen orgs.
    github_client_id: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    github_client_secret_file: Path | None = None
    # The label that queues a PR when added (and cancels it when removed).
    github_merge_label: Annotated[str, Field(min_length=1, max_length=50)] = "keepgreen-merge"
    # Without webhooks (one lost, or none configured) the worker still re-reads each queued
    # PR from the API at most this often.
    github_reconcile_seconds: Annotated[float, Field(ge=1)] = 60.0

    def github_private_key(self) -> SecretStr | None:
        """The App's private key (PEM) from KEEPGREEN_GITHUB_PRIVATE_KEY_FILE, or None when the
        App is not configured (no app id and no key file). One without the other is refused.
        """
        if self.github_app_id is None and self.github_private_key_file is None:
            return None
        if self.github_app_id is None or self.github_private_key_file is None:
            raise SettingsError(
                "KEEPGREEN_GITHUB_APP_ID and KEEPGREEN_GITHUB_PRIVATE_KEY_FILE go together: "
                "set both to use keepgreen as a GitHub App"
            )
        name = "KEEPGREEN_GITHUB_PRIVATE_KEY_FILE"
        key = _read_secret(name, self.github_private_key_file)
        if "PRIVATE KEY-----" not in key:
            raise SettingsError(
                f"{name}: the file must hold the App's private key in PEM form, as GitHub "
                "gives it (-----BEGIN RSA PRIVATE KEY-----)"
            )
        return SecretStr(key)

    def github_client_secret(self) -> SecretStr | None:
        """The App's OAuth client secret, or None when sign-in with GitHub is not configured;
        the client id and the secret file go together.
        """
        if self.github_client_id is None and self.github_client_secret_file is None:
            return None
        if self.github_client_id is None or self.github_client_secret_file is None:
            raise SettingsError(
                "KEEPGREEN_GITHUB_CLIENT_ID and KEEPGREEN_GITHUB_CLIENT_SECRET_FILE go together: "
                "set both to let people sign in to the dashboard with GitHub"
            )
        return _one_line_secret(
            "KEEPGREEN_GITHUB_CLIENT_SECRET_FILE", self.github_client_secret_file, "client secret"
        )

    def github_web_url(self) -> str:
        """Where people sign in to GitHub: github.com for api.github.com, else the API's host
        (GitHub Enterprise Server serves its API under /api/v3).
        """
        api = self.github_api_url.rstrip("/")
        if api == "https://api.github.com":
            return "https://github.com"
        return api.removesuffix("/api/v3")

    def metrics_token(self) -> SecretStr | None:
        """The operator's /metrics token from KEEPGREEN_METRICS_TOKEN_FILE, or None when unset.

        Surrounding whitespace (a trailing newline) is dropped; a file that cannot be read,
        or a token that is short or would not fit in an HTTP header, is refused.
        """
        if self.metrics_token_file is None:
            return None
        name = "KEEPGREEN_METRICS_TOKEN_FILE"
        token = _read_secret(name, self.metrics_token_file)
        # Never the token itself in a message: only what is wrong with it.
        if not token.isascii() or not token.isprintable() or " " in token or not token:
            raise SettingsError(
                f"{name}: the file must hold one token of printable ASCII characters without spaces"
            )
        if not MIN_METRICS_TOKEN_LENGTH <= len(token) <= MAX_METRICS_TOKEN_LENGTH:
            raise SettingsError(
                f"{name}: the token must be {MIN_METRICS_TOKEN_LENGTH} to "
                f"{MAX_METRICS_TOKEN_LENGTH} characters long (e.g. `openssl rand -hex 32`)"
            )
        return SecretStr(token)

    def github_webhook_secret(self) -> SecretStr | None:
        """The App's webhook secret from KEEPGREEN_GITHUB_WEBHOOK_SECRET_FILE; None when unset.

        Surrounding whitespace is dropped; an unreadable or empty file is refused at start.
        """
        if self.github_webhook_secret_file is None:
            return None
        return _one_line_secret(
            "KEEPGREEN_GITHUB_WEBHOOK_SECRET_FILE",
            self.github_webhook_secret_file,
            "App's webhook secret",
        )

    def readonly_paths(self) -> list[Path]:
        """KEEPGREEN_CI_READONLY_PATHS as absolute paths; one that would show the data dir
        (it, a folder inside it, or a folder holding it) is refused.
        """
        data_dir = self.data_dir.resolve()
        paths = []
        for part in self.ci_readonly_paths.split(os.pathsep):
            if not part.strip():
                continue
            path = Path(part).resolve()
            if path == data_dir or path in data_dir.parents or data_dir in path.parents:
                raise SettingsError(
                    f"KEEPGREEN_CI_READONLY_PATHS names {part}, which would show keepgreen's "
                    "data dir to PR code"
                )
            paths.append(path)
        return paths

    def resolved_database_url(self) -> str:
        """The database URL; by default SQLite inside the data dir."""
        if self.database_url:
            return _with_driver(self.database_url)
        return f"sqlite:///{self.data_dir / 'keepgreen.db'}"


def _with_driver(url: str) -> str:
    """Plain `postgresql://` (or `postgres://`) URLs get the psycopg 3 driver keepgreen ships."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def _one_line_secret(name: str, path: Path, what: str) -> SecretStr:
    """A secret alone on one line of its file (surrounding whitespace dropped)."""
    secret = _read_secret(name, path)
    if not secret or "\n" in secret:
        raise SettingsError(f"{name}: the file must hold the {what} alone on one line")
    return SecretStr(secret)


def _read_secret(name: str, path: Path) -> str:
    """The text of the secret file `path` named by setting `name`, surrounding whitespace
    dropped ("" when it is not UTF-8); SettingsError when it cannot be read. Never the secret
    in a message.
    """
    try:
        raw = path.read_bytes()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise SettingsError(f"{name} names {path}, which cannot be read ({reason})") from None
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return ""
