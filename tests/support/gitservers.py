"""Real git servers on loopback for tests: `git daemon` (git://) and `git http-backend` behind a
small HTTP server that asks for basic auth and notes what it saw at each request.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.processes import all_command_lines, all_environments

START_TIMEOUT_SECONDS = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {START_TIMEOUT_SECONDS} s")


@contextmanager
def git_daemon(base: Path, *, writable: bool = False) -> Iterator[str]:
    """`git daemon` exporting every repository under `base` (accepting pushes when
    `writable`); yields `git://127.0.0.1:PORT`.
    """
    port = free_port()
    process = subprocess.Popen(
        [
            "git",
            "daemon",
            *(["--enable=receive-pack"] if writable else []),
            "--export-all",
            f"--base-path={base}",
            "--reuseaddr",
            "--listen=127.0.0.1",
            f"--port={port}",
            "--informative-errors",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its per-connection children are stopped with it
    )
    try:
        _wait_for_port(port, process)
        yield f"git://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=START_TIMEOUT_SECONDS)


@dataclass
class HttpGitServer:
    """What the HTTP git server saw: the Authorization headers, and at each request (while
    the client's processes wait for the answer) the command line and the environment of
    every process it could read.
    """

    url: str
    authorizations: list[str | None] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)


@contextmanager
def http_git_server(
    base: Path, *, user: str, password: str, port: int | None = None
) -> Iterator[HttpGitServer]:
    """Smart HTTP over `git http-backend` for the repositories under `base`, refusing (401)
    any request without basic auth `user:password`; yields its state, `url` being
    `http://127.0.0.1:PORT` (`port`, to start a stopped server again at the same address).
    """
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    port = port or free_port()
    seen = HttpGitServer(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            authorization = self.headers.get("Authorization")
            seen.authorizations.append(authorization)
            seen.processes.extend(all_command_lines())
            seen.processes.extend(all_environments())
            if authorization != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="keepgreen-test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            env = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(base),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "HOME": str(base),
                "REQUEST_METHOD": self.command,
                "PATH_INFO": parts.path,
                "QUERY_STRING": parts.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": user,
                "REMOTE_ADDR": "127.0.0.1",
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            }
            result = subprocess.run(
                ["git", "http-backend"], input=body, capture_output=True, env=env, check=False
            )
            head, _, payload = result.stdout.partition(b"\r\n\r\n")
            status, headers = 200, []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
            pass  # quiet: pytest shows a failing test's own output

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="git-http-server", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=START_TIMEOUT_SECONDS)


@contextmanager
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers; yields `host:port`."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(connection)

    thread = threading.Thread(target=accept, name="silent-server", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=START_TIMEOUT_SECONDS)
        for connection in accepted:
            connection.close()
        listener.close()
