"""The GitHub API adapter against the fake GitHub: tokens minted once and renewed before they
expire (and written for git), every port call, and GitHub failing as the worker expects it.
"""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from keepgreen.adapters.github.client import GithubAppClient
from keepgreen.app.github.api import (
    CheckRunView,
    GithubRefused,
    GithubUnavailable,
    Where,
)
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import IncidentKind, MergeMethod
from tests.conftest import FakeClock, LogLines
from tests.support.fake_github import FakeGithub

OWNER, NAME = "acme", "widgets"


@pytest.fixture
def fake(fake_github: FakeGithub) -> FakeGithub:
    return fake_github


@pytest.fixture
def installation(fake: FakeGithub) -> int:
    installation_id = fake.add_installation(OWNER)
    fake.add_repository(installation_id, OWNER, NAME, files={"README.md": "hello\n"})
    return installation_id


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))


@pytest.fixture
def client(
    fake: FakeGithub, tmp_path: Path, clock: FakeClock, telemetry: Telemetry
) -> GithubAppClient:
    return GithubAppClient(
        app_id=fake.app_id,
        private_key=SecretStr(fake.private_key_pem.decode()),
        api_url=fake.api_url,
        data_dir=tmp_path / "data",
        clock=clock,
        telemetry=telemetry,
    )


def sample(telemetry: Telemetry, name: str, **labels: str) -> float | None:
    return telemetry.registry.get_sample_value(name, labels)


def test_one_token_serves_until_shortly_before_it_expires_and_git_reads_it_from_a_private_file(
    fake: FakeGithub, installation: int, client: GithubAppClient, clock: FakeClock
) -> None:
    path = Path(client.git_token_file(installation))
    client.permission(Where(installation, OWNER, NAME), "ada")
    assert len(fake.tokens_issued) == 1
    assert path.read_text() == fake.tokens_issued[0].token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    clock.advance(minutes=50)  # ten minutes left: still used
    client.permission(Where(installation, OWNER, NAME), "ada")
    assert len(fake.tokens_issued) == 1
    clock.advance(minutes=6)  # four minutes left: renewed, and the file with it
    assert client.git_token_file(installation) == str(path)
    assert len(fake.tokens_issued) == 2
    assert path.read_text() == fake.tokens_issued[1].token


def test_the_calls_the_queue_makes(
    fake: FakeGithub, installation: int, client: GithubAppClient
) -> None:
    where = Where(installation, OWNER, NAME)
    fake.set_permission(OWNER, NAME, "ada", "write")
    number = fake.open_pull_request(
        OWNER, NAME, branch="feature", files={"a.txt": "a\n"}, author="ada"
    )

    assert client.installation_account(installation) == OWNER
    [repo] = client.installation_repositories(installation)
    assert (repo.owner, repo.name, repo.default_branch) == (OWNER, NAME, "main")
    assert repo.clone_url.endswith(f"/git/{OWNER}/{NAME}.git")
    assert client.permission(where, "ada") == "write"
    assert client.permission(where, "mallory") == "read"
    pull = client.pull_request(where, number)
    assert pull is not None
    assert (pull.state, pull.base_ref, pull.author, pull.merged) == ("open", "main", "ada", False)
    assert pull.head_sha == fake.head_sha(OWNER, NAME, number)
    assert client.pull_request(where, 999) is None

    check = client.create_check_run(
        where, head_sha=pull.head_sha, view=CheckRunView("queued", "Queued: position 1 of 1", "…")
    )
    client.update_check_run(
        where, check, CheckRunView("completed", "Merged", "done", conclusion="success")
    )
    recorded = fake.check_runs[check]
    assert (recorded.name, recorded.status, recorded.conclusion) == (
        "keepgreen",
        "completed",
        "success",
    )
    assert [entry["status"] for entry in recorded.history] == ["queued", "completed"]

    comment = client.create_comment(where, number, "first")
    assert client.update_comment(where, comment, "second")
    assert fake.comments[comment].body == "second"
    assert not client.update_comment(where, 424242, "gone")

    answer = client.merge(
        where, number, head_sha=pull.head_sha, method=MergeMethod.SQUASH, title="A change"
    )
    assert answer.sha == fake.branch_sha(OWNER, NAME, "main")
    commit = client.commit(where, answer.sha)
    assert commit is not None
    assert commit.tree == fake.merges[-1].tree
    after = client.pull_request(where, number)
    assert after is not None
    assert after.merged


