"""The telemetry Trunk's uploader sends after each run: an `UploadMetrics` protobuf message."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError

from keepgreen.adapters.trunk.protos import UploadMetrics
from keepgreen.app.flaky.bundles import UploaderReport


def read_uploader_report(body: bytes) -> UploaderReport | None:
    """Whether the run's upload failed, and why as the uploader says; None when the body is
    not the message.
    """
    metrics: Any = UploadMetrics()
    try:
        metrics.ParseFromString(body)
    except DecodeError:
        return None
    return UploaderReport(failed=bool(metrics.failed), reason=str(metrics.failure_reason))
