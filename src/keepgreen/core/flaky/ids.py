"""Test case ids: the UUIDv5 Trunk's uploader computes, so ids carry over between the two.

id = uuid5(NAMESPACE_URL, "#".join([org, repo, file, classname, parent, name, "JUNIT_TESTCASE"]))
with the variant appended when there is one, then (for computed ids) hashed once more as
uuid5(id "#" variant).
A custom `testcase@id` replaces the computed one: "trunk:..." ids are hashed with org and repo,
a v5 UUID is taken as it is (field notes §1.5, checked against the CLI's own test vectors).
"""

from __future__ import annotations

import uuid

_KIND = "JUNIT_TESTCASE"


def repo_full_name(host: str, owner: str, name: str) -> str:
    """`host/owner/name`, the form the ids are made of (e.g. github.com/trunk-io/trunk)."""
    return f"{host}/{owner}/{name}"


def _checksum(values: list[str]) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "#".join(values)))


def _is_v5_uuid(value: str) -> bool:
    try:
        return uuid.UUID(value).version == 5
    except ValueError:
        return False


def _base(
    org: str,
    repo: str,
    *,
    file: str | None,
    classname: str | None,
    parent: str | None,
    name: str | None,
    info_id: str | None,
    variant: str,
) -> str:
    tail = [variant] if variant else []
    if info_id and info_id.startswith("trunk:"):
        return _checksum([org, repo, info_id, *tail])
    if info_id and _is_v5_uuid(info_id):
        return _checksum([info_id, variant]) if variant else info_id
    values = [org, repo, file or "", classname or "", parent or "", name or "", _KIND]
    return _checksum(values + tail)


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

    def base(info_id: str | None) -> str:
        return _base(
            org,
            repo,
            file=file,
            classname=classname,
            parent=parent,
            name=name,
            info_id=info_id,
            variant=variant,
        )

    first = base(custom_id)
    # Trunk's wrapper hashes a second time only for computed ids with a variant.
    if not variant or custom_id is not None:
        return first
    return base(first)
