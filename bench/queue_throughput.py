"""Queue throughput on virtual time: the real scheduler against a simulated git and CI.

Each scenario fills one queue with PRs (a saturated queue), each genuinely bad with
probability p, every CI run failing spuriously with probability f and taking T = 30 min, and
runs until every PR is merged or failed. It prints merged PRs per hour, CI runs per merged PR
and the share of good PRs wrongly failed, beside the figures of the synchronous-round model in
`merge-queue-theory.md` §2.4 (7) for the same strategy.

    python bench/queue_throughput.py [--prs 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

from keepgreen.core.enums import CommitState, PrState
from keepgreen.core.model import QueueConfig
from keepgreen.core.scheduler import BuildTestCommit
from keepgreen.core.scheduler.effects import Effect
from keepgreen.simulation.world import SimulatedWorld

CI_SECONDS = 30 * 60


class FlakyCi(SimulatedWorld):
    """A world whose CI fails a run spuriously with probability `flake_rate`."""

    flake_rate: float = 0.0

    def ci_result(self, sha: str) -> CommitState:
        if self.trees[sha] & self.bad:
            return CommitState.FAILURE
        return CommitState.FAILURE if self.rng.random() < self.flake_rate else CommitState.SUCCESS


@dataclass(frozen=True)
class Strategy:
    name: str
    config: QueueConfig
    # The model's figures (merged/h, runs per merged PR) for p=0.05 f=0 and p=0.02 f=0.05.
    model: dict[tuple[float, float], tuple[float, float]]


STRATEGIES = [
    Strategy(
        "serial", QueueConfig(concurrency=1), {(0.05, 0.0): (1.9, 1.05), (0.02, 0.05): (1.9, 1.07)}
    ),
    Strategy(
        "speculative d=8",
        QueueConfig(concurrency=8),
        {(0.05, 0.0): (12.7, 1.43), (0.02, 0.05): (11.8, 1.35)},
    ),
    Strategy(
        "speculative d=8, depth 2 + optimistic",
        QueueConfig(concurrency=8, pending_failure_depth=2, can_optimistically_merge=True),
        {(0.05, 0.0): (12.8, 1.25), (0.02, 0.05): (14.4, 1.11)},
    ),
    Strategy(
        "batch 4, bisect, C=1",
        QueueConfig(concurrency=1, batch=True, batching_min_size=4, bisection_concurrency=2),
        {(0.05, 0.0): (4.3, 0.46), (0.02, 0.05): (5.5, 0.36)},
    ),
    Strategy(
        "batch 4 + speculative d=8",
        QueueConfig(concurrency=8, batch=True, batching_min_size=4, bisection_concurrency=8),
        {(0.05, 0.0): (11.9, 1.35), (0.02, 0.05): (20.5, 0.78)},
    ),
]
CASES = [(0.05, 0.0), (0.02, 0.05)]


@dataclass(frozen=True)
class Result:
    merged_per_hour: float
    runs_per_merged: float
    wrongly_failed: float
    bad_landed: int
    seconds: float


def simulate(strategy: Strategy, p: float, f: float, *, prs: int, seed: int) -> Result:
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    bad = {n for n in range(1, prs + 1) if rng.random() < p}
    world = FlakyCi(config=strategy.config, bad=bad, seed=seed)
    world.flake_rate = f
    world.ci_seconds = CI_SECONDS
    runs = 0

    def count(effect: Effect) -> None:
        nonlocal runs
        if isinstance(effect, BuildTestCommit):
            runs += 1

    world.on_effect = count
    started = time.perf_counter()
    begin = world.now
    for number in range(1, prs + 1):
        world.submit(number)
    world.settle(limit_steps=100_000, seconds=300)
    states = world.states()
    merged = [n for n, s in states.items() if s is PrState.MERGED]
    good = [n for n in states if n not in bad]
    wrongly = [n for n in good if states[n] is PrState.FAILED]
    hours = (world.now - begin).total_seconds() / 3600
    return Result(
        merged_per_hour=len(merged) / hours,
        runs_per_merged=runs / max(len(merged), 1),
        wrongly_failed=len(wrongly) / max(len(good), 1),
        bad_landed=len(world.main & bad),
        seconds=time.perf_counter() - started,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.prs} PRs per scenario, T = 30 min, seed {args.seed}")
    header = (
        "| strategy | p | f | merged/h | model | runs/merged | model | good PRs failed "
        "| bad landed | wall s |"
    )
    print(header)
    print("|---" * 10 + "|")
    for strategy in STRATEGIES:
        for p, f in CASES:
            result = simulate(strategy, p, f, prs=args.prs, seed=args.seed)
            model_x, model_runs = strategy.model[(p, f)]
            print(
                f"| {strategy.name} | {p} | {f} | {result.merged_per_hour:.1f} | {model_x} "
                f"| {result.runs_per_merged:.2f} | {model_runs} | {result.wrongly_failed:.1%} "
                f"| {result.bad_landed} | {result.seconds:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
