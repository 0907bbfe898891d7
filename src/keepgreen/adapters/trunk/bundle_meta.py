"""A bundle's meta.json: what the upload is about, and which members hold its reports.

meta.json is the uploader's `BundleMeta` (every version since 0.5.29 shares the fields read
here; later ones only add). Read from it:

- `org`, `repo.repo{host,owner,name}`, `repo.repo_head_sha`, `repo.repo_head_branch`,
  `use_uncloned_repo` (in `repo` or beside it), `envs` (the CI variables captured), `variant`;
- `file_sets[]`: `{file_set_type: Junit|Internal, files[]: {path, original_path_rel}}`, the
  reports as the bundle names them (`junit/0`, `internal/0`) and as the CI machine did;
- `internal_bundled_file.path`: the TestReport the uploader made from all of them
  (`internal.bin`), read only when the bundle has no report of its own (an empty run's bundle);
- `failed_tests[].id`, `quarantined_tests[].id`: the uploader's own view, logged beside
  keepgreen's.

Anything else is ignored, so a newer uploader's additions pass. A field of the wrong type is a
400 naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.bundles import BundleMeta
from keepgreen.app.flaky.ingest import ReportFormat
from keepgreen.core.model import RepoRef

META_FILENAME = "meta.json"
LEGACY_INTERNAL_FILENAME = "internal.bin"
# Reports one bundle may carry: as many as a multipart upload's file parts.
MAX_REPORTS = 1000
MAX_PATH_CHARS = 1024
_MAX_FILENAME_CHARS = 255
_MAX_TEST_ID_CHARS = 100
_FILE_SET_FORMATS = {"Junit": ReportFormat.JUNIT, "Internal": ReportFormat.TEST_REPORT}


def invalid_bundle(problem: str) -> InvalidInput:
    return InvalidInput("invalid_bundle", f"the bundle cannot be stored: {problem}")


@dataclass(frozen=True, slots=True)
class BundledReport:
    """A report the bundle carries: its member name, and the name errors give it."""

    path: str
    filename: str
    format: ReportFormat


@dataclass(frozen=True, slots=True)
class BundlePlan:
    """meta.json read: the upload's facts, and which members to keep."""

    meta: BundleMeta
    # The JUnit reports (each must be in the bundle) and the uploader's TestReports given as
    # reports of their own (the uploader leaves some out when it bundles one of them).
    reports: tuple[BundledReport, ...]
    # Read only when `reports` is empty: the TestReport the uploader made of the run.
    fallback: BundledReport | None

    def wanted(self) -> set[str]:
        names = {report.path for report in self.reports}
        if self.fallback is not None and not self.reports:
            names.add(self.fallback.path)
        return names


def read_meta(data: bytes) -> BundlePlan:
    try:
        document = json.loads(data)
    except RecursionError:
        raise invalid_bundle("meta.json is nested too deeply") from None
    except ValueError:  # not UTF-8, or not JSON
        raise invalid_bundle("meta.json is not valid JSON") from None
    top = _object(document, "meta.json")
    repo = _object(top.get("repo"), "repo")
    parts = _object(repo.get("repo"), "repo.repo")
    meta = BundleMeta(
        org=_string(top, "org", required=True),
        repo=RepoRef(
            host=_string(parts, "host", where="repo.repo", required=True),
            owner=_string(parts, "owner", where="repo.repo", required=True),
            name=_string(parts, "name", where="repo.repo", required=True),
        ),
        head_sha=_string(repo, "repo_head_sha", where="repo"),
        head_branch=_string(repo, "repo_head_branch", where="repo"),
        use_uncloned_repo=_flag(repo, "use_uncloned_repo") or _flag(top, "use_uncloned_repo"),
        envs=_envs(top.get("envs")),
        variant=_string(top, "variant"),
        failed_test_ids=_test_ids(top, "failed_tests"),
        quarantined_test_ids=_test_ids(top, "quarantined_tests"),
    )
    reports = _reports(top.get("file_sets"))
    internal = top.get("internal_bundled_file")
    generated = (
        _string(_object(internal, "internal_bundled_file"), "path", where="internal_bundled_file")
        if internal is not None
        else ""
    )
    fallback_path = generated or LEGACY_INTERNAL_FILENAME
    return BundlePlan(
        meta=meta,
        reports=reports,
        fallback=BundledReport(fallback_path, fallback_path, ReportFormat.TEST_REPORT),
    )


def _reports(file_sets: object) -> tuple[BundledReport, ...]:
    if file_sets is None:
        return ()
    if not isinstance(file_sets, list):
        raise invalid_bundle("meta.json: file_sets must be a list")
    found: dict[str, BundledReport] = {}
    for index, file_set in enumerate(file_sets):
        where = f"file_sets[{index}]"
        entry = _object(file_set, where)
        report_format = _FILE_SET_FORMATS.get(_string(entry, "file_set_type", where=where))
        files = entry.get("files", [])
        if report_format is None:
            continue  # a kind of file this version of keepgreen does not know: not a report
        if not isinstance(files, list):
            raise invalid_bundle(f"meta.json: {where}.files must be a list")
        for position, bundled in enumerate(files):
            file_where = f"{where}.files[{position}]"
            described = _object(bundled, file_where)
            path = _string(described, "path", where=file_where, required=True)
            if len(path) > MAX_PATH_CHARS:
                raise invalid_bundle(f"meta.json: {file_where}.path is too long")
            shown = _string(described, "original_path_rel", where=file_where) or path
            found.setdefault(path, BundledReport(path, _filename(shown), report_format))
            if len(found) > MAX_REPORTS:
                raise invalid_bundle(
                    f"it holds more than {MAX_REPORTS} reports; upload them in several runs"
                )
    return tuple(found.values())


def _filename(shown: str) -> str:
    """The report's name in messages: printable, and short enough to read."""
    kept = "".join(ch if ch.isprintable() else "?" for ch in shown)
    return kept[-_MAX_FILENAME_CHARS:]


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise invalid_bundle(f"meta.json: {where} must be a JSON object")
    return value


def _string(value: Mapping[str, Any], key: str, *, where: str = "", required: bool = False) -> str:
    """A string field; "" when absent or null, unless `required`."""
    field = value.get(key)
    name = f"{where}.{key}" if where else key
    if field is None and not required:
        return ""
    if not isinstance(field, str):
        raise invalid_bundle(f"meta.json: {name} must be a string")
    if required and not field:
        raise invalid_bundle(f"meta.json: {name} must not be empty")
    return field


def _flag(value: Mapping[str, Any], key: str) -> bool:
    return value.get(key) is True


def _envs(value: object) -> dict[str, str]:
    """The captured CI variables; anything not a string is not a variable's value."""
    if not isinstance(value, dict):
        return {}
    return {name: text for name, text in value.items() if isinstance(text, str)}


def _test_ids(value: Mapping[str, Any], key: str) -> tuple[str, ...]:
    tests = value.get(key)
    if not isinstance(tests, list):
        return ()
    ids = (test.get("id") for test in tests if isinstance(test, dict))
    return tuple(
        test_id
        for test_id in ids
        if isinstance(test_id, str) and 0 < len(test_id) <= _MAX_TEST_ID_CHARS
    )
