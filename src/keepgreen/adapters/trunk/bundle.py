"""A bundle of Trunk's uploader, read safely: a tar, zstd-compressed, of meta.json first, then
the reports (`junit/0`, ...), `internal.bin`, `CODEOWNERS` and `bazel_bep.json`.

Nothing is written to disk. The body is decompressed as the tar is read, one member after the
other, and the decompression stops at MAX_UNPACKED_BYTES whatever the frames claim (a zstd bomb
costs at most that, in time; the decoder's window is capped too). meta.json, which the uploader
writes first, says which members are reports; only those and CODEOWNERS are kept, each under
its own limit, the rest is read past. The JUnit reports are gzipped as they are read: held
while the upload is parsed and stored, they take about a tenth of what they unpack to, and the
JUnit parser inflates them one at a time, as a multipart upload's. A member that is a link, a
device or a fifo, or whose name is absolute or climbs out with `..`, refuses the bundle (the
uploader writes plain files only), as do a repeated name and more than MAX_MEMBERS members.
"""

from __future__ import annotations

import tarfile
import zlib
from pathlib import PurePosixPath
from typing import IO

import zstandard

from keepgreen.adapters.junit import MAX_REPORT_BYTES
from keepgreen.adapters.trunk.bundle_meta import (
    MAX_PATH_CHARS,
    META_FILENAME,
    invalid_bundle,
    read_meta,
)
from keepgreen.app.flaky.bundles import Bundle
from keepgreen.app.flaky.ingest import ReportFile, ReportFormat

MIB = 1024 * 1024
# The whole tar, decompressed: a bound on the time a bundle takes to read. The body is at most
# 20 MiB; the uploader compresses at level 15, about ten to one for reports, and 256 MiB of
# reports is more than the 200,000 results an upload may hold.
MAX_UNPACKED_BYTES = 256 * MIB
MAX_META_BYTES = 16 * MIB
MAX_CODEOWNERS_BYTES = 1 * MIB  # as a multipart upload's `codeowners`
MAX_MEMBERS = 5000  # the reports (at most 1000) and the uploader's few files of its own
# The decoder's window (the back-reference distance a frame may ask for, and the memory it
# takes): the uploader's level 15 uses 4 MiB.
MAX_WINDOW_BYTES = 32 * MIB
CODEOWNERS_FILENAME = "CODEOWNERS"
_GZIP_MAGIC = b"\x1f\x8b"


class _TooLarge(Exception):
    """The body unpacks to more than MAX_UNPACKED_BYTES."""


class _Unpacked:
    """The body, decompressed as tarfile reads it; never more than MAX_UNPACKED_BYTES."""

    def __init__(self, body: IO[bytes]) -> None:
        decompressor = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW_BYTES)
        self._reader = decompressor.stream_reader(body, read_across_frames=True, closefd=False)
        self.total = 0

    def read(self, size: int = -1) -> bytes:
        # tarfile reads in blocks; a read of "everything" is taken as one more block.
        data = self._reader.read(size if size > 0 else MIB)
        self.total += len(data)
        if self.total > MAX_UNPACKED_BYTES:
            raise _TooLarge
        return data


def read_bundle(body: IO[bytes]) -> Bundle:
    """The bundle's meta.json and reports; InvalidInput (400) naming the problem otherwise."""
    try:
        with tarfile.open(fileobj=_Unpacked(body), mode="r|") as archive:  # type: ignore[call-overload]  # any object with read() will do
            return _read(archive)
    except _TooLarge:
        raise invalid_bundle(
            f"it unpacks to more than {MAX_UNPACKED_BYTES // MIB} MiB; upload its reports in "
            "several runs"
        ) from None
    except zstandard.ZstdError as error:
        raise invalid_bundle(f"the body is not zstd-compressed data ({error})") from None
    except (tarfile.TarError, EOFError) as error:
        raise invalid_bundle(f"the body is not a tar archive once decompressed ({error})") from None


def _read(archive: tarfile.TarFile) -> Bundle:
    members = iter(archive)
    first = next(members, None)
    if first is None:
        raise invalid_bundle("the archive is empty")
    _check(first)
    if first.name != META_FILENAME or not first.isreg():
        raise invalid_bundle(f"its first member must be {META_FILENAME}, not {first.name!r}")
    plan = read_meta(_content(archive, first, MAX_META_BYTES))
    wanted = plan.wanted() | {CODEOWNERS_FILENAME}
    junit = {report.path for report in plan.reports if report.format is ReportFormat.JUNIT}
    kept: dict[str, bytes] = {}
    seen = {first.name}
    for count, member in enumerate(members, start=2):
        if count > MAX_MEMBERS:
            raise invalid_bundle(f"it holds more than {MAX_MEMBERS} members")
        _check(member)
        if member.name in seen:
            raise invalid_bundle(f"member {member.name!r} appears twice")
        seen.add(member.name)
        if member.isreg() and member.name in wanted:
            if member.name == CODEOWNERS_FILENAME:
                kept[member.name] = _content(archive, member, MAX_CODEOWNERS_BYTES)
            elif member.name in junit:
                kept[member.name] = _gzipped(archive, member)
            else:
                kept[member.name] = _content(archive, member, MAX_REPORT_BYTES)
    missing = [
        report
        for report in plan.reports
        if report.format is ReportFormat.JUNIT and report.path not in kept
    ]
    if missing:
        raise invalid_bundle(
            f"meta.json lists the report {missing[0].filename} ({missing[0].path}), which the "
            "archive does not hold"
        )
    chosen = [report for report in plan.reports if report.path in kept]
    if not chosen and plan.fallback is not None and plan.fallback.path in kept:
        chosen = [plan.fallback]
    if not chosen:
        raise invalid_bundle("it holds no report (no JUnit file, no internal.bin)")
    codeowners = kept.get(CODEOWNERS_FILENAME)
    return Bundle(
        meta=plan.meta,
        reports=tuple(
            ReportFile(report.filename, kept[report.path], report.format) for report in chosen
        ),
        codeowners=codeowners.decode(errors="replace") if codeowners is not None else None,
    )


def _check(member: tarfile.TarInfo) -> None:
    """Refuses what the uploader never writes and an unpacker could be fooled by."""
    name = member.name
    if not name or len(name) > MAX_PATH_CHARS or not name.isprintable():
        raise invalid_bundle(f"member {name[:100]!r} has no usable name")
    if name.startswith("/") or ".." in PurePosixPath(name).parts:
        raise invalid_bundle(f"member {name!r} names a path outside the bundle")
    if not (member.isreg() or member.isdir()) or member.issparse():
        raise invalid_bundle(
            f"member {name!r} is a link, a device or another special file; a bundle holds "
            "plain files only"
        )


def _opened(archive: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> IO[bytes]:
    if member.size > limit:
        raise invalid_bundle(f"member {member.name!r} is larger than {limit // MIB} MiB")
    extracted = archive.extractfile(member)
    if extracted is None:  # not a regular file: cannot happen after _check and isreg
        raise invalid_bundle(f"member {member.name!r} cannot be read")
    return extracted


def _content(archive: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    return _opened(archive, member, limit).read()


def _gzipped(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A JUnit report, gzipped (level 1: about 200 MB/s) as it is read; one gzipped already
    is kept as it is.
    """
    extracted = _opened(archive, member, MAX_REPORT_BYTES)
    chunk = extracted.read(MIB)
    if chunk.startswith(_GZIP_MAGIC):
        return chunk + extracted.read()
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    packed = bytearray()
    while chunk:
        packed += packer.compress(chunk)
        chunk = extracted.read(MIB)
    packed += packer.flush()
    return bytes(packed)
