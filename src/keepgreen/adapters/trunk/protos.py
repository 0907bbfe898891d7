"""The protobuf messages of Trunk's uploader, described at run time: no .proto compiler, no
generated code, no build step.

The description mirrors Trunk's published schema field for field (proto/test_context.proto for a
bundle's `internal.bin`, proto/upload_metrics.proto and common.proto for its telemetry): numbers
and types as there, the package and names keepgreen's own (only the wire format has to match).
Every field is declared, read or not, so that a message parses or fails exactly as in Trunk's own
reader: which decides whether an `internal.bin` is a TestReport or, from older writers, a lone
TestResult. Enums are declared as the int32 they are on the wire (proto3 enums are open: an
unknown value is kept, not refused); a oneof's members as the plain fields they are on the wire.

The messages are built once, with the protobuf library's descriptor pool and message factory;
parsing runs in its C implementation (upb), which bounds nesting depth on its own.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "keepgreen.trunk"

_Field = descriptor_pb2.FieldDescriptorProto
INT32, INT64, UINT32 = _Field.TYPE_INT32, _Field.TYPE_INT64, _Field.TYPE_UINT32
BOOL, STRING = _Field.TYPE_BOOL, _Field.TYPE_STRING
REPEATED = "repeated"

# Each message: (field, number, scalar type or message name[, REPEATED]).
_SCHEMA: dict[str, list[tuple[Any, ...]]] = {
    # google.protobuf.Timestamp, the same on the wire.
    "Timestamp": [("seconds", 1, INT64), ("nanos", 2, INT32)],
    # -- test_context.proto ------------------------------------------------------------------
    "CodeOwner": [("name", 1, STRING)],
    # AttemptNumber, LineNumber and BazelAttemptNumber: one int32 each.
    "Number": [("number", 1, INT32)],
    "TestOutput": [
        ("text", 1, STRING),  # the full message, with the trace
        ("message", 2, STRING),  # the short one
        ("system_out", 3, STRING),
        ("system_err", 4, STRING),
    ],
    # Bazel's attempt of a target (`--flaky_test_attempts`), for runs read from its BEP.
    "BazelRunInformation": [
        ("label", 1, STRING),
        ("attempt_number", 2, INT32),
        ("started_at", 3, "Timestamp"),
        ("finished_at", 4, "Timestamp"),
    ],
    "TestCaseRun": [
        ("id", 1, STRING),  # the report's own id (testcase@id), "" when none
        ("name", 2, STRING),
        ("classname", 3, STRING),
        ("file", 4, STRING),
        ("parent_name", 5, STRING),
        ("line", 6, INT32),  # deprecated for line_number
        ("status", 7, INT32),  # 0 unspecified, 1 success, 2 failure, 3 skipped
        ("attempt_number", 8, INT32),  # deprecated for attempt_index, still written
        ("started_at", 9, "Timestamp"),
        ("finished_at", 10, "Timestamp"),
        ("status_output_message", 11, STRING),  # deprecated for test_output
        ("is_quarantined", 12, BOOL),
        ("codeowners", 13, "CodeOwner", REPEATED),
        ("attempt_index", 14, "Number"),  # 0-based (RSpec's retries)
        ("line_number", 15, "Number"),
        ("test_output", 16, "TestOutput"),
        ("bazel_run_information", 17, "BazelRunInformation"),  # oneof test_runner_information
    ],
    "UploaderMetadata": [
        ("version", 1, STRING),
        ("origin", 2, STRING),
        ("upload_time", 3, "Timestamp"),
        ("variant", 4, STRING),
    ],
    "BazelBuildInformation": [
        ("label", 1, STRING),
        ("result", 2, INT32),  # TestBuildResult
        ("max_attempt_number", 3, "Number"),
    ],
    "TestResult": [
        ("test_case_runs", 1, "TestCaseRun", REPEATED),
        ("uploader_metadata", 2, "UploaderMetadata"),  # deprecated for the report's
        ("bazel_build_information", 3, "BazelBuildInformation"),  # oneof test_build_information
    ],
    "TestReport": [
        ("test_results", 1, "TestResult", REPEATED),
        ("uploader_metadata", 2, "UploaderMetadata"),
    ],
    # -- upload_metrics.proto and common.proto: the telemetry the uploader sends after a run ---
    "Semver": [
        ("major", 1, UINT32),
        ("minor", 2, UINT32),
        ("patch", 3, UINT32),
        ("suffix", 4, STRING),
    ],
    "Repo": [("host", 1, STRING), ("owner", 2, STRING), ("name", 3, STRING)],
    "UploadMetrics": [
        ("client_version", 1, "Semver"),
        ("repo", 2, "Repo"),
        ("cli_started_at", 3, "Timestamp"),
        ("upload_started_at", 4, "Timestamp"),
        ("upload_finished_at", 5, "Timestamp"),
        ("failed", 6, BOOL),
        ("failure_reason", 7, STRING),
        ("quarantine_query_result", 8, INT32),  # QuarantineQueryResult
    ],
}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    described = descriptor_pb2.FileDescriptorProto(
        name="keepgreen/trunk.proto", package=PACKAGE, syntax="proto3"
    )
    for message_name, fields in _SCHEMA.items():
        message = described.message_type.add(name=message_name)
        for name, number, kind, *repeated in fields:
            field = message.field.add(
                name=name,
                number=number,
                label=_Field.LABEL_REPEATED if repeated else _Field.LABEL_OPTIONAL,
            )
            if isinstance(kind, str):
                field.type = _Field.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{kind}"
            else:
                field.type = kind
    return described


def _message_classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in _SCHEMA
    }


# The classes are made at run time, so their fields are unknown to a type checker: the readers
# handle their instances as Any, in the two small modules that read them.
_CLASSES = _message_classes()
TestReport: Any = _CLASSES["TestReport"]
TestResult: Any = _CLASSES["TestResult"]
TestCaseRun: Any = _CLASSES["TestCaseRun"]
UploadMetrics: Any = _CLASSES["UploadMetrics"]
# For tests and tools that write what the uploader writes.
MESSAGES: dict[str, Any] = dict(_CLASSES)

__all__ = ["MESSAGES", "TestCaseRun", "TestReport", "TestResult", "UploadMetrics"]
