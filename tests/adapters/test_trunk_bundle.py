"""Reading what Trunk's uploader sends: its bundles (tar + zstd), the TestReport in their
internal.bin and its telemetry, built here the way the uploader builds them, and hostile ones.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
from typing import Any

import pytest
import zstandard

from keepgreen.adapters.trunk import parse_test_report, read_bundle, read_uploader_report
from keepgreen.adapters.trunk.bundle import MAX_MEMBERS
from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.bundles import Bundle, UploaderReport
from keepgreen.app.flaky.ingest import ReportFormat, ResultLimitReached
from keepgreen.core.flaky.results import Outcome
from keepgreen.core.model import RepoRef
from tests.support.trunk_uploader import (
    GITHUB_PR_ENVS,
    SHA,
    BundleParts,
    Member,
    Run,
    bytes_field,
    internal_bin,
    junit_bundle,
    meta_json,
    meta_test,
    tar_bytes,
    text_field,
    upload_metrics,
    varint_field,
    zstd,
    zstd_bomb,
)
from tests.support.wire import REPO

XML = b'<testsuite name="s"><testcase name="t" classname="c" file="f.py"/></testsuite>'
META = json.dumps(meta_json(junit=["a.xml"])).encode()


def read(data: bytes) -> Bundle:
    return read_bundle(io.BytesIO(data))


def refusal(data: bytes) -> str:
    with pytest.raises(InvalidInput) as refused:
        read(data)
    assert refused.value.code == "invalid_bundle"
    return refused.value.message


# -- what a bundle says ----------------------------------------------------------------------


def test_a_bundle_of_junit_reports_is_its_meta_reports_and_codeowners() -> None:
    failed = meta_test("t", "s", classname="c", file="f.py", quarantined=True)
    parts = junit_bundle(
        [("reports/a.xml", XML), ("reports/b.xml", XML)],
        codeowners="* @acme/team\n",
        variant="linux",
        failed_tests=[failed],
        quarantined_tests=[failed],
    )
    bundle = read(parts.bundle())
    meta = bundle.meta
    assert (meta.org, meta.repo, meta.head_sha) == ("acme", REPO, SHA)
    assert (meta.head_branch, meta.use_uncloned_repo) == ("refs/remotes/pull/12/merge", False)
    assert meta.envs == GITHUB_PR_ENVS
    assert meta.variant == "linux"
    assert meta.failed_test_ids == meta.quarantined_test_ids == (failed["id"],)
    # Named as on the CI machine; gzipped as they were read; internal.bin not read at all.
    assert [report.filename for report in bundle.reports] == ["reports/a.xml", "reports/b.xml"]
    assert {report.format for report in bundle.reports} == {ReportFormat.JUNIT}
    assert [gzip.decompress(report.data) for report in bundle.reports] == [XML, XML]
    assert bundle.codeowners == "* @acme/team\n"


def test_a_report_gzipped_already_is_kept_as_it_is() -> None:
    packed = gzip.compress(XML)
    (report,) = read(junit_bundle([("a.xml", packed)]).bundle()).reports
    assert report.data == packed


def test_results_only_in_an_internal_file_set_are_that_test_report() -> None:
    """RSpec's plugin: its .bin is the one report, and the uploader bundles it as internal/0."""
    report = internal_bin(Run("turns"))
    parts = BundleParts(
        meta=meta_json(internal_files=["tmp/rspec.bin"], internal_bundled_file="internal/0"),
        internal_bin=report,
    )
    (bundled,) = read(parts.bundle()).reports
    assert (bundled.filename, bundled.format, bundled.data) == (
        "tmp/rspec.bin",
        ReportFormat.TEST_REPORT,
        report,
    )


def test_a_run_without_reports_is_the_uploaders_own_empty_test_report() -> None:
    """`--allow-empty-test-results`: no file set, only the internal.bin made of nothing."""
    parts = BundleParts(meta=meta_json(), internal_bin=internal_bin())
    (bundled,) = read(parts.bundle()).reports
    assert (bundled.filename, bundled.format) == ("internal.bin", ReportFormat.TEST_REPORT)
    assert parse_test_report(bundled.filename, bundled.data, max_results=10) == []


