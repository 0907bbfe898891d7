"""The worker beside a busy API in one process rests after each pass, in proportion to the
processor time the pass took; with the API idle, or alone, it never rests.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.engine import QueueEngine
from keepgreen.app.telemetry import Telemetry
from keepgreen.app.worker import Worker, WorkerSettings, api_rest_seconds
from keepgreen.bootstrap import Container
from tests.conftest import FakeClock

PASS_CPU_SECONDS = 0.03  # what each pass burns of the worker thread's processor time
PASSES = 4


def test_the_rest_is_the_passes_processor_time_times_the_ratio_up_to_its_cap() -> None:
    settings = WorkerSettings(holder="test", api_rest_ratio=2.0, api_rest_max_seconds=5.0)
    assert api_rest_seconds(0.1, settings) == pytest.approx(0.2)
    assert api_rest_seconds(4.0, settings) == 5.0  # a long pass rests no more than the cap
    never = WorkerSettings(holder="test", api_rest_ratio=0.0)
    assert api_rest_seconds(1.0, never) == 0.0


def passes_of(container: Container, clock: FakeClock, *, api_busy: bool) -> tuple[
    list[float], Telemetry
]:  # fmt: skip
    """Run a worker whose every pass burns `PASS_CPU_SECONDS` of processor time, the API of
    its process answering a request during each when `api_busy`; when each pass began.
    """
    telemetry = Telemetry()
    began: list[float] = []
    done = threading.Event()

    def a_pass() -> None:
        began.append(time.monotonic())
        if api_busy:
            telemetry.http_request(route="/v1/getQueue", method="POST", status=200, seconds=0.001)
        spent = time.thread_time() + PASS_CPU_SECONDS
        while time.thread_time() < spent:
            pass
        if len(began) == PASSES:
            done.set()

    worker = Worker(
        container.unit_of_work,
        engine=QueueEngine(clock=clock),
        host=LocalGitHost(),
        runner=None,
        clock=clock,
        settings=WorkerSettings(
            holder="test", poll_seconds=0.001, chore_seconds=0, api_rest_ratio=3.0
        ),
        chores=[a_pass],
        telemetry=telemetry,
    )
    stop = threading.Event()
    serving = threading.Thread(target=worker.serve, args=(stop,), daemon=True)
    serving.start()
    assert done.wait(30)
    stop.set()
    serving.join(10)
    return began, telemetry


def rested(telemetry: Telemetry) -> float:
    value = telemetry.registry.get_sample_value("keepgreen_worker_api_rest_seconds_total")
    return 0.0 if value is None else value


def test_beside_a_busy_api_each_pass_is_followed_by_its_rest(
    container: Container, clock: FakeClock
) -> None:
    began, telemetry = passes_of(container, clock, api_busy=True)
    # Each pass took at least PASS_CPU_SECONDS of processor time, so rested 3 times that.
    assert rested(telemetry) >= 3 * PASS_CPU_SECONDS * (PASSES - 1)
    gaps = [after - before for before, after in itertools.pairwise(began)]
    assert min(gaps) >= 4 * PASS_CPU_SECONDS  # the pass, then its rest


def test_with_the_api_idle_the_worker_never_rests(container: Container, clock: FakeClock) -> None:
    _began, telemetry = passes_of(container, clock, api_busy=False)
    assert rested(telemetry) == 0.0
    assert telemetry.requests_answered == 0
