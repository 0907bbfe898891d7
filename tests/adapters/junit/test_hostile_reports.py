"""Reports written to hurt: each is refused quickly, with a clear problem, and leaks nothing.

"Nothing leaks" is checked with a secret behind a FIFO and a local HTTP server: the FIFO is never
opened, the secret never shows in an error, and the server never sees a request.
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import pytest

from keepgreen.adapters.junit import MAX_REPORT_BYTES, ReportError, TooManyResults, parse_report
from keepgreen.core.flaky.results import MAX_DETAIL_CHARS, Outcome

SECRET = "kg-secret-7f3a9c"
ENTITY_PROBLEM = "entity declarations are not allowed"
MIB = 1024 * 1024


def refused(data: bytes, *, within_seconds: float = 2.0) -> ReportError:
    started = time.monotonic()
    with pytest.raises(ReportError) as caught:
        parse_report("evil.xml", data)
    assert time.monotonic() - started < within_seconds
    assert SECRET not in str(caught.value)
    return caught.value


class WatchedSecret(NamedTuple):
    path: Path
    opened: threading.Event  # set as soon as anything opens the file to read it


@pytest.fixture
def secret_file(tmp_path: Path) -> Iterator[WatchedSecret]:
    """A FIFO that hands out the secret, and tells whether anything opened it.

    A writer on a FIFO waits until a reader opens it, so a parser that read the file would set
    `opened` (and get the secret); one that never touched it leaves the writer waiting.
    """
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs POSIX FIFOs")
    path = tmp_path / "secret.txt"
    os.mkfifo(path)
    opened = threading.Event()

    def hand_out() -> None:
        with path.open("w") as writer:
            opened.set()
            writer.write(f"{SECRET}\n")

    writer = threading.Thread(target=hand_out, daemon=True)
    writer.start()
    yield WatchedSecret(path, opened)
    # Release the writer if nobody read: a reader that does not wait for data.
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    writer.join(timeout=5)
    os.close(reader)


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that serves the secret and records every path asked for."""
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            body = f'<!ENTITY leak "{SECRET}">'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # the base class's name
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


# --- entities ---


def billion_laughs(*, in_attribute: bool) -> str:
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    )
    use = '<testcase name="&lol9;"/>' if in_attribute else '<testcase name="a">&lol9;</testcase>'
    return f"<?xml version='1.0'?><!DOCTYPE lolz [{entities}]><testsuite>{use}</testsuite>"


@pytest.mark.parametrize("in_attribute", [True, False], ids=["attribute", "text"])
@pytest.mark.parametrize("codec", ["utf-8", "utf-16"])
def test_billion_laughs_is_refused(in_attribute: bool, codec: str) -> None:
    xml = billion_laughs(in_attribute=in_attribute)
    if codec != "utf-8":
        xml = xml.replace("version='1.0'", f"version='1.0' encoding='{codec}'")

    assert refused(xml.encode(codec)).problem == ENTITY_PROBLEM


@pytest.mark.parametrize(
    "use",
    [
        '<testcase name="a"><failure>&xxe;</failure></testcase>',
        '<testcase name="&xxe;"/>',
        '<testcase name="a"/>',  # declared and never used
    ],
)
def test_an_external_file_entity_is_refused_and_never_read(
    secret_file: WatchedSecret, use: str
) -> None:
    xml = (
        f'<!DOCTYPE testsuite [<!ENTITY xxe SYSTEM "{secret_file.path.as_uri()}">]>'
        f"<testsuite>{use}</testsuite>"
    )

    assert refused(xml.encode()).problem == ENTITY_PROBLEM
    assert not secret_file.opened.is_set()


def test_etc_passwd_is_refused() -> None:
    xml = (
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
        '<testsuites><testsuite name="s"><testcase name="a"><failure message="x">&xxe;'
        "</failure></testcase></testsuite></testsuites>"
    )

    error = refused(xml.encode())

    assert error.problem == ENTITY_PROBLEM
    assert "root:" not in str(error)


def test_parameter_entities_are_refused(secret_file: WatchedSecret) -> None:
    external = (
        f'<!DOCTYPE t [<!ENTITY % ext SYSTEM "{secret_file.path.as_uri()}"> %ext;]>'
        '<testsuite><testcase name="a"/></testsuite>'
    )
    internal = (
        "<!DOCTYPE t [<!ENTITY % def \"<!ENTITY e 'injected'>\"> %def;]>"
        '<testsuite><testcase name="&e;"/></testsuite>'
    )

    assert refused(external.encode()).problem == ENTITY_PROBLEM
    assert refused(internal.encode()).problem == ENTITY_PROBLEM
    assert not secret_file.opened.is_set()


