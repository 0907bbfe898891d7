"""The flaky-test use cases: ingest uploads, detect, read, quarantine."""
