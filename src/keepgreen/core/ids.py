"""Typed identifiers: every id is a string (a UUID made outside the core) with its own type."""

import uuid
from typing import NewType

OrgId = NewType("OrgId", str)
RepositoryId = NewType("RepositoryId", str)
QueueId = NewType("QueueId", str)
PullRequestId = NewType("PullRequestId", str)
TestRunId = NewType("TestRunId", str)
CiRunId = NewType("CiRunId", str)  # a run CI reported (create-ci-run), not a queue's test run


def is_uuid(value: str) -> bool:
    """Whether `value` is a UUID in any of the spellings `uuid.UUID` reads."""
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
