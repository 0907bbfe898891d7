"""Rich views of API answers: a queue's configuration and pull requests, one submitted PR.

Views read the wire bodies (camelCase JSON) with `.get`, so an answer from a newer or older
server that lacks a field shows a dash instead of failing. Values that come from users (titles,
authors, status contexts) are wrapped in `Text`, never parsed as Rich markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import typer
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

MISSING = "-"
_SHORT_SHA = 12

# How each PR state is coloured: waiting is yellow, testing blue, good news green, bad news red.
_STATE_STYLES = {
    "not_ready": "dim",
    "pending": "yellow",
    "testing": "blue",
    "tests_passed": "green",
    "pending_failure": "magenta",
    "merged": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    "running": "green",
    "paused": "yellow",
    "draining": "magenta",
    "switching_modes": "magenta",
}
_TERMINAL = frozenset({"merged", "failed", "cancelled"})


def console() -> Console:
    """A console on stdout; no guessing colours for numbers, paths or URLs in our output."""
    return Console(highlight=False)


def done(data: Mapping[str, Any], message: str, *, json_output: bool) -> None:
    """A write verb's answer: the raw JSON with --json, else one line saying what happened."""
    if json_output:
        print_json(data)
    else:
        console().print(message, markup=False)


def print_json(data: Mapping[str, Any]) -> None:
    """Print an API answer as indented JSON, plain text whatever the terminal."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def queue_view(queue: Mapping[str, Any], *, title: str) -> RenderableType:
    """A queue's configuration, what it waits on and its incidents, then its enqueued pull
    requests in queue order.
    """
    head: list[RenderableType] = [config_view(queue, title=title)]
    chosen = queue.get("chosen")
    if isinstance(chosen, Mapping):
        head.append(
            Text(
                f"Runs by now: batches of {chosen.get('batchSize', MISSING)}, "
                f"up to {chosen.get('depth', MISSING)} runs in flight, testing timeout "
                f"{chosen.get('testingTimeoutMinutes', MISSING)} min ({chosen.get('why', MISSING)})"
            )
        )
    if queue.get("stateReason") == "stalled":
        head.append(
            Text.assemble(
                ("Stalled since ", "bold red"),
                (str(queue.get("stalledSince", MISSING)), "bold red"),
                (": no test run started and no PR merged for ", "bold red"),
                (f"{queue.get('stallMinutes', MISSING)} minutes or more", "bold red"),
            )
        )
    if queue.get("waitingOn"):
        head.append(Text.assemble(("Waiting on: ", "bold yellow"), str(queue["waitingOn"])))
    if queue.get("incidents"):
        head.append(incidents_view(queue["incidents"]))
    entries: list[Mapping[str, Any]] = list(queue.get("enqueuedPullRequests") or [])
    if not entries:
        return Group(*head, Text("No pull requests in the queue."))
    table = Table(title="Enqueued pull requests", title_justify="left", title_style="bold")
    table.add_column("#", justify="right")
    table.add_column("PR", justify="right")
    table.add_column("state")
    table.add_column("priority")
    table.add_column("title", overflow="fold")
    table.add_column("author")
    table.add_column("sha")
    for position, entry in enumerate(entries, start=1):
        table.add_row(
            str(position),
            Text(f"#{entry.get('prNumber', MISSING)}"),
            state_text(entry.get("state")),
            Text(priority_text(entry)),
            Text(str(entry.get("prTitle", MISSING))),
            Text(str(entry.get("prAuthor", MISSING))),
            Text(str(entry.get("prSha", MISSING))[:_SHORT_SHA]),
        )
    return Group(*head, table)


def incidents_view(incidents: list[Mapping[str, Any]]) -> RenderableType:
    """Git server incidents, newest first, one paragraph each: when, what kind, how often,
    whether it lasts, and what happened (a sentence that folds at any width).
    """
    lines: list[RenderableType] = [Text("Git server incidents", style="bold")]
    for incident in incidents:
        number = incident.get("prNumber")
        ended = incident.get("endedAt")
        line = Text()
        line.append(str(incident.get("startedAt", MISSING)))
        line.append("  ")
        line.append(str(incident.get("kind", MISSING)), style="bold")
        if number is not None:
            line.append(f"  #{number}")
        line.append(f"  {incident.get('failures', MISSING)} failure(s)  ")
        if ended:
            line.append(f"ended {ended}", style="dim")
        else:
            line.append("ongoing", style="bold yellow")
        lines.append(line)
        lines.append(Text("  " + str(incident.get("message", MISSING))))
    return Group(*lines)


def config_view(config: Mapping[str, Any], *, title: str) -> RenderableType:
    """A queue's configuration as label/value rows under `title`."""
    table = Table(show_header=False, box=None)
    table.add_column("setting", style="bold")
    table.add_column("value", overflow="fold")
    batching = "off"
    if config.get("batch"):
        batching = (
            f"on (min size {value_of(config, 'batchingMinSize')}, "
            f"max wait {value_of(config, 'batchingMaxWaitTimeMinutes')} min)"
        )
    statuses = config.get("requiredStatuses") or []
    rows: list[tuple[str, str | Text]] = [
        ("state", state_text(config.get("state"))),
        ("mode", value_of(config, "mode")),
        ("concurrency", value_of(config, "concurrency")),
        ("bisection concurrency", value_of(config, "bisectionConcurrency")),
        ("testing timeout", f"{value_of(config, 'testingTimeoutMinutes')} min"),
        ("pending failure depth", value_of(config, "pendingFailureDepth")),
        ("optimistic merge", switch(config.get("canOptimisticallyMerge"))),
        ("batching", batching),
        ("direct merge", value_of(config, "directMergeMode")),
        ("merge method", value_of(config, "mergeMethod")),
        ("optimization", value_of(config, "optimizationMode")),
        ("required statuses", Text(", ".join(map(str, statuses)) if statuses else "(none)")),
        ("check start timeout", _minutes_or_off(config.get("checkStartTimeoutMinutes"))),
        (
            "testing timeout follows",
            "the queue's p95 CI time" if config.get("adaptiveTestingTimeout") else "the setting",
        ),
        ("stall report after", _minutes_or_off(config.get("stallMinutes"))),
        ("skipped checks", "count as passed" if config.get("acceptSkippedChecks") else "refused"),
        ("max retries", value_of(config, "maxRetries")),
        ("flaky-only failures", value_of(config, "flakyFailures")),
        (
            "failed batches",
            "isolated beside the queue" if config.get("bisectBesideQueue") else "bisected in line",
        ),
        ("adaptive batch size", switch(config.get("adaptiveBatchSize"))),
        ("adaptive depth", switch(config.get("adaptiveDepth"))),
    ]
    _add_rows(table, rows)
    return _titled(title, table)


