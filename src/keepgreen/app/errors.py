"""The errors use cases raise; the HTTP edge maps each kind to one status code."""

from __future__ import annotations


class KeepgreenError(Exception):
    """A refusal a client can act on: `code` is snake_case, `message` a human sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidInput(KeepgreenError):
    """The request is well-formed JSON but a field's value is not acceptable (400)."""


class Unauthenticated(KeepgreenError):
    """A credential other than the API token (a fork's workflow run) does not hold (401)."""


class NotFound(KeepgreenError):
    """The repository, queue, pull request or test run does not exist for this org (404)."""


class Forbidden(KeepgreenError):
    """A credential other than the API token (a signed upload URL) is invalid or expired (403)."""


class Conflict(KeepgreenError):
    """The current state does not allow the operation (409)."""


class Unavailable(KeepgreenError):
    """A dependency (the code host) could not be reached (503)."""


class RetryableConflict(Conflict):
    """The database broke a deadlock between two writers by rolling this one back: the whole
    transaction can be tried again as it was (409 if it still fails).
    """


class Busy(Unavailable):
    """The service is at its limit for this kind of request right now: 503 with Retry-After,
    which clients (keepgreen's CLI among them) honour before trying again.
    """

    def __init__(self, code: str, message: str, *, retry_after_seconds: int) -> None:
        super().__init__(code, message)
        self.retry_after_seconds = retry_after_seconds
