"""Each tool's JUnit dialect, from a copy of what it writes, reads into the results Trunk reads.

Rows are (name, classname, parent, file, outcome, attempt, message), in document order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from keepgreen.adapters.junit import parse_report
from keepgreen.core.flaky.results import CaseResult, Outcome

FIXTURES = Path(__file__).parent / "fixtures"
PASSED, FAILED, SKIPPED = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED

Row = tuple[str, str | None, str | None, str | None, Outcome, int, str | None]
XUNIT_MESSAGE = "Assert.Equal() Failure: Values differ\r\nExpected: 0\r\nActual:   1"


def parse_fixture(name: str) -> list[CaseResult]:
    return parse_report(name, (FIXTURES / name).read_bytes())


def rows(results: list[CaseResult]) -> list[Row]:
    return [
        (r.name, r.classname, r.parent, r.file, r.outcome, r.attempt, r.message) for r in results
    ]


def test_pytest_xunit1_keeps_file_and_reads_failure_error_and_skip() -> None:
    results = parse_fixture("pytest_xunit1.xml")

    cart, path = "tests.test_cart", "tests/test_cart.py"
    assertion = "assert 3 == 4\n +  where 3 = total([1, 2])"
    setup = 'failed on setup with "RuntimeError: no database"'
    assert rows(results) == [
        ("test_add", cart, "pytest", path, PASSED, 0, None),
        ("test_total", cart, "pytest", path, FAILED, 0, assertion),
        ("test_save", cart, "pytest", path, FAILED, 0, setup),
        ("test_refund", cart, "pytest", path, SKIPPED, 0, "payment sandbox not configured"),
    ]
    total = results[1]
    assert total.detail is not None
    assert total.detail.startswith("def test_total():\n>       assert total([1, 2]) == 4")
    assert total.detail.endswith("tests/test_cart.py:9: AssertionError")
    assert total.duration_ms == 2
    # pytest writes local time with its offset (+02:00 here); results are in UTC.
    assert {r.timestamp for r in results} == {datetime(2024, 5, 1, 12, 3, 12, 345678, tzinfo=UTC)}


def test_pytest_xunit2_has_no_file_and_a_teardown_error_after_a_failure_stays_one_result() -> None:
    results = parse_fixture("pytest_xunit2.xml")

    orders = "tests.test_orders"
    invoice = "AssertionError: invoice orders need an address"
    cancel = "assert 'open' == 'cancelled'\n  \n  - cancelled\n  + open"
    assert rows(results) == [
        ("test_place[card]", orders, "pytest", None, PASSED, 0, None),
        ("test_place[invoice]", orders, "pytest", None, FAILED, 0, invoice),
        # `failure` (call) then `error` (teardown) in one testcase: one failed run, the first
        # says why.
        ("test_cancel", orders, "pytest", None, FAILED, 0, cancel),
        ("test_export", orders, "pytest", None, SKIPPED, 0, "export drops the currency (SHOP-31)"),
        # A collection error: pytest writes classname="".
        ("tests.test_import", None, "pytest", None, FAILED, 0, "collection failure"),
    ]
    assert results[2].detail is not None
    assert "tests/test_orders.py:22: AssertionError" in results[2].detail
    assert "teardown" not in results[2].detail


def test_jest_junit_one_suite_per_describe_and_unicode_titles() -> None:
    results = parse_fixture("jest_junit.xml")

    cart = "src/cart.test.ts"
    grosse = "src/i18n/größe.test.ts"
    expect = "Error: expect(received).toBe(expected) // Object.is equality"
    assert rows(results) == [
        ("Cart adds an item", "Cart", "Cart", cart, PASSED, 0, None),
        ("Cart removes an item", "Cart", "Cart", cart, FAILED, 0, expect),
        ("Cart checks out", "Cart", "Cart", cart, SKIPPED, 0, None),
        ("Größe Anzeige zeigt 🍕 als Symbol", "Größe Anzeige", "Größe", grosse, PASSED, 0, None),
        ("Größe 表示 は正しく表示される", "Größe 表示", "Größe", grosse, PASSED, 0, None),
    ]
    # jest-junit writes no `message`: the message is the body's first line, the body is kept.
    assert results[1].detail is not None
    assert results[1].detail.endswith("at new Promise (<anonymous>)")
    # No offset in jest-junit's timestamps: read as UTC.
    assert results[0].timestamp == datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)


def test_surefire_reruns_and_flakes_become_numbered_attempts() -> None:
    results = parse_fixture("surefire.xml")

    cls = "com.acme.shop.CartTest"
    assert rows(results) == [
        ("addsItem", cls, cls, None, PASSED, 0, None),
        # Failed every run: `failure` is attempt 0, each rerun element one more.
        ("removesItem", cls, cls, None, FAILED, 0, "expected: <0> but was: <1>"),
        ("removesItem", cls, cls, None, FAILED, 1, "expected: <0> but was: <2>"),
        ("removesItem", cls, cls, None, FAILED, 2, "Connection refused"),
        # Passed on a rerun: the flaky runs first, the testcase's own run last.
        ("checksOut", cls, cls, None, FAILED, 0, "checkout did not finish within 30 seconds"),
        ("checksOut", cls, cls, None, FAILED, 1, "Connection reset"),
        ("checksOut", cls, cls, None, PASSED, 2, None),
        # No `message` on the flaky element: the first line of its stackTrace.
        ("appliesCoupon", cls, cls, None, FAILED, 0, "java.lang.AssertionError"),
        ("appliesCoupon", cls, cls, None, PASSED, 1, None),
    ]
    first, rerun, rerun_error = results[1:4]
    assert first.detail is not None
    assert first.detail.startswith(
        "org.opentest4j.AssertionFailedError: expected: <0> but was: <1>"
    )
    assert rerun.detail is not None
    assert rerun.detail.startswith(
        "org.opentest4j.AssertionFailedError: expected: <0> but was: <2>"
    )
    # The rerun's own system-out and system-err are not part of its trace.
    assert "cart 43" not in rerun.detail
    assert rerun_error.detail is not None
    assert "inventory service" not in rerun_error.detail
    # Surefire's times: the first failing run's, the last passing run's, grouped as "1,200.5".
    assert [r.duration_ms for r in results[1:4]] == [31, None, None]
    assert [r.duration_ms for r in results[4:7]] == [None, None, 1_200_500]
    # Surefire writes no timestamps.
    assert {r.timestamp for r in results} == {None}


def test_gotestsum_suite_per_package_and_subtests_by_slash() -> None:
    results = parse_fixture("gotestsum.xml")

    cart, money = "github.com/acme/shop/cart", "github.com/acme/shop/money"
    refund_output = (
        "=== RUN   TestRefund\n    refund_test.go:12: needs a payment sandbox\n"
        "--- SKIP: TestRefund (0.00s)\n"
    )
    assert rows(results) == [
        ("TestAdd", cart, cart, None, PASSED, 0, None),
        ("TestCheckout/empty_cart", cart, cart, None, FAILED, 0, "Failed"),
        ("TestCheckout", cart, cart, None, FAILED, 0, "Failed"),
        ("TestRefund", cart, cart, None, SKIPPED, 0, refund_output),
        ("TestRound", money, money, None, PASSED, 0, None),
        ("TestRound/half_even", money, money, None, PASSED, 0, None),
    ]
    assert results[1].detail == (
        "=== RUN   TestCheckout/empty_cart\n    cart_test.go:42: got 1 line, want 0\n"
        "--- FAIL: TestCheckout/empty_cart (0.01s)"
    )
    assert results[1].duration_ms == 10
    assert results[0].timestamp == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_go_junit_report_cdata_bodies_and_suite_id_is_not_a_test_id() -> None:
    results = parse_fixture("go_junit_report.xml")

    cart = "github.com/acme/shop/cart"
    assert rows(results) == [
        ("TestAdd", cart, cart, None, PASSED, 0, None),
        ("TestCheckout", cart, cart, None, FAILED, 0, "Failed"),
        ("TestRefund", cart, cart, None, SKIPPED, 0, "Skipped"),
    ]
    # CDATA body, with Go's indentation kept.
    assert results[1].detail == "    cart_test.go:42: got 1 line, want 0"
    assert results[2].detail == "    refund_test.go:12: needs a payment sandbox"
    # `testsuite id="0"` is the suite's; only `testcase@id` is a custom test id.
    assert {r.custom_id for r in results} == {None}
    assert results[0].timestamp == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_gradle_testsuite_root_skips_and_ignores_system_out() -> None:
    results = parse_fixture("gradle.xml")

    cls = "com.acme.shop.CheckoutTest"
    assertion = "org.opentest4j.AssertionFailedError: expected: <0> but was: <1>"
    assert rows(results) == [
        ("addsItem()", cls, cls, None, PASSED, 0, None),
        ("[1] EUR, 2", cls, cls, None, PASSED, 0, None),
        ("removesItem()", cls, cls, None, FAILED, 0, assertion),
        ("checksOut()", cls, cls, None, SKIPPED, 0, None),
    ]
    assert results[2].duration_ms == 195
    assert results[2].detail is not None
    assert results[2].detail.endswith("(CheckoutTest.kt:31)")
    assert not any("opening cart" in (r.detail or "") for r in results)


def test_junit5_console_launcher_jupiter_suite_and_disabled_reason() -> None:
    results = parse_fixture("junit5_jupiter.xml")

    cls, suite = "com.acme.shop.CartTest", "JUnit Jupiter"
    disabled = "void com.acme.shop.CartTest.checksOut() is @Disabled"
    assert rows(results) == [
        ("addsItem()", cls, suite, None, PASSED, 0, None),
        ("removesItem()", cls, suite, None, FAILED, 0, "expected: <0> but was: <1>"),
        # The reason is the CDATA body of `skipped`, not an attribute.
        ("checksOut()", cls, suite, None, SKIPPED, 0, disabled),
    ]
    assert results[1].detail is not None
    assert "unique-id" not in results[1].detail


def test_junit5_console_launcher_vintage_suite() -> None:
    results = parse_fixture("junit5_vintage.xml")

    cls, suite = "com.acme.shop.LegacyCartTest", "JUnit Vintage"
    missing = "/data/legacy.csv (No such file or directory)"
    assert rows(results) == [
        ("legacyTotal", cls, suite, None, PASSED, 0, None),
        ("legacyImport", cls, suite, None, FAILED, 0, missing),
    ]


def test_dotnet_junit_xml_test_logger_with_bom_and_crlf_messages() -> None:
    results = parse_fixture("dotnet_junitxml_logger.xml")

    cls, suite = "Acme.Shop.Tests.CartTests", "Acme.Shop.Tests.dll"
    assert rows(results) == [
        ("AddsItem", cls, suite, None, PASSED, 0, None),
        ("RemovesItem(count: 2)", cls, suite, None, FAILED, 0, XUNIT_MESSAGE),
        ("ChecksOut", cls, suite, None, SKIPPED, 0, "Needs a payment sandbox"),
    ]
    assert results[1].duration_ms == 45  # 0.0453 s


def test_dotnet_trx2junit_suite_per_class() -> None:
    results = parse_fixture("dotnet_trx2junit.xml")

    cls = "Acme.Shop.Tests.CartTests"
    assert rows(results) == [
        ("AddsItem", cls, cls, None, PASSED, 0, None),
        ("RemovesItem(count: 2)", cls, cls, None, FAILED, 0, XUNIT_MESSAGE),
        ("ChecksOut", cls, cls, None, SKIPPED, 0, None),
    ]


def test_bazel_java_test_xml_with_single_quoted_attributes() -> None:
    results = parse_fixture("bazel_java.xml")

    cls = "com.acme.shop.CartTest"
    assert rows(results) == [
        ("addsItem", cls, cls, None, PASSED, 0, None),
        ("removesItem", cls, cls, None, FAILED, 0, "expected:<0> but was:<1>"),
    ]
    assert results[0].timestamp == datetime(2024, 5, 1, 12, 0, 13, 511000, tzinfo=UTC)


def test_bazel_generated_xml_for_a_target_without_junit_output() -> None:
    results = parse_fixture("bazel_generated.xml")

    target = "src/shop/cart_test"
    assert rows(results) == [(target, None, target, None, FAILED, 0, "exited with error code 1")]
    assert results[0].duration_ms == 3000
    # The log is in the suite's system-out, which is not read; the error element is empty.
    assert results[0].detail is None


def test_phpunit_nested_suites_give_the_outermost_suite_as_parent() -> None:
    results = parse_fixture("phpunit_nested.xml")

    cart_file = "/home/runner/work/shop/shop/tests/Unit/CartTest.php"
    price_file = "/home/runner/work/shop/shop/tests/Unit/PriceTest.php"
    cart_cls, price_cls = "Tests.Unit.CartTest", "Tests.Unit.PriceTest"
    # PHPUnit writes no `message`: the first line of the body names the test.
    total = "Tests\\Unit\\CartTest::testTotal"
    # The outermost suite is PHPUnit's `name=""`: no parent, at any depth (as Trunk reads it).
    assert rows(results) == [
        ("testTotal", cart_cls, None, cart_file, FAILED, 0, total),
        ("testAdds with data set #0", cart_cls, None, cart_file, PASSED, 0, None),
        ('testAdds with data set "two items"', cart_cls, None, cart_file, PASSED, 0, None),
        ("testRounds", price_cls, None, price_file, PASSED, 0, None),
    ]
