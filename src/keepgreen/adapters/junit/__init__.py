"""JUnit XML reports, read safely: `parse_report` turns one uploaded report into CaseResults."""

from keepgreen.adapters.junit.document import MAX_REPORT_BYTES, ReportError
from keepgreen.adapters.junit.parser import TooManyResults, parse_report

__all__ = ["MAX_REPORT_BYTES", "ReportError", "TooManyResults", "parse_report"]
