"""What Trunk's uploader (trunk-analytics-cli) sends, made the way it makes it, for tests that
replay its requests (its Rust build needs crates this machine cannot fetch).

- meta.json: its current `BundleMeta` (0.7.8) with every field it serializes;
- internal.bin: a `TestReport`, encoded here by hand from the field numbers of Trunk's
  proto/test_context.proto (a protobuf wire encoder of the tests' own, so that a wrong number in
  keepgreen's description of the messages cannot go unnoticed);
- the bundle: a tar with GNU headers (the tar crate's), meta.json first, then internal.bin, the
  reports as `junit/<n>` and CODEOWNERS, compressed by zstd at level 15;
- its calls: createBundleUpload (camelCase JSON, `x-api-token`), the PUT of the bundle
  (`application/octet-stream`, no token), getQuarantineConfig and its telemetry.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import zstandard

from keepgreen.core.model import RepoRef
from tests.support.wire import REPO

ORG = "acme"
SHA = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
CLIENT_VERSION = "trunk-analytics-cli cargo=0.12.3 git=0123abc rustc=1.91.0"
ZSTD_LEVEL = 15  # the uploader's BundlerUtil::ZSTD_COMPRESSION_LEVEL
STATUS = {"success": 1, "failure": 2, "skipped": 3, "unspecified": 0}

# GitHub Actions on a pull request's `pull_request` event, as the uploader captures it.
GITHUB_PR_ENVS = {
    "CI": "true",
    "GITHUB_ACTIONS": "true",
    "GITHUB_REF": "refs/pull/12/merge",
    "GITHUB_HEAD_REF": "feature/speedup",
    "GITHUB_BASE_REF": "main",
    "GITHUB_SHA": "f" * 40,  # the merge commit: the uploader resolves the PR's own head
    "GITHUB_REPOSITORY": "acme/widgets",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_RUN_ID": "9949497745",
    "GITHUB_RUN_ATTEMPT": "1",
    "GITHUB_EVENT_NAME": "pull_request",
}


def trunk_test_id(
    *, name: str, parent: str, classname: str = "", file: str = "", org: str = ORG
) -> str:
    """The id the uploader computes for a JUnit testcase without variant or custom id
    (gen_info_id: uuid5 of the URL namespace over org, host/owner/name, file, classname,
    suite, name and "JUNIT_TESTCASE"), as it sends it to getQuarantineConfig.
    """
    parts = [org, f"{REPO.host}/{REPO.owner}/{REPO.name}", file, classname, parent, name]
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "#".join([*parts, "JUNIT_TESTCASE"])))


# -- protobuf, by hand ---------------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32s go out as ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def bytes_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def text_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode())


def timestamp(seconds: int, nanos: int = 0) -> bytes:
    """A google.protobuf.Timestamp's body."""
    return varint_field(1, seconds) + varint_field(2, nanos)


@dataclass(frozen=True)
class Run:
    """One TestCaseRun, as RSpec's plugin or the uploader's JUnit reader writes it."""

    name: str
    parent: str = "widgets spec"
    classname: str = "spec.widgets_spec"
    file: str = "./spec/widgets_spec.rb"
    status: str = "success"
    attempt_index: int | None = None  # RSpec's retries, 0-based
    attempt_number: int | None = None  # the deprecated field, also written
    bazel_attempt: int | None = None
    is_quarantined: bool = False
    message: str = ""
    text: str = ""
    custom_id: str = ""
    started_at: int | None = 1_790_000_000
    seconds: float = 0.25

    def encode(self) -> bytes:
        out = b""
        if self.custom_id:
            out += text_field(1, self.custom_id)
        out += text_field(2, self.name) + text_field(3, self.classname) + text_field(4, self.file)
        out += text_field(5, self.parent) + varint_field(7, STATUS[self.status])
        if self.attempt_number is not None:
            out += varint_field(8, self.attempt_number)
        if self.started_at is not None:
            finished = self.started_at + self.seconds
            out += bytes_field(9, timestamp(self.started_at))
            out += bytes_field(10, timestamp(int(finished), round(finished % 1 * 1e9)))
        if self.is_quarantined:
            out += varint_field(12, 1)
        out += bytes_field(13, text_field(1, "@acme/widgets-team"))  # codeowners
        if self.attempt_index is not None:
            out += bytes_field(14, varint_field(1, self.attempt_index))
        if self.message or self.text:
            out += bytes_field(16, text_field(1, self.text) + text_field(2, self.message))
        if self.bazel_attempt is not None:
            out += bytes_field(
                17, text_field(1, "//widgets:spec") + varint_field(2, self.bazel_attempt)
            )
        return out


