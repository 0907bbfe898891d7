"""Queue throughput on virtual time: workloads, candidate settings, and what each achieves.

`simulate(workload, strategy, prs=..., seed=...)` drives the real scheduler (`decide`) in a
`SimulatedWorld` whose CI takes `ci_minutes` per run, fails every run holding a bad PR and any
run by chance with probability `spurious_rate`. Time is event-driven: it jumps to the next CI
answer, scheduler deadline or PR arrival. A saturated workload keeps enough PRs waiting that the
scheduler never runs dry (the queue is "always full" without holding every PR at once).

`compare` runs every strategy over several seeds; `recommend` picks the setting to use. The
benchmark (`bench/queue_throughput.py`) and `keepgreen simulate` both print what these return.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from keepgreen.core.enums import FlakyFailures, PrState, QueueMode
from keepgreen.core.model import QueueConfig
from keepgreen.core.scheduler import BuildTestCommit
from keepgreen.core.scheduler.effects import Effect
from keepgreen.simulation.world import SimulatedWorld

# Beyond this a strategy is not "safe" to recommend: good PRs wrongly failed (worst seed).
MAX_WRONGLY_FAILED = 0.002


@dataclass(frozen=True, slots=True)
class Workload:
    """What the queue faces: CI time, runners, how often PRs are bad, how flaky CI is, and how
    PRs arrive.

    `arrivals_per_hour` None: saturated (PRs always waiting); else PRs arrive at that mean rate,
    in bursts of `burst_size` at once (bursts come as a Poisson process). `lanes` > 0: parallel
    mode with that many disjoint impacted-target areas, a share `all_share` of PRs touching
    everything ("ALL"). `known_flaky_share`: the share of chance failures that came only from
    tests known to be flaky (the world tells the scheduler through its flaky-knowledge hook).
    """

    name: str
    description: str
    bad_rate: float
    spurious_rate: float
    ci_minutes: float = 30.0
    ci_spread_minutes: float = 0.0  # standard deviation of one run's CI time
    runners: int = 8
    arrivals_per_hour: float | None = None
    burst_size: int = 1
    lanes: int = 0
    all_share: float = 0.0
    known_flaky_share: float = 0.0

    @property
    def is_saturated(self) -> bool:
        return self.arrivals_per_hour is None


@dataclass(frozen=True, slots=True)
class Strategy:
    """A candidate setting: a name and the queue configuration it stands for.

    `concurrency` > 1 means "use the workload's runners": such a strategy runs with as many
    runs at once as the workload has runners (8 in W1, 16 in W2), bisections likewise.
    """

    name: str
    config: QueueConfig


# One line per candidate; add rows here (the benchmark and `keepgreen simulate` take them all).
# What peers do: no flaky-test knowledge, no retries, failed batches bisected in line.
_PEER = QueueConfig(flaky_failures=FlakyFailures.OFF, bisect_beside_queue=False)
# keepgreen's own: failed batches isolated beside the queue, one retry when it pays, failures of
# known flaky tests passed.
_KEEPGREEN = QueueConfig(
    concurrency=8,
    batch=True,
    batching_min_size=4,
    bisection_concurrency=8,
    pending_failure_depth=2,
    can_optimistically_merge=True,
    bisect_beside_queue=True,
    max_retries=2,
    flaky_failures=FlakyFailures.PASS,
)

# One line per candidate; add rows here (the benchmark and `keepgreen simulate` take them all).
STRATEGIES: tuple[Strategy, ...] = (
    Strategy("serial", replace(_PEER, concurrency=1)),
    Strategy("GitHub-like: speculative d=8", replace(_PEER, concurrency=8)),
    Strategy(
        "d=8 + pending-failure depth 2 + optimistic",
        replace(_PEER, concurrency=8, pending_failure_depth=2, can_optimistically_merge=True),
    ),
    Strategy(
        "batch 4 + concurrency 8, bisect in line",
        replace(_PEER, concurrency=8, batch=True, batching_min_size=4, bisection_concurrency=8),
    ),
    Strategy(
        "batch 4 + C 8 + depth 2 + optimistic, bisect in line",
        replace(
            _PEER,
            concurrency=8,
            batch=True,
            batching_min_size=4,
            bisection_concurrency=8,
            pending_failure_depth=2,
            can_optimistically_merge=True,
        ),
    ),
    Strategy("keepgreen: batch 4 + C 8, beside the queue, depth 2, 2 retries", _KEEPGREEN),
    Strategy(
        "keepgreen: the same, adaptive batch size",
        replace(_KEEPGREEN, adaptive_batch_size=True),
    ),
    Strategy(
        "keepgreen: the same, adaptive batch size and depth",
        replace(_KEEPGREEN, adaptive_batch_size=True, adaptive_depth=True),
    ),
    Strategy(
        "keepgreen: no batching, d=8, depth 2, 2 retries beside the queue",
        replace(_KEEPGREEN, batch=False),
    ),
)

W1 = Workload(
    "W1",
    "T = 30 min, 8 runners, 5% bad, 5% spurious failures, saturated",
    bad_rate=0.05,
    spurious_rate=0.05,
)
WORKLOADS: tuple[Workload, ...] = (
    W1,
    Workload(
        "W2",
        "monorepo: parallel mode, 8 disjoint target areas, 10% ALL, 16 runners, saturated",
        bad_rate=0.05,
        spurious_rate=0.05,
        runners=16,
        lanes=8,
        all_share=0.10,
    ),
    Workload(
        "W3",
        "flaky: 2% bad, 15% spurious failures, no flaky-test knowledge, saturated",
        bad_rate=0.02,
        spurious_rate=0.15,
    ),
    Workload(
        "W3+k",
        "W3 with flaky-test knowledge: every spurious failure is in known-flaky tests",
        bad_rate=0.02,
        spurious_rate=0.15,
        known_flaky_share=1.0,
    ),
    Workload(
        "W4",
        "bursty: bursts of 6 PRs, 1.5 PRs/h on average (below even serial's capacity), "
        "5% bad, 5% spurious",
        bad_rate=0.05,
        spurious_rate=0.05,
        arrivals_per_hour=1.5,
        burst_size=6,
    ),
)


def config_for(strategy: Strategy, workload: Workload) -> QueueConfig:
    """The strategy's configuration on this workload's runners."""
    config = strategy.config
    if config.concurrency > 1:
        config = replace(config, concurrency=workload.runners)
    if config.bisection_concurrency > 1:
        config = replace(config, bisection_concurrency=workload.runners)
    return config


@dataclass(frozen=True, slots=True)
class Outcome:
    """One simulation: what happened to every PR, and how long it took."""

    prs: int
    merged: int
    failed: int
    good: int
    good_failed: int
    bad_landed: int
    ci_runs: int
    hours: float
    minutes_to_merge: tuple[float, ...]  # per merged PR, from submission to merge

    @property
    def merged_per_hour(self) -> float:
        return self.merged / self.hours if self.hours > 0 else 0.0

    @property
    def runs_per_merged(self) -> float:
        return self.ci_runs / max(self.merged, 1)

    @property
    def wrongly_failed(self) -> float:
        return self.good_failed / max(self.good, 1)

    def merge_minutes(self, quantile: float) -> float:
        return percentile(self.minutes_to_merge, quantile)


def percentile(values: Sequence[float], quantile: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(math.ceil(quantile * len(ordered)), 1)
    return ordered[rank - 1]


class _World(SimulatedWorld):
    """A world whose CI time is drawn around a mean (lognormal with the workload's spread)."""

    ci_mean: float = 1800.0
    ci_sigma: float = 0.0
    durations: random.Random

    def ci_duration(self) -> float:
        if self.ci_sigma <= 0:
            return self.ci_mean
        sigma2 = math.log(1 + (self.ci_sigma / self.ci_mean) ** 2)
        mu = math.log(self.ci_mean) - sigma2 / 2
        return max(self.durations.lognormvariate(mu, math.sqrt(sigma2)), 60.0)


def simulate(
    workload: Workload,
    strategy: Strategy,
    *,
    prs: int,
    seed: int,
    backlog: int | None = None,
    on_world: Callable[[SimulatedWorld], None] | None = None,
) -> Outcome:
    """Run `prs` PRs of `workload` through the real scheduler with `strategy`'s settings.

    Deterministic per seed: the seed draws which PRs are bad, their areas, their arrival times,
    every chance failure and every CI time. `backlog`: how many live PRs a saturated queue
    keeps (default: enough for every runner to hold a full batch twice over, plus 16).
    `on_world` sees the world before the first PR (e.g. to wire in a hook).
    """
    config = config_for(strategy, workload)
    draw = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    bad = {n for n in range(1, prs + 1) if draw.random() < workload.bad_rate}
    areas: dict[int, tuple[str, ...] | None] = {}
    if workload.lanes:
        for number in range(1, prs + 1):
            if draw.random() < workload.all_share:
                areas[number] = None
            else:
                areas[number] = (f"area-{draw.randrange(workload.lanes)}",)
    world = _World(
        config=config,
        mode=QueueMode.PARALLEL if workload.lanes else QueueMode.SINGLE,
        bad=bad,
        seed=seed,
        spurious_rate=workload.spurious_rate,
        known_flaky_share=workload.known_flaky_share,
    )
    world.ci_mean = workload.ci_minutes * 60
    world.ci_sigma = workload.ci_spread_minutes * 60
    world.durations = random.Random(seed + 1_000_003)  # noqa: S311 - simulated CI times
    if on_world is not None:
        on_world(world)
    runs = 0

    def count(effect: Effect) -> None:
        nonlocal runs
        if isinstance(effect, BuildTestCommit):
            runs += 1

    world.on_effect = count
    begin = world.now
    keep = backlog if backlog is not None else 2 * config.concurrency * _batch(config) + 16

    def submit(number: int) -> None:
        world.submit(number, targets=areas.get(number) if workload.lanes else "unset")

    if workload.arrivals_per_hour is None:
        _saturate(world, prs=prs, keep=keep, submit=submit)
    else:
        _arrive(world, _arrival_times(workload, prs, begin, draw), submit=submit)
    return _outcome(world, prs=prs, bad=bad, runs=runs, begin=begin)


def _saturate(world: SimulatedWorld, *, prs: int, keep: int, submit: Callable[[int], None]) -> None:
    """Keep `keep` PRs live until all `prs` are submitted, then let the queue drain."""
    submitted = 0
    while True:
        while submitted < prs and len(world.state.entries) < keep:
            submitted += 1
            submit(submitted)
        world.run_effects()
        if world.advance():
            continue
        if world.state.entries:
            msg = "the simulated queue stalled with PRs in it"
            raise RuntimeError(msg)
        if submitted >= prs:
            return


def _arrive(
    world: SimulatedWorld, arrivals: list[datetime], *, submit: Callable[[int], None]
) -> None:
    """Submit PR n at `arrivals[n - 1]`, and run until every PR has ended."""
    submitted = 0
    while True:
        upcoming = arrivals[submitted] if submitted < len(arrivals) else None
        if world.advance(until=upcoming):
            continue
        if upcoming is None:
            if world.state.entries:
                msg = "the simulated queue stalled with PRs in it"
                raise RuntimeError(msg)
            return
        while submitted < len(arrivals) and arrivals[submitted] <= world.now:
            submitted += 1
            submit(submitted)
        world.run_effects()


def _batch(config: QueueConfig) -> int:
    return config.batching_min_size if config.batch else 1


def _arrival_times(
    workload: Workload, prs: int, begin: datetime, draw: random.Random
) -> list[datetime]:
    if workload.arrivals_per_hour is None:
        return []
    times: list[datetime] = []
    at = begin
    burst_rate = workload.arrivals_per_hour / max(workload.burst_size, 1)
    while len(times) < prs:
        at += timedelta(hours=draw.expovariate(burst_rate))
        times.extend([at] * min(workload.burst_size, prs - len(times)))
    return times


def _outcome(
    world: SimulatedWorld, *, prs: int, bad: set[int], runs: int, begin: datetime
) -> Outcome:
    final = world.final
    merged = [entry for entry in final.values() if entry.state is PrState.MERGED]
    failed = [entry for entry in final.values() if entry.state is PrState.FAILED]
    good = [number for number in final if number not in bad]
    end = max((entry.state_changed_at for entry in final.values()), default=begin)
    return Outcome(
        prs=prs,
        merged=len(merged),
        failed=len(failed),
        good=len(good),
        good_failed=sum(1 for entry in failed if entry.number not in bad),
        bad_landed=len(world.main & bad),
        ci_runs=runs,
        hours=(end - begin).total_seconds() / 3600,
        minutes_to_merge=tuple(
            (entry.state_changed_at - (entry.submitted_at or begin)).total_seconds() / 60
            for entry in merged
        ),
    )


# -- over seeds ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over seeds: its least, mean and greatest value."""

    low: float
    mean: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(min(values), statistics.fmean(values), max(values))


@dataclass(frozen=True, slots=True)
class Row:
    """One strategy on one workload over every seed."""

    workload: Workload
    strategy: Strategy
    outcomes: tuple[Outcome, ...]
    model: tuple[float, float] | None = field(default=None)

    def spread(self, figure: Callable[[Outcome], float]) -> Spread:
        return Spread.of([figure(outcome) for outcome in self.outcomes])

    @property
    def merged_per_hour(self) -> Spread:
        return self.spread(lambda o: o.merged_per_hour)

    @property
    def runs_per_merged(self) -> Spread:
        return self.spread(lambda o: o.runs_per_merged)

    @property
    def wrongly_failed(self) -> Spread:
        return self.spread(lambda o: o.wrongly_failed)

    @property
    def bad_landed(self) -> Spread:
        return self.spread(lambda o: float(o.bad_landed))

    @property
    def merge_p50(self) -> Spread:
        return self.spread(lambda o: o.merge_minutes(0.5))

    @property
    def merge_p95(self) -> Spread:
        return self.spread(lambda o: o.merge_minutes(0.95))

    @property
    def is_safe(self) -> bool:
        """No bad PR landed and at most 0.2% good PRs wrongly failed, on every seed."""
        return self.bad_landed.high == 0 and self.wrongly_failed.high <= MAX_WRONGLY_FAILED


def compare(
    workload: Workload,
    strategies: Sequence[Strategy] = STRATEGIES,
    *,
    prs: int,
    seeds: Sequence[int],
    on_outcome: Callable[[Strategy, int, Outcome], None] | None = None,
) -> list[Row]:
    """Every strategy on `workload` for every seed."""
    rows: list[Row] = []
    for strategy in strategies:
        outcomes: list[Outcome] = []
        for seed in seeds:
            outcome = simulate(workload, strategy, prs=prs, seed=seed)
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(strategy, seed, outcome)
        rows.append(Row(workload, strategy, tuple(outcomes), model(strategy, workload)))
    return rows


def recommend(rows: Sequence[Row]) -> Row | None:
    """The safe row (`Row.is_safe`) with the most merged PRs an hour (as printed, to 0.1),
    ties going to fewer CI runs per merged PR; None when no row is safe.
    """
    safe = [row for row in rows if row.is_safe]
    if not safe:
        return None
    return min(
        safe,
        key=lambda r: (-round(r.merged_per_hour.mean, 1), r.runs_per_merged.mean, r.strategy.name),
    )


# -- the closed forms of merge-queue-theory.md §2.4 -------------------------------------------


def serial_model(*, p: float, f: float, ci_hours: float) -> tuple[float, float]:
    """§2.4 (1): merged per hour and CI runs per merged PR of a serial queue (no retries):
    `X = (1-p)(1-f)/T`; every PR takes one run, and a share (1-p)(1-f) of them merges.
    """
    success = (1 - p) * (1 - f)
    return success / ci_hours, 1 / success


def speculative_model(*, p: float, f: float, depth: int, ci_hours: float) -> tuple[float, float]:
    """§2.4 (2), synchronous rounds of length T: `M(d) = (1-pi)(1-(1-pi)^d)/pi` merged per
    round with `pi = 1-(1-p)(1-f)`, d runs per round.
    """
    pi = 1 - (1 - p) * (1 - f)
    if pi == 0:
        return depth / ci_hours, 1.0
    merged = (1 - pi) * (1 - (1 - pi) ** depth) / pi
    return merged / ci_hours, depth / merged


def model(strategy: Strategy, workload: Workload) -> tuple[float, float] | None:
    """The closed form's (merged/h, runs per merged PR) where one applies: a saturated single
    line, fixed CI time, no batching, no pending-failure depth, no optimistic merge.
    """
    config = config_for(strategy, workload)
    applies = (
        workload.is_saturated
        and not workload.lanes
        and workload.ci_spread_minutes == 0
        and not config.batch
        and config.pending_failure_depth == 0
        and not config.can_optimistically_merge
        and workload.known_flaky_share == 0
    )
    if not applies:
        return None
    hours = workload.ci_minutes / 60
    p, f = workload.bad_rate, workload.spurious_rate
    if config.concurrency == 1:
        return serial_model(p=p, f=f, ci_hours=hours)
    return speculative_model(p=p, f=f, depth=config.concurrency, ci_hours=hours)


__all__ = [
    "MAX_WRONGLY_FAILED",
    "STRATEGIES",
    "W1",
    "WORKLOADS",
    "Outcome",
    "Row",
    "Spread",
    "Strategy",
    "Workload",
    "compare",
    "config_for",
    "model",
    "percentile",
    "recommend",
    "serial_model",
    "simulate",
    "speculative_model",
]
