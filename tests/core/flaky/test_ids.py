"""Test ids match the vectors of Trunk's own uploader (context/src/meta/id.rs, its bindings'
tests and bundle/src/types.rs), and uuid.uuid5 wherever they are hashed."""

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepgreen.core.flaky.ids import _base, make_test_id, repo_full_name, uuid5_url

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
        # With a variant, gen_info_id hashes the base id once more, custom or not: these are
        # its results in context-js/tests/meta.test.ts (4392f63c-... and 8057218b-... are the
        # bases, gen_info_id_base's).
        ("trunk:12345", "unix", "db8c5727-0fe9-560f-863f-7f3ee68df425"),
        ("a6e84936-3ee9-57d5-b041-ae124896f654", "", "a6e84936-3ee9-57d5-b041-ae124896f654"),
        ("a6e84936-3ee9-57d5-b041-ae124896f654", "unix", "931cae54-0fcd-56eb-8eac-afa833699e53"),
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


# --- Trunk's other vectors: bundle/src/types.rs, Test::new with and without custom ids ---


@pytest.mark.parametrize(
    ("custom_id", "expected"),
    [
        (None, "aad1f138-09ab-5ea9-9c21-af48a03d6edd"),
        ("aad1f138-09ab-5ea9-9c21-af48a03d6edd", "aad1f138-09ab-5ea9-9c21-af48a03d6edd"),
        ("trunk:example-id", "208beb01-6179-546e-b0dd-8502e24ae85c"),
    ],
)
def test_trunk_test_new_vectors(custom_id: str | None, expected: str) -> None:
    got = make_test_id(
        "org_slug",
        repo_full_name("host", "owner", "name"),
        file="file",
        classname="class_name",
        parent="parent_name",
        name="test_name",
        custom_id=custom_id,
    )

    assert got == expected


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("", "1defca6d-177c-5958-b1df-4c4da091b71a"),
        ("quarantined", "941fb8fd-93eb-5370-894b-734b16d8b2f0"),
    ],
)
def test_trunk_rspec_vectors(variant: str, expected: str) -> None:
    got = make_test_id(
        "test-org",
        repo_full_name("github.com", "test-org", "rspec"),
        file=None,
        classname=None,
        parent="parent_name",
        name="test_name",
        custom_id="trunk:./spec/example_spec.rb[2:1]-./spec/example_spec.rb:28",
        variant=variant,
    )

    assert got == expected


@pytest.mark.parametrize(
    "custom_id",
    [
        "a6e84936-3ee9-57d5-b041-ae124896f654",
        "A6E84936-3EE9-57D5-B041-AE124896F654",
        "a6e849363ee957d5b041ae124896f654",
        "{a6e84936-3ee9-57d5-b041-ae124896f654}",
        "urn:uuid:a6e84936-3ee9-57d5-b041-ae124896f654",
        # Rust's Uuid reads the version digit whatever the variant bits: still version 5.
        "a6e84936-3ee9-57d5-0041-ae124896f654",
    ],
)
def test_every_form_rust_reads_as_a_v5_uuid_is_taken_as_the_id(custom_id: str) -> None:
    assert make_test_id("o", "r", **EXAMPLE, custom_id=custom_id) == custom_id


@pytest.mark.parametrize(
    "custom_id",
    [
        "a6e84936-3ee9-47d5-b041-ae124896f654",  # version 4
        "a6e8-4936-3ee9-57d5-b041-ae124896f654",  # hyphens where Rust wants none
        "{a6e849363ee957d5b041ae124896f654}",  # braces around the simple form
        " a6e84936-3ee9-57d5-b041-ae124896f654",  # Python's UUID() would strip this
        "URN:UUID:a6e84936-3ee9-57d5-b041-ae124896f654",
        "",
    ],
)
def test_ids_rust_does_not_read_as_v5_uuids_are_ignored(custom_id: str) -> None:
    computed = make_test_id("o", "r", **EXAMPLE)

    assert make_test_id("o", "r", **EXAMPLE, custom_id=custom_id) == computed


# --- the hash, against uuid.uuid5 ---


@given(st.text())
def test_uuid5_url_is_uuid5_of_the_url_namespace(name: str) -> None:
    assert uuid5_url(name) == str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def reference_id(
    org: str,
    repo: str,
    fields: tuple[str | None, str | None, str | None, str | None],
    custom_id: str | None,
    variant: str,
) -> str:
    """gen_info_id as the field notes (§1.5) write it, on uuid.uuid5."""

    def checksum(values: list[str]) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "#".join(values)))

    def base(info_id: str | None) -> str:
        tail = [variant] if variant else []
        if info_id and info_id.startswith("trunk:"):
            return checksum([org, repo, info_id, *tail])
        if info_id and re.fullmatch(
            r"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", info_id
        ):
            return checksum([info_id, variant]) if variant else info_id
        return checksum([org, repo, *(field or "" for field in fields), "JUNIT_TESTCASE", *tail])

    first = base(custom_id)
    return base(first) if variant else first


optional_text = st.none() | st.text(max_size=30)


@given(
    org=st.text(max_size=20),
    repo=st.text(max_size=30),
    fields=st.tuples(optional_text, optional_text, optional_text, optional_text),
    custom_id=st.none()
    | st.text(max_size=20)
    | st.builds(lambda tail: f"trunk:{tail}", st.text(max_size=20))
    | st.builds(lambda name: str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), st.text(max_size=10))
    | st.builds(lambda: str(uuid.uuid4())),
    variant=st.sampled_from(["", "linux", "unix"]) | st.text(max_size=10),
)
def test_make_test_id_is_gen_info_id_on_uuid5(
    org: str,
    repo: str,
    fields: tuple[str | None, str | None, str | None, str | None],
    custom_id: str | None,
    variant: str,
) -> None:
    file, classname, parent, name = fields

    got = make_test_id(
        org,
        repo,
        file=file,
        classname=classname,
        parent=parent,
        name=name,
        custom_id=custom_id,
        variant=variant,
    )

    assert got == reference_id(org, repo, fields, custom_id, variant)


@pytest.mark.parametrize(
    ("custom_id", "expected"),
    [
        (None, "c869cb93-66e2-516d-a0ea-15ff4b413c3f"),
        ("trunk:12345", "4392f63c-8dc9-5cec-bbdc-e7b90c2e5a6b"),
        ("a6e84936-3ee9-57d5-b041-ae124896f654", "8057218b-95e4-5373-afbe-c366d4058615"),
    ],
)
def test_gen_info_id_base_vectors_with_a_variant(custom_id: str | None, expected: str) -> None:
    # The first of the two hashes a variant takes (gen_info_id_base in Trunk's CLI), which
    # make_test_id does not return on its own: checked through the function that computes it.
    fields = (
        "example_org",
        "example_repo",
        "src/lib.rs",
        "ExampleClass",
        "parent/fact/path",
        "example_name",
        "JUNIT_TESTCASE",
    )

    got = _base("example_org", "example_repo", fields, info_id=custom_id, variant="unix")

    assert got == expected
