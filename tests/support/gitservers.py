"""Real git servers on loopback for tests: `git daemon` (git://), `git http-backend` behind a
small HTTP server that asks for basic auth, and `sshd` letting one user in with one key; the
HTTP and SSH servers note what they saw at each request.
"""

from __future__ import annotations

import base64
import os
import pwd
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.http_backend import http_backend
from tests.support.processes import all_command_lines, all_environments, child_processes

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


@dataclass(frozen=True)
class TlsFiles:
    """A self-signed certificate for 127.0.0.1 and its key (the certificate is its own CA)."""

    certificate: Path
    key: Path


def self_signed_certificate(directory: Path) -> TlsFiles:
    """Make a certificate for `IP:127.0.0.1` with openssl, valid for a day."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "server.crt", directory / "server.key")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(files.key), "-out", str(files.certificate),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return files


@contextmanager
def http_git_server(
    base: Path,
    *,
    user: str,
    password: str,
    port: int | None = None,
    tls: TlsFiles | None = None,
) -> Iterator[HttpGitServer]:
    """Smart HTTP over `git http-backend` for the repositories under `base`, refusing (401)
    any request without basic auth `user:password`; yields its state, `url` being
    `http://127.0.0.1:PORT` (`port`, to start a stopped server again at the same address),
    or `https://` with `tls`.
    """
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    port = port or free_port()
    seen = HttpGitServer(f"{'https' if tls else 'http'}://127.0.0.1:{port}")

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
            answer = http_backend(
                base,
                method=self.command,
                path=parts.path,
                query=parts.query,
                headers=self.headers,
                body=body,
                user=user,
            )
            status, headers, payload = answer.status, answer.headers, answer.body
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
            pass  # quiet: pytest shows a failing test's own output

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.certificate, tls.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
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


SSHD = Path("/usr/sbin/sshd")
# sshd as root separates privileges into this directory, which its service unit makes at boot.
SSHD_PRIVSEP_DIR = Path("/run/sshd")
# Runs for each session sshd lets in (authorized_keys `command=`): it notes the command asked
# for, and the command line and environment of every process it may read while the client
# waits, then serves the command as sshd would have. Nothing goes to stdout: that is git's.
_ON_SESSION = """#!{python} -I
import os
from pathlib import Path

command = os.environ.get("SSH_ORIGINAL_COMMAND", "")
with open({sessions!r}, "a") as sessions:
    print(command, file=sessions)
seen = []
for entry in Path("/proc").iterdir():
    for name in ("cmdline", "environ") if entry.name.isdigit() else ():
        try:
            data = (entry / name).read_bytes()
        except OSError:
            continue
        seen.append(data.replace(b"\\0", b" ").replace(b"\\n", b" ").decode(errors="replace"))
with open({processes!r}, "a") as processes:
    processes.writelines(line + "\\n" for line in seen)
