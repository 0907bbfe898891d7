"""Flaky tests, the pure part: test ids, parsed results, failure summaries and the monitors."""
