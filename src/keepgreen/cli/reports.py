"""JUnit reports to upload (found, compressed, batched) and what the answers add up to."""

from __future__ import annotations

import glob
import gzip
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keepgreen.cli.api import ClientError

MIB = 1024 * 1024
# Compressed report bytes per request: under the server's 20 MiB body limit with room to spare
# for the metadata (CODEOWNERS can be large) and the multipart framing.
MAX_BATCH_BYTES = 16 * MIB
# File parts per request: the server reads at most 1000 (MAX_REPORT_FILES of its upload route).
MAX_BATCH_FILES = 1000
# The counts of an upload summary, added up over requests and shown in its line.
COUNTS = ("files", "tests", "results", "passed", "failed", "skipped")
_GZIP_MAGIC = b"\x1f\x8b"
_GLOB_CHARACTERS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class Report:
    """One report to send: its path as the user gave it (or the glob found it), and its bytes
    gzip-compressed."""

    name: str
    gzipped: bytes


@dataclass(frozen=True, slots=True)
class Expansion:
    """The report files the paths and globs named, and the ones that named no file."""

    files: list[str]
    unmatched: list[str]


# -- what to send ---------------------------------------------------------------------------------


def expand_reports(patterns: Sequence[str]) -> Expansion:
    """Expand globs ourselves (quoted ones reach us whole; `**` recurses); plain paths stay as
    given. A path that exists is taken literally even if it holds glob characters. Each file is
    listed once, in the order first named; a pattern naming no regular file is unmatched."""
    files: dict[str, None] = {}
    unmatched: list[str] = []
    for pattern in patterns:
        if Path(pattern).is_file():
            found = [pattern]
        elif _GLOB_CHARACTERS.isdisjoint(pattern):
            found = []
        else:
            # glob.glob, not Path.glob: a user's pattern may be absolute, which Path.glob refuses.
            matches = sorted(glob.glob(pattern, recursive=True))  # noqa: PTH207
            found = [path for path in matches if Path(path).is_file()]
        if not found:
            unmatched.append(pattern)
        files.update(dict.fromkeys(found))
    return Expansion(list(files), unmatched)


def unmatched_message(unmatched: Sequence[str]) -> str:
    """Names every path or glob that found no report file."""
    listed = ", ".join(repr(pattern) for pattern in unmatched)
    return f"no report file matches {listed}"


def compress(name: str) -> Report:
    """The report at `name`, gzip-compressed (a report already gzip-compressed is kept as is)."""
    try:
        data = Path(name).read_bytes()
    except OSError as error:
        raise ClientError(f"cannot read {name}: {error.strerror or error}") from error
    if data.startswith(_GZIP_MAGIC):
        return Report(name, data)
    # mtime=0 makes the bytes depend on the content alone.
    # Level 6, zlib's default: 2.4x faster than 9 for 5% more bytes on JUnit XML.
    return Report(name, gzip.compress(data, compresslevel=6, mtime=0))


def plan_batches(
    reports: Sequence[Report], *, max_bytes: int, max_files: int = MAX_BATCH_FILES
) -> list[list[Report]]:
    """Consecutive runs of reports, each at most `max_bytes` compressed and `max_files` long,
    in the order given (retries written to later files stay after the attempts they follow)."""
    batches: list[list[Report]] = []
    size = 0
    for report in reports:
        if len(report.gzipped) > max_bytes:
            raise ClientError(
                f"{report.name} is {_size(len(report.gzipped))} compressed, over the "
                f"{_size(max_bytes)} one upload request may carry; split it into smaller reports"
            )
        if not batches or size + len(report.gzipped) > max_bytes or len(batches[-1]) >= max_files:
            batches.append([])
            size = 0
        batches[-1].append(report)
        size += len(report.gzipped)
    return batches


def _size(count: int) -> str:
    return f"{count / MIB:.1f} MiB" if count >= MIB else f"{count / 1024:.0f} KiB"


# -- what the answers add up to -------------------------------------------------------------------


def merge_summaries(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary for several requests: counts added up, a failure listed once (quarantined
    only if every request said so), `upload_ids` naming every request's upload.

    A single summary is returned as it came. Counts are per request: a test whose reports went
    in two requests is counted in each, and one that failed in the first and passed in the
    second still shows as failed (the safe side for the exit code).
    """
    if len(summaries) == 1:
        return dict(summaries[0])
    failures: dict[object, dict[str, Any]] = {}
    for summary in summaries:
        for failure in failures_of(summary):
            key = failure.get("test_id")
            if not isinstance(key, str):
                key = object()  # no id to match on: it stays on its own
            if key in failures:
                both = failures[key].get("quarantined") is True and is_quarantined(failure)
                failures[key]["quarantined"] = both
            else:
                failures[key] = dict(failure)
    return {
        "upload_id": summaries[0].get("upload_id"),
        "upload_ids": [summary.get("upload_id") for summary in summaries],
        **{name: sum(count_of(summary, name) for summary in summaries) for name in COUNTS},
        "excluded_as_infrastructure_failure": any(
            summary.get("excluded_as_infrastructure_failure") is True for summary in summaries
        ),
        "quarantine_enabled": all(
            summary.get("quarantine_enabled") is True for summary in summaries
        ),
        "failures": list(failures.values()),
    }


def failures_of(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The summary's failures that are JSON objects (anything else is ignored)."""
    return [failure for failure in summary.get("failures") or [] if isinstance(failure, Mapping)]


def is_quarantined(failure: Mapping[str, Any]) -> bool:
    return failure.get("quarantined") is True


def count_of(summary: Mapping[str, Any], name: str) -> int:
    """The summary's count `name` (one of COUNTS); 0 when it is missing or not a whole number."""
    value = summary.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def decide_exit_code(
    command_code: int, summary: Mapping[str, Any] | None, *, all_reports_found: bool
) -> int:
    """The exit code of `keepgreen test` for a command that exited `command_code`.

    0 stays 0. A failure becomes 0 only when the upload worked (`summary` is not None), every
    report pattern found its files (a missing report may be a build error nothing quarantines),
    quarantine is on, and there is at least one failed test and every one is quarantined.
    """
    if command_code == 0 or summary is None or not all_reports_found:
        return command_code
    failures = failures_of(summary)
    if summary.get("quarantine_enabled") is not True or not failures:
        return command_code
    return 0 if all(is_quarantined(failure) for failure in failures) else command_code
