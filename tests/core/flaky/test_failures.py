"""Failure summaries: the same failure from two runs reads the same; different failures do not."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime, timedelta
from random import Random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from keepgreen.core.flaky.failures import (
    MAX_SUMMARY_CHARS,
    FailureCount,
    FailureTemplate,
    absorb_failures,
    failure_summary,
    mine_templates,
    normalise,
    summary_key,
)

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

# --- The same failure, from two runs of a real runner ---------------------------------------
# (message, detail) as each runner's JUnit report carries them; the second run differs only in
# what changes between runs.
PYTEST_RUN_1 = (
    (
        "AssertionError: upload of /tmp/pytest-of-runner/pytest-12/test_upload0/a.bin to "
        "127.0.0.1:54321 failed after 1.52s\n  assert 503 == 200"
    ),
    """\
tmp_path = PosixPath('/tmp/pytest-of-runner/pytest-12/test_upload0')

    def test_upload(tmp_path):
        client = Client(port=54321)
>       assert client.upload(tmp_path / "a.bin") == 200
E       AssertionError: upload of /tmp/pytest-of-runner/pytest-12/test_upload0/a.bin to \
127.0.0.1:54321 failed after 1.52s
E       assert 503 == 200

tests/test_upload.py:14: AssertionError""",
)
PYTEST_RUN_2 = (
    (
        "AssertionError: upload of /tmp/pytest-of-runner/pytest-873/test_upload0/a.bin to "
        "127.0.0.1:40877 failed after 998ms\n  assert 502 == 200"
    ),
    """\
tmp_path = PosixPath('/tmp/pytest-of-runner/pytest-873/test_upload0')

    def test_upload(tmp_path):
        client = Client(port=40877)
>       assert client.upload(tmp_path / "a.bin") == 200
E       AssertionError: upload of /tmp/pytest-of-runner/pytest-873/test_upload0/a.bin to \
127.0.0.1:40877 failed after 998ms
E       assert 502 == 200

tests/test_upload.py:14: AssertionError""",
)
PYTEST_EXPECTED = "AssertionError: upload of <path> to <ip>:<num> failed after <duration>"

# pytest writes a rewritten assert's message without its type; the crash line names it.
PYTEST_PLAIN_ASSERT_1 = (
    "assert <Session object at 0x7f3a2b1c4d50> is None",
    """\
    def test_logout(client):
        client.logout()
>       assert client.session is None
E       assert <Session object at 0x7f3a2b1c4d50> is None

