"""How one report becomes results: identity fields, outcomes, attempts, times, and plain bad input.

Reports here are small and written inline; each tool's real dialect is in test_dialects.py.
"""

from __future__ import annotations

import gzip
import pickle
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keepgreen.adapters.junit import MAX_REPORT_BYTES, ReportError, parse_report
from keepgreen.core.flaky.results import (
    MAX_DETAIL_CHARS,
    MAX_FIELD_CHARS,
    MAX_IDENTITY_BYTES,
    CaseResult,
    Outcome,
)

FIXTURES = Path(__file__).parent / "fixtures"


def parse(xml: str) -> list[CaseResult]:
    return parse_report("report.xml", xml.encode())


def only(xml: str) -> CaseResult:
    [result] = parse(xml)
    return result


def problem(data: bytes, *, filename: str = "report.xml") -> str:
    with pytest.raises(ReportError) as caught:
        parse_report(filename, data)
    assert caught.value.filename == filename
    assert str(caught.value) == f"{filename}: {caught.value.problem}"
    return caught.value.problem


# --- the public surface ---


def test_report_error_names_the_file_and_the_problem_and_pickles() -> None:
    error = ReportError("out/TEST-a.xml", "the file is empty")

    assert str(error) == "out/TEST-a.xml: the file is empty"
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301  # our own object, round-tripped
    assert (copy.filename, copy.problem, str(copy)) == (error.filename, error.problem, str(error))


def test_the_size_limit_is_50_mib() -> None:
    assert MAX_REPORT_BYTES == 50 * 1024 * 1024


# --- gzip ---


def test_gzip_is_told_by_its_magic_bytes_not_by_the_name() -> None:
    plain = (FIXTURES / "surefire.xml").read_bytes()

    from_gzip = parse_report("TEST-com.acme.shop.CartTest.xml", gzip.compress(plain))
    from_plain_named_gz = parse_report("TEST-com.acme.shop.CartTest.xml.gz", plain)

    assert from_gzip == from_plain_named_gz == parse_report("plain.xml", plain)
    assert len(from_gzip) == 9


def test_gzip_of_several_members_reads_them_all() -> None:
    # What `cat a.gz b.gz` or `gzip -c` in a loop produces.
    head, tail = b'<testsuite><testcase name="a"/>', b'<testcase name="b"/></testsuite>'

    results = parse_report("r.xml.gz", gzip.compress(head) + gzip.compress(tail))

    assert [r.name for r in results] == ["a", "b"]


