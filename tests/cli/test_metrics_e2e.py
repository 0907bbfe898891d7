"""GET /metrics of real processes: `keepgreen serve` (API and worker in one, sharing their
metrics) and `keepgreen worker --metrics-port`, which has no API otherwise.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve_e2e import Served, keepgreen
from tests.support.telemetry import OPERATOR, OPERATOR_TOKEN
from tests.web.test_metrics_lint import promtool_problems

pytestmark = pytest.mark.slow

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0


@pytest.fixture
def env(fresh_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A fresh install with the operator's token file; no other keepgreen setting."""
    token_file = tmp_path / "metrics.token"
    token_file.write_text(OPERATOR_TOKEN + "\n")
    return {**fresh_env, "KEEPGREEN_METRICS_TOKEN_FILE": str(token_file)}


class Worker:
    """`keepgreen worker ARGS` with its stderr in a file; the metrics URL it announces."""

    def __init__(self, *args: str, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "keepgreen", "worker", *args],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            env=env,
            cwd=cwd,
        )

    def metrics_url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            found = re.search(r"worker metrics .*url=(http://\S+/metrics)", self.log.read_text())
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"the worker announced no metrics port:\n{self.log.read_text()}")

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


@pytest.fixture
def worker(env: dict[str, str], workdir: Path, tmp_path: Path) -> Iterator[Worker]:
    started = Worker("--metrics-port", "0", env=env, cwd=workdir, log=tmp_path / "worker.log")
    yield started
    if started.process.poll() is None:
        started.stop()


def passes(text: str) -> float:
    found = re.search(r'^keepgreen_worker_passes_total\{outcome="ok"\} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


def test_the_worker_serves_its_metrics_on_loopback_with_the_operator_token(
    worker: Worker,
) -> None:
    url = worker.metrics_url()
    assert url.startswith("http://127.0.0.1:")
    refused = httpx.get(url)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert (
        httpx.get(url, headers={"authorization": "Bearer wrong-token-0123456789"}).status_code
        == 401
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        response = httpx.get(url, headers=OPERATOR)
        assert response.status_code == 200, response.text
        if passes(response.text) >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert passes(response.text) >= 1
    assert "keepgreen_db_pool_size" in response.text
    assert promtool_problems(response.text) == set()
    # Only /metrics: the worker serves no API.
    assert httpx.get(url.replace("/metrics", "/v1/openapi.json")).status_code == 404
    assert worker.stop() == 0


def test_a_metrics_port_without_the_token_file_stops_the_worker_at_start(
    env: dict[str, str], workdir: Path
) -> None:
    del env["KEEPGREEN_METRICS_TOKEN_FILE"]
    result = keepgreen("worker", "--metrics-port", "0", env=env, cwd=workdir, check=False)
    assert result.returncode == 2
    assert "KEEPGREEN_METRICS_TOKEN_FILE" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_metrics_port_in_use_is_one_sentence(env: dict[str, str], workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env["KEEPGREEN_WORKER_METRICS_PORT"] = str(port)
        result = keepgreen("worker", env=env, cwd=workdir, check=False)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port} for metrics" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_shows_the_api_and_its_worker_on_one_metrics_endpoint(
    env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    served = Served(env=env, cwd=workdir, log=tmp_path / "serve.log", worker=True)
    try:
        served.wait_until_answering()
        base = served.url.removesuffix("/v1")
        assert httpx.get(f"{base}/metrics").status_code == 401
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            text = httpx.get(f"{base}/metrics", headers=OPERATOR).text
            if passes(text) >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert passes(text) >= 1  # the worker thread's passes
        assert 'route="/metrics"' in text  # the API's requests
        assert promtool_problems(text) == set()
    finally:
        served.stop()