tests/test_auth.py:31: AssertionError""",
)
PYTEST_PLAIN_ASSERT_2 = (
    "assert <Session object at 0x7f11c0ffee20> is None",
    PYTEST_PLAIN_ASSERT_1[1].replace("0x7f3a2b1c4d50", "0x7f11c0ffee20"),
)

# jest-junit: colours survive without their ESC (XML cannot carry it) or with it.
JEST_RUN_1 = (
    (
        "Error: [2mexpect([22m[31mreceived[39m[2m).[22mtoBe[2m([22m[32mexpected[39m[2m)"
        " // Object.is equality[22m\n\nExpected: [32m200[39m\nReceived: [31m503[39m\n"
        "    at Object.<anonymous> (/home/runner/work/app/app/src/api.test.ts:42:23)"
    ),
    (
        "Error: [2mexpect([22m[31mreceived[39m[2m).[22mtoBe[2m([22m[32mexpected[39m[2m)"
        " // Object.is equality[22m\n\nExpected: [32m200[39m\nReceived: [31m503[39m\n"
        "    at Object.<anonymous> (/home/runner/work/app/app/src/api.test.ts:42:23)\n"
        "    at processTicksAndRejections (node:internal/process/task_queues:95:5)"
    ),
)
JEST_RUN_2 = (
    (
        "Error: \x1b[2mexpect(\x1b[22m\x1b[31mreceived\x1b[39m\x1b[2m).\x1b[22mtoBe\x1b[2m("
        "\x1b[22m\x1b[32mexpected\x1b[39m\x1b[2m) // Object.is equality\x1b[22m\n\n"
        "Expected: \x1b[32m200\x1b[39m\nReceived: \x1b[31m404\x1b[39m\n"
        "    at Object.<anonymous> (/home/runner/work/app/app/src/api.test.ts:42:23)"
    ),
    (
        "Error: \x1b[2mexpect(\x1b[22m\x1b[31mreceived\x1b[39m\x1b[2m).\x1b[22mtoBe\x1b[2m("
        "\x1b[22m\x1b[32mexpected\x1b[39m\x1b[2m) // Object.is equality\x1b[22m\n"
    ),
)
JEST_EXPECTED = "Error: expect(received).toBe(expected) // Object.is equality"

# Surefire, JUnit 5: the body's first line is the outer exception with its type.
JAVA_RUN_1 = (
    (
        "Connection to localhost:49153 refused after 3000 ms "
        "(pool 5f0c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f)"
    ),
    (
        "java.lang.IllegalStateException: Connection to localhost:49153 refused after 3000 ms "
        "(pool 5f0c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f)\n"
        "\tat com.acme.db.Pool.acquire(Pool.java:88)\n"
        "\tat com.acme.db.PoolTest.acquiresConnection(PoolTest.java:41)\n"
        "Caused by: java.net.ConnectException: Connection refused\n"
    ),
)
JAVA_RUN_2 = (
    (
        "Connection to localhost:38211 refused after 3001 ms "
        "(pool 0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f)"
    ),
    (
        "java.lang.IllegalStateException: Connection to localhost:38211 refused after 3001 ms "
        "(pool 0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f)\n"
        "\tat com.acme.db.Pool.acquire(Pool.java:88)\n"
        "\tat com.acme.db.PoolTest.acquiresConnection(PoolTest.java:41)\n"
    ),
)
JAVA_EXPECTED = (
    "java.lang.IllegalStateException: Connection to localhost:<num> refused after <duration> "
    "(pool <uuid>)"
)

JAVA_IDENTITY_1 = (
    "expected: <com.acme.Order@1b6d3586> but was: <com.acme.Order@7852e922>",
    (
        "org.opentest4j.AssertionFailedError: expected: <com.acme.Order@1b6d3586> but was: "
        "<com.acme.Order@7852e922>\n"
        "\tat org.junit.jupiter.api.AssertionUtils.fail(AssertionUtils.java:55)"
    ),
)
JAVA_IDENTITY_2 = (
    "expected: <com.acme.Order@4e25154f> but was: <com.acme.Order@70177ecd>",
    (
        "org.opentest4j.AssertionFailedError: expected: <com.acme.Order@4e25154f> but was: "
        "<com.acme.Order@70177ecd>\n"
        "\tat org.junit.jupiter.api.AssertionUtils.fail(AssertionUtils.java:55)"
    ),
)

# go-junit-report: the message is just "Failed"; the body is go test's output.
GO_RUN_1 = (
    "Failed",
    (
        "=== RUN   TestFetch\n"
        "    fetch_test.go:27: GET http://127.0.0.1:41235/items/3f2b8c1e-9d4a-4b7e-8f21-0c5d6e7f8a9b:"
        " context deadline exceeded after 5.001s\n"
        "--- FAIL: TestFetch (5.00s)\n"
    ),
)
GO_RUN_2 = (
    "Failed",
    (
        "=== RUN   TestFetch\n"
        "    fetch_test.go:27: GET http://127.0.0.1:33009/items/a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d:"
        " context deadline exceeded after 4.998s\n"
        "--- FAIL: TestFetch (5.01s)\n"
    ),
)
GO_EXPECTED = (
    "fetch_test.go:<num>: GET http://<ip>:<num>/items/<uuid>: context deadline exceeded after "
    "<duration>"
)

GO_PANIC_1 = (
    "Failed",
    (
        "=== RUN   TestCache\n"
        "--- FAIL: TestCache (0.00s)\n"
        "panic: runtime error: invalid memory address or nil pointer dereference [recovered]\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x4f6a2b]\n\n"
        "goroutine 7 [running]:\n"
    ),
)
GO_PANIC_2 = (
    "Failed",
    (
        "=== RUN   TestCache\n"
        "--- FAIL: TestCache (0.01s)\n"
        "panic: runtime error: invalid memory address or nil pointer dereference [recovered]\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x20 pc=0x51c0d4]\n\n"
        "goroutine 34 [running]:\n"
    ),
)

# xunit through JunitXml.TestLogger: "Type : text" in the message, frames in the body; the
# same failure on a Windows and on a Linux agent.
DOTNET_RUN_1 = (
    (
        "System.InvalidOperationException : Lock file "
        "C:\\Users\\runneradmin\\AppData\\Local\\Temp\\tmpA1B2.tmp held by process 4242 since "
        "2024-03-01 10:00:00Z"
    ),
    (
        "   at Acme.Store.Open() in D:\\a\\app\\src\\Store.cs:line 57\n"
        "   at Acme.Tests.StoreTests.Opens() in D:\\a\\app\\tests\\StoreTests.cs:line 19"
    ),
)
DOTNET_RUN_2 = (
    (
        "System.InvalidOperationException : Lock file /tmp/tmpQ9z3.tmp held by process 71 since "
        "2024-03-02 17:45:12Z"
    ),
    (
        "   at Acme.Store.Open() in /_/src/Store.cs:line 57\n"
        "   at Acme.Tests.StoreTests.Opens() in /_/tests/StoreTests.cs:line 19"
    ),
)
DOTNET_EXPECTED = (
    "System.InvalidOperationException: Lock file <path> held by process <num> since <time>"
)


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        pytest.param(PYTEST_RUN_1, PYTEST_RUN_2, PYTEST_EXPECTED, id="pytest"),
        pytest.param(
            PYTEST_PLAIN_ASSERT_1,
            PYTEST_PLAIN_ASSERT_2,
            "AssertionError: assert <Session object at <hex>> is None",
            id="pytest-plain-assert",
        ),
        pytest.param(JEST_RUN_1, JEST_RUN_2, JEST_EXPECTED, id="jest"),
        pytest.param(JAVA_RUN_1, JAVA_RUN_2, JAVA_EXPECTED, id="junit-java"),
        pytest.param(
            JAVA_IDENTITY_1,
            JAVA_IDENTITY_2,
            "org.opentest4j.AssertionFailedError: expected: <com.acme.Order@<hex>> "
            "but was: <com.acme.Order@<hex>>",
            id="junit-identity-hash",
        ),
        pytest.param(GO_RUN_1, GO_RUN_2, GO_EXPECTED, id="go"),
        pytest.param(
            GO_PANIC_1,
            GO_PANIC_2,
            "panic: runtime error: invalid memory address or nil pointer dereference [recovered]",
            id="go-panic",
        ),
        pytest.param(DOTNET_RUN_1, DOTNET_RUN_2, DOTNET_EXPECTED, id="dotnet"),
    ],
)
def test_two_runs_of_one_failure_have_one_summary(
    first: tuple[str, str], second: tuple[str, str], expected: str
) -> None:
    assert failure_summary(*first) == expected
    assert failure_summary(*second) == expected


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(
            PYTEST_RUN_1,
            (
                "ValueError: bad port 54321",
                "E       ValueError: bad port 54321\n\nx.py:3: ValueError",
            ),
            id="pytest-other-exception",
        ),
        pytest.param(
            JEST_RUN_1,
            (
                "Error: expect(received).toEqual(expected) // deep equality",
                "Error: expect(received).toEqual(expected) // deep equality\n    at x (a.ts:1:1)",
            ),
            id="jest-other-matcher",
        ),
        pytest.param(
            JAVA_RUN_1,
            (
                "Connection to localhost:49153 refused after 3000 ms",
                (
                    "java.lang.IllegalArgumentException: Connection to localhost:49153 refused "
                    "after 3000 ms\n\tat com.acme.db.Pool.acquire(Pool.java:88)"
                ),
            ),
            id="java-other-type-same-text",
        ),
        pytest.param(GO_RUN_1, GO_PANIC_1, id="go-timeout-vs-panic"),
        pytest.param(
            DOTNET_RUN_1,
            ("System.InvalidOperationException : Sequence contains no elements", None),
            id="dotnet-other-text",
        ),
    ],
)
def test_different_failures_stay_apart(
    first: tuple[str, str], second: tuple[str | None, str | None]
) -> None:
    assert failure_summary(*first) != failure_summary(*second)


# --- normalise, one mask at a time ----------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("\x1b[1;31mFAILED\x1b[0m tests", "FAILED tests"),
        ("\x1b]8;;https://x.test\x07link\x1b]8;;\x07 text", "link text"),
        ("[31mred[39m and \\u001b[32mgreen\\u001b[39m", "red and green"),
        ("id 3F2B8C1E-9D4A-4B7E-8F21-0C5D6E7F8A9B gone", "id <uuid> gone"),
        ("object at 0x7f3a2b1c4d50 and 0XDEAD", "object at <hex> and <hex>"),
        ("commit a1b2c3d4e5f60718293a4b5c6d7e8f9012345678 missing", "commit <hex> missing"),
        ("short sha 9fceb02 here", "short sha <hex> here"),
        ("com.acme.Order@12345678 vs Order@1b6d3586", "com.acme.Order@<hex> vs Order@<hex>"),
        ("at 2024-03-01T10:00:00.123456+01:00 and 2024-03-01", "at <time> and <time>"),
        ("2024/03/01 10:00:00 +0000 UTC", "<time> UTC"),
        ("[10:42:07.512] ready", "[<time>] ready"),
        ("host 10.0.0.7:5432 down", "host <ip>:<num> down"),
        ("dial tcp [::1]:54321 and fe80::1ff:fe23:4567:890a", "dial tcp [<ip>]:<num> and <ip>"),
        (
            "took 12ms, 1.5s, 1m30.5s, 5021 ms, 3 seconds",
            "took <duration>, <duration>, <duration>, <duration>, <duration>",
        ),
        ("expected 3 got -4.25e-3 (100%)", "expected <num> got -<num> (<num>%)"),
        ("File tests/test_x.py:123:45 in test", "File tests/test_x.py:<num>:<num> in test"),
        ("/tmp/pytest-of-ci/pytest-7/test_a0/out.json: gone", "<path>: gone"),  # noqa: S108 - text
        ("open /var/tmp/x1/f.txt: denied", "open <path>: denied"),
        ("at /private/var/folders/xy/ab12cd/T/tmpk3/f.", "at <path>."),
        ("'C:\\Users\\ci\\AppData\\Local\\Temp\\tmp1.txt'", "'<path>'"),
        ("run /home/runner/work/_temp/8c1e.sh failed", "run /home/runner/work/<path> failed"),
        ("in /scratch/pytest-of-bob/pytest-3/test_b0", "in /scratch/<path>"),
        ("a\n\n\tb   c  ", "a b c"),
    ],
)
def test_normalise_masks(message: str, expected: str) -> None:
    assert normalise(message) == expected


def test_normalise_keeps_words_identifiers_and_ordinary_paths() -> None:
    message = (
        "utf8 sha256 gw3 IPv4 deadbeef std::vector /home/ci/src/app.py tmpdir /tmpfoo ada@facade.io"
    )
    assert normalise(message) == message


def test_normalise_cuts_long_messages_at_a_space() -> None:
    message = "word " * 200
    got = normalise(message)
    assert len(got) <= MAX_SUMMARY_CHARS
    assert got.endswith("word…")
    assert normalise(got) == got


def test_normalise_cuts_a_message_without_spaces_where_it_must() -> None:
    got = normalise("x" * 1000)
    assert got == "x" * (MAX_SUMMARY_CHARS - 1) + "…"


# Fragments of real failure text, so that Hypothesis mixes masks, boundaries and cuts.
FRAGMENTS = st.sampled_from(
    [
        " ",
        "\n",
        "\x1b[31m",
        "[0m",
        "0x7f3a",
        "a1b2c3d",
        "3f2b8c1e-9d4a-4b7e-8f21-0c5d6e7f8a9b",
        "2024-03-01T10:00:00Z",
        "10:00:00",
        "10.0.0.7",
        "::1",
        ":",
        "/tmp/x",  # noqa: S108 - text to mask, not a file
        "/var/folders/a/",
        "C:\\Temp\\",
        "pytest-of-a/pytest-1/",
        "_temp/",
        "12",
        "ms",
        "s",
        ".",
        "-",
        "@",
        "Foo",
        "e5",
        "<num>",
        "x" * 120,
    ]
)


@given(st.one_of(st.text(), st.lists(FRAGMENTS, max_size=40).map("".join)))
@settings(max_examples=500, deadline=None)
@example("5/tmp/x")
@example("[[0m1m")
@example("w " * 149 + "a1b2c3d4e5g")
def test_normalise_is_idempotent(message: str) -> None:
    once = normalise(message)
    assert normalise(once) == once
    assert len(once) <= MAX_SUMMARY_CHARS


# --- failure_summary's choices --------------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "detail"),
    [(None, None), ("", ""), ("  \n ", "\n\n"), ("Failed", None), (None, "=== RUN   TestX\n")],
)
def test_no_summary_without_text(message: str | None, detail: str | None) -> None:
    assert failure_summary(message, detail) is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("TypeError: x is undefined\n    at f (/ci/src/a.js:3:9)", "TypeError: x is undefined"),
        ("Error: boom\n    at async Promise.all (index 0)", "Error: boom"),
        ("Error: boom\n    at /ci/src/a.js:3:9", "Error: boom"),
        ("expected true\n\tat com.acme.T.t(T.java:3)", "expected true"),
        ("Bad\n   at Acme.T.Run() in /_/T.cs:line 4", "Bad"),
        ('boom\nTraceback (most recent call last):\n  File "x.py"', "boom"),
        ("Expected a list\nat least 3 items long", "Expected a list at least <num> items long"),
    ],
)
def test_the_message_is_cut_where_its_stack_trace_starts(message: str, expected: str) -> None:
    assert failure_summary(message, None) == expected


def test_without_a_message_the_first_informative_line_of_the_body() -> None:
    detail = "\n\n   Expected 4 items\n   but found 3\n"
    assert failure_summary(None, detail) == "Expected <num> items"


def test_the_last_exception_of_a_chained_python_traceback_is_the_one_raised() -> None:
    detail = (
        "E   KeyError: 'port'\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "E   ConfigError: no port in /tmp/cfg-8812.toml\n\n"
        "app/config.py:9: ConfigError"
    )
    assert failure_summary("ConfigError: no port", detail) == "ConfigError: no port in <path>"


def test_a_type_without_text_goes_in_front_of_the_message() -> None:
    detail = "java.lang.AssertionError\n\tat com.acme.T.t(T.java:3)"
    assert (
        failure_summary("lists differ at 3", detail)
        == "java.lang.AssertionError: lists differ at <num>"
    )
    assert failure_summary(None, detail) == "java.lang.AssertionError"
    # A message that already names the type is not prefixed twice.
    assert failure_summary("AssertionError", detail) == "AssertionError"
    # A dotted name alone might be a class or a module: only an exception's name counts.
    assert failure_summary("boom", "com.acme.FooTest\n\tat com.acme.T.t(T.java:3)") == "boom"


def test_a_message_without_a_typed_body_is_kept_whole() -> None:
    message = "Assert.Equal() Failure\nExpected: 42\nActual:   43"
    detail = "   at Acme.Tests.MathTests.Adds() in /_/tests/MathTests.cs:line 12"
    assert failure_summary(message, detail) == (
        "Assert.Equal() Failure Expected: <num> Actual: <num>"
    )


# --- summary_key ----------------------------------------------------------------------------
def test_summary_key_is_sixteen_hex_digits_of_sha256() -> None:
    summary = "Error: expect(received).toBe(expected)"
    assert summary_key(summary) == hashlib.sha256(summary.encode()).hexdigest()[:16]
    assert len(summary_key(summary)) == 16
    assert summary_key(summary) != summary_key(summary + " ")


# --- mine_templates -------------------------------------------------------------------------
def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_variants_of_one_timeout_become_one_template() -> None:
    raw = [
        ("Timeout after 5021 ms waiting for host db-primary", 4, at(10)),
        ("Timeout after 4998 ms waiting for host db-replica", 2, at(30)),
        ("Timeout after 5003 ms waiting for host cache", 1, at(20)),
        ("Timeout after 5000 ms waiting for host 10.0.0.7", 1, at(25)),
        ("Timeout after 5012 ms waiting for host 10.0.0.9", 2, at(15)),
        ("KeyError: 'session'", 3, at(5)),
    ]
    counts = [FailureCount(normalise(text), n, last) for text, n, last in raw]
    assert mine_templates(counts) == [
        FailureTemplate("Timeout after <duration> waiting for host <*>", 10, at(30)),
        FailureTemplate("KeyError: 'session'", 3, at(5)),
    ]


def test_two_word_summaries_of_one_exception_type_make_one_template() -> None:
    keys = ["'cache_372'", "'user_528'", "'token_891'"]
    counts = [FailureCount(f"KeyError: {key}", 1, at(n)) for n, key in enumerate(keys)]
    counts.append(FailureCount("ValueError: 'cache_372'", 1, at(9)))
    assert mine_templates(counts) == [
        FailureTemplate("KeyError: <*>", 3, at(2)),
        FailureTemplate("ValueError: 'cache_372'", 1, at(9)),
    ]


def test_a_summary_alone_is_its_own_template() -> None:
    only = FailureCount("Timeout after <duration> waiting for host <ip>", 2, at(1))
    assert mine_templates([only]) == [FailureTemplate(only.summary, 2, at(1))]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("TypeError: x is <num>", "ValueError: x is <num>", id="first-token-differs"),
        pytest.param("a b c d e", "a x y z e", id="below-similarity"),
        pytest.param("timed out after <duration>", "timed out after <duration> twice", id="length"),
    ],
)
def test_summaries_that_are_not_alike_stay_apart(first: str, second: str) -> None:
    templates = mine_templates([FailureCount(first, 1, at(1)), FailureCount(second, 1, at(2))])
    assert sorted(t.summary for t in templates) == sorted([first, second])


def test_similarity_is_the_share_of_positions_that_agree() -> None:
    counts = [FailureCount("a b c d e", 1, at(1)), FailureCount("a x y d e", 1, at(2))]
    assert [t.summary for t in mine_templates(counts, similarity=0.6)] == ["a <*> <*> d e"]
    assert len(mine_templates(counts, similarity=0.61)) == 2


def test_the_most_common_come_first_then_the_latest_then_by_text() -> None:
    counts = [
        FailureCount("Alpha failed", 1, at(1)),
        FailureCount("Beta broke down", 5, at(1)),
        FailureCount("Gamma exploded loudly", 1, at(9)),
        FailureCount("Delta", 1, at(1)),
    ]
    got = [t.summary for t in mine_templates(counts, limit=3)]
    assert got == ["Beta broke down", "Gamma exploded loudly", "Alpha failed"]
    assert mine_templates(counts, limit=0) == []


def test_similarity_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="similarity"):
        mine_templates([], similarity=0.0)


# Few words and short summaries, so that summaries often half-agree and the greedy grouping
# would depend on the order it sees them in.
SUMMARIES = st.tuples(
    st.sampled_from(["Timeout", "Error:"]),
    st.lists(st.sampled_from(["a", "b", "c", "<num>"]), min_size=1, max_size=3),
).map(lambda parts: " ".join([parts[0], *parts[1]]))


def counts_of(summaries: st.SearchStrategy[str], *, max_size: int) -> st.SearchStrategy[Any]:
    return st.lists(
        st.builds(
            FailureCount,
            summary=summaries,
            count=st.integers(min_value=1, max_value=3),
            last_at=st.integers(min_value=0, max_value=3).map(at),
        ),
        max_size=max_size,
    )


COUNTS = counts_of(SUMMARIES, max_size=10)
# Taken in the order listed, "E a x y" and "E a b c" start two groups and "E a b y" joins the
# first; taken the other way round, all three make one group "E a <*> <*>".
ORDER_SENSITIVE = [
    FailureCount("E a x y", 1, at(1)),
    FailureCount("E a b c", 1, at(1)),
    FailureCount("E a b y", 1, at(1)),
]


def test_a_grouping_that_greedy_order_would_change_comes_out_one_way() -> None:
    results = {tuple(mine_templates(order)) for order in itertools.permutations(ORDER_SENSITIVE)}
    assert len(results) == 1


@given(COUNTS, st.randoms(use_true_random=False))
@settings(max_examples=300, deadline=None)
def test_templates_do_not_depend_on_the_input_order(
    counts: list[FailureCount], rng: Random
) -> None:
    shuffled = list(counts)
    rng.shuffle(shuffled)
    assert mine_templates(shuffled, limit=20) == mine_templates(counts, limit=20)


@given(COUNTS)
@settings(max_examples=300, deadline=None)
def test_every_summary_is_counted_once_under_a_template_that_covers_it(
    counts: list[FailureCount],
) -> None:
    templates = mine_templates(counts, limit=len(counts) + 1)
    assert sum(t.count for t in templates) == sum(c.count for c in counts)
    for item in counts:
        assert any(_covers(t.summary, item.summary) for t in templates)
    if counts:
        assert max(t.last_at for t in templates) == max(c.last_at for c in counts)


def _covers(template: str, summary: str) -> bool:
    pattern, tokens = template.split(), summary.split()
    return len(pattern) == len(tokens) and all(
        p in (t, "<*>") for p, t in zip(pattern, tokens, strict=True)
    )


# Summaries whose own text may hold the wildcard token ("<*>" written by a reporter).
WILD_SUMMARIES = st.lists(st.sampled_from(["E", "a", "b", "c", "<*>"]), min_size=1, max_size=5).map(
    " ".join
)


def _reference_templates(counts: list[FailureCount], similarity: float) -> list[FailureTemplate]:
    """mine_templates as its docstring says it, position by position, without shortcuts."""
    groups: list[list[Any]] = []  # [tokens, summary, count, last_at]
    for item in sorted(counts, key=lambda c: (-c.count, c.summary, c.last_at)):
        tokens = item.summary.split()
        best, best_score = None, -1.0
        for group in groups:
            if len(group[0]) != len(tokens) or group[0][:1] != tokens[:1]:
                continue
            agree = sum(1 for g, t in zip(group[0], tokens, strict=True) if g in (t, "<*>"))
            score = agree / len(tokens)
            if score >= similarity and score > best_score:
                best, best_score = group, score
        if best is None:
            groups.append([tokens, item.summary, item.count, item.last_at])
            continue
        merged = [g if g == t else "<*>" for g, t in zip(best[0], tokens, strict=True)]
        if merged != best[0]:
            best[0], best[1] = merged, " ".join(merged)
        best[2] += item.count
        best[3] = max(best[3], item.last_at)
    templates = sorted((FailureTemplate(g[1], g[2], g[3]) for g in groups), key=lambda t: t.summary)
    return sorted(templates, key=lambda t: (t.count, t.last_at), reverse=True)


@given(counts_of(WILD_SUMMARIES, max_size=12), st.sampled_from([0.4, 0.6, 0.8, 1.0]))
@settings(max_examples=400, deadline=None)
def test_templates_agree_with_the_position_by_position_definition(
    counts: list[FailureCount], similarity: float
) -> None:
    limit = len(counts) + 1
    assert mine_templates(counts, similarity=similarity, limit=limit) == _reference_templates(
        counts, similarity
    )


# --- absorb_failures: the templates an upload grows -------------------------------------------


def test_an_upload_grows_the_stored_template_it_matches_in_place() -> None:
    stored = [
        FailureTemplate("KeyError: 'session'", 3, at(5)),
        FailureTemplate("Timeout after <duration> waiting for host db-primary", 4, at(10)),
    ]
    new = [
        FailureCount("Timeout after <duration> waiting for host cache", 2, at(40)),
        FailureCount("ValueError: bad literal", 1, at(40)),
    ]
    assert absorb_failures(stored, new) == [
        stored[0],  # untouched, so the caller need not rewrite it
        FailureTemplate("Timeout after <duration> waiting for host <*>", 6, at(40)),
        FailureTemplate("ValueError: bad literal", 1, at(40)),  # new ones follow
    ]


def test_stored_templates_are_joined_but_never_merged_with_each_other() -> None:
    # Alike enough to have been one template, but stored apart (as a migration stores each
    # summary of the past): an upload adds to the first that fits best, not to both.
    stored = [FailureTemplate("E a b c", 1, at(1)), FailureTemplate("E a b d", 1, at(1))]
    grown = absorb_failures(stored, [FailureCount("E a b d", 2, at(2))])
    assert grown == [stored[0], FailureTemplate("E a b d", 3, at(2))]


@given(COUNTS, st.integers(min_value=0, max_value=10))
@settings(max_examples=300, deadline=None)
def test_absorbing_uploads_one_by_one_keeps_every_count_under_a_covering_template(
    counts: list[FailureCount], cut: int
) -> None:
    # Two uploads of one day: the second is mined into what the first stored.
    first, second = counts[:cut], counts[cut:]
    stored = absorb_failures([], first)
    grown = absorb_failures(stored, second)
    assert len(grown) >= len(stored)
    for before, after in zip(stored, grown, strict=False):
        assert _covers(after.summary, before.summary)
        assert after.count >= before.count
    assert sum(t.count for t in grown) == sum(c.count for c in counts)
    for item in counts:
        assert any(_covers(t.summary, item.summary) for t in grown)
    # Mined again for a listing, the stored templates give the listing's counts.
    listed = mine_templates([FailureCount(t.summary, t.count, t.last_at) for t in grown], limit=99)
    assert sum(t.count for t in listed) == sum(c.count for c in counts)


@given(COUNTS)
@settings(max_examples=200, deadline=None)
def test_absorbing_into_nothing_is_mining(counts: list[FailureCount]) -> None:
    assert sorted(absorb_failures([], counts), key=repr) == sorted(
        mine_templates(counts, limit=len(counts) + 1), key=repr
    )