def test_corrupt_and_truncated_gzip_are_refused() -> None:
    good = gzip.compress(b'<testsuite><testcase name="a"/></testsuite>' * 100)
    corrupt = good[:20] + bytes(b ^ 0xFF for b in good[20:40]) + good[40:]

    assert problem(corrupt).startswith("not valid gzip data")
    assert problem(good[: len(good) // 2]) == "the gzip data is truncated"
    assert problem(b"\x1f\x8b").startswith(("not valid gzip data", "the gzip data is truncated"))


# --- identity fields ---


def test_identity_fields_come_from_the_testcase_and_its_suite() -> None:
    result = only(
        '<testsuites><testsuite name="checkout">'
        '<testcase name="pays" classname="shop.Checkout" file="shop/checkout_test.py"'
        ' filepath="ignored.py" id="trunk:checkout-pays"/>'
        "</testsuite></testsuites>"
    )

    assert (result.name, result.classname, result.parent, result.file, result.custom_id) == (
        "pays",
        "shop.Checkout",
        "checkout",
        "shop/checkout_test.py",
        "trunk:checkout-pays",
    )
    assert (result.outcome, result.attempt) == (Outcome.PASSED, 0)


def test_filepath_is_the_file_when_file_is_missing_and_an_empty_file_is_none() -> None:
    # Trunk's parser falls back on an attribute that is missing, not on one that is empty.
    results = parse(
        "<testsuite>"
        '<testcase name="a" filepath="src/a.rs"/>'
        '<testcase name="b" file="" filepath="src/b.rs"/>'
        "</testsuite>"
    )

    assert [r.file for r in results] == ["src/a.rs", None]


def test_empty_optional_fields_become_none() -> None:
    result = only(
        '<testsuite name=""><testcase name="a" classname="" file="" filepath="" id=""/></testsuite>'
    )

    assert (result.classname, result.parent, result.file, result.custom_id) == (None,) * 4


def test_a_testcase_without_a_name_is_a_test_named_empty() -> None:
    results = parse(
        '<testsuite name="s">'
        '<testcase classname="c"><failure message="kept"/></testcase>'
        '<testcase name="" classname="c"/>'
        '<testcase name="  " classname="c"/>'
        '<testcase name="named" classname="c"/>'
        "</testsuite>"
    )

    assert [(r.name, r.outcome, r.message) for r in results] == [
        ("", Outcome.FAILED, "kept"),
        ("", Outcome.PASSED, None),
        ("", Outcome.PASSED, None),
        ("named", Outcome.PASSED, None),
    ]


@pytest.mark.parametrize(
    "xml",
    [
        "<testsuites/>",
        '<testsuites name="jest tests" tests="0"></testsuites>',
        '<testsuite name="empty" tests="0"><properties/><system-out/></testsuite>',
    ],
)
def test_a_report_without_testcases_is_valid_and_empty(xml: str) -> None:
    assert parse(xml) == []


def test_parent_is_the_outermost_suite_even_when_it_has_no_name() -> None:
    results = parse(
        '<testsuites><testsuite name="outer">'
        '<testcase name="a"/>'
        '<testsuite><testcase name="b"/></testsuite>'
        '<testsuite name="inner"><testsuite name="innermost"><testcase name="c"/></testsuite>'
        '<testcase name="d"/></testsuite>'
        '<testcase name="e"/>'
        "</testsuite>"
        '<testsuite><testsuite name="inner"><testcase name="f"/></testsuite></testsuite>'
        '<testcase name="g"/>'
        "</testsuites>"
    )

    assert [(r.name, r.parent) for r in results] == [
        ("a", "outer"),
        ("b", "outer"),
        ("c", "outer"),
        ("d", "outer"),
        ("e", "outer"),
        ("f", None),  # the outermost suite has no name; the inner one's does not count
        ("g", None),  # directly under the root `testsuites`: no suite
    ]


def test_the_file_falls_back_on_the_outermost_suites_file_then_filepath() -> None:
    results = parse(
        '<testsuites><testsuite name="outer" file="outer.php">'
        '<testsuite name="inner" file="inner.php"><testcase name="a"/>'
        '<testcase name="b" filepath="own.php"/><testcase name="c" file=""/></testsuite>'
        "</testsuite>"
        '<testsuite name="other" filepath="other.php" file=""><testcase name="d"/></testsuite>'
        '<testsuite name="path" filepath="path.php"><testcase name="e"/></testsuite>'
        "</testsuites>"
    )

    assert [(r.name, r.file) for r in results] == [
        ("a", "outer.php"),
        ("b", "own.php"),
        ("c", None),  # there, but empty: no fallback
        ("d", None),  # the suite's `file` is there, and empty
        ("e", "path.php"),
    ]


def test_a_testsuites_inside_a_suite_only_groups() -> None:
    results = parse(
        '<testsuites><testsuite name="s"><testsuites><testcase name="a"/>'
        '<testsuite name="t"><testcase name="b"/></testsuite></testsuites>'
        "</testsuite></testsuites>"
    )

    assert [(r.name, r.parent) for r in results] == [("a", "s"), ("b", "s")]


def test_a_testcase_anywhere_but_in_another_testcase_is_read() -> None:
    # Trunk's parser reads every `testcase` in a suite, whatever element holds it.
    results = parse(
        '<testsuite name="s"><properties><testcase name="in-properties"/></properties>'
        '<testcase name="a"><system-out><testcase name="nested"/></system-out></testcase>'
        "</testsuite>"
    )

    assert [(r.name, r.parent) for r in results] == [("in-properties", "s"), ("a", "s")]


def test_identity_fields_are_trimmed_and_cut_to_8000_bytes_as_trunk_does() -> None:
    long = "n" * (MAX_IDENTITY_BYTES + 50)
    # 2,667 three-byte characters are 8,001 bytes: the cut falls inside the last one.
    wide = "€" * 2_667

    result = only(
        f'<testsuite name=" {long} "><testcase name="  {wide}" classname="{long}"'
        ' file=" a.py " id=" trunk:x "/></testsuite>'
    )

    assert result.name == "€" * 2_666
    assert result.classname == result.parent == long[:MAX_IDENTITY_BYTES]
    assert (result.file, result.custom_id) == ("a.py", "trunk:x")


# --- outcomes, messages and details ---


def test_message_falls_back_to_the_first_non_empty_line_of_the_body() -> None:
    results = parse(
        "<testsuite>"
        '<testcase name="attr"><failure message="short">long\nbody</failure></testcase>'
        '<testcase name="blank-attr"><failure message="  ">\n\n  first line  \nsecond</failure>'
        "</testcase>"
        '<testcase name="none"><error/></testcase>'
        "</testsuite>"
    )

    assert [(r.outcome, r.message, r.detail) for r in results] == [
        (Outcome.FAILED, "short", "long\nbody"),
        # Blank lines around the body go; the first line's indentation stays.
        (Outcome.FAILED, "first line", "  first line  \nsecond"),
        (Outcome.FAILED, None, None),
    ]


def test_cdata_bodies_and_messages() -> None:
    result = only(
        '<testsuite><testcase name="a"><failure type="AssertionError">'
        "<![CDATA[expected <b> & got </b>\n  at a.js:1]]></failure></testcase></testsuite>"
    )

    assert result.message == "expected <b> & got </b>"
    assert result.detail == "expected <b> & got </b>\n  at a.js:1"


def test_long_messages_and_details_are_cut() -> None:
    body = "x" * (MAX_DETAIL_CHARS + 100)
    message = "m" * (MAX_FIELD_CHARS + 100)

    result = only(
        f'<testsuite><testcase name="a"><failure message="{message}">{body}</failure>'
        "</testcase></testsuite>"
    )

    assert result.message == message[:MAX_FIELD_CHARS]
    assert result.detail == body[:MAX_DETAIL_CHARS]


def test_a_failure_wins_over_a_skip() -> None:
    result = only(
        '<testsuite><testcase name="a"><skipped message="later"/><error message="setup"/>'
        "</testcase></testsuite>"
    )

    assert (result.outcome, result.message) == (Outcome.FAILED, "setup")


def test_a_skip_without_a_message_or_body_has_none() -> None:
    result = only('<testsuite><testcase name="a"><skipped/></testcase></testsuite>')

    assert (result.outcome, result.message, result.detail) == (Outcome.SKIPPED, None, None)


def test_flaky_runs_before_a_final_skip_stay_failed_attempts() -> None:
    # Not something Surefire writes today, but the last run is what the testcase describes.
    results = parse(
        '<testsuite><testcase name="a"><flakyFailure message="boom"><stackTrace>t</stackTrace>'
        '</flakyFailure><skipped message="assumption failed"/></testcase></testsuite>'
    )

    assert [(r.outcome, r.attempt, r.message) for r in results] == [
        (Outcome.FAILED, 0, "boom"),
        (Outcome.SKIPPED, 1, "assumption failed"),
    ]


def test_reruns_share_identity_and_may_carry_their_own_time_and_timestamp() -> None:
    # cargo-nextest (quick-junit) writes `time` and `timestamp` on flaky and rerun elements.
    results = parse(
        '<testsuites><testsuite name="nextest-run" timestamp="2024-05-01T10:00:00Z">'
        '<testcase name="cart::adds" classname="shop" time="0.2" timestamp="2024-05-01T10:00:05Z">'
        '<flakyFailure type="test failure" time="0.1" timestamp="2024-05-01T10:00:01Z">'
        "<stackTrace>thread 'cart::adds' panicked at src/cart.rs:9:5</stackTrace>"
        "<system-out>noise</system-out></flakyFailure>"
        "</testcase></testsuite></testsuites>"
    )

    assert [(r.name, r.classname, r.parent, r.outcome, r.attempt) for r in results] == [
        ("cart::adds", "shop", "nextest-run", Outcome.FAILED, 0),
        ("cart::adds", "shop", "nextest-run", Outcome.PASSED, 1),
    ]
    assert [r.duration_ms for r in results] == [100, 200]
    assert [r.timestamp for r in results] == [
        datetime(2024, 5, 1, 10, 0, 1, tzinfo=UTC),
        datetime(2024, 5, 1, 10, 0, 5, tzinfo=UTC),
    ]
    assert results[0].message == "thread 'cart::adds' panicked at src/cart.rs:9:5"


def test_system_out_and_err_are_ignored_wherever_they_are() -> None:
    results = parse(
        '<testsuite name="s"><system-out><![CDATA[<failure message="no"/>]]></system-out>'
        '<testcase name="a"><system-out>out</system-out><system-err>err</system-err></testcase>'
        '<testcase name="b"><failure message="real">trace</failure>'
        "<system-out>out</system-out></testcase>"
        "<system-err/></testsuite>"
    )

    assert [(r.name, r.outcome, r.detail) for r in results] == [
        ("a", Outcome.PASSED, None),
        ("b", Outcome.FAILED, "trace"),
    ]


def test_comments_and_processing_instructions_are_dropped() -> None:
    result = only(
        '<testsuite><!-- generated --><testcase name="a"><failure>one<!-- x -->two<?pi y?>'
        "three</failure></testcase></testsuite>"
    )

    assert result.detail == "onetwothree"


# --- times and timestamps ---


@pytest.mark.parametrize(
    ("time", "expected_ms"),
    [
        ("0.123", 123),
        ("12", 12_000),
        (" 2.5 ", 2_500),
        ("1,234.5", 1_234_500),  # Surefire's English grouping
        ("1,200", 1_200_000),  # a lone comma before three digits is grouping too
        ("0,25", 250),  # a decimal comma
        ("1e-3", 1),
        ("", None),
        ("fast", None),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("1e400", None),
        ("99999999999", None),  # more than a year
    ],
)
def test_time_in_seconds_becomes_milliseconds_or_none(time: str, expected_ms: int | None) -> None:
    result = only(f'<testsuite><testcase name="a" time="{time}"/></testsuite>')

    assert result.duration_ms == expected_ms


def test_missing_time_is_none() -> None:
    assert only('<testsuite><testcase name="a"/></testsuite>').duration_ms is None


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),  # naive is UTC
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T14:30:00+02:30", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00.250", datetime(2024, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)),
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
        ("yesterday", None),
        ("2024-13-01T00:00:00", None),
        ("0001-01-01T00:00:00+05:00", None),  # before the first representable UTC instant
    ],
)
def test_timestamps_are_iso_8601_in_utc(timestamp: str, expected: datetime | None) -> None:
    result = only(f'<testsuite><testcase name="a" timestamp="{timestamp}"/></testsuite>')

    assert result.timestamp == expected
    if result.timestamp is not None:
        assert result.timestamp.utcoffset() is not None


