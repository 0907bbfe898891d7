"""Typed identifiers: every id is a string (a UUID made outside the core) with its own type."""

from typing import NewType

OrgId = NewType("OrgId", str)
RepositoryId = NewType("RepositoryId", str)
QueueId = NewType("QueueId", str)
PullRequestId = NewType("PullRequestId", str)
TestRunId = NewType("TestRunId", str)