def test_an_entity_from_an_external_dtd_is_refused_and_the_dtd_never_read(
    secret_file: WatchedSecret,
) -> None:
    xml = (
        f'<!DOCTYPE testsuite SYSTEM "{secret_file.path.as_uri()}">'
        '<testsuite><testcase name="a"><failure>&leak;</failure></testcase></testsuite>'
    )

    assert refused(xml.encode()).problem == "entity references are not allowed"
    assert not secret_file.opened.is_set()


def test_nothing_is_fetched_over_the_network(server: tuple[str, list[str]]) -> None:
    # The libxml2 in lxml 6.1's wheels has no HTTP client at all; this guards other builds.
    url, requests = server
    leaky = [
        (f'<!DOCTYPE t [<!ENTITY xxe SYSTEM "{url}/entity">]>', "&xxe;"),
        (f'<!DOCTYPE t [<!ENTITY % remote SYSTEM "{url}/parameter"> %remote;]>', "&leak;"),
        (f'<!DOCTYPE testsuite SYSTEM "{url}/dtd">', "&leak;"),
    ]
    harmless = (
        f'<!DOCTYPE testsuite PUBLIC "-//Evil//DTD//EN" "{url}/public">'
        '<testsuite><testcase name="a"/></testsuite>'
    )

    problems = [
        refused(f'{doctype}<testsuite><testcase name="a">{use}</testcase></testsuite>'.encode())
        for doctype, use in leaky
    ]
    # A DTD that declares no entity, and is not loaded, does no harm: the report is read.
    results = parse_report("public.xml", harmless.encode())

    assert [error.problem for error in problems] == [
        ENTITY_PROBLEM,
        ENTITY_PROBLEM,
        "entity references are not allowed",
    ]
    assert [r.name for r in results] == ["a"]
    assert requests == []


def test_entity_declarations_mentioned_in_a_log_are_only_text() -> None:
    # A test of an XML library may well print a DTD; inside CDATA it declares nothing.
    xml = (
        '<testsuite><testcase name="rejects_xxe"><system-out><![CDATA['
        '<!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
        "]]></system-out></testcase></testsuite>"
    )

    assert [r.name for r in parse_report("xml-lib.xml", xml.encode())] == ["rejects_xxe"]
    # Cut short, it is refused for what is wrong with it, not for the text it quotes.
    assert refused(xml[:-20].encode()).problem.startswith("not well-formed XML at line 1")


# --- depth ---


def test_a_hundred_thousand_nested_elements_are_refused() -> None:
    data = b"<testsuites>" + b"<testsuite>" * 100_000 + b"</testsuite>" * 100_000 + b"</testsuites>"

    assert refused(data).problem == "elements are nested deeper than 64 levels"


def nested_suites(levels: int) -> bytes:
    """A testcase at `levels` levels of elements: testsuites, then suites, then the case."""
    suites = levels - 2
    opening = "".join(f'<testsuite name="level{i}">' for i in range(suites))
    closing = "</testsuite>" * suites
    return f'<testsuites>{opening}<testcase name="deep"/>{closing}</testsuites>'.encode()


def test_64_levels_are_read_and_65_refused() -> None:
    [result] = parse_report("deep.xml", nested_suites(64))

    assert result.parent == "level0"  # the outermost suite
    assert refused(nested_suites(65)).problem == "elements are nested deeper than 64 levels"


def test_deep_elements_inside_a_testcase_count_too() -> None:
    data = b'<testsuite><testcase name="a"><failure>' + b"<b>" * 70 + b"</b>" * 70 + b"</failure>"
    data += b"</testcase></testsuite>"

    assert refused(data).problem == "elements are nested deeper than 64 levels"


# --- size ---


def test_a_100_mb_plain_report_is_refused_before_parsing() -> None:
    data = b"<testsuite>" + b" " * (100 * MIB) + b"</testsuite>"

    assert refused(data, within_seconds=0.5).problem == "larger than 50 MiB"


def test_one_byte_over_the_limit_is_refused_and_the_limit_itself_is_read() -> None:
    # Logs of a megabyte each, then spaces up to the limit.
    head, tail = b'<testsuite><testcase name="a"/>', b"</testsuite>"
    log = b"<system-out>" + b"x" * MIB + b"</system-out>"
    body = log * 49
    at_limit = head + body + b" " * (MAX_REPORT_BYTES - len(head) - len(body) - len(tail)) + tail
    assert len(at_limit) == MAX_REPORT_BYTES

    assert [r.name for r in parse_report("big.xml", at_limit)] == ["a"]
    assert refused(at_limit + b" ").problem == "larger than 50 MiB"


