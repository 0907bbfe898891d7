"""The HTTP side of the CLI client: one POST per command, and errors as `error: <message>`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    import httpx

TOKEN_HEADER = "x-api-token"  # noqa: S105 (a header name, not a secret)
CONNECT_TIMEOUT_SECONDS = 5.0
# A submit reads the PR from git before answering; leave it room on a big repository.
READ_TIMEOUT_SECONDS = 60.0
_ERROR_SNIPPET = 200


class ClientError(Exception):
    """A failure reported as `error: <message>`; exit code 1, or 2 for a usage problem."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class ApiClient:
    """HTTP API v1 at `url` (its base, ending in /v1), speaking for the org of `token`."""

    url: str
    token: str

    def post(self, verb: str, body: Mapping[str, object]) -> dict[str, Any]:
        """POST `body` to a verb; the JSON object answered, or ClientError saying what failed."""
        import httpx

        endpoint = f"{self.url.rstrip('/')}/{verb}"
        timeout = httpx.Timeout(READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        return exchange(
            lambda: httpx.post(
                endpoint, json=body, headers={TOKEN_HEADER: self.token}, timeout=timeout
            ),
            base_url=self.url,
            endpoint=endpoint,
        )


def exchange(send: Callable[[], httpx.Response], *, base_url: str, endpoint: str) -> dict[str, Any]:
    """Make one request to `endpoint` (of the API at `base_url`) by calling `send`; the JSON
    object answered, or ClientError saying what failed.

    An invalid URL is a usage problem (exit code 2); an unreachable or slow server, a server's
    refusal and an answer that is no JSON object exit 1. `send` chooses the client and its
    transport; every command words these failures alike through here.
    """
    import httpx

    try:
        response = send()
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as error:
        raise ClientError(f"invalid API URL {base_url!r}: {error}", exit_code=2) from error
    except httpx.ConnectError as error:
        raise ClientError(
            f"cannot connect to keepgreen at {base_url} ({error}); "
            "is `keepgreen serve` running there?"
        ) from error
    except httpx.TimeoutException as error:
        raise ClientError(f"keepgreen at {base_url} did not answer in time") from error
    except httpx.HTTPError as error:
        raise ClientError(f"request to {endpoint} failed: {error}") from error
    return answer_of(response, endpoint=endpoint)


# Answers that mean "not now": the server (or a proxy before it) asks the client to come back.
_TRY_AGAIN_STATUSES = frozenset({502, 503, 504})
_FIRST_PAUSE_SECONDS = 2.0
_MAX_PAUSE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Patience:
    """How long a request that may safely be sent again keeps trying: until `seconds` have
    passed since the first try, pausing as the server's Retry-After says (else 2 s, doubling,
    at most 60 s between tries). `sleep` and `clock` are swapped in tests; `waiting` is told
    each pause before it starts.
    """

    seconds: float
    sleep: Callable[[float], None]
    clock: Callable[[], float]
    waiting: Callable[[str], None]


def exchange_patiently(
    send: Callable[[], httpx.Response], *, base_url: str, endpoint: str, patience: Patience
) -> dict[str, Any]:
    """`exchange` for a request that is safe to repeat (an upload with its idempotency key):
    a timeout, a dropped connection or a 502/503/504 is tried again within `patience`, so a
    busy server is waited for instead of given up on while it goes on storing. A server that
    cannot be connected to at all is reported at once.
    """
    import httpx

    deadline = patience.clock() + patience.seconds
    pause = _FIRST_PAUSE_SECONDS
    while True:
        response: httpx.Response | None = None
        try:
            response = send()
        except (httpx.ConnectError, httpx.ConnectTimeout) as caught:
            # Nothing listens there: a server that is down is named at once, not waited for.
            return exchange(partial(send_or_raise, caught), base_url=base_url, endpoint=endpoint)
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as caught:
            error: Exception = caught
        if response is not None:
            if response.status_code not in _TRY_AGAIN_STATUSES:
                return answer_of(response, endpoint=endpoint)
            wait = _retry_after(response) or pause
            why = f"is busy (HTTP {response.status_code})"
        else:
            wait = pause
            why = (
                "did not answer in time"
                if isinstance(error, httpx.TimeoutException)
                else (f"could not be reached ({error})")
            )
        if patience.clock() + wait > deadline:
            if response is not None:
                return answer_of(response, endpoint=endpoint)
            return exchange(partial(send_or_raise, error), base_url=base_url, endpoint=endpoint)
        patience.waiting(f"keepgreen at {base_url} {why}; trying again in {wait:.0f} s")
        patience.sleep(wait)
        pause = min(pause * 2, _MAX_PAUSE_SECONDS)


def send_or_raise(error: Exception) -> httpx.Response:
    """Raises `error` again, for `exchange` to word it as it words every failure."""
    raise error


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date, or nothing: the client's own pause serves
    return min(max(seconds, 0.0), _MAX_PAUSE_SECONDS)


def answer_of(response: httpx.Response, *, endpoint: str) -> dict[str, Any]:
    """The JSON object of a response, or ClientError with the server's message."""
    try:
        data: object = response.json()
    except ValueError:
        data = None
    if response.is_error:
        raise ClientError(_error_message(response.status_code, data, response.text))
    if not isinstance(data, dict):
        raise ClientError(f"{endpoint} answered {response.status_code} without a JSON object")
    return data


def _error_message(status: int, data: object, text: str) -> str:
    """The server's `error.message`, or what can be said about an answer from something else."""
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        snippet = " ".join(text.split())[:_ERROR_SNIPPET]
        return f"HTTP {status}: {snippet or 'no message'}"
    if message == "no such endpoint":
        return f"{message} (KEEPGREEN_URL should be the API base, ending in /v1)"
    return message


def connect(url: str | None, token: str | None) -> ApiClient:
    """The client for the options given, falling back to KEEPGREEN_URL and KEEPGREEN_TOKEN."""
    from keepgreen.settings import Settings

    settings = Settings()
    token = (token or settings.token or "").strip()
    if not token:
        raise ClientError(
            "no API token: set KEEPGREEN_TOKEN or pass --token "
            "(`keepgreen token create --org SLUG` makes one)",
            exit_code=2,
        )
    return ApiClient(url or settings.url, token)


@contextmanager
def reported() -> Iterator[None]:
    """Turn a ClientError into `error: <message>` on stderr and the error's exit code."""
    try:
        yield
    except ClientError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(error.exit_code) from None
