"""The fake GitHub answers as GitHub does, to a client generated from GitHub's description
(githubkit) and to git, and every exchange stays within the description.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from githubkit import AppAuthStrategy, GitHub
from githubkit.exception import RequestFailed

from tests.support.fake_github import FakeGithub

OWNER, NAME = "acme", "widgets"
_APP_CLIENTS: list[GitHub[AppAuthStrategy]] = []


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGithub]:
    with FakeGithub(tmp_path / "github") as served:
        yield served
    assert served.violations == []


@pytest.fixture
def installation(fake: FakeGithub) -> int:
    installation_id = fake.add_installation(OWNER)
    fake.add_repository(installation_id, OWNER, NAME, files={"README.md": "hello\n"})
    return installation_id


def app_client(fake: FakeGithub) -> GitHub[AppAuthStrategy]:
    """A client as the App; kept alive to the end (githubkit's namespaces need their client)."""
    auth = AppAuthStrategy(str(fake.app_id), fake.private_key_pem.decode())
    client = GitHub(auth, base_url=fake.api_url, auto_retry=False)
    _APP_CLIENTS.append(client)
    return client


def installation_client(fake: FakeGithub, installation_id: int) -> GitHub:  # type: ignore[type-arg]
    app = app_client(fake)
    return app.with_auth(app.auth.as_installation(installation_id))


def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": "/nonexistent",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "T",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "T",
            "GIT_COMMITTER_EMAIL": "t@example.com",
        },
    )


def test_an_installation_token_opens_its_repositories_and_only_them(
    fake: FakeGithub, installation: int
) -> None:
    other = fake.add_installation("globex")
    fake.add_repository(other, "globex", "secret")
    client = installation_client(fake, installation)

    listed = client.rest.apps.list_repos_accessible_to_installation(per_page=1)

    assert listed.parsed_data.total_count == 1
    assert [r.full_name for r in listed.parsed_data.repositories] == [f"{OWNER}/{NAME}"]
    assert listed.headers["x-ratelimit-limit"] == "5000"
    assert listed.headers["x-ratelimit-resource"] == "core"
    assert int(listed.headers["x-ratelimit-remaining"]) == 5000 - int(
        listed.headers["x-ratelimit-used"]
    )
    with pytest.raises(RequestFailed) as hidden:
        client.rest.repos.get("globex", "secret")
    assert hidden.value.response.status_code == 404
    assert [t.installation_id for t in fake.tokens_issued] == [installation]


def _jwt(key_pem: bytes, app_id: int, *, lifetime: int = 540) -> str:
    now = int(time.time()) - 30
    return jwt.encode({"iat": now, "exp": now + lifetime, "iss": str(app_id)}, key_pem, "RS256")


def test_the_app_jwt_must_be_signed_by_the_apps_key(fake: FakeGithub, installation: int) -> None:
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )

    def get_app(token: str) -> int:
        answer = httpx.get(f"{fake.api_url}/app", headers={"Authorization": f"Bearer {token}"})
        return answer.status_code

    assert app_client(fake).rest.apps.get_installation(installation).parsed_data.id == installation
    assert get_app(_jwt(fake.private_key_pem, fake.app_id)) == 200
    assert get_app(_jwt(other_key, fake.app_id)) == 401
    assert get_app(_jwt(fake.private_key_pem, fake.app_id + 1)) == 401
    assert get_app(_jwt(fake.private_key_pem, fake.app_id, lifetime=3600)) == 401
    with pytest.raises(RequestFailed) as unknown:
        app_client(fake).rest.apps.create_installation_access_token(999_999)
    assert unknown.value.response.status_code == 404


