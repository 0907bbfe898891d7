"""Test ids match the vectors of Trunk's own uploader (context/src/meta/id.rs)."""

import pytest

from keepgreen.core.flaky.ids import make_test_id, repo_full_name

EXAMPLE = {
    "file": "src/lib.rs",
    "classname": "ExampleClass",
    "parent": "parent/fact/path",
    "name": "example_name",
}
STAGING = "modules/settings/repoName/__tests__/ticketing-integration.vitest.tsx"


@pytest.mark.parametrize(
    ("custom_id", "variant", "expected"),
    [
        (None, "", "06cb6db5-f807-5198-b072-af67a0636f8a"),
        (None, "unix", "1bf61475-b542-5faf-aa85-e66a691257a3"),
        ("trunk:12345", "unix", "4392f63c-8dc9-5cec-bbdc-e7b90c2e5a6b"),
        ("a6e84936-3ee9-57d5-b041-ae124896f654", "", "a6e84936-3ee9-57d5-b041-ae124896f654"),
        ("a6e84936-3ee9-57d5-b041-ae124896f654", "unix", "8057218b-95e4-5373-afbe-c366d4058615"),
    ],
)
def test_published_vectors(custom_id: str | None, variant: str, expected: str) -> None:
    got = make_test_id(
        "example_org", "example_repo", **EXAMPLE, custom_id=custom_id, variant=variant
    )
    assert got == expected


def test_real_staging_test() -> None:
    got = make_test_id(
        "trunk-staging-org",
        repo_full_name("github.com", "trunk-io", "trunk"),
        file=None,
        classname=STAGING,
        parent=STAGING,
        name="Ticketing Integration > should allow you to select a ticketing system",
    )
    assert got == "3f507aef-e834-523b-a8ad-edaba6b137be"


def test_a_v4_custom_id_is_ignored_and_the_id_computed() -> None:
    computed = make_test_id("example_org", "example_repo", **EXAMPLE)
    with_v4 = make_test_id(
        "example_org", "example_repo", **EXAMPLE, custom_id="08e1c642-3a55-45cf-8bf9-b9d0b21785dd"
    )
    assert with_v4 == computed


def test_every_identity_field_changes_the_id() -> None:
    base = make_test_id("org", "h/o/n", **EXAMPLE)
    for field, value in EXAMPLE.items():
        changed = {**EXAMPLE, field: value + "x"}
        assert make_test_id("org", "h/o/n", **changed) != base
    assert make_test_id("org2", "h/o/n", **EXAMPLE) != base
    assert make_test_id("org", "h/o/m", **EXAMPLE) != base
