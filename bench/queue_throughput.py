"""Queue throughput on virtual time: the real scheduler against a simulated git and CI.

For every workload (W1 steady, W2 monorepo lanes, W3 flaky without and with flaky-test
knowledge, W4 bursty arrivals) and every candidate strategy, it simulates `--prs` PRs for each
of `--seeds` seeds and prints one table per workload, strategies side by side: merged PRs per
hour, CI runs per merged PR, good PRs wrongly failed, bad PRs landed (the range over seeds,
min-max), time to merge p50/p95 where PRs arrive over time, and the closed form of
`merge-queue-theory.md` §2.4 (1)/(2) where it applies (saturated single line, no batching, no
flake tolerance). The last line names the recommended strategy per workload and the wall time.

    python bench/queue_throughput.py [--prs 1000] [--seeds 5] [--workloads W1,W4] [--strategies 0,2]
"""

from __future__ import annotations

import argparse
import time

from keepgreen.simulation.throughput import (
    STRATEGIES,
    WORKLOADS,
    Outcome,
    Row,
    Spread,
    Strategy,
    compare,
    recommend,
)


def _span(spread: Spread, fmt: str, scale: float = 1.0) -> str:
    low, high = format(spread.low * scale, fmt), format(spread.high * scale, fmt)
    return low if low == high else f"{low}-{high}"


def _row(row: Row) -> str:
    cells = [
        row.strategy.name,
        _span(row.merged_per_hour, ".1f"),
        _span(row.runs_per_merged, ".2f"),
        _span(row.wrongly_failed, ".1f", 100) + "%",
        _span(row.bad_landed, ".0f"),
    ]
    if not row.workload.is_saturated:
        cells += [_span(row.merge_p50, ".0f"), _span(row.merge_p95, ".0f")]
    cells.append("-" if row.model is None else f"{row.model[0]:.1f} · {row.model[1]:.2f}")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=1000, help="PRs per simulation")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..N per cell")
    parser.add_argument(
        "--workloads", default=",".join(w.name for w in WORKLOADS), help="e.g. W1,W3"
    )
    parser.add_argument(
        "--strategies",
        default=",".join(str(i) for i in range(len(STRATEGIES))),
        help="indexes into the strategy list, e.g. 0,2",
    )
    args = parser.parse_args()
    wanted = set(args.workloads.split(","))
    strategies = [STRATEGIES[int(i)] for i in args.strategies.split(",")]
    seeds = list(range(1, args.seeds + 1))
    started = time.perf_counter()
    slowest = 0.0
    print(
        f"{args.prs} PRs per simulation, seeds {seeds[0]}-{seeds[-1]}; figures min-max over "
        "seeds; the speculative strategies run as many runs at once as the workload has runners"
    )
    picks: list[str] = []
    for workload in (w for w in WORKLOADS if w.name in wanted):
        print(f"\n{workload.name}: {workload.description}\n")
        header = "| strategy | merged/h | CI runs/merged | good PRs wrongly failed | bad landed |"
        if not workload.is_saturated:
            header += " merge p50 min | merge p95 min |"
        header += " model (§2.4): merged/h · runs |"
        print(header)
        print("|---" * header.count(" |") + "|")
        clock = [time.perf_counter()]

        def timed(
            _strategy: Strategy, _seed: int, _outcome: Outcome, clock: list[float] = clock
        ) -> None:
            nonlocal slowest
            now = time.perf_counter()
            slowest = max(slowest, now - clock[0])
            clock[0] = now

        rows = []
        for strategy in strategies:
            row = compare(workload, [strategy], prs=args.prs, seeds=seeds, on_outcome=timed)[0]
            rows.append(row)
            print(_row(row), flush=True)
        best = recommend(rows)
        picks.append(f"{workload.name}: {best.strategy.name if best else 'none safe'}")
    print(f"\nrecommended (no bad PR landed, <= 0.2% good PRs failed): {'; '.join(picks)}")
    print(
        f"wall time {time.perf_counter() - started:.0f} s; "
        f"slowest single simulation {slowest:.1f} s"
    )


if __name__ == "__main__":
    main()
