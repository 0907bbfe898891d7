"""Git's credential plumbing: the environment in which git signs in to a repository's server.

A token reaches git through a credential helper (`credential_helper.py`) that reads the token
file when git asks, and an SSH key through GIT_SSH_COMMAND naming the key file. The secret is
never in a command line, a URL, a git config file or the environment: only file paths are.
Every git command keepgreen runs against a remote gets `remote_git_environment`, so none of
them can prompt, store a credential elsewhere or take a transport keepgreen does not use.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from keepgreen.adapters.git.secret_files import (
    ORIGIN_VARIABLE,
    TOKEN_FILE_VARIABLE,
    USERNAME_VARIABLE,
    Secret,
    SecretFileError,
    read_secret_file,
)
from keepgreen.adapters.git.secret_files import read_token_file as read_token_in
from keepgreen.app.ports import CredentialFileError
from keepgreen.core.git_urls import GitUrlKind, git_url_kind
from keepgreen.core.model import DEFAULT_GIT_USERNAME, GitAuth

HELPER_MODULE = "keepgreen.adapters.git.credential_helper"
# The transports keepgreen uses; git's `ext::` (which runs a command) and others stay off.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
SSH_CONNECT_TIMEOUT_SECONDS = 20


def checked_auth(auth: GitAuth) -> GitAuth:
    """`auth` with its file paths made absolute (links kept, so that a secret mounted through
    a link that is swapped on rotation is followed), once each file can be used.

    Raises CredentialFileError naming the option and the file, never its content.
    """
    absolute = replace(
        auth,
        token_file=_absolute(auth.token_file),
        ssh_key_file=_absolute(auth.ssh_key_file),
        ssh_known_hosts=_absolute(auth.ssh_known_hosts),
    )
    if absolute.token_file is not None:
        read_token_file(absolute.token_file)
    if absolute.ssh_key_file is not None:
        _read(absolute.ssh_key_file, option="ssh-key-file", limit=1024 * 1024)
        # ssh ignores a key of one's own that others may read; say so now, not at a fetch.
        status = Path(absolute.ssh_key_file).stat()
        if status.st_uid == os.getuid() and status.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialFileError(
                f"ssh-key-file {absolute.ssh_key_file} may be read by other users, so ssh "
                "will not use it; make it private (chmod 600)"
            )
    if absolute.ssh_known_hosts is not None:
        _read(absolute.ssh_known_hosts, option="ssh-known-hosts", limit=16 * 1024 * 1024)
    return absolute


def remote_git_environment(
    url: str, auth: GitAuth, *, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a git command that talks to the server of `url` with `auth`.

    `base` (default: this process's environment) is kept, except that nothing may prompt
    (no terminal, no askpass program, ssh in batch mode), only keepgreen's transports are
    allowed, the operator's credential helpers are switched off (so none stores the token
    or answers in its place), and the repository's credentials are wired in.
    """
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            # Empty, not unset: an empty GIT_ASKPASS also hides core.askPass and SSH_ASKPASS.
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
            "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
            "GIT_CONFIG_NOSYSTEM": "1",
        }
    )
    # `credential.helper=` empties the list of helpers from every config file; the entries
    # after it are the only ones git runs.
    config: list[tuple[str, str]] = [("credential.helper", "")]
    kind = git_url_kind(url)
    if kind is GitUrlKind.HTTP and auth.token_file is not None:
        helper = f"!{shlex.quote(sys.executable)} -m {HELPER_MODULE}"
        config.append(("credential.helper", helper))
        env[TOKEN_FILE_VARIABLE] = auth.token_file
        env[USERNAME_VARIABLE] = auth.username or DEFAULT_GIT_USERNAME
        env[ORIGIN_VARIABLE] = origin_of(url)
    if kind is GitUrlKind.SSH:
        env["GIT_SSH_COMMAND"] = ssh_command(auth)
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def ssh_command(auth: GitAuth) -> str:
    """GIT_SSH_COMMAND for `auth`: never a prompt, never a host key taken on trust."""
    words = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ConnectTimeout={SSH_CONNECT_TIMEOUT_SECONDS}",
    ]
    if auth.ssh_key_file is not None:
        words += ["-i", auth.ssh_key_file, "-o", "IdentitiesOnly=yes"]
    if auth.ssh_known_hosts is not None:
        words += ["-o", f"UserKnownHostsFile={auth.ssh_known_hosts}"]
    return shlex.join(words)


def origin_of(url: str) -> str:
    """`protocol://host[:port]` of an http(s) URL, as git's credential requests name it."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2].lower()
    return f"{parts.scheme.lower()}://{host}"


def _absolute(path: str | None) -> str | None:
    if path is None:
        return None
    # abspath, not resolve(): a secret mounted through a link swapped on rotation stays
    # followed through the link.
    return os.path.abspath(Path(path).expanduser())  # noqa: PTH100


def read_token_file(path: str) -> Secret:
    """The token in `path` (see `secret_files.read_token_file`); CredentialFileError when the
    file cannot be used.
    """
    try:
        return read_token_in(path)
    except SecretFileError as error:
        raise CredentialFileError(str(error)) from None


def _read(path: str, *, option: str, limit: int) -> bytes:
    try:
        return read_secret_file(path, option=option, limit=limit)
    except SecretFileError as error:
        raise CredentialFileError(str(error)) from None
