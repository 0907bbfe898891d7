"""Git URLs: which transport a URL names, credentials that must not be in it, and its redaction."""

from __future__ import annotations

import re
from enum import StrEnum

from keepgreen.core.model import GitAuth

REDACTED = "***"
# git's `<transport>::<address>` form (ext::, fd::, ...), which keepgreen never uses.
_TRANSPORT_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")


class GitUrlKind(StrEnum):
    """The transport a repository's git URL names."""

    LOCAL = "local"  # a path on this machine, or file://
    HTTP = "http"  # http:// or https://: basic auth from --git-token-file
    SSH = "ssh"  # ssh://, or scp-like user@host:path: an SSH key from --ssh-key-file
    GIT = "git"  # git://: the git daemon's protocol, which has no authentication
    UNSUPPORTED = "unsupported"  # any other scheme (ftp://, ext::, ...)


_SCHEMES = {
    "file": GitUrlKind.LOCAL,
    "http": GitUrlKind.HTTP,
    "https": GitUrlKind.HTTP,
    "ssh": GitUrlKind.SSH,
    "git+ssh": GitUrlKind.SSH,
    "ssh+git": GitUrlKind.SSH,
    "git": GitUrlKind.GIT,
}


def git_url_kind(url: str) -> GitUrlKind:
    """The transport of `url`, by git's own rules for telling URLs from paths."""
    scheme, separator, _ = url.partition("://")
    if separator:
        return _SCHEMES.get(scheme.lower(), GitUrlKind.UNSUPPORTED)
    if _TRANSPORT_PREFIX.match(url):
        return GitUrlKind.UNSUPPORTED
    if _is_scp_like(url):
        return GitUrlKind.SSH
    return GitUrlKind.LOCAL


def _is_scp_like(url: str) -> bool:
    # git's rule: a colon before the first slash makes `host:path` an scp-like remote.
    colon, slash = url.find(":"), url.find("/")
    return "://" not in url and colon != -1 and (slash == -1 or colon < slash)


def _userinfo(url: str) -> tuple[str, str] | None:
    """`(userinfo, rest)` of a URL with a scheme and an `@` in its authority, else None."""
    scheme, separator, remainder = url.partition("://")
    if not separator:
        return None
    end = min((i for i in (remainder.find(c) for c in "/?#") if i != -1), default=len(remainder))
    authority = remainder[:end]
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return None
    return userinfo, f"{scheme}://{REDACTED}@{host}{remainder[end:]}"


def _scp_like_password(url: str) -> str | None:
    """For `user:password@host/path` (which git would read as scp-like host `user`), the URL
    with the `user:password` part redacted; None for anything else.
    """
    if not _is_scp_like(url):
        return None
    host, _, path = url.partition(":")
    slash = path.find("/")
    head = path if slash == -1 else path[:slash]
    if "@" in host or "@" not in head:
        return None
    return f"{REDACTED}@{path.partition('@')[2]}"


def credentials_problem(url: str) -> str | None:
    """Why `url` may not be stored because it holds credentials, or None.

    Refused: any userinfo in an http(s) URL (`user:password@` or a bare `token@`), and a
    password in any URL. An SSH user name alone (`ssh://git@host/...`, `git@host:path`) is no
    secret and stays. The sentence never repeats the URL, so the secret is not echoed.
    """
    kind = git_url_kind(url)
    found = _userinfo(url)
    has_password = (found is not None and ":" in found[0]) or _scp_like_password(url) is not None
    if kind is GitUrlKind.HTTP and found is not None:
        return (
            "git-url must not hold credentials (the part before '@'); put the token in a file "
            "readable by keepgreen and give --git-token-file PATH (and --git-username if the "
            "server wants a user other than x-access-token)"
        )
    if has_password:
        return (
            "git-url must not hold a password; for an ssh URL give --ssh-key-file PATH, for an "
            "http(s) URL put the token in a file and give --git-token-file PATH"
        )
    return None


def redact_url(url: str) -> str:
    """`url` as it may be shown: credentials stored by an older keepgreen become `***`.

    An http(s) URL loses its whole userinfo (a bare `token@` is a secret too); another URL
    loses a userinfo with a password in it; an SSH user name alone is shown as it is.
    """
    found = _userinfo(url)
    if found is not None:
        userinfo, redacted = found
        if git_url_kind(url) is GitUrlKind.HTTP or ":" in userinfo:
            return redacted
        return url
    return _scp_like_password(url) or url


def auth_problem(url: str, auth: GitAuth) -> str | None:
    """Why `auth` does not fit `url` (a token for an ssh URL, a key for a local path...), or
    None. The files themselves are checked where they can be read, not here.
    """
    kind = git_url_kind(url)
    http_options = auth.token_file is not None or auth.username is not None
    ssh_options = auth.ssh_key_file is not None or auth.ssh_known_hosts is not None
    if kind in (GitUrlKind.LOCAL, GitUrlKind.GIT) and (http_options or ssh_options):
        where = "a local repository" if kind is GitUrlKind.LOCAL else "a git:// URL"
        return (
            f"git-token-file, git-username, ssh-key-file and ssh-known-hosts are not used with "
            f"{where}, which has no authentication; leave them out"
        )
    if kind is GitUrlKind.HTTP and ssh_options:
        return "ssh-key-file and ssh-known-hosts are for ssh URLs; this git-url is http(s)"
    if kind is GitUrlKind.SSH and http_options:
        return "git-token-file and git-username are for http(s) URLs; this git-url is ssh"
    if auth.username is not None and auth.token_file is None:
        return "git-username needs --git-token-file (the password that goes with it)"
    if auth.username is not None and (
        not auth.username or any(ord(c) < 0x21 or c in ":\x7f" for c in auth.username)
    ):
        return "git-username must be a non-empty name without spaces, colons or controls"
    return None
