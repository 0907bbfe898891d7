"""keepgreen: a self-hosted merge queue and flaky-test service."""

__version__ = "0.1.0"