def test_timestamp_falls_back_to_the_nearest_suite_that_has_a_readable_one() -> None:
    results = parse(
        '<testsuites><testsuite name="outer" timestamp="2024-05-01T10:00:00">'
        '<testsuite name="inner" timestamp="2024-05-01T11:00:00">'
        '<testcase name="own" timestamp="2024-05-01T12:00:00"/>'
        '<testcase name="from-inner"/>'
        '<testcase name="unreadable-own" timestamp="soon"/>'
        "</testsuite>"
        '<testsuite name="broken" timestamp="n/a"><testcase name="from-outer"/></testsuite>'
        "</testsuite>"
        '<testsuite name="none"><testcase name="no-timestamp"/></testsuite></testsuites>'
    )

    assert [(r.name, r.timestamp and r.timestamp.hour) for r in results] == [
        ("own", 12),
        ("from-inner", 11),
        ("unreadable-own", 11),
        ("from-outer", 10),
        ("no-timestamp", None),
    ]


# --- input that is not a report ---


@pytest.mark.parametrize("data", [b"", b"   \n\t  \n"])
def test_an_empty_file_is_refused(data: bytes) -> None:
    assert problem(data) == "the file is empty"


def test_an_empty_gzip_is_an_empty_file() -> None:
    assert problem(gzip.compress(b"")) == "the file is empty"


