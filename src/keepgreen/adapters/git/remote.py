"""Git commands against a repository's server: run with its credentials, a time limit, no
prompt and no stdin; their failures told as one sentence without a secret in it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from keepgreen.adapters.git.credentials import read_token_file, remote_git_environment
from keepgreen.app.ports import CodeHostError, CredentialFileError
from keepgreen.core.enums import IncidentKind
from keepgreen.core.git_urls import REDACTED, redact_url
from keepgreen.core.model import GitAuth

REMOTE_TIMEOUT_SECONDS = 30.0
_MAX_SERVER_SAID = 300  # characters of a server's own message kept in an error
_TERMINAL_ESCAPE = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[@-_])")  # colours, cursor moves
# Anything shaped like credentials in a URL git printed: `scheme://user:secret@`.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")

# git's words for each kind of failure (lowercase), and what keepgreen says about it, in
# the order they are looked for: a more telling message before a vaguer one.
_FAILURES: tuple[tuple[tuple[str, ...], str, IncidentKind], ...] = (
    (("timed out", "timeout"), "the server did not answer in time", IncidentKind.TIMEOUT),
    (
        ("[remote rejected]", "hook declined"),
        "the server refused the push (a hook or a branch rule)",
        IncidentKind.PUSH_REJECTED,
    ),
    (
        (
            "repository not exported",
            "no such repository",
            "does not appear to be a git repository",
            "not found",
        ),
        "there is no git repository there (or it is not exported to keepgreen)",
        IncidentKind.REPOSITORY_MISSING,
    ),
    (
        ("host key verification failed", "no matching host key", "remote host identification"),
        "the server's SSH host key is not in the known hosts (give --ssh-known-hosts with it)",
        IncidentKind.HOST_KEY_UNKNOWN,
    ),
    (
        (
            "authentication failed",
            "could not read username",
            "could not read password",
            "permission denied",
            "access denied",
            "http 401",
            "http 403",
            "returned error: 401",
            "returned error: 403",
            "invalid username or password",
        ),
        "the server refused keepgreen's credentials",
        IncidentKind.CREDENTIALS_REFUSED,
    ),
    (
        (
            "could not resolve host",
            "name or service not known",
            "temporary failure in name resolution",
        ),
        "the server's name cannot be resolved",
        IncidentKind.UNREACHABLE,
    ),
    (
        (
            "connection refused",
            "failed to connect",
            "couldn't connect",
            "unable to connect",
            "no route to host",
            "network is unreachable",
            "unable to look up",
        ),
        "nothing answers at the server's address",
        IncidentKind.UNREACHABLE,
    ),
    (
        ("ssl certificate problem", "certificate verify failed", "server certificate"),
        "the server's TLS certificate is not trusted",
        IncidentKind.TLS_UNTRUSTED,
    ),
)


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """What a git command against a server printed."""

    stdout: str
    stderr: str
    returncode: int = 0


def run_remote_git(
    args: Sequence[str],
    *,
    url: str,
    auth: GitAuth,
    timeout: float = REMOTE_TIMEOUT_SECONDS,
    cwd: str = "/",
    check: bool = True,
) -> RemoteResult:
    """Run `git <args>` talking to the server of `url` with `auth`; its output on success.

    git runs in a session of its own with stdin closed, so neither it nor its helpers (ssh,
    git-remote-https, the credential helper) can prompt; at `timeout` the whole group is
    killed. A failure is a CodeHostError: one sentence naming the URL (redacted) and the
    cause, with no secret in it. `cwd` is neutral ground, so the configuration of a
    repository the caller happens to stand in is not read. With `check` off, a non-zero exit
    is returned (for the caller to read git's answer) instead of raised; a timeout still raises.
    """
    env = remote_git_environment(url, auth)
    try:
        process = subprocess.Popen(
            ["git", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
    except OSError as error:
        raise CodeHostError(f"git cannot be run: {error.strerror}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Kill the group: a child of git's (ssh) would otherwise hold the pipes open.
        _kill_group(process.pid)
        process.communicate()
        raise CodeHostError(
            f"git-url {redact_url(url)} did not answer within {timeout:g} s",
            kind=IncidentKind.TIMEOUT,
        ) from None
    if check and process.returncode != 0:
        raise failure(url, auth, stderr)
    return RemoteResult(stdout, stderr, process.returncode)


def failure(url: str, auth: GitAuth, stderr: str) -> CodeHostError:
    """The error for a failed git command: `failure_sentence`, and the kind of failure."""
    text = stderr.lower()
    kind = next(
        (kind for words, _, kind in _FAILURES if any(word in text for word in words)),
        IncidentKind.GIT_ERROR,
    )
    return CodeHostError(failure_sentence(url, auth, stderr), kind=kind)


def failure_sentence(url: str, auth: GitAuth, stderr: str) -> str:
    """One sentence about a failed git command: the URL (redacted), what went wrong, and for
    a refusal what keepgreen signed in with. git's own words appear only when no known cause
    matches, with the token and anything like a URL's credentials taken out.
    """
    shown = redact_url(url)
    text = stderr.lower()
    for words, cause, kind in _FAILURES:
        if not any(word in text for word in words):
            continue
        if kind is IncidentKind.PUSH_REJECTED:
            said = server_said(stderr, auth)
            told = f"; the server said: {said}" if said else ""
            return f"git-url {shown} refused a push: {cause}{told}"
        hint = _credentials_hint(auth) if kind is IncidentKind.CREDENTIALS_REFUSED else ""
        return f"git-url {shown} cannot be read: {cause}{hint}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = scrub(lines[-1], auth) if lines else "git failed without saying why"
    return f"git-url {shown} cannot be read: {said.removeprefix('fatal: ')}"


def server_said(stderr: str, auth: GitAuth) -> str:
    """What the server itself printed (git's `remote:` lines: a hook's message), on one line,
    with secrets taken out; empty when it printed nothing.
    """
    said = " ".join(
        line.removeprefix("remote:").strip()
        for line in stderr.splitlines()
        if line.startswith("remote:") and line.removeprefix("remote:").strip()
    )
    # The server's words reach terminals (`queue show`) and logs: no control characters
    # (a hook's colours, or escapes meant for whoever reads them), and a readable length.
    said = "".join(c for c in _TERMINAL_ESCAPE.sub("", said) if c >= " " and c != "\x7f")
    if len(said) > _MAX_SERVER_SAID:
        said = said[: _MAX_SERVER_SAID - 1] + "…"
    return scrub(said, auth)


def scrub(text: str, auth: GitAuth) -> str:
    """`text` without the token of `auth` and without credentials in any URL in it."""
    if auth.token_file is not None:
        try:
            token = read_token_file(auth.token_file).reveal()
        except CredentialFileError:
            token = ""
        if token:
            text = text.replace(token, REDACTED)
    return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)


def _credentials_hint(auth: GitAuth) -> str:
    if auth.token_file is not None:
        return f" (the token in git-token-file {auth.token_file})"
    if auth.ssh_key_file is not None:
        return f" (the key in ssh-key-file {auth.ssh_key_file})"
    return "; it wants credentials: give --git-token-file PATH or --ssh-key-file PATH"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group ended on its own meanwhile
        os.killpg(pgid, signal.SIGKILL)
