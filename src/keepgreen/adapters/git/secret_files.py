"""Reading a secret from its file, with nothing else imported: git's credential helper runs
this at every authenticated git call, so its start-up cost is paid once per fetch and push.

The errors are sentences naming the option and the path, never the file's content.
"""

from __future__ import annotations

from pathlib import Path

# What the credential helper reads from its environment (paths and names, never the secret).
TOKEN_FILE_VARIABLE = "KEEPGREEN_GIT_TOKEN_FILE"  # noqa: S105 (a variable name)
USERNAME_VARIABLE = "KEEPGREEN_GIT_USERNAME"
ORIGIN_VARIABLE = "KEEPGREEN_GIT_ORIGIN"  # `protocol://host[:port]`: the only server it answers
MAX_TOKEN_BYTES = 16 * 1024


class SecretFileError(Exception):
    """A secret's file is missing, unreadable or unusable (the sentence says which and why)."""


class Secret:
    """A secret read from a file. Its repr and str hide it; `reveal` is the one way out."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def read_token_file(path: str) -> Secret:
    """The token in `path`: its content with surrounding whitespace stripped.

    Raises SecretFileError, with a sentence naming `git-token-file` and the path, when the
    file is missing, unreadable, empty, too big or holds more than one line.
    """
    data = read_secret_file(path, option="git-token-file", limit=MAX_TOKEN_BYTES)
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretFileError(f"git-token-file {path} is not UTF-8 text") from None
    if not token:
        raise SecretFileError(f"git-token-file {path} is empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in token):
        raise SecretFileError(
            f"git-token-file {path} must hold the token alone on one line (no other lines)"
        )
    return Secret(token)


def read_secret_file(path: str, *, option: str, limit: int) -> bytes:
    """The bytes of the regular file `path`, which keepgreen must be able to read."""
    file = Path(path)
    try:
        if not file.is_file():
            what = "is not a regular file" if file.exists() else "does not exist"
            raise SecretFileError(f"{option} {path} {what}")
        with file.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise SecretFileError(f"{option} {path} cannot be read by keepgreen: {reason}") from None
    if len(data) > limit:
        raise SecretFileError(f"{option} {path} is too big to be what it should be")
    return data