@pytest.mark.parametrize(
    "data",
    [
        b"hello, this is a log file",
        b'{"testsuites": []}',
        b"\x00\x01\x02\x03\xff\xfe garbage",
        b"PK\x03\x04 a zip file",
    ],
)
def test_something_that_is_not_xml_is_refused(data: bytes) -> None:
    assert problem(data) == "not an XML document"


@pytest.mark.parametrize(
    ("cut_after", "where"),
    [
        (b'<testcase name="removesItem" clas', "line 10, column "),  # in a start tag
        (b"removing 1 item from ca", "line 16, column "),  # in a CDATA section
        (b'</testcase>\n  <testcase name="appliesCoupon"', "line 5"),  # in an element
    ],
)
def test_a_truncated_report_is_refused_with_where_it_ends(cut_after: bytes, where: str) -> None:
    xml = (FIXTURES / "surefire.xml").read_bytes()
    end = xml.index(cut_after) + len(cut_after)

    text = problem(xml[:end])

    assert text.startswith("not well-formed XML at line ")
    assert where in text
    assert "\n" not in text


def test_mismatched_tags_are_refused() -> None:
    text = problem(b'<testsuite><testcase name="a"></testsuite></testcase>')

    assert text == (
        "not well-formed XML at line 1, column 43: "
        "Opening and ending tag mismatch: testcase line 1 and testsuite"
    )


