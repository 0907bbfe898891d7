"""Test case ids: the UUIDv5 Trunk's uploader computes, so ids carry over between the two.

This is `gen_info_id` of Trunk's CLI (context/src/meta/id.rs, field notes §1.5):

    base = uuid5(NAMESPACE_URL, "#".join([org, repo, file, classname, parent, name,
                                          "JUNIT_TESTCASE"] + [variant if any]))

A custom `testcase@id` replaces the computed base: a "trunk:..." id is hashed with org, repo
(and variant), a v5 UUID is taken as it is (hashed with the variant when there is one), any
other id is ignored. With a variant the id is hashed once more, as uuid5(base "#" variant),
custom or not.

The hash is SHA-1 over the namespace's bytes and the name (RFC 9562 §5.5), written out here
rather than through uuid.uuid5: a report holds up to 200,000 tests, and building UUID objects
took four times as long as the hash itself.
"""

from __future__ import annotations

import hashlib
import re

_KIND = "JUNIT_TESTCASE"
# SHA-1 makes an id here, as RFC 9562 defines UUIDv5, not a secret (and the keyword saying so
# costs a fifth of the call).
_sha1 = hashlib.sha1
_NAMESPACE_URL = bytes.fromhex("6ba7b8119dad11d180b400c04fd430c8")  # uuid.NAMESPACE_URL
# The variant digit of a UUID: its two top bits are 10, the other two come from the hash.
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}

# What Rust's Uuid::parse_str reads: simple, hyphenated, braced or URN; the version is the
# 13th hex digit whatever the variant bits say.
_HEX = "[0-9A-Fa-f]"
_V5_HYPHENATED = rf"{_HEX}{{8}}-{_HEX}{{4}}-5{_HEX}{{3}}-{_HEX}{{4}}-{_HEX}{{12}}"
_V5_UUID = re.compile(
    rf"{_HEX}{{12}}5{_HEX}{{19}}|{_V5_HYPHENATED}|\{{{_V5_HYPHENATED}\}}|urn:uuid:{_V5_HYPHENATED}"
)


def repo_full_name(host: str, owner: str, name: str) -> str:
    """`host/owner/name`, the form the ids are made of (e.g. github.com/trunk-io/trunk)."""
    return f"{host}/{owner}/{name}"


def uuid5_url(name: str) -> str:
    """str(uuid.uuid5(uuid.NAMESPACE_URL, name)), computed without UUID objects."""
    digest = _sha1(_NAMESPACE_URL + name.encode()).hexdigest()
    variant = _VARIANT_DIGIT[digest[16]]
    return f"{digest[:8]}-{digest[8:12]}-5{digest[13:16]}-{variant}{digest[17:20]}-{digest[20:32]}"


def make_test_id(
    org: str,
    repo: str,
    *,
    file: str | None,
    classname: str | None,
    parent: str | None,
    name: str | None,
    custom_id: str | None = None,
    variant: str = "",
) -> str:
    """The test case's id within org slug `org` and repository `repo` (see repo_full_name)."""
    if not custom_id and not variant:
        # Nearly every test: one hash of the identity fields, uuid5_url written out for speed.
        key = f"{org}#{repo}#{file or ''}#{classname or ''}#{parent or ''}#{name or ''}#{_KIND}"
        digest = _sha1(_NAMESPACE_URL + key.encode()).hexdigest()
        variant_digit = _VARIANT_DIGIT[digest[16]]
        return (
            f"{digest[:8]}-{digest[8:12]}-5{digest[13:16]}-{variant_digit}{digest[17:20]}-"
            f"{digest[20:32]}"
        )
    fields = (org, repo, file or "", classname or "", parent or "", name or "", _KIND)
    first = _base(org, repo, fields, info_id=custom_id, variant=variant)
    if not variant:
        return first
    return _base(org, repo, fields, info_id=first, variant=variant)


def _base(
    org: str, repo: str, fields: tuple[str, ...], *, info_id: str | None, variant: str
) -> str:
    """Trunk's gen_info_id_base: the custom id's hash when it counts, else the hash of
    `fields` (org, repo, file, classname, parent, name and "JUNIT_TESTCASE", "" for None).
    """
    tail = (variant,) if variant else ()
    if info_id:
        if info_id.startswith("trunk:"):
            return uuid5_url("#".join((org, repo, info_id, *tail)))
        if _V5_UUID.fullmatch(info_id):
            return uuid5_url(f"{info_id}#{variant}") if variant else info_id
    return uuid5_url("#".join((*fields, *tail)))
