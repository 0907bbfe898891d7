"""A fake GitHub for keepgreen's tests: REST API, git over HTTP and webhook deliveries."""

from tests.support.fake_github.fake import FakeGithub, running_fake_github
from tests.support.fake_github.state import (
    CheckRunRecord,
    CommentRecord,
    FakeRepo,
    IssuedToken,
    MergeRecord,
    RecordedRequest,
)

__all__ = [
    "CheckRunRecord",
    "CommentRecord",
    "FakeGithub",
    "FakeRepo",
    "IssuedToken",
    "MergeRecord",
    "RecordedRequest",
    "running_fake_github",
]
