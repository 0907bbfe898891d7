"""JUnit parse speed: keepgreen's parser, test ids included, beside a raw lxml iterparse loop.

Run: python bench/junit_parse.py [--sizes 2000,20000,50000,200000] [--repeat 5]
Each report is pytest-style (xunit2, one suite): 3 testcases in 100 fail with a 40-line
traceback, the rest pass. `raw` is the floor any lxml parser stands on: an iterparse loop over
the same bytes that reads every start and end event and clears each element, building nothing.
`parse` is parse_report; `parse+ids` adds make_test_id for each result, as the upload does.
Times are the best of --repeat runs, in CPU seconds of this process (other processes on a
shared machine then matter less); runs of the three are interleaved.
"""

from __future__ import annotations

import argparse
import io
import random
import time
from collections.abc import Callable

from lxml import etree  # type: ignore[import-untyped]

from keepgreen.adapters.junit import parse_report
from keepgreen.core.flaky.ids import make_test_id, repo_full_name

REPO = repo_full_name("github.com", "bench", "widgets")
TRACE_LINES = 40


def pytest_report(testcases: int, *, seed: int = 0) -> bytes:
    """What `pytest --junitxml` writes for `testcases` tests, 3% failing."""
    rng = random.Random(seed)  # noqa: S311  # reproducible data, not a secret
    failing = testcases * 3 // 100
    out = io.StringIO()
    out.write(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"'
        f' failures="{failing}" skipped="0" tests="{testcases}" time="812.331"'
        ' timestamp="2024-05-01T12:03:12.345678+02:00" hostname="runner-7">'
    )
    for i in range(testcases):
        module = f"tests.unit.pkg{i % 40}.test_module{i % 700}"
        head = (
            f'<testcase classname="{module}" name="test_behaviour_{i}[case-{i % 13}]"'
            f' time="{rng.random():.3f}"'
        )
        if i % 100 >= 3:
            out.write(f"{head} />")
            continue
        frames = [
            f"    result = compute_value(input_{k}, options=opts)  # {module}" for k in range(36)
        ]
        trace = "\n".join(
            [
                "def test_behaviour():",
                *frames,
                "&gt;       assert result == expected",
                f"E       AssertionError: assert {i} == {i + 1}",
                f"{module.replace('.', '/')}.py:{i % 500}: AssertionError",
            ]
        )
        message = f"AssertionError: assert {i} == {i + 1}&#10;  +  where {i} = compute()"
        out.write(f'{head}><failure message="{message}">{trace}</failure></testcase>')
    out.write("</testsuite></testsuites>")
    return out.getvalue().encode()


def raw_iterparse(data: bytes) -> None:
    for event, element in etree.iterparse(io.BytesIO(data), events=("start", "end")):
        if event == "end":
            element.clear()


def parse(data: bytes) -> None:
    parse_report("pytest.xml", data)


def parse_with_ids(data: bytes) -> None:
    for result in parse_report("pytest.xml", data):
        make_test_id(
            "bench",
            REPO,
            file=result.file,
            classname=result.classname,
            parent=result.parent,
            name=result.name,
            custom_id=result.custom_id,
        )


def best_times(
    data: bytes, runs: dict[str, Callable[[bytes], None]], repeat: int
) -> dict[str, float]:
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeat):
        for name, run in runs.items():
            started = time.process_time()
            run(data)
            best[name] = min(best[name], time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,50000,200000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runs = {"raw": raw_iterparse, "parse": parse, "parse+ids": parse_with_ids}
    print(
        f"{'testcases':>10} {'MB':>6} {'raw ms':>8} {'parse ms':>9} {'parse+ids ms':>13}"
        f" {'parse/raw':>10} {'parse+ids/raw':>14}"
    )
    for size in (int(size) for size in args.sizes.split(",")):
        data = pytest_report(size)
        times = best_times(data, runs, args.repeat)
        raw, parsed, with_ids = (times[name] * 1000 for name in runs)
        print(
            f"{size:>10,} {len(data) / 1e6:>6.1f} {raw:>8.1f} {parsed:>9.1f} {with_ids:>13.1f}"
            f" {parsed / raw:>10.2f} {with_ids / raw:>14.2f}"
        )


if __name__ == "__main__":
    main()
