"""A git credential helper that answers with a token file's content, for one server only.

git runs it (`python -m keepgreen.adapters.git.credential_helper get`) when a server asks for
credentials, with the request on stdin (`protocol=https`, `host=example.com:8443`, ...). It
answers `get` for the origin in KEEPGREEN_GIT_ORIGIN only, so a redirect to another server
never receives the token; `store` and `erase` are ignored, since keepgreen keeps the token
in its file. Only paths and names come through the environment; the token is read here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

# Only the secret_files module: git starts this helper at every authenticated call, and the
# rest of keepgreen would take ten times longer to import than the answer takes.
from keepgreen.adapters.git.secret_files import (
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
    SecretFileError,
    read_token_file,
)

DEFAULT_USERNAME = "x-access-token"  # as core.model's DEFAULT_GIT_USERNAME; always set by keepgreen


def answer(
    argv: Sequence[str], *, stdin: TextIO, stdout: TextIO, stderr: TextIO, env: Mapping[str, str]
) -> int:
    """Carry out one helper call; always 0, since git reads an empty answer as "no help"."""
    if not argv or argv[-1] != "get":
        return 0
    request = {}
    for line in stdin:
        key, separator, value = line.rstrip("\n").partition("=")
        if not line.strip():
            break
        if separator:
            request[key] = value
    asked = f"{request.get('protocol', '').lower()}://{request.get('host', '').lower()}"
    token_file = env.get(TOKEN_FILE_VARIABLE)
    if token_file is None or asked != env.get(ORIGIN_VARIABLE):
        return 0
    try:
        token = read_token_file(token_file)
    except SecretFileError as error:
        stderr.write(f"keepgreen: {error}\n")
        return 0
    username = env.get(USERNAME_VARIABLE) or DEFAULT_USERNAME
    stdout.write(f"username={username}\npassword={token.reveal()}\n")
    return 0


def main() -> None:
    sys.exit(
        answer(sys.argv[1:], stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr, env=os.environ)
    )


if __name__ == "__main__":
    main()