def gzip_bomb(size: int) -> bytes:
    """`size` zero bytes gzipped, made without holding them all in memory."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    parts = [compressor.compress(zeros) for _ in range(size // MIB)]
    return b"".join([*parts, compressor.flush()])


def test_a_100_mb_gzip_bomb_is_refused_fast_and_without_inflating_it_all() -> None:
    bomb = gzip_bomb(100 * MIB)
    assert len(bomb) < 200_000

    tracemalloc.start()
    try:
        error = refused(bomb, within_seconds=5)  # inflating 50 MiB, on a busy CI machine
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.problem == "larger than 50 MiB when decompressed"
    # It stops at the limit: about 50 MiB held, never the 100.
    assert peak < 60 * MIB


def test_a_gzip_bomb_of_many_small_members_is_refused() -> None:
    member = gzip.compress(b"<" * MIB)

    assert refused(member * 60).problem == "larger than 50 MiB when decompressed"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_a_flood_of_tiny_elements_is_refused_before_the_tree_is_built() -> None:
    # 13 million `<a/>` fit in 50 MiB; their tree would take about 1.6 GB. A child process
    # reports its own peak memory (VmHWM, which starts afresh at exec; ru_maxrss would count
    # this test process's peak, inherited through fork).
    script = """
import re
from pathlib import Path
from keepgreen.adapters.junit import ReportError, parse_report
data = b"<testsuite>" + b"<a/>" * 13_000_000 + b"</testsuite>"
try:
    parse_report("flood.xml", data)
except ReportError as error:
    print(error.problem)
