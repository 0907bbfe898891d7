"""`keepgreen worker --metrics-port`: GET /metrics of a worker process, which has no API."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import uvicorn

from keepgreen.bootstrap import Container
from keepgreen.web.app import create_metrics_app

_START_SECONDS = 10.0


class MetricsPortError(Exception):
    """The metrics port cannot be served; the message says why in one sentence."""


@dataclass
class MetricsServer:
    """A uvicorn server for GET /metrics alone, on a thread of the worker process."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=_START_SECONDS)


def serve_metrics(container: Container, *, host: str, port: int) -> MetricsServer:
    """Listen on `host:port` (port 0: one the OS picks) and serve the container's /metrics
    there, with the same operator-token rule as `keepgreen serve`.
    """
    if container.metrics_token is None:
        raise MetricsPortError(
            "a metrics port needs KEEPGREEN_METRICS_TOKEN_FILE (the token Prometheus sends); "
            "without it /metrics would refuse every scrape"
        )
    # Bound here, in the caller's thread, so that a port in use is a sentence at start rather
    # than a server thread dying quietly.
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(64)
    except OSError as error:
        raise MetricsPortError(
            f"cannot listen on {host}:{port} for metrics: {error.strerror or error}"
        ) from None
    bound = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_metrics_app(container), log_level="warning", access_log=False)
    )
    thread = threading.Thread(
        target=server.run,
        kwargs={"sockets": [listener]},
        name="keepgreen-metrics",
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + _START_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise MetricsPortError(f"the metrics server on {host}:{bound} did not start")
        time.sleep(0.01)
    shown = f"[{host}]" if ":" in host else host
    return MetricsServer(server, thread, f"http://{shown}:{bound}/metrics")
