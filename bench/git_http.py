"""A git smart-HTTP server for benchmarks: `git http-backend` behind a small HTTP/1.1 server
(keep-alive, optional basic auth) in a process of its own, counting what it serves.

`served(root, ...)` starts it as `python git_http.py ROOT` and yields a `GitHttpServer` whose
`stats()` reads the counters (`GET /_stats`, itself not counted): requests, bytes received
and sent (request and status lines, headers and bodies as they crossed the socket), 401
challenges and seconds spent in `git http-backend`, each by kind: `fetch` (upload-pack, its
ref advertisement included), `push` (receive-pack) and `other`. Its own process keeps the
server's work off the measured process (its CPU, its GIL, its child processes).
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' CGI runner
from tests.support.http_backend import http_backend

START_TIMEOUT_SECONDS = 10.0
KINDS = ("fetch", "push", "other")
_FIELDS = ("requests", "bytes_in", "bytes_out", "challenges", "backend_seconds")


def request_kind(path: str, query: str) -> str:
    """`fetch` for upload-pack, `push` for receive-pack (each with its ref advertisement)."""
    if path.endswith("/git-upload-pack") or "service=git-upload-pack" in query:
        return "fetch"
    if path.endswith("/git-receive-pack") or "service=git-receive-pack" in query:
        return "push"
    return "other"


class Counters:
    """What the server saw, by kind; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {kind: dict.fromkeys(_FIELDS, 0.0) for kind in KINDS}

    def add(self, kind: str, **amounts: float) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._values[kind][name] += amount

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {kind: dict(values) for kind, values in self._values.items()}


def make_handler(
    root: Path, counters: Counters, expected_auth: str | None
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real server offers it

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/_stats":
                self._reply(200, [("Content-Type", "application/json")], _stats_body(counters))
                return
            kind = request_kind(parts.path, parts.query)
            received = len(self.raw_requestline) + len(self.headers.as_bytes())
            body, raw_length = self._read_body()
            received += raw_length
            authorization = self.headers.get("Authorization")
            if expected_auth is not None and authorization != expected_auth:
                sent = self._reply(401, [("WWW-Authenticate", 'Basic realm="bench"')], b"")
                counters.add(kind, requests=1, bytes_in=received, bytes_out=sent, challenges=1)
                return
            started = time.perf_counter()
            status, headers, payload = self._backend(parts.path, parts.query, body)
            seconds = time.perf_counter() - started
            sent = self._reply(status, headers, payload)
            counters.add(
                kind, requests=1, bytes_in=received, bytes_out=sent, backend_seconds=seconds
            )

        def _read_body(self) -> tuple[bytes, int]:
            """The request body, de-chunked, and how many bytes it took on the wire."""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks, raw = [], 0
                while True:
                    size_line = self.rfile.readline()
                    size = int(size_line.split(b";")[0].strip(), 16)
                    chunk = self.rfile.read(size + 2)  # the chunk and its CRLF
                    raw += len(size_line) + len(chunk)
                    if size == 0:
                        return b"".join(chunks), raw
                    chunks.append(chunk[:-2])
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            return body, len(body)

        def _backend(
            self, path: str, query: str, body: bytes
        ) -> tuple[int, list[tuple[str, str]], bytes]:
            answer = http_backend(
                root,
                method=self.command,
                path=path,
                query=query,
                headers=self.headers,
                body=body,
                user="bench",  # http-backend accepts pushes from a known user only
            )
            status, headers, payload = answer.status, answer.headers, answer.body
            return status, headers, payload

        def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> int:
            """Send the whole answer at once; its size on the wire."""
            lines = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}"]
            lines += [f"{name}: {value}" for name, value in headers]
            lines.append(f"Content-Length: {len(payload)}")
            data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload
            self.wfile.write(data)
            self.wfile.flush()
            return len(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
            pass

    return Handler


def _stats_body(counters: Counters) -> bytes:
    return json.dumps(counters.snapshot()).encode()


def serve(root: Path, *, user: str | None, password_file: Path | None) -> None:
    """Serve the repositories under `root` until killed; print the port first."""
    expected = None
    if user is not None and password_file is not None:
        password = password_file.read_text().strip()
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(root, Counters(), expected))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


@dataclass(frozen=True)
class GitHttpServer:
    """A running server: `url` is `http://127.0.0.1:PORT` (repositories at `/<name>.git`)."""

    url: str

    def stats(self) -> dict[str, dict[str, float]]:
        with urllib.request.urlopen(f"{self.url}/_stats", timeout=10) as answer:  # noqa: S310 (our own loopback server)
            stats: dict[str, dict[str, float]] = json.load(answer)
        return stats


@contextmanager
def served(
    root: Path, *, user: str | None = None, password_file: Path | None = None
) -> Iterator[GitHttpServer]:
    """The repositories under `root` over smart HTTP (basic auth when `user` is given)."""
    auth = ["--user", user, "--password-file", str(password_file)] if user and password_file else []
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(root), *auth],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield GitHttpServer(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=START_TIMEOUT_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--user")
    parser.add_argument("--password-file", type=Path)
    args = parser.parse_args()
    serve(args.root, user=args.user, password_file=args.password_file)


if __name__ == "__main__":
    main()
