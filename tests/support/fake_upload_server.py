"""A fake keepgreen for the CLI's upload tests: an `httpx.MockTransport` handler that answers
POST /v1/flaky-tests/upload, parsing each multipart request as the server's form parser does
(python-multipart), recording it, and answering the summary a test gives it.
"""

from __future__ import annotations

import gzip
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from python_multipart.multipart import MultipartParser, parse_options_header

from keepgreen.cli.upload import UploadHooks

URL = "http://keepgreen.test/v1"  # the API base the CLI must be pointed at (KEEPGREEN_URL)
TOKEN = "kg_0123456789abcdef"  # the only token the fake accepts


@dataclass(frozen=True)
class Part:
    """One part of a multipart body, as the server's form parser sees it."""

    name: str
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(frozen=True)
class Received:
    """One upload request as the server received it."""

    request: httpx.Request
    parts: list[Part]

    @property
    def metadata(self) -> Any:
        (part,) = [part for part in self.parts if part.name == "metadata"]
        assert (part.filename, part.content_type) == (None, "application/json")
        return json.loads(part.data)

    @property
    def reports(self) -> dict[str, bytes]:
        """Each `file` part's filename and its bytes, gunzipped (every one must be gzip)."""
        files = [part for part in self.parts if part.name == "file"]
        assert all(part.content_type == "application/gzip" for part in files)
        return {str(part.filename): gzip.decompress(part.data) for part in files}

    @property
    def compressed_bytes(self) -> int:
        return sum(len(part.data) for part in self.parts if part.name == "file")


def parse_multipart(request: httpx.Request) -> list[Part]:
    """The parts of a multipart/form-data request, parsed with python-multipart."""
    kind, options = parse_options_header(request.headers["content-type"])
    assert kind == b"multipart/form-data"
    parts: list[Part] = []
    headers: dict[bytes, bytes] = {}
    field_name, value, data = bytearray(), bytearray(), bytearray()

    def header_end() -> None:
        headers[bytes(field_name).lower()] = bytes(value)
        field_name.clear()
        value.clear()

    def part_end() -> None:
        _, disposition = parse_options_header(headers[b"content-disposition"])
        filename = disposition.get(b"filename")
        content_type = headers.get(b"content-type")
        parts.append(
            Part(
                name=disposition[b"name"].decode(),
                filename=None if filename is None else filename.decode(),
                content_type=None if content_type is None else content_type.decode(),
                data=bytes(data),
            )
        )
        headers.clear()
        data.clear()

    parser = MultipartParser(
        options[b"boundary"],
        {
            "on_header_field": lambda chunk, start, end: field_name.extend(chunk[start:end]),
            "on_header_value": lambda chunk, start, end: value.extend(chunk[start:end]),
            "on_header_end": header_end,
            "on_part_data": lambda chunk, start, end: data.extend(chunk[start:end]),
            "on_part_end": part_end,
        },
    )
    parser.write(request.read())
    parser.finalize()
    return parts


@dataclass
class FakeServer:
    """POST /v1/flaky-tests/upload: records each request and answers the next of `answers`
    (a summary, or a whole response); when they run out, a summary counting the files."""

    answers: list[dict[str, Any] | httpx.Response] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert (request.method, str(request.url)) == ("POST", f"{URL}/flaky-tests/upload")
        assert request.headers["x-api-token"] == TOKEN
        upload = Received(request, parse_multipart(request))
        self.received.append(upload)
        answer = (
            self.answers.pop(0)
            if self.answers
            else summary(upload_id=f"upload-{len(self.received)}", files=len(upload.reports))
        )
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)

    @property
    def only(self) -> Received:
        (upload,) = self.received
        return upload

    def hooks(self, **changes: Any) -> UploadHooks:
        return UploadHooks(transport=httpx.MockTransport(self.handle), **changes)


def summary(
    *failures: dict[str, Any],
    upload_id: str = "upload-1",
    files: int = 1,
    tests: int = 10,
    skipped: int = 0,
    quarantine_enabled: bool = True,
    excluded: bool = False,
) -> dict[str, Any]:
    """An upload summary as the contract shapes it; counts follow from the failures given."""
    return {
        "upload_id": upload_id,
        "files": files,
        "tests": tests,
        "results": tests,
        "passed": tests - len(failures) - skipped,
        "failed": len(failures),
        "skipped": skipped,
        "excluded_as_infrastructure_failure": excluded,
        "quarantine_enabled": quarantine_enabled,
        "failures": list(failures),
    }


def failure(name: str, *, quarantined: bool = False) -> dict[str, Any]:
    """One failed test as a summary lists it; its id follows from its name."""
    return {
        "test_id": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
        "name": name,
        "classname": "tests.test_auth",
        "parent": "pytest",
        "file": "tests/test_auth.py",
        "quarantined": quarantined,
    }


def refusal(status: int, message: str, code: str = "invalid_field") -> httpx.Response:
    """The server's JSON error answer."""
    return httpx.Response(status, json={"error": {"code": code, "message": message}})