def test_git_clone_and_push_with_the_token_and_401_without(
    fake: FakeGithub, installation: int, tmp_path: Path
) -> None:
    token = app_client(fake).rest.apps.create_installation_access_token(installation)
    url = fake.repo(OWNER, NAME).clone_url
    authed = url.replace("http://", f"http://x-access-token:{token.parsed_data.token}@")

    refused = git("clone", url, str(tmp_path / "anonymous"))
    cloned = git("clone", authed, str(tmp_path / "work"))
    (tmp_path / "work" / "new.txt").write_text("new\n")
    git("add", "new.txt", cwd=tmp_path / "work")
    git("commit", "-qm", "test branch", cwd=tmp_path / "work")
    pushed = git("push", "origin", "HEAD:refs/heads/keepgreen/test-1", cwd=tmp_path / "work")

    assert refused.returncode != 0
    assert any(r.path.startswith("/git/") and r.status == 401 for r in fake.requests)
    assert cloned.returncode == 0, cloned.stderr
    assert pushed.returncode == 0, pushed.stderr
    assert (
        fake.branch_sha(OWNER, NAME, "keepgreen/test-1")
        == git("rev-parse", "HEAD", cwd=tmp_path / "work").stdout.strip()
    )


@pytest.mark.parametrize("method", ["merge", "squash", "rebase"])
def test_a_merge_lands_the_merged_tree_by_each_method(
    fake: FakeGithub, installation: int, method: str
) -> None:
    number = fake.open_pull_request(
        OWNER, NAME, branch="feature", files={"a.txt": "a\n"}, title="Add a"
    )
    fake.push_to_pull_request(OWNER, NAME, number, files={"b.txt": "b\n"})
    main_before = fake.branch_sha(OWNER, NAME)
    fake.push_to_branch(OWNER, NAME, files={"c.txt": "c\n"})
    base = fake.branch_sha(OWNER, NAME)
    head = fake.head_sha(OWNER, NAME, number)
    client = installation_client(fake, installation)

    merged = client.rest.pulls.merge(
        OWNER, NAME, number, data={"sha": head, "merge_method": method}
    ).parsed_data

    bare = fake.repo(OWNER, NAME).bare
    record = fake.merges[-1]
    assert merged.merged
    assert merged.sha == record.sha == fake.branch_sha(OWNER, NAME)
    assert bare.git("ls-tree", "--name-only", record.tree).split() == [
        "README.md",
        "a.txt",
        "b.txt",
        "c.txt",
    ]
    expected_parents = {"merge": [base, head], "squash": [base]}.get(method)
    if expected_parents is not None:
        assert record.parents == expected_parents
    else:  # two commits replayed on the base, in order
        assert bare.git("rev-list", "--count", f"{base}..{record.sha}") == "2"
        assert bare.git("log", "-1", "--format=%s", f"{record.sha}~1") == "Add a"
    assert main_before != base
    pull = client.rest.pulls.get(OWNER, NAME, number).json()
    assert (pull["state"], pull["merged"], pull["merge_commit_sha"]) == ("closed", True, record.sha)


def test_conflicts_and_stale_heads_are_refused(fake: FakeGithub, installation: int) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"README.md": "theirs\n"})
    stale = fake.head_sha(OWNER, NAME, number)
    fake.push_to_pull_request(OWNER, NAME, number, files={"x.txt": "x\n"})
    client = installation_client(fake, installation)

    with pytest.raises(RequestFailed) as moved:
        client.rest.pulls.merge(OWNER, NAME, number, data={"sha": stale})
    fake.push_to_branch(OWNER, NAME, files={"README.md": "ours\n"})
    assert client.rest.pulls.get(OWNER, NAME, number).parsed_data.mergeable is False
    with pytest.raises(RequestFailed) as conflict:
        client.rest.pulls.merge(OWNER, NAME, number, data={"merge_method": "squash"})

    assert moved.value.response.status_code == 409
    assert conflict.value.response.status_code == 405
    assert fake.merges == []