def internal_bin(*runs: Run, variant: str = "") -> bytes:
    """A TestReport of one TestResult (the uploader writes one per file set, or per Bazel
    target), with the uploader's metadata.
    """
    metadata = text_field(1, "") + text_field(2, "RSpec") + text_field(4, variant)
    result = b"".join(bytes_field(1, run.encode()) for run in runs) + bytes_field(2, metadata)
    return bytes_field(1, result) + bytes_field(2, metadata)


def upload_metrics(*, failed: bool, reason: str = "") -> bytes:
    """The uploader's UploadMetrics telemetry message."""
    semver = varint_field(1, 0) + varint_field(2, 12) + varint_field(3, 3)
    repo = text_field(1, REPO.host) + text_field(2, REPO.owner) + text_field(3, REPO.name)
    out = bytes_field(1, semver) + bytes_field(2, repo)
    out += bytes_field(3, timestamp(1_790_000_000)) + bytes_field(4, timestamp(1_790_000_010))
    out += varint_field(6, int(failed)) + text_field(7, reason) + varint_field(8, 1)
    return out


# -- meta.json -----------------------------------------------------------------------------


def bundled_file(path: str, original: str) -> dict[str, Any]:
    return {
        "original_path": f"/home/runner/work/widgets/widgets/{original}",
        "original_path_rel": original,
        "path": path,
        "owners": [],
        "team": None,
    }


def meta_test(
    name: str, parent: str, *, classname: str, file: str, quarantined: bool
) -> dict[str, Any]:
    """A `Test` as meta.json's failed_tests and quarantined_tests hold it."""
    return {
        "name": name,
        "parentName": parent,
        "className": classname,
        "file": file,
        "id": trunk_test_id(name=name, parent=parent, classname=classname, file=file),
        "timestamp_millis": 1_790_000_000_000,
        "is_quarantined": quarantined,
        "failure_message": "expected true, got false",
        "variant": "",
    }