def test_an_old_uploaders_meta_is_read_too() -> None:
    """0.5.29's fields only: no variant, no original_path_rel, no internal_bundled_file."""
    meta: dict[str, Any] = meta_json(junit=["a.xml"], internal_bundled_file=None)
    for newer in ("variant", "failed_tests", "bundle_upload_id_v2", "internal_bundled_file"):
        del meta[newer]
    del meta["file_sets"][0]["files"][0]["original_path_rel"]
    bundle = read(BundleParts(meta=meta, reports={"junit/0": XML}).bundle())
    assert bundle.meta.variant == ""
    assert [report.filename for report in bundle.reports] == ["junit/0"]


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ([Member("meta.json", META), Member("../x", XML)], "outside the bundle"),
        ([Member("meta.json", META), Member("junit/../../x", XML)], "outside the bundle"),
        ([Member("meta.json", META), Member("/junit/0", XML)], "outside the bundle"),
        (
            [Member("meta.json", META), Member("junit/0", kind=tarfile.LNKTYPE, link="meta.json")],
            "plain files only",
        ),
        (
            [Member("meta.json", META), Member("junit/0", kind=tarfile.SYMTYPE, link="/etc")],
            "plain files only",
        ),
        ([Member("meta.json", META), Member("dev", kind=tarfile.CHRTYPE)], "plain files only"),
        ([Member("meta.json", META), Member("pipe", kind=tarfile.FIFOTYPE)], "plain files only"),
        ([Member("meta.json", META), Member("junit/0", XML), Member("junit/0", XML)], "twice"),
        ([Member("meta.json", META), Member("junit/0\x1b[2J", XML)], "no usable name"),
        ([Member("junit/0", XML), Member("meta.json", META)], "first member must be meta.json"),
        ([Member("meta.json", META)], "does not hold"),
        ([], "empty"),
    ],
    # Named by the problem alone: META holds fresh uuids, and every xdist worker must collect
    # the same ids.
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_what_the_uploader_never_writes_refuses_the_bundle(
    members: list[Member], problem: str
) -> None:
    assert problem in refusal(zstd(tar_bytes(members)))


@pytest.mark.parametrize(
    ("meta", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[]", "must be a JSON object"),
        (b'{"org": "acme"}', "repo must be a JSON object"),
        (json.dumps({**meta_json(), "org": 5}).encode(), "org must be a string"),
        (json.dumps({**meta_json(), "file_sets": {}}).encode(), "file_sets must be a list"),
        (
            json.dumps({**meta_json(), "repo": {"repo": {"host": "h", "owner": "o"}}}).encode(),
            "repo.repo.name",
        ),
    ],
    ids=["not json", "not utf-8", "too deep", "a list", "no repo", "org", "file_sets", "name"],
)
def test_a_bad_meta_json_is_refused_naming_the_field(meta: bytes, problem: str) -> None:
    assert problem in refusal(zstd(tar_bytes([Member("meta.json", meta)])))


def test_more_than_a_thousand_reports_is_refused() -> None:
    meta = meta_json(junit=[f"r{i}.xml" for i in range(1001)])
    assert "more than 1000 reports" in refusal(
        zstd(tar_bytes([Member("meta.json", json.dumps(meta).encode())]))
    )


def test_too_many_members_are_refused() -> None:
    members = [Member("meta.json", META), Member("junit/0", XML)]
    members += [Member(f"extra/{i}") for i in range(MAX_MEMBERS)]
    assert f"more than {MAX_MEMBERS} members" in refusal(zstd(tar_bytes(members)))


def test_a_zstd_bomb_is_refused_after_256_mib_in_well_under_a_second() -> None:
    bomb = zstd_bomb(meta=META, member="bazel_bep.json", size=2 * 1024**3)
    assert len(bomb) < 200 * 1024
    started = time.perf_counter()
    assert "unpacks to more than 256 MiB" in refusal(bomb)
    assert time.perf_counter() - started < 2.0


def test_a_report_over_the_report_limit_is_refused_at_its_header() -> None:
    bomb = zstd_bomb(meta=META, member="junit/0", size=60 * 1024**2)
    assert "larger than 50 MiB" in refusal(bomb)


def test_a_codeowners_over_1_mib_is_refused() -> None:
    members = [
        Member("meta.json", META),
        Member("junit/0", XML),
        Member("CODEOWNERS", b"#" * (1024**2 + 1)),
    ]
    assert "larger than 1 MiB" in refusal(zstd(tar_bytes(members)))


def test_a_frame_asking_for_a_huge_window_is_refused() -> None:
    """A frame of unknown size with a 1 GiB window would make the decoder allocate that much:
    refused before decoding.
    """
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=30)
    streaming = zstandard.ZstdCompressor(compression_params=params).compressobj()
    data = streaming.compress(tar_bytes([Member("meta.json", META)])) + streaming.flush()
    assert zstandard.get_frame_parameters(data).window_size == 1024**3
    assert "too much memory" in refusal(data)


@pytest.mark.parametrize(
    "body",
    [b"", b"not compressed at all", zstd(tar_bytes([Member("meta.json", META)]))[:-20]],
    ids=["empty", "plain", "truncated"],
)
def test_a_body_that_is_no_bundle_is_refused(body: bytes) -> None:
    refusal(body)


# -- internal.bin ----------------------------------------------------------------------------


