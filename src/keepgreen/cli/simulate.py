"""`keepgreen simulate`: try the candidate queue settings on a simulated workload, on the real
scheduler, and say which to use.

The workload comes from parameters (CI time, runners, bad and flaky rates, arrivals) or from a
queue's own history (`--queue ... --days N`, read from the database; a parameter given as well
overrides what the history says). Exit codes: 0 done, 1 refused (`error: <sentence>`: an unknown
queue, no history to go on), 2 a usage problem (a value out of range, a malformed queue name).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from keepgreen.simulation.throughput import (
    MAX_WRONGLY_FAILED,
    STRATEGIES,
    Row,
    Spread,
    Strategy,
    Workload,
    compare,
    recommend,
)

if TYPE_CHECKING:
    from keepgreen.app.queue_history import QueueProfile
    from keepgreen.bootstrap import Container

ContainerFactory = Callable[[], "Container"]
_WIDE = 400  # columns for output that is not a terminal


def register(app: typer.Typer, *, open_container: ContainerFactory) -> None:
    """Add `keepgreen simulate` to `app`."""

    @app.command("simulate")
    def simulate(
        queue: Annotated[
            str | None,
            typer.Option(
                "--queue",
                metavar="HOST/OWNER/NAME:BRANCH",
                help="Take the workload from this queue's history (or give the queue's id).",
                show_default=False,
            ),
        ] = None,
        days: Annotated[
            float, typer.Option("--days", min=0.01, help="With --queue: how many days back.")
        ] = 14.0,
        org: Annotated[
            str | None,
            typer.Option("--org", help="With --queue: the repository's org, if ambiguous."),
        ] = None,
        ci_minutes: Annotated[
            float | None,
            typer.Option(
                "--ci-minutes",
                min=0.1,
                help="Mean CI time of one run (default 30).",
                show_default=False,
            ),
        ] = None,
        ci_spread_minutes: Annotated[
            float | None,
            typer.Option(
                "--ci-spread-minutes",
                min=0.0,
                help="Standard deviation of the CI time (default 0).",
                show_default=False,
            ),
        ] = None,
        runners: Annotated[
            int | None,
            typer.Option(
                "--runners",
                min=1,
                max=256,
                help="Runs at once for the speculative settings (default 8).",
                show_default=False,
            ),
        ] = None,
        bad_rate: Annotated[
            float | None,
            typer.Option(
                "--bad-rate",
                min=0.0,
                max=0.99,
                help="Share of PRs that really break the build (default 0.05).",
                show_default=False,
            ),
        ] = None,
        flaky_rate: Annotated[
            float | None,
            typer.Option(
                "--flaky-rate",
                min=0.0,
                max=0.99,
                help="Chance that any run fails spuriously (default 0.05).",
                show_default=False,
            ),
        ] = None,
        arrivals_per_hour: Annotated[
            float | None,
            typer.Option(
                "--arrivals-per-hour",
                min=0.01,
                help="PRs arriving per hour (default saturated, PRs always waiting).",
                show_default=False,
            ),
        ] = None,
        saturated: Annotated[
            bool,
            typer.Option("--saturated", help="PRs always waiting (with --queue: ignore arrivals)."),
        ] = False,
        burst_size: Annotated[
            int, typer.Option("--burst-size", min=1, max=1000, help="PRs arriving together.")
        ] = 1,
        prs: Annotated[
            int, typer.Option("--prs", min=10, max=100_000, help="PRs per simulation.")
        ] = 500,
        seeds: Annotated[
            int, typer.Option("--seeds", min=1, max=100, help="Simulations per setting.")
        ] = 3,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print JSON instead of a table.")
        ] = False,
    ) -> None:
        """Simulate the candidate settings on the real scheduler and recommend one.

        With --queue, a workload option not given takes the figure of the queue's history.
        """
        if saturated and arrivals_per_hour is not None:
            raise typer.BadParameter("give --saturated or --arrivals-per-hour, not both")
        profile = None
        candidates = list(STRATEGIES)
        if queue is not None:
            profile = _profile(open_container, queue, days=days, org=org)
            candidates.append(Strategy("this queue's settings", profile.config))
        elif org is not None:
            raise typer.BadParameter("--org goes with --queue")
        workload = _workload(
            profile,
            ci_minutes=ci_minutes,
            ci_spread_minutes=ci_spread_minutes,
            runners=runners,
            bad_rate=bad_rate,
            flaky_rate=flaky_rate,
            arrivals_per_hour=None if saturated else arrivals_per_hour,
            saturated=saturated,
            burst_size=burst_size,
        )
        rows = compare(workload, candidates, prs=prs, seeds=list(range(1, seeds + 1)))
        best = recommend(rows)
        if json_output:
            typer.echo(json.dumps(_json(workload, profile, rows, best, prs=prs, seeds=seeds)))
            return
        _print(workload, profile, rows, best, prs=prs, seeds=seeds)


def _profile(
    open_container: ContainerFactory, queue: str, *, days: float, org: str | None
) -> QueueProfile:
    from keepgreen.app.errors import InvalidInput, KeepgreenError

    container = open_container()
    try:
        return container.queue_history.profile(queue, days=days, org_slug=org)
    except InvalidInput as error:
        raise typer.BadParameter(error.message, param_hint="--queue") from None
    except KeepgreenError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        container.close()


def _workload(
    profile: QueueProfile | None,
    *,
    ci_minutes: float | None,
    ci_spread_minutes: float | None,
    runners: int | None,
    bad_rate: float | None,
    flaky_rate: float | None,
    arrivals_per_hour: float | None,
    saturated: bool,
    burst_size: int,
) -> Workload:
    """The parameters given, else the history's figures, else the defaults (W1's)."""
    if profile is not None:
        if ci_minutes is None and profile.ci_minutes is None:
            typer.echo(
                f"error: queue {profile.queue} has no finished test run in the last "
                f"{profile.days:g} days; give --ci-minutes (and the other figures) instead",
                err=True,
            )
            raise typer.Exit(1)
        ci_minutes = ci_minutes if ci_minutes is not None else profile.ci_minutes
        if ci_spread_minutes is None:
            ci_spread_minutes = profile.ci_spread_minutes
        runners = runners if runners is not None else max(profile.config.concurrency, 1)
        bad_rate = bad_rate if bad_rate is not None else min(profile.bad_rate, 0.99)
        flaky_rate = flaky_rate if flaky_rate is not None else min(profile.spurious_rate, 0.99)
        if arrivals_per_hour is None and not saturated and profile.arrivals_per_hour > 0:
            arrivals_per_hour = profile.arrivals_per_hour
    arrivals = "saturated" if arrivals_per_hour is None else f"{arrivals_per_hour:g} PRs/h"
    workload = Workload(
        name="simulated",
        description="",
        ci_minutes=30.0 if ci_minutes is None else ci_minutes,
        ci_spread_minutes=ci_spread_minutes or 0.0,
        runners=8 if runners is None else runners,
        bad_rate=0.05 if bad_rate is None else bad_rate,
        spurious_rate=0.05 if flaky_rate is None else flaky_rate,
        arrivals_per_hour=arrivals_per_hour,
        burst_size=burst_size,
    )
    description = (
        f"T = {workload.ci_minutes:.1f} min (spread {workload.ci_spread_minutes:.1f}), "
        f"{workload.runners} runners, {workload.bad_rate:.1%} bad, "
        f"{workload.spurious_rate:.1%} spurious failures, {arrivals}"
        + (f" in bursts of {burst_size}" if burst_size > 1 and arrivals_per_hour else "")
    )
    return Workload(**{**_fields(workload), "description": description})


def _fields(workload: Workload) -> dict[str, Any]:
    return {name: getattr(workload, name) for name in Workload.__slots__}


def _span(spread: Spread, fmt: str, scale: float = 1.0) -> str:
    low, high = format(spread.low * scale, fmt), format(spread.high * scale, fmt)
    return low if low == high else f"{low}-{high}"


def _recommendation(best: Row | None) -> str:
    limit = f"{MAX_WRONGLY_FAILED:.1%}"
    if best is None:
        return (
            "No candidate kept every bad PR out with at most "
            f"{limit} of good PRs wrongly failed on every seed."
        )
    return (
        f"Recommended: {best.strategy.name} ({best.merged_per_hour.mean:.1f} merged/h, "
        f"{best.runs_per_merged.mean:.2f} CI runs per merged PR; no bad PR landed, "
        f"at most {limit} good PRs wrongly failed)."
    )


def _print(
    workload: Workload,
    profile: QueueProfile | None,
    rows: list[Row],
    best: Row | None,
    *,
    prs: int,
    seeds: int,
) -> None:
    console = Console(width=None if Console().is_terminal else _WIDE)
    if profile is not None:
        console.print(
            f"History of {profile.queue}, last {profile.days:g} days: {profile.runs} runs "
            f"({profile.run_failure_rate:.1%} failed), {profile.merged} merged, "
            f"{profile.failed} failed, {profile.submitted} submitted.",
            markup=False,
            highlight=False,
        )
    console.print(
        f"{workload.description}; {prs} PRs x {seeds} seeds (ranges over seeds).",
        markup=False,
        highlight=False,
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    columns = ["strategy", "merged/h", "CI runs/merged", "good PRs wrongly failed", "bad landed"]
    if not workload.is_saturated:
        columns += ["merge p50 min", "merge p95 min"]
    for column in columns:
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for row in rows:
        cells = [
            row.strategy.name,
            _span(row.merged_per_hour, ".1f"),
            _span(row.runs_per_merged, ".2f"),
            _span(row.wrongly_failed, ".1f", 100) + "%",
            _span(row.bad_landed, ".0f"),
        ]
        if not workload.is_saturated:
            cells += [_span(row.merge_p50, ".0f"), _span(row.merge_p95, ".0f")]
        table.add_row(*cells, style="bold" if row is best else None)
    console.print(table)
    console.print(_recommendation(best), markup=False, highlight=False)


def _spread_json(spread: Spread, digits: int = 4) -> dict[str, float]:
    return {
        "min": round(spread.low, digits),
        "mean": round(spread.mean, digits),
        "max": round(spread.high, digits),
    }


def _json(
    workload: Workload,
    profile: QueueProfile | None,
    rows: list[Row],
    best: Row | None,
    *,
    prs: int,
    seeds: int,
) -> dict[str, Any]:
    history = None
    if profile is not None:
        history = {
            "queue": profile.queue,
            "days": profile.days,
            "runs": profile.runs,
            "ciMinutes": profile.ci_minutes,
            "ciSpreadMinutes": profile.ci_spread_minutes,
            "runFailureRate": profile.run_failure_rate,
            "badRate": profile.bad_rate,
            "spuriousRate": profile.spurious_rate,
            "submitted": profile.submitted,
            "merged": profile.merged,
            "failed": profile.failed,
            "arrivalsPerHour": profile.arrivals_per_hour,
        }
    strategies = []
    for row in rows:
        item: dict[str, Any] = {
            "name": row.strategy.name,
            "mergedPerHour": _spread_json(row.merged_per_hour),
            "ciRunsPerMerged": _spread_json(row.runs_per_merged),
            "goodWronglyFailed": _spread_json(row.wrongly_failed),
            "badLanded": _spread_json(row.bad_landed),
            "safe": row.is_safe,
        }
        if not workload.is_saturated:
            item["mergeMinutesP50"] = _spread_json(row.merge_p50, 1)
            item["mergeMinutesP95"] = _spread_json(row.merge_p95, 1)
        strategies.append(item)
    return {
        "workload": {
            "ciMinutes": workload.ci_minutes,
            "ciSpreadMinutes": workload.ci_spread_minutes,
            "runners": workload.runners,
            "badRate": workload.bad_rate,
            "flakyRate": workload.spurious_rate,
            "arrivalsPerHour": workload.arrivals_per_hour,
            "burstSize": workload.burst_size,
            "prs": prs,
            "seeds": seeds,
        },
        "history": history,
        "strategies": strategies,
        "recommendation": None if best is None else best.strategy.name,
        "summary": _recommendation(best),
    }
