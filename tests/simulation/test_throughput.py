"""The simulator against the closed forms of merge-queue-theory.md §2.4, and its determinism.

The cases are those where the synchronous-round model holds exactly for keepgreen: a saturated
queue, one line (single mode), a fixed CI time T, no flakes (f = 0), no batching, no
pending-failure depth and no optimistic merge.

- Serial (§2.4 (1)): one run at a time, each taking T; a good PR merges, a bad one fails; the
  next run starts at once. So X = (1-p)/T.
- Speculative depth d (§2.4 (2)): d runs start together (PR k tested on top of PRs 1..k-1) and,
  with a fixed T, finish together. The leading passes land; the first failure fails its PR, and
  every run behind it, which held the bad PR, is started again on the new line: a round of T
  merges the run of successes at the head, M(d) = (1-p)(1-(1-p)^d)/p.

p is the share of bad PRs the seed actually drew (the model's input, so the test checks the
queue's mechanics rather than the sampling of bad PRs). 1,000 PRs give about 75 rounds at d=8,
enough for the 5% tolerance with the fixed seeds below (deterministic: no flaky test).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from keepgreen.core.model import QueueConfig
from keepgreen.simulation.throughput import (
    W1,
    Outcome,
    Strategy,
    serial_model,
    simulate,
    speculative_model,
)

NO_FLAKES = replace(W1, spurious_rate=0.0, bad_rate=0.05)


def drawn_bad_rate(outcome: Outcome) -> float:
    return 1 - outcome.good / outcome.prs


@pytest.mark.parametrize("seed", [1, 2])
def test_serial_throughput_matches_the_closed_form(seed: int) -> None:
    outcome = simulate(
        NO_FLAKES, Strategy("serial", QueueConfig(concurrency=1)), prs=400, seed=seed
    )
    expected, runs = serial_model(p=drawn_bad_rate(outcome), f=0.0, ci_hours=0.5)
    assert outcome.merged_per_hour == pytest.approx(expected, rel=0.05)
    assert outcome.runs_per_merged == pytest.approx(runs, rel=0.05)
    assert outcome.bad_landed == 0
    assert outcome.good_failed == 0  # no flakes: only bad PRs fail


@pytest.mark.parametrize(("depth", "bad_rate", "seed"), [(8, 0.05, 1), (4, 0.10, 3)])
def test_speculative_throughput_matches_the_closed_form(
    depth: int, bad_rate: float, seed: int
) -> None:
    workload = replace(NO_FLAKES, bad_rate=bad_rate, runners=depth)
    strategy = Strategy(f"speculative d={depth}", QueueConfig(concurrency=depth))
    outcome = simulate(workload, strategy, prs=1000, seed=seed)
    expected, _ = speculative_model(p=drawn_bad_rate(outcome), f=0.0, depth=depth, ci_hours=0.5)
    assert outcome.merged_per_hour == pytest.approx(expected, rel=0.05)
    assert outcome.bad_landed == 0
    assert outcome.good_failed == 0
    # Far above serial: the depth is used.
    assert outcome.merged_per_hour > 0.5 * depth * serial_model(p=bad_rate, f=0, ci_hours=0.5)[0]


def test_the_same_seed_gives_the_same_results_and_another_seed_others() -> None:
    strategy = Strategy(
        "d=4 + depth 2 + optimistic",
        QueueConfig(concurrency=4, pending_failure_depth=2, can_optimistically_merge=True),
    )
    workload = replace(W1, ci_spread_minutes=10.0, runners=4)
    first = simulate(workload, strategy, prs=150, seed=7)
    again = simulate(workload, strategy, prs=150, seed=7)
    other = simulate(workload, strategy, prs=150, seed=8)
    assert first == again
    assert first != other
    assert first.merged + first.failed == 150


def test_bursty_arrivals_report_time_to_merge_from_submission() -> None:
    workload = replace(
        W1, arrivals_per_hour=4.0, burst_size=4, bad_rate=0.0, spurious_rate=0.0, runners=4
    )
    outcome = simulate(workload, Strategy("d=4", QueueConfig(concurrency=4)), prs=60, seed=1)
    assert outcome.merged == 60
    # Below capacity: most PRs merge in one CI run (30 min) after they arrive, none sooner.
    assert min(outcome.minutes_to_merge) >= 30
    assert outcome.merge_minutes(0.5) == pytest.approx(30, abs=1)
    assert outcome.merge_minutes(0.95) < 120


def test_parallel_lanes_merge_beyond_one_lane() -> None:
    """Eight disjoint areas: a bad PR holds up only its own lane."""
    lanes = replace(W1, lanes=8, all_share=0.0, spurious_rate=0.0, runners=16)
    single = replace(lanes, lanes=0)
    strategy = Strategy("speculative", QueueConfig(concurrency=16))
    in_lanes = simulate(lanes, strategy, prs=200, seed=2)
    in_line = simulate(single, strategy, prs=200, seed=2)
    assert in_lanes.bad_landed == in_line.bad_landed == 0
    assert in_lanes.merged_per_hour > 1.3 * in_line.merged_per_hour


def test_results_do_not_depend_on_the_processs_hash_seed() -> None:
    """Sets of ids iterate in a per-process order; nothing the simulation decides may follow it
    (lanes, batches and CI times all in play)."""
    program = (
        "from dataclasses import replace\n"
        "from keepgreen.simulation.throughput import STRATEGIES, W1, simulate\n"
        "w = replace(W1, lanes=4, all_share=0.1, ci_spread_minutes=5.0)\n"
        "print(simulate(w, STRATEGIES[4], prs=80, seed=3))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert "merged=" in outputs.pop()