def test_runs_are_read_with_their_identity_outcome_attempt_and_evidence() -> None:
    report = internal_bin(
        Run(
            "turns",
            status="failure",
            attempt_index=0,
            message="expected true",
            text="trace\n  at 3",
        ),
        Run("turns", status="success", attempt_index=1, seconds=1.5),
        Run("skips", status="skipped"),
        Run("vague", status="unspecified"),
        Run("custom", custom_id="trunk:spec/widgets_spec.rb[1:2]"),
    )
    turns, retried, skips, vague, custom = parse_test_report("internal.bin", report, max_results=10)
    assert (turns.name, turns.classname, turns.parent, turns.file) == (
        "turns",
        "spec.widgets_spec",
        "widgets spec",
        "./spec/widgets_spec.rb",
    )
    assert (turns.outcome, turns.attempt, turns.message) == (Outcome.FAILED, 0, "expected true")
    assert turns.detail == "trace\n  at 3"
    assert (retried.outcome, retried.attempt, retried.duration_ms) == (Outcome.PASSED, 1, 1500)
    assert turns.custom_id is None
    assert custom.custom_id == "trunk:spec/widgets_spec.rb[1:2]"
    assert (skips.outcome, vague.outcome) == (Outcome.SKIPPED, Outcome.SKIPPED)
    assert turns.timestamp is not None
    assert turns.timestamp.timestamp() == 1_790_000_000


@pytest.mark.parametrize(
    ("run", "attempt"),
    [
        (Run("t", attempt_index=2, attempt_number=0, bazel_attempt=5), 2),
        (Run("t", attempt_index=0, attempt_number=3), 0),  # set to 0 is still set
        (Run("t", bazel_attempt=3, attempt_number=1), 3),
        (Run("t", attempt_number=4), 4),
        (Run("t"), 0),
        (Run("t", attempt_index=-1), 0),
    ],
)
def test_the_attempt_is_attempt_index_else_bazels_else_the_deprecated_number(
    run: Run, attempt: int
) -> None:
    (result,) = parse_test_report("internal.bin", internal_bin(run), max_results=1)
    assert result.attempt == attempt


def test_a_quarantined_failure_is_read_as_the_failure_it_is() -> None:
    run = Run("t", status="failure", is_quarantined=True, message="flaked")
    (result,) = parse_test_report("internal.bin", internal_bin(run), max_results=1)
    assert result.outcome is Outcome.FAILED


def test_the_deprecated_status_output_message_is_the_evidence_of_older_writers() -> None:
    legacy = text_field(2, "t") + varint_field(7, 2) + text_field(11, "\n  Boom: no\n  at x:1\n")
    report = bytes_field(1, bytes_field(1, legacy))
    (result,) = parse_test_report("internal.bin", report, max_results=1)
    assert (result.message, result.detail) == ("Boom: no", "  Boom: no\n  at x:1")


def test_a_lone_test_result_is_read_as_trunks_reader_reads_it() -> None:
    """Older writers sent one TestResult; Trunk's reader falls back to it, and so does this."""
    lone = bytes_field(1, Run("a").encode()) + bytes_field(1, Run("b", status="failure").encode())
    results = parse_test_report("internal.bin", lone, max_results=10)
    assert [(result.name, result.outcome) for result in results] == [
        ("a", Outcome.PASSED),
        ("b", Outcome.FAILED),
    ]


@pytest.mark.parametrize(
    "data",
    [b"\xff\xff\xff\xff", bytes_field(1, bytes_field(1, b"\x12\x02\xff\xfe")), b"\x0a\x05ab"],
    ids=["garbage", "a name not UTF-8", "truncated"],
)
def test_what_is_no_test_report_is_a_400_naming_the_file(data: bytes) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_test_report("tmp/rspec.bin", data, max_results=10)
    assert "tmp/rspec.bin" in refused.value.message


def test_more_runs_than_the_budget_stop_the_reading() -> None:
    with pytest.raises(ResultLimitReached):
        parse_test_report("internal.bin", internal_bin(Run("a"), Run("b"), Run("c")), max_results=2)


# -- telemetry -------------------------------------------------------------------------------


def test_the_uploaders_telemetry_says_whether_its_upload_failed_and_why() -> None:
    assert read_uploader_report(upload_metrics(failed=False)) == UploaderReport(
        failed=False, reason=""
    )
    failed = upload_metrics(failed=True, reason="unknown_put_bundle_to_s3")
    assert read_uploader_report(failed) == UploaderReport(
        failed=True, reason="unknown_put_bundle_to_s3"
    )
    assert read_uploader_report(b"") == UploaderReport(failed=False, reason="")
    assert read_uploader_report(b"\xff\xff\xff") is None


def test_the_repo_in_meta_is_read_as_the_uploader_parsed_it() -> None:
    other = RepoRef("gitlab.example.com", "team", "tool")
    assert read(junit_bundle([("a.xml", XML)], repo=other).bundle()).meta.repo == other
