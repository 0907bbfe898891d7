"""Git URLs: the transport each names, the credentials refused in them, their redaction, and
which credential options fit which URL.
"""

from __future__ import annotations

import pytest

from keepgreen.core.git_urls import (
    GitUrlKind,
    auth_problem,
    credentials_problem,
    git_url_kind,
    redact_url,
)
from keepgreen.core.model import GitAuth


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("/srv/git/widgets.git", GitUrlKind.LOCAL),
        ("./widgets", GitUrlKind.LOCAL),
        ("file:///srv/git/widgets.git", GitUrlKind.LOCAL),
        ("https://github.com/acme/widgets.git", GitUrlKind.HTTP),
        ("HTTP://git.example.com/w.git", GitUrlKind.HTTP),
        ("ssh://git@github.com/acme/widgets.git", GitUrlKind.SSH),
        ("git@github.com:acme/widgets.git", GitUrlKind.SSH),
        ("git://git.example.com/widgets.git", GitUrlKind.GIT),
        ("ftp://git.example.com/widgets.git", GitUrlKind.UNSUPPORTED),
        ("ext::sh -c touch% /tmp/pwned", GitUrlKind.UNSUPPORTED),
    ],
)
def test_the_transport_of_a_url(url: str, kind: GitUrlKind) -> None:
    assert git_url_kind(url) is kind


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://bot:p4ss@github.com/acme/widgets.git", "p4ss"),
        ("https://ghp_0123456789@github.com/acme/widgets.git", "ghp_0123456789"),
        ("http://jdoe:@git.example.com/w.git", "jdoe"),
        ("ssh://git:p4ss@git.example.com/w.git", "p4ss"),
        ("git://anon:p4ss@git.example.com/w.git", "p4ss"),
        ("bot:p4ss@github.com/acme/widgets.git", "p4ss"),
    ],
)
def test_credentials_in_a_url_are_refused_and_never_repeated(url: str, secret: str) -> None:
    problem = credentials_problem(url)
    assert problem is not None
    assert secret not in problem
    assert "--git-token-file" in problem
    assert secret not in redact_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "ssh://git@github.com/acme/widgets.git",
        "git@github.com:acme/widgets.git",
        "https://github.com/acme/widgets.git",
        "/srv/git/with@sign/widgets",
        "https://github.com/acme/widgets.git?ref=a@b",
    ],
)
def test_urls_without_secrets_are_accepted_and_shown_as_they_are(url: str) -> None:
    assert credentials_problem(url) is None
    assert redact_url(url) == url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://bot:p4ss@github.com/acme/w.git", "https://***@github.com/acme/w.git"),
        ("https://tok@github.com:8443/acme/w.git", "https://***@github.com:8443/acme/w.git"),
        ("ssh://git:p4ss@host/w.git", "ssh://***@host/w.git"),
        ("bot:p4ss@github.com/acme/w.git", "***@github.com/acme/w.git"),
    ],
)
def test_stored_credentials_are_shown_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "auth", "problem"),
    [
        ("https://h/w.git", GitAuth(token_file="/t"), None),
        ("https://h/w.git", GitAuth(token_file="/t", username="bot"), None),
        ("git@h:w.git", GitAuth(ssh_key_file="/k", ssh_known_hosts="/kh"), None),
        ("https://h/w.git", GitAuth(username="bot"), "git-username needs --git-token-file"),
        ("https://h/w.git", GitAuth(ssh_key_file="/k"), "are for ssh URLs"),
        ("ssh://h/w.git", GitAuth(token_file="/t"), "are for http(s) URLs"),
        ("/srv/w", GitAuth(token_file="/t"), "not used with a local repository"),
        ("git://h/w.git", GitAuth(ssh_key_file="/k"), "not used with a git:// URL"),
        ("https://h/w", GitAuth(token_file="/t", username="a:b"), "without spaces, colons"),
    ],
)
def test_credential_options_fit_their_url(url: str, auth: GitAuth, problem: str | None) -> None:
    found = auth_problem(url, auth)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