os.execv("/bin/sh", ["/bin/sh", "-c", command])
"""


@dataclass(frozen=True)
class SshGitServer:
    """An sshd on 127.0.0.1 that lets this machine's current user in with `client_key` only,
    known to the client by the line in `known_hosts`; it serves any repository path on the
    machine, and notes every session it let in.
    """

    port: int
    user: str
    client_key: Path  # the private key sshd accepts (0600)
    known_hosts: Path  # `[127.0.0.1]:PORT ssh-ed25519 ...`: the server's host key
    directory: Path

    def url(self, repository: Path) -> str:
        """`ssh://user@127.0.0.1:PORT/abs/path.git`."""
        return f"ssh://{self.user}@127.0.0.1:{self.port}{repository.absolute()}"

    def scp_like_url(self, repository: Path) -> str:
        """`user@[127.0.0.1:PORT]:/abs/path.git`: git's scp-like syntax, which takes a port
        only inside brackets (`user@host:path` always goes to port 22).
        """
        return f"{self.user}@[127.0.0.1:{self.port}]:{repository.absolute()}"

    def sessions(self) -> list[str]:
        """The commands of the sessions let in so far (`git-upload-pack '/path'`, ...)."""
        return _lines(self.directory / "sessions")

    def processes(self) -> list[str]:
        """Each process's command line and environment, read during every session."""
        return _lines(self.directory / "processes")

    def log(self) -> str:
        """What sshd logged (`Accepted publickey for ...`, `Connection closed by ...`)."""
        return (self.directory / "sshd.log").read_text(errors="replace")


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def ssh_keygen(path: Path, *, comment: str = "keepgreen-test") -> Path:
    """A new ed25519 key pair without passphrase at `path` (private, 0600) and `path.pub`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


@contextmanager
def ssh_git_server(directory: Path) -> Iterator[SshGitServer]:
    """`sshd -D -e` on a free loopback port, its host key, client key, config and log in
    `directory`; yields the server, stopped on exit. Skips the test when sshd is not installed.

    Run by root, sshd lets root in by key only (`PermitRootLogin prohibit-password`); run by
    another user it can let in only that same user, which is who the tests are.
    """
    if not SSHD.is_file():
        pytest.skip(f"{SSHD} is not installed (Debian: apt-get install openssh-server)")
    directory.mkdir(parents=True, exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name
    host_key = ssh_keygen(directory / "host_ed25519", comment="keepgreen-test-host")
    client_key = ssh_keygen(directory / "client" / "id_ed25519")
    on_session = directory / "on-session"
    on_session.write_text(
        _ON_SESSION.format(
            python=sys.executable,
            sessions=str(directory / "sessions"),
            processes=str(directory / "processes"),
        )
    )
    on_session.chmod(0o755)
    authorized = directory / "authorized_keys"
    client_public = client_key.with_suffix(".pub").read_text().strip()
    authorized.write_text(f'restrict,command="{on_session}" {client_public}\n')
    port = free_port()
    key_type, key_body = host_key.with_suffix(".pub").read_text().split()[:2]
    known_hosts = directory / "client" / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {key_type} {key_body}\n")
    if os.getuid() == 0:
        # What the openssh-server service makes at start; sshd run by root refuses without it.
        SSHD_PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    config = directory / "sshd_config"
    settings = [
        f"ListenAddress 127.0.0.1:{port}",
        f"HostKey {host_key}",
        f"PidFile {directory / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized}",
        f"AllowUsers {user}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",  # the files are in the test's tmp dirs
        "PermitRootLogin prohibit-password",
        "PermitUserEnvironment no",
        "PermitTTY no",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PrintMotd no",
        "PrintLastLog no",
        "LogLevel VERBOSE",
    ]
    # OpenSSH 9.8 and later penalise an address whose connections fail to sign in (as the
    # tests' wrong keys and unknown host keys do); all of them come from 127.0.0.1.
    penalties = "PerSourcePenalties no"
    config.write_text("\n".join([*settings, penalties]) + "\n")
    if _sshd_config_problem(config):
        config.write_text("\n".join(settings) + "\n")
    problem = _sshd_config_problem(config)
    if problem:
        raise RuntimeError(f"sshd refuses the test's config: {problem}")
    log = directory / "sshd.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    server = SshGitServer(port, user, client_key, known_hosts, directory)
    try:
        _wait_for_log(server, f"Server listening on 127.0.0.1 port {port}", process)
        yield server
    finally:
        # Sessions run in sessions of their own, out of the group: let the last ones end
        # (their client is gone) so that none is left behind unreaped.
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while child_processes(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=START_TIMEOUT_SECONDS)


def _sshd_config_problem(config: Path) -> str | None:
    tested = subprocess.run(
        [str(SSHD), "-t", "-f", str(config)], capture_output=True, text=True, check=False
    )
    if tested.returncode == 0:
        return None
    return tested.stderr.strip() or f"sshd -t exited {tested.returncode}"


def _wait_for_log(server: SshGitServer, line: str, process: subprocess.Popen[bytes]) -> None:
    """Wait until sshd logs `line` (it listens), rather than knock on its port: a connection
    that does not sign in is logged, and penalised by newer sshd.
    """
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if line in server.log():
            return
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited {process.returncode}: {server.log().strip()}")
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen in {START_TIMEOUT_SECONDS} s: {server.log().strip()}")
