"""The served keepgreen's public interfaces as the flaky-scale benchmark uses them: the upload
endpoint and the read API over HTTP (one pooled client, safe to share between threads), uploads
released together from many threads, and the `keepgreen upload` command.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from serve_process import ORG, keepgreen  # bench/ is on sys.path when run as a script

HOST, OWNER = "github.com", "bench"
UPLOAD_TIMEOUT_SECONDS = 1800.0


def ref_json(name: str) -> dict[str, str]:
    return {"host": HOST, "owner": OWNER, "name": name}


def sha(*parts: object) -> str:
    return hashlib.sha1(":".join(map(str, parts)).encode()).hexdigest()  # noqa: S324 (an id)


@dataclass
class Answer:
    status: int
    seconds: float
    body: Any
    retry_after: str | None


class Api:
    """The HTTP API of the served keepgreen, as the benchmark's org."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.client = httpx.Client(
            base_url=url,
            headers={"x-api-token": token},
            timeout=httpx.Timeout(UPLOAD_TIMEOUT_SECONDS, connect=30),
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=100),
        )

    def upload(
        self,
        repo: str,
        files: list[bytes],
        *,
        commit: str,
        branch: str = "main",
        pr: int | None = None,
        refused: bool = False,
        check: bool = True,
    ) -> Answer:
        """One upload of `files`; `refused`: with a commit sha the server refuses (400) once it
        has read the whole body, which times the transfer and the multipart parsing alone.
        `check`: fail on any other answer than the one expected.
        """
        fields: dict[str, Any] = {"repo": ref_json(repo), "org_url_slug": ORG, "branch": branch}
        fields["commit_sha"] = "not a sha" if refused else commit
        if pr is not None:
            fields["pr_number"] = pr
        parts = [
            (
                "file",
                (
                    f"report-{i}.xml",
                    data,
                    "application/gzip" if data[:2] == b"\x1f\x8b" else "application/xml",
                ),
            )
            for i, data in enumerate(files)
        ]
        started = time.perf_counter()
        response = self.client.post(
            "/flaky-tests/upload", data={"metadata": json.dumps(fields)}, files=parts
        )
        seconds = time.perf_counter() - started
        body = (
            response.json()
            if response.headers.get("content-type", "").startswith("application/json")
            else response.text
        )
        answer = Answer(response.status_code, seconds, body, response.headers.get("retry-after"))
        expected = 400 if refused else 200
        if check and answer.status != expected:
            raise RuntimeError(f"upload to {repo} answered {answer.status}: {str(body)[:500]}")
        return answer

    def post(self, verb: str, body: dict[str, Any]) -> tuple[float, Any]:
        started = time.perf_counter()
        response = self.client.post(f"/{verb}", json=body)
        seconds = time.perf_counter() - started
        if response.status_code != 200:
            raise RuntimeError(f"{verb} answered {response.status_code}: {response.text[:500]}")
        return seconds, response.json()

    def timed(self, verb: str, body: dict[str, Any]) -> tuple[float, int]:
        """Seconds and status of one call, whatever it answers."""
        started = time.perf_counter()
        status = self.client.post(f"/{verb}", json=body).status_code
        return time.perf_counter() - started, status

    def flaky(self, verb: str, repo: str, **fields: Any) -> tuple[float, Any]:
        return self.post(
            f"flaky-tests/{verb}", {"repo": ref_json(repo), "org_url_slug": ORG, **fields}
        )

    def failing(
        self, repo: str, window: tuple[datetime, datetime], *, page_size: int = 100, token: str = ""
    ) -> tuple[float, Any]:
        return self.flaky(
            "list-failing-tests",
            repo,
            start_time=window[0].isoformat(),
            end_time=window[1].isoformat(),
            page_query={"page_size": page_size, "page_token": token},
        )

    def all_failing(self, repo: str) -> set[tuple[str, str]]:
        """(classname, name) of every test listed as failing in the last 7 days."""
        found: set[tuple[str, str]] = set()
        token, window = "", week()
        for _ in range(10_000):
            _seconds, page = self.failing(repo, window, token=token)
            found.update((test["classname"], test["name"]) for test in page["tests"])
            token = page["page"].get("next_page_token") or ""
            if not token:
                return found
        raise RuntimeError("list-failing-tests kept answering next pages")


def week() -> tuple[datetime, datetime]:
    """The 7-day window of list-failing-tests, ending a minute from now (all results are new)."""
    end = datetime.now(UTC) + timedelta(minutes=1)
    return end - timedelta(days=7), end


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)  # as `keepgreen upload` compresses a report


def at_once(send: Callable[[bytes], Answer], reports: list[bytes]) -> tuple[float, list[Answer]]:
    """Every report sent by a thread of its own, all released together; the wall time from
    the release to the last answer, and the answers (status 0: no HTTP answer at all).
    """
    barrier = threading.Barrier(len(reports) + 1)

    def one(data: bytes) -> Answer:
        barrier.wait()
        try:
            return send(data)
        except httpx.HTTPError as error:
            return Answer(0, 0.0, f"{type(error).__name__}: {error}", None)

    with ThreadPoolExecutor(max_workers=len(reports)) as pool:
        futures = [pool.submit(one, data) for data in reports]
        barrier.wait()
        started = time.perf_counter()
        answers = [future.result() for future in futures]
    return time.perf_counter() - started, answers


def status_counts(answers: list[Answer]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for answer in answers:
        counts[str(answer.status) if answer.status in (200, 503, 500) else "other"] += 1
    return counts


def cli_upload(path: Path, repo: str, *, commit: str, env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of `keepgreen upload` sending `path`, as a CI job runs it."""
    started = time.perf_counter()
    keepgreen(
        "upload",
        *("--org", ORG, "--repo", f"{HOST}/{OWNER}/{repo}", "--sha", commit, "--branch", "main"),
        *("--json", str(path)),
        env=env,
        cwd=cwd,
    )
    return time.perf_counter() - started