def test_a_merge_github_refuses_says_why(
    fake: FakeGithub, installation: int, client: GithubAppClient
) -> None:
    where = Where(installation, OWNER, NAME)
    number = fake.open_pull_request(OWNER, NAME, branch="feature", files={"a.txt": "a\n"})
    stale = fake.head_sha(OWNER, NAME, number)
    fake.push_to_pull_request(OWNER, NAME, number, files={"a.txt": "b\n"})
    moved = client.merge(where, number, head_sha=stale, method=MergeMethod.MERGE_COMMIT, title="x")
    assert (moved.sha, moved.refusal) == (None, "head_moved")

    fake.push_to_branch(OWNER, NAME, "main", files={"a.txt": "conflict\n"})
    head = fake.head_sha(OWNER, NAME, number)
    conflict = client.merge(where, number, head_sha=head, method=MergeMethod.REBASE, title="x")
    assert (conflict.sha, conflict.refusal) == (None, "not_mergeable")


def test_required_checks_come_from_protection_and_rulesets(
    fake: FakeGithub, installation: int, client: GithubAppClient
) -> None:
    where = Where(installation, OWNER, NAME)
    assert client.required_checks(where, "main") == ()
    fake.protect(OWNER, NAME, "main", ["ci/test"])
    fake.protect(OWNER, NAME, "main", ["ci/lint", "ci/test"], ruleset=True)
    assert client.required_checks(where, "main") == ("ci/test", "ci/lint")


def test_github_failing_is_unavailable_with_its_wait_and_counted(
    fake: FakeGithub, installation: int, client: GithubAppClient, telemetry: Telemetry
) -> None:
    where = Where(installation, OWNER, NAME)
    client.permission(where, "ada")  # a token first: failures below hit the call itself

    fake.fail(502, times=1)
    with pytest.raises(GithubUnavailable) as down:
        client.permission(where, "ada")
    assert down.value.kind is IncidentKind.GITHUB_UNAVAILABLE
    assert "502" in str(down.value)

    fake.fail(429, times=1, retry_after=7)
    with pytest.raises(GithubUnavailable) as limited:
        client.permission(where, "ada")
    assert limited.value.kind is IncidentKind.GITHUB_RATE_LIMITED
    assert limited.value.retry_after == pytest.approx(7, abs=1)

    assert client.permission(where, "ada") == "read"  # answering again
    assert sample(telemetry, "keepgreen_github_requests_total", outcome="unavailable") == 1
    assert sample(telemetry, "keepgreen_github_requests_total", outcome="rate_limited") == 1
    remaining = sample(
        telemetry, "keepgreen_github_rate_limit_remaining", installation=str(installation)
    )
    limit = sample(telemetry, "keepgreen_github_rate_limit", installation=str(installation))
    assert limit == 5000
    assert remaining is not None
    assert 0 < remaining < 5000


def test_an_unknown_installation_is_refused(fake: FakeGithub, client: GithubAppClient) -> None:
    with pytest.raises(GithubRefused, match="not installed"):
        client.git_token_file(987654)
    with pytest.raises(GithubRefused):
        client.installation_account(987654)


def test_the_token_never_reaches_logs_or_errors(
    fake: FakeGithub, installation: int, client: GithubAppClient, log_lines: LogLines
) -> None:
    where = Where(installation, OWNER, NAME)
    client.permission(where, "ada")
    fake.fail(502, times=1)
    with pytest.raises(GithubUnavailable) as down:
        client.permission(where, "ada")
    token = fake.tokens_issued[-1].token
    assert token not in str(down.value)
    assert token not in log_lines.text()


def test_a_github_that_cannot_be_reached_says_where(tmp_path: Path, clock: FakeClock) -> None:
    from tests.support.gitservers import free_port

    url = f"http://127.0.0.1:{free_port()}/api/v3"
    with FakeGithub(tmp_path / "keys") as keys:  # only its key: nothing listens at `url`
        client = GithubAppClient(
            app_id=keys.app_id,
            private_key=SecretStr(keys.private_key_pem.decode()),
            api_url=url,
            data_dir=tmp_path / "data",
            clock=clock,
            telemetry=Telemetry(),
        )
        with pytest.raises(GithubUnavailable, match=f"GitHub cannot be reached at {url}"):
            client.installation_account(1)
