"""Each test's identity, and so its id, is the one Trunk's uploader gives it.

The reports are the inputs of Trunk's own parser tests and fixtures (trunk-io/analytics-cli at
fcbc1bd: context/src/junit/parser.rs, context-py/tests/test_junit_parse.py, cli/test_fixtures,
xcresult/tests/data); the fields are the ones those tests assert, and each id is what Trunk's
gen_info_id makes of them, written out here with uuid.uuid5 (field notes §1.5).
"""

from __future__ import annotations

import uuid

from keepgreen.adapters.junit import parse_report
from keepgreen.core.flaky.ids import make_test_id, repo_full_name
from keepgreen.core.flaky.results import CaseResult, Outcome

ORG = "org-url-slug"
REPO = repo_full_name("repo-host", "repo-owner", "repo-name")
PHPUNIT_XML = "/home/runner/work/flake-farm/flake-farm/php/phpunit/phpunit.xml"
EMAIL_TEST = "/home/runner/work/flake-farm/flake-farm/php/phpunit/tests/EmailTest.php"


def parse(xml: str) -> list[CaseResult]:
    return parse_report("junit.xml", xml.encode())


def trunk_id(file: str, classname: str, parent: str, name: str, *, variant: str = "") -> str:
    """gen_info_id for a testcase without a custom id: the inputs as Trunk's parser reads
    them ("" for what is missing).
    """
    values = [ORG, REPO, file, classname, parent, name, "JUNIT_TESTCASE"]
    base = str(uuid.uuid5(uuid.NAMESPACE_URL, "#".join(values + ([variant] if variant else []))))
    return base if not variant else str(uuid.uuid5(uuid.NAMESPACE_URL, f"{base}#{variant}"))


def id_of(result: CaseResult, *, variant: str = "") -> str:
    return make_test_id(
        ORG,
        REPO,
        file=result.file,
        classname=result.classname,
        parent=result.parent,
        name=result.name,
        custom_id=result.custom_id,
        variant=variant,
    )


def test_into_test_case_runs() -> None:
    results = parse(
        """<?xml version="1.0" encoding="UTF-8"?>
        <testsuites>
            <testsuite name="testsuite" timestamp="2023-10-01T12:00:00Z" time="0.002">
                <testcase file="test.java" line="5" classname="test" name="test_variant_truncation1" time="0.001">
                    <failure message="Test failed" type="java.lang.AssertionError">
                        <![CDATA[Expected: <true> but was: <false>]]>
                    </failure>
                </testcase>
                <testcase file="test.java" name="test_variant_truncation2" time="0.001">
                    <failure message="Test failed"/>
                </testcase>
            </testsuite>
        </testsuites>
        """  # noqa: E501  # Trunk's test's report, as it is
    )

    first, second = results
    assert (first.name, first.parent, first.classname, first.file) == (
        "test_variant_truncation1",
        "testsuite",
        "test",
        "test.java",
    )
    assert (first.outcome, first.message) == (Outcome.FAILED, "Test failed")
    # Trunk trims every text; the body keeps its first line's indentation here (Go's and
    # pytest's output have some of meaning), which is all the difference.
    assert first.detail is not None
    assert first.detail.strip() == "Expected: <true> but was: <false>"
    # Trunk's started_at (1696161600, the suite's timestamp) and its 1 ms.
    assert first.timestamp is not None
    assert (first.timestamp.timestamp(), first.duration_ms) == (1696161600, 1)
    # The id Trunk's test finds quarantined: gen_info_id_base of these very fields.
    assert id_of(first) == trunk_id("test.java", "test", "testsuite", "test_variant_truncation1")
    assert (second.classname, second.file, second.message) == (None, "test.java", "Test failed")
    assert id_of(second) == trunk_id("test.java", "", "testsuite", "test_variant_truncation2")


def test_into_test_case_runs_mixed_ids() -> None:
    # A custom id that is neither "trunk:..." nor a v5 UUID is kept, and the id is computed.
    results = parse(
        """<testsuites>
            <testsuite name="testsuite" timestamp="2023-10-01T12:00:00Z" time="0.002">
                <testcase id="xcresult-uuid-abcd" file="test.swift" classname="TestClass" name="test_with_id" time="0.001">
                </testcase>
                <testcase file="test.swift" classname="TestClass" name="test_without_id" time="0.001">
                </testcase>
            </testsuite>
        </testsuites>"""  # noqa: E501  # Trunk's test's report, as it is
    )

    assert [(r.name, r.custom_id) for r in results] == [
        ("test_with_id", "xcresult-uuid-abcd"),
        ("test_without_id", None),
    ]
    assert [id_of(r) for r in results] == [
        trunk_id("test.swift", "TestClass", "testsuite", "test_with_id"),
        trunk_id("test.swift", "TestClass", "testsuite", "test_without_id"),
    ]