def _minutes_or_off(value: object) -> str:
    if value is None:
        return MISSING
    return "off" if value == 0 else f"{value} min"


def pull_request_view(pr: Mapping[str, Any], *, title: str) -> RenderableType:
    """One submitted pull request under `title`: state, priority, readiness, head, author."""
    table = Table(show_header=False, box=None)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    readiness: Mapping[str, Any] = pr.get("readiness") or {}
    state = state_text(pr.get("state"))
    if pr.get("isCurrentlySubmittedToQueue") is False and pr.get("state") not in _TERMINAL:
        state.append(" (removed from the queue)", style="dim")
    rows: list[tuple[str, str | Text]] = [
        ("title", Text(str(pr.get("prTitle", MISSING)))),
        ("author", Text(str(pr.get("prAuthor", MISSING)))),
        ("state", state),
        ("since", value_of(pr, "stateChangedAt")),
        ("priority", priority_text(pr)),
        ("batching", "tested alone (no batch)" if pr.get("noBatch") else "may be batched"),
        ("sha", value_of(pr, "prSha")),
        ("base branch", Text(str(pr.get("prBaseBranch", MISSING)))),
        ("mergeability", value_of(readiness, "gitHubMergeability")),
        ("base branch matches", switch(readiness.get("doesBaseBranchMatch"), "yes", "no")),
        ("impacted targets", _targets(readiness)),
    ]
    if pr.get("verifiedByTestRun"):
        rows.append(("verified by test run", value_of(pr, "verifiedByTestRun")))
    _add_rows(table, rows)
    parts: list[RenderableType] = [_titled(title, table)]
    explanation = pr.get("explanation")
    if isinstance(explanation, Mapping):
        parts.append(explanation_view(explanation))
    if pr.get("incidents"):
        parts.append(incidents_view(pr["incidents"]))
    return Group(*parts) if len(parts) > 1 else parts[0]


