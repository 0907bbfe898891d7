"""What one log line costs a served process: keepgreen's access line written as `serve` writes
it (structlog rendering it and writing it to the handler's stream), beside the same line
through the standard library's logger, record and formatter (the route the tests use, and
the one `serve` took before), in the same run.

Run: python bench/log_lines.py [--lines 20000] [--rounds 3]

Each round writes `--lines` access lines through each route, in both formats, to /dev/null
(so the cost is the rendering, not a terminal), alternating the routes; the table gives the
median microseconds per line over the rounds and the ratio of the two.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import structlog

from keepgreen.logs import LogFormat, configure_logging, log_handler, route_structlog_to_stdlib


def served(log_format: LogFormat, sink: IO[str]) -> None:
    configure_logging(log_format=log_format, level="info", stream=sink)


def through_stdlib(log_format: LogFormat, sink: IO[str]) -> None:
    configure_logging(log_format=log_format, level="info", stream=sink)
    route_structlog_to_stdlib()
    logging.getLogger().handlers[:] = [log_handler(log_format, sink)]


def per_line_us(
    route: Callable[[LogFormat, IO[str]], None], log_format: LogFormat, lines: int
) -> float:
    with Path("/dev/null").open("w") as sink:
        route(log_format, sink)
        log = structlog.get_logger("keepgreen.access")
        started = time.perf_counter()
        for _ in range(lines):
            log.info(
                "request",
                method="POST",
                route="/v1/getQueue",
                status=200,
                duration_ms=1.23,
                request_id="d8e9d10407a94d74849850676e3dbf2b",
            )
        return (time.perf_counter() - started) / lines * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.lines} access lines per route and format, {args.rounds} rounds; µs per line\n")
    print("| format | served (structlog to the stream) | through the standard library | ratio |")
    print("|---|---|---|---|")
    formats: tuple[LogFormat, ...] = ("console", "json")
    for log_format in formats:
        times: dict[str, list[float]] = {"served": [], "stdlib": []}
        for _ in range(args.rounds):
            times["served"].append(per_line_us(served, log_format, args.lines))
            times["stdlib"].append(per_line_us(through_stdlib, log_format, args.lines))
        fast, slow = (statistics.median(times[name]) for name in ("served", "stdlib"))
        print(f"| {log_format} | {fast:.1f} | {slow:.1f} | {fast / slow:.2f} |")


if __name__ == "__main__":
    main()