def meta_json(
    *,
    junit: Sequence[str] = (),
    internal_files: Sequence[str] = (),
    internal_bundled_file: str | None = "internal.bin",
    org: str = ORG,
    repo: RepoRef = REPO,
    sha: str = SHA,
    branch: str = "refs/remotes/pull/12/merge",
    envs: Mapping[str, str] | None = None,
    variant: str | None = None,
    failed_tests: Sequence[dict[str, Any]] = (),
    quarantined_tests: Sequence[dict[str, Any]] = (),
    codeowners: bool = False,
    use_uncloned_repo: bool = False,
) -> dict[str, Any]:
    """BundleMeta 0.7.8 (BundleMetaBaseProps, JunitProps, DebugProps and the fields after them,
    flattened) as serde writes it; `junit` and `internal_files` are the reports' original paths.
    """
    file_sets = []
    if junit:
        file_sets.append(
            {
                "file_set_type": "Junit",
                "files": [bundled_file(f"junit/{i}", name) for i, name in enumerate(junit)],
                "glob": "reports/**/*.xml",
            }
        )
    if internal_files:
        offset = len(junit)
        file_sets.append(
            {
                "file_set_type": "Internal",
                "files": [
                    bundled_file(f"internal/{offset + i}", name)
                    for i, name in enumerate(internal_files)
                ],
                "glob": "spec/reports/*.bin",
            }
        )
    internal = (
        {**bundled_file(internal_bundled_file, "internal.bin"), "original_path_rel": None}
        if internal_bundled_file is not None
        else None
    )
    return {
        "version": "1",
        "cli_version": CLIENT_VERSION.removeprefix("trunk-analytics-cli "),
        "org": org,
        "repo": {
            "repo": {"host": repo.host, "owner": repo.owner, "name": repo.name},
            "repo_root": "/home/runner/work/widgets/widgets",
            "repo_url": f"https://{repo.host}/{repo.owner}/{repo.name}",
            "repo_head_sha": sha,
            "repo_head_sha_short": sha[:7],
            "repo_head_branch": branch,
            "repo_head_commit_epoch": 1_789_999_000,
            "repo_head_commit_message": "Speed the widgets up",
            "repo_head_author_name": "Ada",
            "repo_head_author_email": "ada@example.com",
            "use_uncloned_repo": use_uncloned_repo,
        },
        "bundle_upload_id": str(uuid.uuid4()),
        "tags": [],
        "file_sets": file_sets,
        "envs": dict(GITHUB_PR_ENVS if envs is None else envs),
        "upload_time_epoch": 1_790_000_100,
        "test_command": "bundle exec rspec",
        "os_info": "linux",
        "quarantined_tests": list(quarantined_tests),
        "codeowners": {"path": "/home/runner/work/widgets/widgets/.github/CODEOWNERS"}
        if codeowners
        else None,
        "use_uncloned_repo": use_uncloned_repo,
        "num_files": len(junit) + len(internal_files),
        "num_tests": 3,
        "command_line": "trunk-analytics-cli test --junit-paths reports/**/*.xml -- rspec",
        "trunk_envs": {"TRUNK_PUBLIC_API_ADDRESS": "http://127.0.0.1"},
        "bundle_upload_id_v2": str(uuid.uuid4()),
        "variant": variant,
        "internal_bundled_file": internal,
        "failed_tests": list(failed_tests),
    }


# -- the bundle ----------------------------------------------------------------------------


@dataclass
class Member:
    """One tar member; `kind` a tarfile type (a regular file unless said otherwise)."""

    name: str
    data: bytes = b""
    kind: bytes = tarfile.REGTYPE
    link: str = ""
    size: int | None = None  # the header's size when it is to lie