def test_check_runs_and_comments_keep_their_history(fake: FakeGithub, installation: int) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"a.txt": "a\n"})
    head = fake.head_sha(OWNER, NAME, number)
    fake.add_check_run(OWNER, NAME, head_sha=head, check_name="ci/build", conclusion="failure")
    client = installation_client(fake, installation)

    created = client.rest.checks.create(
        OWNER,
        NAME,
        data={"name": "keepgreen", "head_sha": head, "status": "queued",
              "output": {"title": "Queued", "summary": "position 1 of 1"}},
    ).parsed_data  # fmt: skip
    client.rest.checks.update(
        OWNER, NAME, created.id,
        data={"conclusion": "success", "output": {"title": "Merged", "summary": "as abc"}},
    )  # fmt: skip
    listed = client.rest.checks.list_for_ref(OWNER, NAME, head).parsed_data
    comment = client.rest.issues.create_comment(OWNER, NAME, number, data={"body": "queued"})
    client.rest.issues.update_comment(OWNER, NAME, comment.parsed_data.id, data={"body": "merged"})
    bodies = [c.body for c in client.rest.issues.list_comments(OWNER, NAME, number).parsed_data]

    run = fake.check_runs[created.id]
    assert [(h["status"], h["conclusion"], h["title"]) for h in run.history] == [
        ("queued", None, "Queued"),
        ("completed", "success", "Merged"),
    ]
    assert sorted((r.name, r.conclusion, r.app.slug) for r in listed.check_runs) == [
        ("ci/build", "failure", "ci"),
        ("keepgreen", "success", "keepgreen"),
    ]
    assert bodies == ["merged"]
    assert fake.comments[comment.parsed_data.id].history == ["queued"]


def test_permissions_and_required_checks(fake: FakeGithub, installation: int) -> None:
    fake.set_permission(OWNER, NAME, "mallory", "none")
    fake.set_permission(OWNER, NAME, "maya", "maintain")
    fake.protect(OWNER, NAME, "main", ["ci/build"])
    fake.protect(OWNER, NAME, "release", ["ci/e2e"], ruleset=True)
    client = installation_client(fake, installation)

    permission = client.rest.repos.get_collaborator_permission_level
    protection = client.rest.repos.get_status_checks_protection

    assert permission(OWNER, NAME, "mallory").parsed_data.permission == "none"
    assert permission(OWNER, NAME, "maya").parsed_data.permission == "write"
    assert permission(OWNER, NAME, "anyone").parsed_data.permission == "read"
    assert protection(OWNER, NAME, "main").parsed_data.contexts == ["ci/build"]
    with pytest.raises(RequestFailed) as unprotected:
        protection(OWNER, NAME, "release")
    assert unprotected.value.response.status_code == 404
    rules = client.rest.repos.get_branch_rules(OWNER, NAME, "release").parsed_data
    assert rules[0].type == "required_status_checks"


def test_injected_failures_come_first_then_the_answer(fake: FakeGithub, installation: int) -> None:
    client = installation_client(fake, installation)
    client.rest.repos.get(OWNER, NAME)  # the token is issued before the failures start
    fake.fail(502, times=1)
    fake.fail(429, times=1, retry_after=7)

    with pytest.raises(RequestFailed) as bad_gateway:
        client.rest.repos.get(OWNER, NAME)
    with pytest.raises(RequestFailed) as limited:
        client.rest.repos.get(OWNER, NAME)
    answered = client.rest.repos.get(OWNER, NAME)

    assert bad_gateway.value.response.status_code == 502
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["retry-after"] == "7"
    assert "x-ratelimit-remaining" in limited.value.response.headers
    assert answered.status_code == 200
    assert [r.status for r in fake.requests[-3:]] == [502, 429, 200]


def test_a_request_outside_the_description_is_refused_and_recorded(
    fake: FakeGithub, installation: int
) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="f", files={"a.txt": "a\n"})
    token = app_client(fake).rest.apps.create_installation_access_token(installation)

    answer = httpx.put(
        f"{fake.api_url}/repos/{OWNER}/{NAME}/pulls/{number}/merge",
        json={"merge_method": "fast-forward"},
        headers={"Authorization": f"token {token.parsed_data.token}"},
    )
    unknown = httpx.get(
        f"{fake.api_url}/repos/{OWNER}/{NAME}/nothing-here",
        headers={"Authorization": f"token {token.parsed_data.token}"},
    )

    assert answer.status_code == 422
    assert unknown.status_code == 404
    assert unknown.json()["message"] == "Not Found"
    assert len(fake.violations) == 2
    assert fake.violations[0].startswith("pulls/merge request: request body at /merge_method")
    assert "nothing-here" in fake.violations[1]
    fake.violations.clear()  # seen: the fixture asserts there are no others