print(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1])
"""

    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )

    problem, peak_kib = run.stdout.splitlines()
    assert problem == "more than 2,000,000 elements and attributes"
    assert int(peak_kib) < 300 * 1024  # the 52 MB of input, Python and lxml


def test_attributes_count_towards_the_node_limit() -> None:
    # 1.1 million elements alone are allowed; with an attribute each they are 2.2 million nodes.
    data = b"<testsuite>" + b'<p v="1"/>' * 1_100_000 + b"</testsuite>"

    assert refused(data, within_seconds=10).problem == "more than 2,000,000 elements and attributes"


def test_many_angle_brackets_in_logs_are_not_elements() -> None:
    # Over two million `<` and `=` make the exact count run; it finds three elements.
    log = "<=>" * 1_100_000
    xml = f'<testsuite><testcase name="a"><system-out><![CDATA[{log}]]></system-out></testcase>'
    xml += "</testsuite>"

    assert [r.name for r in parse_report("logs.xml", xml.encode())] == ["a"]


def test_more_than_200_000_testcases_are_refused() -> None:
    data = b"<testsuite>" + b'<testcase name="t"/>' * 200_001 + b"</testsuite>"

    # Counted as they are read: the parse stops at the 200,001st.
    assert refused(data).problem == "more than 200,000 test cases"


def test_200_000_testcases_are_read() -> None:
    data = b"<testsuite>" + b'<testcase name="t"/>' * 200_000 + b"</testsuite>"

    assert len(parse_report("many.xml", data)) == 200_000


# --- garbage ---


def test_random_bytes_are_refused() -> None:
    data = random.Random(0).randbytes(100_000)  # noqa: S311  # reproducible noise, not a secret

    assert refused(data).problem == "not an XML document"


def test_random_bytes_after_a_gzip_magic_are_refused() -> None:
    data = b"\x1f\x8b" + random.Random(1).randbytes(100_000)  # noqa: S311  # reproducible noise

    assert refused(data).problem.startswith("not valid gzip data")


def test_utf_7_which_hides_markup_from_byte_counts_is_refused() -> None:
    data = b'<?xml version="1.0" encoding="UTF-7"?>+ADw-testsuite/+AD4-'

    assert refused(data).problem == "the encoding 'UTF-7' is not supported (use UTF-8)"


def test_texts_past_libxml2s_10_mb_are_read_and_only_a_cut_is_kept() -> None:
    # libxml2 refuses texts over 10 MB unless told otherwise; the limit here is the report's.
    body = b"at Frame.method(Frame.java:1)\n" * (400 * 1024)  # 12 MB of trace
    data = b'<testsuite><testcase name="a"><failure message="boom">' + body
    data += b"</failure><system-out>" + b"x" * (11 * MIB) + b"</system-out></testcase></testsuite>"

    [result] = parse_report("big.xml", data)

    assert (result.outcome, result.message) == (Outcome.FAILED, "boom")
    assert result.detail is not None
    assert len(result.detail) == MAX_DETAIL_CHARS


# --- results: the budget of an upload ---


def rerun_flood(reruns: int) -> bytes:
    """One testcase with `reruns` reruns, gzipped: a result per rerun, for a few bytes each."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    step = 100_000
    parts = [
        compressor.compress(b'<testsuite><testcase name="t">'),
        *(compressor.compress(b"<rerunFailure/>" * step) for _ in range(reruns // step)),
        compressor.compress(b"</testcase></testsuite>"),
    ]
    return b"".join([*parts, compressor.flush()])


def test_reading_stops_at_the_first_result_past_the_budget() -> None:
    # 1.9 million results in 55 KB; the budget is passed at the 200,001st.
    flood = rerun_flood(1_900_000)
    assert len(flood) < 100_000

    started = time.monotonic()
    with pytest.raises(TooManyResults) as caught:
        parse_report("flood.xml.gz", flood, max_results=200_000)

    assert time.monotonic() - started < 5  # about 0.6 s; the whole report takes ten times that
    assert caught.value.problem == "more than 200,000 results"


def test_the_budget_counts_each_run_of_each_testcase() -> None:
    # Six results: `a` failed then passed on a retry (2), `b` passed (1), nameless `c` failed
    # a run then passed (2), and the testcase inside `properties` (1), as Trunk reads it.
    xml = (
        '<testsuite><testcase name="a"><flakyFailure message="x"/></testcase>'
        '<testcase name="b"/><testcase><rerunFailure/></testcase>'
        '<properties><testcase name="in-properties"/></properties></testsuite>'
    )

    assert len(parse_report("r.xml", xml.encode(), max_results=6)) == 6
    with pytest.raises(TooManyResults):
        parse_report("r.xml", xml.encode(), max_results=5)
    with pytest.raises(TooManyResults):
        parse_report("r.xml.gz", gzip.compress(xml.encode()), max_results=5)


def peak_of(script: str, *args: str) -> list[str]:
    """Runs `script` in a fresh interpreter, which prints its lines and then VmHWM in MiB.

    A child's peak is read from VmHWM, which starts afresh at exec; ru_maxrss would count this
    test process's peak, inherited through fork.
    """
    peak = (
        "\nimport re as _re, pathlib as _p\n"
        "print(int(_re.search(r'VmHWM:\\s+(\\d+) kB', "
        "_p.Path('/proc/self/status').read_text())[1]) // 1024)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script + peak, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return run.stdout.splitlines()


# The parse of an upload, in a child: reads every report into memory first (as the upload
# route does), prints the memory held then, and parses them against one budget.
UPLOAD_PARSE = """
import re, sys
from pathlib import Path
from keepgreen.adapters.junit import TooManyResults, parse_report
reports = [path.read_bytes() for path in sorted(Path(sys.argv[1]).iterdir())]
print(int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1]) // 1024)
kept, total = [], 0
try:
    for data in reports:
        kept.append(parse_report("r.xml", data, max_results=200_000 - total))
        total += len(kept[-1])
    print(total)
except TooManyResults as error:
    print(error.problem)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_the_issues_oversized_upload_is_refused_in_little_memory(tmp_path: Path) -> None:
    # Issue 10: 7.4 million results in one upload were all read, at 1.7 GB, before the 400.
    for index in range(4):
        (tmp_path / f"{index}.xml.gz").write_bytes(rerun_flood(1_900_000))

    before, problem, peak = peak_of(UPLOAD_PARSE, str(tmp_path))

    assert problem == "more than 200,000 results"
    # 200,000 results of one testcase share its name: what grows is their list, ~40 MB.
    assert int(peak) - int(before) < 80


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_the_largest_accepted_upload_is_read_in_bounded_memory(tmp_path: Path) -> None:
    # 200,000 Java-style testcases with their own names, one in 33 failing with a 40-line
    # trace: 55 MB in two reports, the result limit of an upload.
    for part in range(2):
        with (tmp_path / f"{part}.xml").open("wb") as report:
            report.write(b'<testsuites><testsuite name="all">')
            for i in range(part * 100_000, (part + 1) * 100_000):
                module = f"com.example.product.module{i % 300}"
                head = (
                    f'<testcase classname="{module}.ServiceIntegrationTest" '
                    f'name="handlesCase{i}WithoutFailing" time="0.01" '
                    f'file="src/test/java/{module.replace(".", "/")}/ServiceIntegrationTest.java"'
                )
                if i % 33:
                    report.write(f"{head}/>".encode())
                    continue
                trace = f"at com.example.Frame.method(Frame.java:{i})\n" * 40
                failure = f'<failure message="expected {i} but was {i + 1}">{trace}</failure>'
                report.write(f"{head}>{failure}</testcase>".encode())
            report.write(b"</testsuite></testsuites>")

    before, results, peak = peak_of(UPLOAD_PARSE, str(tmp_path))

    assert results == "200000"
    # What the parse adds to the reports it was given is the results alone, about 550 bytes
    # each here (their names, paths and 6,000 traces): the document is never held as a tree.
    assert int(peak) - int(before) < 200