def explanation_view(explanation: Mapping[str, Any]) -> RenderableType:
    """What the PR waits on, or why it left: a line, then its details (and the CI link)."""
    lines: list[RenderableType] = [Text(str(explanation.get("title", MISSING)), style="bold")]
    lines.extend(Text(line) for line in str(explanation.get("summary", "")).splitlines())
    if explanation.get("detailsUrl"):
        lines.append(Text(f"CI: {explanation['detailsUrl']}"))
    if explanation.get("reasonCode"):
        lines.append(Text(f"reason code: {explanation['reasonCode']}"))
    evidence = explanation.get("evidence")
    if isinstance(evidence, Mapping):
        lines.extend(Text(line) for line in evidence_lines(evidence))
    return Group(*lines)


def evidence_lines(evidence: Mapping[str, Any]) -> list[str]:
    """The evidence of an explanation, a line each: the run that tests or decided the PR, its
    failed statuses with their links, the run that passed, and a bisection's culprits.
    """
    lines = []
    run = evidence.get("testRun")
    if isinstance(run, Mapping):
        lines += ["evidence:", *_run_lines("run", run)]
    for check in evidence.get("failedStatuses") or ():
        state = check.get("state") or "never reported"
        said = f" ({check['description']})" if check.get("description") else ""
        link = f" {check['targetUrl']}" if check.get("targetUrl") else ""
        lines.append(f"  failed: {check.get('context', MISSING)} {state}{said}{link}")
    passed = evidence.get("passedRun")
    if isinstance(passed, Mapping):
        lines += _run_lines("passed in run", passed)
    bisection = evidence.get("bisection")
    if isinstance(bisection, Mapping):
        culprits = ", ".join(f"#{n}" for n in bisection.get("culprits") or ()) or "none yet"
        lines.append(f"  failed batch run {bisection.get('batchRun', MISSING)}")
        lines.append(f"    bisection found: {culprits}")
        if bisection.get("isolatingRun"):
            lines.append(f"    isolated by run {bisection['isolatingRun']}")
    return lines


def _run_lines(label: str, run: Mapping[str, Any]) -> list[str]:
    # Two short lines: a run id is 36 characters, and a wrapped line is hard to copy.
    sha = str(run.get("sha") or MISSING)[:_SHORT_SHA]
    tested = ", ".join(f"#{n}" for n in run.get("testedPrs") or ())
    kind, status = run.get("kind", MISSING), run.get("status", MISSING)
    return [
        f"  {label} {run.get('id', MISSING)}: {kind}, {status}",
        f"    commit {sha}" + (f", testing {tested}" if tested else ""),
    ]


def _titled(title: str, body: RenderableType) -> RenderableType:
    # A title above the table, not Rich's table title: that one wraps to the table's width.
    return Group(Text(title, style="bold"), body)


def _add_rows(table: Table, rows: list[tuple[str, str | Text]]) -> None:
    # Plain strings become Text too: a value from the server is shown, never read as markup.
    for label, value in rows:
        table.add_row(label, value if isinstance(value, Text) else Text(value))


def state_text(state: object) -> Text:
    """A PR or queue state, coloured by what it means."""
    value = MISSING if state is None else str(state)
    return Text(value, style=_STATE_STYLES.get(value, ""))


def priority_text(entry: Mapping[str, Any]) -> str:
    """`high (10)`; skip-the-line PRs say so."""
    text = f"{value_of(entry, 'priorityName')} ({value_of(entry, 'priorityValue')})"
    return f"{text}, skips the line" if entry.get("skipTheLine") else text


def _targets(readiness: Mapping[str, Any]) -> str:
    if not readiness.get("requiresImpactedTargets"):
        return "not required"
    return "uploaded" if readiness.get("hasImpactedTargets") else "required, not uploaded yet"


def switch(value: object, on: str = "on", off: str = "off") -> str:
    if value is None:
        return MISSING
    return on if value else off


def value_of(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return MISSING if value is None or value == "" else str(value)