def tar_bytes(members: Iterable[Member]) -> bytes:
    """A tar as the uploader's tar crate writes it: GNU headers, regular files, mode 0644."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for member in members:
            info = tarfile.TarInfo(member.name)
            info.type = member.kind
            info.mode = 0o644
            info.mtime = 1_790_000_000
            info.linkname = member.link
            info.size = len(member.data) if member.kind == tarfile.REGTYPE else 0
            archive.addfile(
                info, io.BytesIO(member.data) if member.kind == tarfile.REGTYPE else None
            )
    return out.getvalue()


def zstd(data: bytes, *, level: int = ZSTD_LEVEL) -> bytes:
    return zstandard.ZstdCompressor(level=level).compress(data)


def zstd_bomb(*, meta: bytes, member: str, size: int) -> bytes:
    """A bundle of meta.json and then `member`, `size` bytes of zeros, compressed as it is
    written (a few hundred KiB for gigabytes): what a decompression bomb looks like.
    """
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    first = tarfile.TarInfo("meta.json")
    first.size = len(meta)
    out = compressor.compress(first.tobuf(tarfile.GNU_FORMAT) + meta + bytes(-len(meta) % 512))
    huge = tarfile.TarInfo(member)
    huge.size = size
    out += compressor.compress(huge.tobuf(tarfile.GNU_FORMAT))
    zeros = bytes(1024 * 1024)
    for _ in range(size // len(zeros)):
        out += compressor.compress(zeros)
    return out + compressor.flush()


@dataclass
class BundleParts:
    """A bundle's members: meta.json, then internal.bin, the reports and CODEOWNERS, the order
    the uploader's make_tarball writes them in.
    """

    meta: dict[str, Any]
    reports: dict[str, bytes] = field(default_factory=dict)  # member name -> report
    internal_bin: bytes | None = None
    codeowners: str | None = None

    def members(self) -> list[Member]:
        members = [Member("meta.json", json.dumps(self.meta).encode())]
        internal = self.meta.get("internal_bundled_file")
        if internal is not None and self.internal_bin is not None:
            members.append(Member(internal["path"], self.internal_bin))
        members += [Member(name, data) for name, data in self.reports.items()]
        if self.codeowners is not None:
            members.append(Member("CODEOWNERS", self.codeowners.encode()))
        return members

    def bundle(self) -> bytes:
        return zstd(tar_bytes(self.members()))


def junit_bundle(
    reports: Sequence[tuple[str, bytes]],
    *,
    generated: bytes | None = None,
    codeowners: str | None = None,
    **meta: Any,
) -> BundleParts:
    """A bundle of JUnit reports as `trunk flakytests upload --junit-paths` makes it: each
    report under junit/<n>, and the TestReport the uploader made of them as internal.bin.
    """
    return BundleParts(
        meta=meta_json(
            junit=[name for name, _ in reports], codeowners=codeowners is not None, **meta
        ),
        reports={f"junit/{i}": data for i, (_, data) in enumerate(reports)},
        internal_bin=generated if generated is not None else internal_bin(),
        codeowners=codeowners,
    )


# -- the calls -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Uploader:
    """The uploader's HTTP calls to `base` (TRUNK_PUBLIC_API_ADDRESS: no /v1, no trailing /)."""

    base: str
    token: str
    org: str = ORG

    def _api(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.base}/v1/{path}",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-api-token": self.token},
        )

    def create_bundle_upload(
        self, *, repo: RepoRef = REPO, org: str | None = None
    ) -> httpx.Response:
        return self._api(
            "metrics/createBundleUpload",
            {
                "repo": {"host": repo.host, "owner": repo.owner, "name": repo.name},
                "orgUrlSlug": self.org if org is None else org,
                "clientVersion": CLIENT_VERSION,
                "remoteUrls": [f"https://{repo.host}/{repo.owner}/{repo.name}"],
                "externalId": None,
                "testCollectionShortId": None,
            },
        )

    def upload_url(self) -> str:
        response = self.create_bundle_upload()
        assert response.status_code == 200, response.text
        url: str = response.json()["url"]
        return url

    @staticmethod
    def put_bundle(url: str, bundle: bytes) -> httpx.Response:
        """The S3 client's PUT: no token, the bundle's length declared."""
        return httpx.put(
            url,
            content=bundle,
            headers={
                "content-type": "application/octet-stream",
                "content-length": str(len(bundle)),
            },
            timeout=60,
        )

    def get_quarantine_config(self, test_ids: Sequence[str]) -> httpx.Response:
        return self._api(
            "metrics/getQuarantineConfig",
            {
                "repo": {"host": REPO.host, "owner": REPO.owner, "name": REPO.name},
                "remoteUrls": [f"https://{REPO.host}/{REPO.owner}/{REPO.name}"],
                "orgUrlSlug": self.org,
                "testIdentifiers": [
                    {
                        "name": "n",
                        "parentName": "p",
                        "className": None,
                        "file": None,
                        "id": test_id,
                        "timestamp_millis": None,
                        "is_quarantined": False,
                        "failure_message": None,
                        "variant": "",
                    }
                    for test_id in test_ids
                ],
            },
        )

    def telemetry(self, body: bytes, *, token: str | None = None) -> httpx.Response:
        headers = {"content-type": "application/x-protobuf"}
        if token is not None or self.token:
            headers["x-api-token"] = self.token if token is None else token
        return httpx.post(
            f"{self.base}/v1/flakytests-cli/upload-metrics", content=body, headers=headers
        )
