"""What Trunk's own uploader sends: bundles (tar + zstd of meta.json, reports, internal.bin),
its TestReport protobuf, and its telemetry, read without trusting any of it.
"""

from keepgreen.adapters.trunk.bundle import read_bundle
from keepgreen.adapters.trunk.test_report import parse_test_report
from keepgreen.adapters.trunk.upload_metrics import read_uploader_report

__all__ = ["parse_test_report", "read_bundle", "read_uploader_report"]
