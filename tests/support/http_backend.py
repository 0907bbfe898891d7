"""`git http-backend` as a CGI program, for the tests' HTTP git servers: one request in, the
status, headers and body it answers.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CgiAnswer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def http_backend(
    root: Path,
    *,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    user: str,
) -> CgiAnswer:
    """Run `git http-backend` over the repositories under `root` for one request; `user` is
    the authenticated user (http-backend takes pushes only from one).
    """
    env = {
        "PATH": os.environ["PATH"],
        "GIT_PROJECT_ROOT": str(root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(root),
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_TYPE": headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_USER": user,
        "REMOTE_ADDR": "127.0.0.1",
        "GIT_PROTOCOL": headers.get("Git-Protocol", ""),
        "HTTP_CONTENT_ENCODING": headers.get("Content-Encoding", ""),
    }
    result = subprocess.run(
        ["git", "http-backend"], input=body, capture_output=True, env=env, check=False
    )
    head, _, payload = result.stdout.partition(b"\r\n\r\n")
    status, answer_headers = 200, []
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            answer_headers.append((name, value.strip()))
    return CgiAnswer(status, answer_headers, payload)