def test_into_test_case_runs_with_variant() -> None:
    [result] = parse(
        """<testsuites>
            <testsuite name="testsuite" timestamp="2023-10-01T12:00:00Z" time="0.002">
                <testcase id="trunk:123" file="test.java" classname="TestClass" name="test_with_variant" time="0.001">
                </testcase>
            </testsuite>
        </testsuites>"""  # noqa: E501  # Trunk's test's report, as it is
    )

    base = uuid.uuid5(uuid.NAMESPACE_URL, f"{ORG}#{REPO}#trunk:123#test-variant")
    assert result.custom_id == "trunk:123"
    assert id_of(result, variant="test-variant") == str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"{base}#test-variant")
    )


def test_into_test_case_runs_with_suite_level_file_and_filepath() -> None:
    results = parse(
        """<testsuites>
            <testsuite name="testsuite" file="suite_file.java" timestamp="2023-10-01T12:00:00Z" time="0.002">
                <testcase classname="TestClass" name="test_without_file" time="0.001">
                </testcase>
                <testcase file="testcase_file.java" classname="TestClass" name="test_with_file" time="0.001">
                </testcase>
            </testsuite>
            <testsuite name="testsuite" filepath="path/to/suite_file.java" timestamp="2023-10-01T12:00:00Z" time="0.002">
                <testcase classname="TestClass" name="test_without_file" time="0.001">
                </testcase>
            </testsuite>
        </testsuites>"""  # noqa: E501  # Trunk's tests' reports, as they are, in one
    )

    assert [(r.name, r.file) for r in results] == [
        ("test_without_file", "suite_file.java"),
        ("test_with_file", "testcase_file.java"),
        ("test_without_file", "path/to/suite_file.java"),
    ]
    assert id_of(results[0]) == trunk_id(
        "suite_file.java", "TestClass", "testsuite", "test_without_file"
    )


def test_nested_testsuites_take_the_outermost_suite_as_parent() -> None:
    # context-py's test_junit_parse_nested_testsuites: PHPUnit's suites of suites.
    timestamp = "2024-05-01T12:00:00+00:00"
    results = parse(
        f"""<?xml version="1.0" encoding="UTF-8"?>
    <testsuites>
      <testsuite name="{PHPUNIT_XML}" tests="2" assertions="2" errors="0" failures="0" skipped="0" time="0.001161" timestamp="{timestamp}">
          <testsuite name="Project Test Suite" tests="2" assertions="2" errors="0" failures="0" skipped="0" time="0.001161" timestamp="{timestamp}">
              <testsuite name="" file="{EMAIL_TEST}" tests="2" assertions="2" errors="0" failures="0" skipped="0" time="0.001161" timestamp="{timestamp}">
                  <testcase name="testCanBeCreatedFromValidEmail" file="{EMAIL_TEST}" line="6" class="EmailTest" classname="EmailTest" assertions="1" time="0.000860"/>
                  <testcase name="testCannotBeCreatedFromInvalidEmail" file="{EMAIL_TEST}" line="15" class="EmailTest" classname="EmailTest" assertions="1" time="0.000301"/>
              </testsuite>
          </testsuite>
      </testsuite>
    </testsuites>
    """  # noqa: E501  # Trunk's test's report, as it is
    )

    assert [(r.parent, r.outcome) for r in results] == [(PHPUNIT_XML, Outcome.PASSED)] * 2
    assert id_of(results[0]) == trunk_id(
        EMAIL_TEST, "EmailTest", PHPUNIT_XML, "testCanBeCreatedFromValidEmail"
    )


def test_the_first_failure_says_why_and_a_blank_error_after_it_adds_nothing() -> None:
    # context-py's test_junit_parse_valid.
    [result] = parse(
        """
    <testsuites name="my-test-run" tests="1" failures="1" errors="0">
      <testsuite name="my-test-suite" tests="1" disabled="0" errors="0" failures="1" timestamp="2024-05-01T12:00:00+00:00">
        <testcase name="failure-case" file="test.py" classname="MyClass" timestamp="2024-05-01T12:00:00+00:00" time="1">
          <failure message="AssertionError: assert 'testdata' in '# estdata'">
            FAILURE BODY
          </failure>
          <system-out/>
          <system-err/>
          <error message="       " type="">
            <!-- Example of a test case with empty error text. -->
          </error>
        </testcase>
      </testsuite>
    </testsuites>
   """  # noqa: E501  # Trunk's test's report, as it is
    )

    assert (result.outcome, result.message, result.detail) == (
        Outcome.FAILED,
        "AssertionError: assert 'testdata' in '# estdata'",
        "            FAILURE BODY",
    )
    assert id_of(result) == trunk_id("test.py", "MyClass", "my-test-suite", "failure-case")