@pytest.mark.parametrize(
    ("root", "shown"),
    [
        (b"<html><body/></html>", "<html>"),
        (b'<testcase name="a"/>', "<testcase>"),
        (b'<t:testsuite xmlns:t="urn:junit"/>', "<{urn:junit}testsuite>"),
    ],
)
def test_a_root_other_than_testsuites_or_testsuite_is_refused(root: bytes, shown: str) -> None:
    assert problem(root) == f"the root element is {shown}, not <testsuites> or <testsuite>"


def test_bytes_invalid_in_the_declared_encoding_are_refused() -> None:
    data = b'<?xml version="1.0" encoding="UTF-8"?><testsuite name="caf\xe9"/>'

    assert problem(data).startswith("bytes that are not text in the document's encoding (line 1")


def test_an_unsupported_encoding_is_refused() -> None:
    data = b'<?xml version="1.0" encoding="x-klingon"?><testsuite/>'

    assert problem(data) == "the encoding 'x-klingon' is not supported (use UTF-8)"


def test_latin_1_and_utf_16_reports_are_read() -> None:
    latin = b'<?xml version="1.0" encoding="ISO-8859-1"?>'
    latin += b'<testsuite><testcase name="caf\xe9"/></testsuite>'
    utf16 = '<?xml version="1.0" encoding="UTF-16"?><testsuite><testcase name="café"/></testsuite>'

    assert [r.name for r in parse_report("latin.xml", latin)] == ["café"]
    assert [r.name for r in parse_report("utf16.xml", utf16.encode("utf-16"))] == ["café"]
