"""Shards of one CI run (one commit, each shard its own part of the suite) uploaded at once to
one repository, beside the same uploads one after another to another: how each upload was
answered, and what was stored, read back through list-failing-tests.
"""

from __future__ import annotations

import time
from typing import Any

from flaky_api import Answer, Api, at_once, gz, sha, status_counts  # bench/ is on sys.path
from pytest_reports import Suite, failing_names, report

MAX_RETRY_ROUNDS = 5
MAX_RETRY_AFTER_SECONDS = 60.0

Names = set[tuple[str, str]]  # (classname, name) of tests


def shard_reports(count: int, tests: int) -> tuple[list[bytes], list[Names]]:
    """`count` shards of `tests` tests each: their reports, and the tests failing in each."""
    suite = Suite(f"shards{count}", count * tests)
    parts = [range(k * tests, (k + 1) * tests) for k in range(count)]
    reports = [gz(report(suite, part, run_seed=1)) for part in parts]
    return reports, [failing_names(suite, part, run_seed=1) for part in parts]


def one_after_another(api: Api, repo: str, reports: list[bytes], commit: str) -> float:
    started = time.perf_counter()
    for data in reports:
        api.upload(repo, [data], commit=commit)
    return time.perf_counter() - started


def measure_shards(
    api: Api, count: int, tests: int, *, retry: bool
) -> tuple[str, str, float, dict[str, Any]]:
    """The row of `count` shards: keepgreen's cell, the reference's, their ratio (wall time at
    once over one after another) and the figures. With `retry`, refused shards are sent again
    as a client would, and then checked to be stored once.
    """
    reports, failing = shard_reports(count, tests)
    commit = sha("shards", count)
    expected: Names = set().union(*failing)
    alone = one_after_another(api, f"seq{count}", reports, commit)
    alone_stored = len(api.all_failing(f"seq{count}"))
    repo = f"par{count}"

    def send(data: bytes) -> Answer:
        return api.upload(repo, [data], commit=commit, check=False)

    wall, answers = at_once(send, reports)
    codes = status_counts(answers)
    without_retry_after = sum(1 for a in answers if a.status == 503 and not a.retry_after)
    accepted = {k for k, answer in enumerate(answers) if answer.status == 200}
    stored = api.all_failing(repo)
    # What the 200s say was stored is there, and nothing of a refused upload is.
    exact = stored == set().union(*(failing[k] for k in accepted)) if accepted else not stored
    cell = (
        f"at once {wall:.2f} s; "
        + ", ".join(f"{code}: {codes[code]}" for code in ("200", "503", "500", "other"))
        + f"; stored {len(stored):,}/{len(expected):,} failing tests"
        + ("" if exact else " (NOT what the 200s say)")
    )
    if without_retry_after:
        cell += f"; {without_retry_after} 503 without Retry-After"
    figures: dict[str, Any] = {
        "seconds": wall, "codes": dict(codes), "stored": len(stored), "expected": len(expected),
        "stored_matches_answers": exact, "503_without_retry_after": without_retry_after,
        "one_after_another_seconds": alone, "one_after_another_stored": alone_stored,
    }  # fmt: skip
    refusals = [str(answer.body)[:200] for answer in answers if answer.status != 200]
    if refusals:
        figures["first_refusal"] = refusals[0]
    refused = [k for k in range(count) if k not in accepted]
    if retry and refused:
        rounds, duplicated = send_again(api, repo, reports, answers, refused, commit)
        stored = api.all_failing(repo)
        cell += f"; after {rounds} retry rounds: stored {len(stored):,}/{len(expected):,}"
        if duplicated:
            cell += f", {duplicated} stored twice"
        figures |= {
            "retry_rounds": rounds,
            "stored_after_retries": len(stored),
            "duplicated": duplicated,
        }
    reference = f"one after another {alone:.2f} s; stored {alone_stored:,}/{len(expected):,}"
    return cell, reference, wall / alone, figures


def retry_after_seconds(value: str | None) -> float:
    """Retry-After in seconds; a second when absent or given as an HTTP date."""
    try:
        return float(value) if value else 1.0
    except ValueError:
        return 1.0


def send_again(
    api: Api, repo: str, reports: list[bytes], answers: list[Answer], refused: list[int],
    commit: str,
) -> tuple[int, int]:  # fmt: skip
    """Sends the refused shards again, together, after the longest Retry-After among them;
    the rounds taken, and how many retried shards have their failures stored twice.
    """
    rounds, pending, last = 0, refused, {k: answers[k] for k in refused}
    while pending and rounds < MAX_RETRY_ROUNDS:
        rounds += 1
        wait = max(retry_after_seconds(last[k].retry_after) for k in pending)
        time.sleep(min(MAX_RETRY_AFTER_SECONDS, wait))
        _wall, again = at_once(
            lambda data: api.upload(repo, [data], commit=commit, check=False),
            [reports[k] for k in pending],
        )
        last |= dict(zip(pending, again, strict=True))
        pending = [k for k in pending if last[k].status != 200]
    duplicated = 0
    for k in refused:
        if last[k].status == 200 and last[k].body["failures"]:
            test_id = last[k].body["failures"][0]["test_id"]
            _seconds, details = api.flaky("get-test-details", repo, test_id=test_id)
            failures = details["test"].get("most_common_failures") or []
            duplicated += sum(failure["occurrence_count"] for failure in failures) > 1
    return rounds, duplicated