def test_the_cli_fixture_of_two_googletest_suites() -> None:
    # cli/test_fixtures/junit1_fail.xml.
    results = parse(
        """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" failures="1" disabled="0" errors="0" time="0.001" timestamp="2024-12-10T03:00:00.000" name="AllTests">
  <testsuite name="HelloTest" tests="1" failures="1" disabled="0" skipped="0" errors="0" time="0.001" timestamp="2024-12-10T03:00:00.000">
    <testcase name="Hello" file="trunk/hello_world/cc/hello_test.cc" line="9" status="run" result="completed" time="0.001" timestamp="2024-12-10T03:00:00.000" classname="HelloTest">
      <failure message="Failure at 3:00"/>
    </testcase>
  </testsuite>
  <testsuite name="GoodbyeTest" tests="1" failures="1" disabled="0" skipped="0" errors="0" time="0.001" timestamp="2024-12-10T05:00:00.000">
    <testcase name="Goodbye" file="trunk/hello_world/cc/hello_test.cc" line="9" status="run" result="completed" time="0.001" timestamp="2024-12-10T05:00:00.000" classname="HelloTest">
      <failure message="Failure at 5:00"/>
    </testcase>
  </testsuite>
</testsuites>
"""  # noqa: E501  # Trunk's fixture, as it is
    )

    cc = "trunk/hello_world/cc/hello_test.cc"
    assert [(r.name, r.parent, r.outcome, r.message) for r in results] == [
        ("Hello", "HelloTest", Outcome.FAILED, "Failure at 3:00"),
        ("Goodbye", "GoodbyeTest", Outcome.FAILED, "Failure at 5:00"),
    ]
    assert [id_of(r) for r in results] == [
        trunk_id(cc, "HelloTest", "HelloTest", "Hello"),
        trunk_id(cc, "HelloTest", "GoodbyeTest", "Goodbye"),
    ]


def test_xcresults_v5_ids_are_the_ids() -> None:
    # xcresult/tests/data/test-swift-without-test-suites.junit.xml: the converter writes each
    # test's v5 UUID as its `id`, which Trunk takes as it is, or hashes with a variant.
    results = parse(
        """<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="xcresult: swift testing example" tests="2" failures="1" errors="0">
    <testsuite name="swift testing exampleTests" tests="2" disabled="0" errors="0" failures="1">
        <testcase name="helloWorld()" classname="helloWorld()" timestamp="2025-02-18T17:00:29.234+00:00" time="0.000" id="7ecfda2a-0be3-5d89-baa8-55a4db82dbc3">
        </testcase>
        <testcase name="helloWorldInvalid()" classname="helloWorldInvalid()" timestamp="2025-02-18T17:00:29.234+00:00" time="0.001" id="5bc0c7dc-c9a3-56ce-9f89-0161d851e2e2" file="/Users/work/src/swift-testing/swift%20testing%20example/swift%20testing%20exampleTests/swift_testing_exampleTests.swift">
            <failure message="swift_testing_exampleTests.swift:19: Expectation failed: (greeting → &quot;Hello, world!&quot;) == &quot;Hello&quot;"/>
        </testcase>
    </testsuite>
</testsuites>
"""  # noqa: E501  # Trunk's fixture, as it is
    )

    ids = ["7ecfda2a-0be3-5d89-baa8-55a4db82dbc3", "5bc0c7dc-c9a3-56ce-9f89-0161d851e2e2"]
    assert [id_of(r) for r in results] == ids
    # With a variant, the v5 id is hashed with it, and (as every id with a variant) once more.
    hashed = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"{test_id}#ios")) for test_id in ids]
    assert [id_of(r, variant="ios") for r in results] == [
        str(uuid.uuid5(uuid.NAMESPACE_URL, f"{once}#ios")) for once in hashed
    ]
    assert results[1].message == (
        'swift_testing_exampleTests.swift:19: Expectation failed: (greeting → "Hello, world!")'
        ' == "Hello"'
    )


def test_attributes_are_trimmed_as_trunks_parser_trims_them() -> None:
    [result] = parse(
        '<testsuites><testsuite name=" suite "><testcase name="  adds an item "'
        ' classname=" Cart " file=" src/cart.test.ts "/></testsuite></testsuites>'
    )

    assert (result.name, result.classname, result.parent, result.file) == (
        "adds an item",
        "Cart",
        "suite",
        "src/cart.test.ts",
    )
    assert id_of(result) == trunk_id("src/cart.test.ts", "Cart", "suite", "adds an item")


def test_a_testcase_without_a_name_has_trunks_id_for_an_empty_name() -> None:
    # Trunk's parser flags the report ("could not parse test case name") and keeps the test.
    [result] = parse(
        '<testsuites><testsuite name="com.acme.CartTest">'
        '<testcase classname="com.acme.CartTest" time="0"><error message="boom"/></testcase>'
        "</testsuite></testsuites>"
    )

    assert (result.name, result.outcome) == ("", Outcome.FAILED)
    assert id_of(result) == trunk_id("", "com.acme.CartTest", "com.acme.CartTest", "")


def test_a_testcase_outside_any_suite_is_kept_with_the_id_of_an_empty_parent() -> None:
    # Trunk's parser drops it ("test case found without a test suite found"); it is kept here,
    # with the id Trunk's formula gives it.
    [result] = parse('<testsuites><testcase name="loose" classname="c"/></testsuites>')

    assert result.parent is None
    assert id_of(result) == trunk_id("", "c", "", "loose")
