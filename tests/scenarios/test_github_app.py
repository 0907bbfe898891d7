"""keepgreen as a GitHub App, in one process against the fake GitHub: installed on a
repository, PRs queued by comment and label, CI answering as check runs on the test branches,
the good PR merged through GitHub with the tested tree, the bad one failed with its reason on
its check run, and GitHub failing for a while delaying without losing anything.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.app.errors import NotFound
from keepgreen.app.github.feedback import STATE_LABELS
from keepgreen.app.pull_requests import QueueTarget
from keepgreen.app.queues import QueueUpdate
from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.model import QueueEntry, RepoRef
from tests.conftest import FakeClock
from tests.support.fake_github import FakeGithub
from tests.support.github_app import GithubRepoDriver, app_files, signed

OWNER, NAME = "acme", "widgets"
WRITER, READER = "ada", "mallory"


@pytest.fixture
def fake(fake_github: FakeGithub) -> FakeGithub:
    return fake_github


@pytest.fixture
def extra_settings(fake: FakeGithub, tmp_path: Path) -> dict[str, Any]:
    return {**app_files(fake, tmp_path / "app").settings(), "github_reconcile_seconds": 1.0}


@pytest.fixture
def repo(fake: FakeGithub, container: Container, client: TestClient) -> GithubRepoDriver:
    """The App installed on acme/widgets, whose main requires `ci/test`; ada may write."""
    container.admin.create_token(OWNER)  # the org the installation is linked to by name
    installation = fake.add_installation(OWNER)
    fake.add_repository(installation, OWNER, NAME, files={"README.md": "widgets\n"})
    fake.protect(OWNER, NAME, "main", ["ci/test"])
    fake.set_permission(OWNER, NAME, WRITER, "write")

    def send(event: str, payload: Any) -> int:
        body, headers = signed(event, payload)
        return client.post("/webhooks/github", content=body, headers=headers).status_code

    driver = GithubRepoDriver(fake, installation, OWNER, NAME, send)
    payload = driver.payloads.installation(
        "created", account=OWNER, repositories=[(fake.repo(OWNER, NAME).id, NAME)]
    )
    assert send("installation", payload) == 202
    container.worker.run_once()
    return driver


def target(container: Container) -> QueueTarget:
    org = container.admin.list_repositories(org_slug=OWNER)[0].repository.org_id
    return QueueTarget(org, RepoRef("127.0.0.1", OWNER, NAME), "main")


def entry(container: Container, number: int) -> QueueEntry:
    return container.pull_requests.get(target(container), number)


def configure(container: Container, update: QueueUpdate) -> None:
    at = target(container)
    container.queues.update(at.org_id, at.repo, at.branch, update)


def is_submitted(container: Container, number: int) -> bool:
    try:
        return not entry(container, number).state.is_terminal
    except NotFound:
        return False


def settle(container: Container, repo: GithubRepoDriver, *, passes: int = 12) -> None:
    """Worker passes, CI answering each new test branch (a file `bad.txt` fails it)."""
    for _ in range(passes):
        container.worker.run_once()
        repo.answer_ci(lambda files: "failure" if "bad.txt" in files else "success")


def test_installing_registers_the_repository_with_a_queue_that_shows_itself_on_prs(
    container: Container, repo: GithubRepoDriver
) -> None:
    [info] = container.admin.list_repositories(org_slug=OWNER)
    assert info.repository.github_installation_id == repo.installation_id
    assert info.repository.git_url == repo.fake.repo(OWNER, NAME).clone_url
    snapshot = container.queues.get(info.repository.org_id, info.repository.ref, "main")
    assert snapshot.queue.config.status_check_enabled
    assert snapshot.queue.config.comments_enabled


def test_a_good_pr_merges_through_github_with_the_tested_tree_and_a_bad_one_fails_on_its_check(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    good = fake.open_pull_request(
        OWNER, NAME, branch="good", files={"good.txt": "1\n"}, author=WRITER
    )
    bad = fake.open_pull_request(OWNER, NAME, branch="bad", files={"bad.txt": "1\n"}, author=WRITER)
    assert repo.label(good, "keepgreen-merge", sender=WRITER) == 202
    assert repo.comment(bad, "Ready.\n/keepgreen merge --priority low", author=WRITER) == 202
    container.worker.run_once()
    assert entry(container, good).state is PrState.TESTING
    assert entry(container, bad).priority.name == "low"

    settle(container, repo)

    assert entry(container, good).state is PrState.MERGED
    failed = entry(container, bad)
    assert (failed.state, failed.state_reason) == (PrState.FAILED, StateReason.TESTS_FAILED)
    [merge] = fake.merges
    assert merge.number == good
    tested = [sha for sha, verdict in repo.answered.items() if verdict == "success"]
    assert merge.tree in {repo.tree_of(sha) for sha in tested}
    assert fake.branch_sha(OWNER, NAME, "main") == merge.sha

    [good_check] = fake.check_runs_for(OWNER, NAME, head_sha=fake.head_sha(OWNER, NAME, good))
    assert (good_check.status, good_check.conclusion) == ("completed", "success")
    assert good_check.title == f"Merged as {merge.sha[:12]}"
    statuses = [entry["status"] for entry in good_check.history]
    assert statuses[0] == "queued" or statuses[0] == "in_progress"
    [bad_check] = fake.check_runs_for(OWNER, NAME, head_sha=fake.head_sha(OWNER, NAME, bad))
    assert (bad_check.status, bad_check.conclusion) == ("completed", "failure")
    assert "its tests failed" in bad_check.title
    assert bad_check.details_url is not None

    # One comment per PR, edited as the PR moved on.
    [good_comment] = fake.comments_on(OWNER, NAME, good)
    assert "Merged" in good_comment.body
    assert good_comment.history, "the comment was edited, not posted again"
    [bad_comment] = fake.comments_on(OWNER, NAME, bad)
    assert "Failed" in bad_comment.body


def test_someone_without_write_access_is_answered_politely_and_nothing_is_queued(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="x", files={"x.txt": "1\n"}, author=READER)
    assert repo.comment(number, "/keepgreen merge", author=READER) == 202
    assert repo.label(number, "keepgreen-merge", sender=READER) == 202
    container.worker.run_once()
    with pytest.raises(NotFound, match="never submitted"):
        entry(container, number)
    replies = fake.comments_on(OWNER, NAME, number)
    assert len(replies) == 2
    assert all(f"@{READER} only people with write access" in reply.body for reply in replies)


def test_a_command_keepgreen_does_not_know_is_answered_with_the_usage(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="x", files={"x.txt": "1\n"}, author=WRITER)
    assert repo.comment(number, "/keepgreen merge --priority soon", author=WRITER) == 202
    container.worker.run_once()
    [reply] = fake.comments_on(OWNER, NAME, number)
    assert "--priority" in reply.body
    assert "unknown name `soon`" in reply.body


def test_a_push_to_a_queued_pr_cancels_it_and_removing_the_label_cancels_too(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    pushed = fake.open_pull_request(OWNER, NAME, branch="p", files={"p.txt": "1\n"}, author=WRITER)
    unlabelled = fake.open_pull_request(
        OWNER, NAME, branch="u", files={"u.txt": "1\n"}, author=WRITER
    )
    repo.comment(pushed, "/keepgreen merge", author=WRITER)
    repo.label(unlabelled, "keepgreen-merge", sender=WRITER)
    container.worker.run_once()
    old_head = fake.head_sha(OWNER, NAME, pushed)

    assert repo.pushed_to(pushed, files={"p.txt": "2\n"}) == 202
    assert repo.label(unlabelled, "keepgreen-merge", sender=WRITER, action="unlabeled") == 202
    container.worker.run_once()

    cancelled = entry(container, pushed)
    assert (cancelled.state, cancelled.state_reason) == (PrState.CANCELLED, StateReason.PUSHED_TO)
    assert entry(container, unlabelled).state is PrState.CANCELLED
    [old_check] = fake.check_runs_for(OWNER, NAME, head_sha=old_head)
    assert old_check.conclusion == "cancelled"
    assert not fake.merges


def test_github_failing_for_a_while_delays_the_merge_and_merges_once(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="g", files={"g.txt": "1\n"}, author=WRITER)
    repo.comment(number, "/keepgreen merge", author=WRITER)
    container.worker.run_once()
    repo.answer_ci(lambda _files: "success")
    fake.fail(502, times=3)
    container.worker.run_once()
    fake.fail(429, times=2, retry_after=0)
    settle(container, repo)

    assert entry(container, number).state is PrState.MERGED
    assert [merge.number for merge in fake.merges] == [number]
    incidents = container.queues.get(target(container).org_id, target(container).repo, "main")
    kinds = {incident.kind.value for incident in incidents.incidents}
    assert kinds & {"github_unavailable", "github_rate_limited"}


def test_a_lost_installation_webhook_is_made_good_by_the_sync(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    fake.add_repository(repo.installation_id, OWNER, "gadgets", files={"README.md": "g\n"})
    # No `installation_repositories` delivery arrives; the periodic sync finds it.
    for chore in container.worker.chores:
        chore()
    names = {info.repository.ref.name for info in container.admin.list_repositories(org_slug=OWNER)}
    assert names == {NAME, "gadgets"}


def test_closing_a_queued_pr_or_commenting_cancel_takes_it_out(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    closed = fake.open_pull_request(OWNER, NAME, branch="c", files={"c.txt": "1\n"}, author=WRITER)
    cancelled = fake.open_pull_request(
        OWNER, NAME, branch="d", files={"d.txt": "1\n"}, author=WRITER
    )
    repo.comment(closed, "/keepgreen merge", author=WRITER)
    repo.comment(cancelled, "/keepgreen merge --no-batch", author=WRITER)
    container.worker.run_once()
    assert entry(container, cancelled).no_batch

    fake.close_pull_request(OWNER, NAME, closed)
    payload = repo.payloads.pull_request(
        "closed", number=closed, head_sha=fake.head_sha(OWNER, NAME, closed), head_ref="c"
    )
    assert repo.send("pull_request", payload) == 202
    assert repo.comment(cancelled, "/keepgreen cancel", author=WRITER) == 202
    container.worker.run_once()

    assert (entry(container, closed).state, entry(container, closed).state_reason) == (
        PrState.CANCELLED,
        StateReason.PR_CLOSED,
    )
    assert entry(container, cancelled).state is PrState.CANCELLED
    assert repo.comment(cancelled, "/keepgreen cancel", author=WRITER) == 202
    container.worker.run_once()
    assert "not in a keepgreen queue" in fake.comments_on(OWNER, NAME, cancelled)[-1].body


def test_a_pr_closed_without_its_webhook_leaves_at_the_next_reconcile(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub, clock: Any
) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="l", files={"l.txt": "1\n"}, author=WRITER)
    repo.comment(number, "/keepgreen merge", author=WRITER)
    container.worker.run_once()
    fake.close_pull_request(OWNER, NAME, number)  # GitHub's webhook is lost
    deadline = 40
    while entry(container, number).state is not PrState.CANCELLED and deadline:
        container.worker.run_once()
        deadline -= 1
    assert entry(container, number).state_reason is StateReason.PR_CLOSED


def test_one_installation_cannot_act_on_another_installations_repository(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub, client: TestClient
) -> None:
    container.admin.create_token("globex")
    other = fake.add_installation("globex")
    fake.add_repository(other, "globex", "tools", files={"README.md": "t\n"})
    fake.set_permission("globex", "tools", WRITER, "write")
    container.github_installations.installed(other, "globex")  # type: ignore[union-attr]
    number = fake.open_pull_request(
        "globex", "tools", branch="t", files={"t.txt": "1\n"}, author=WRITER
    )
    # A delivery signed by keepgreen's App but for acme's installation, naming globex's repo.
    forged = repo.payloads.issue_comment(number=number, body="/keepgreen merge", author=WRITER)
    forged["repository"]["name"] = "tools"
    forged["repository"]["owner"]["login"] = "globex"
    forged["repository"]["full_name"] = "globex/tools"
    assert repo.send("issue_comment", forged) == 202
    container.worker.run_once()

    globex = container.admin.list_repositories(org_slug="globex")[0].repository
    with pytest.raises(NotFound):
        container.pull_requests.get(QueueTarget(globex.org_id, globex.ref, "main"), number)
    assert fake.comments_on("globex", "tools", number) == []


def test_an_installation_of_an_account_without_an_org_waits_until_it_is_linked(
    container: Container, fake: FakeGithub, client: TestClient
) -> None:
    installation = fake.add_installation("initech")
    fake.add_repository(installation, "initech", "tps", files={"README.md": "t\n"})
    driver = GithubRepoDriver(fake, installation, "initech", "tps", lambda _event, _payload: 0)
    body, headers = signed(
        "installation",
        driver.payloads.installation(
            "created", account="initech", repositories=[(fake.repo("initech", "tps").id, "tps")]
        ),
    )
    assert client.post("/webhooks/github", content=body, headers=headers).status_code == 202
    container.worker.run_once()
    assert container.admin.list_repositories() == []

    installations = container.github_installations
    assert installations is not None
    result = installations.link(installation, "initech-eng")
    assert result.added == ("initech/tps",)
    [info] = container.admin.list_repositories(org_slug="initech-eng")
    assert info.repository.ref.name == "tps"
    with pytest.raises(NotFound, match="GitHub knows no installation 424242"):
        installations.link(424242, "initech-eng")


def test_deliveries_with_missing_or_odd_fields_are_dropped_without_harm(
    container: Container, repo: GithubRepoDriver, client: TestClient, fake: FakeGithub
) -> None:
    odd = [
        ("issue_comment", {"action": "created", "installation": {"id": repo.installation_id}}),
        ("pull_request", {"action": "labeled", "pull_request": {"number": "seven"}}),
        ("check_run", {"action": "completed", "check_run": {"name": 5, "head_sha": None}}),
        ("status", {"state": "sideways", "sha": "abc"}),
        ("installation", {"action": "created", "installation": {"id": 999_999}}),
        ("push", {"ref": []}),
    ]
    for event, payload in odd:
        body, headers = signed(event, payload)
        assert client.post("/webhooks/github", content=body, headers=headers).status_code == 202
    container.worker.run_once()
    with container.unit_of_work() as uow:
        assert uow.github_deliveries.pending(limit=10) == []
    assert fake.comments == {}


def test_repositories_removed_from_the_installation_leave_and_uninstalling_keeps_them(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    gadgets = fake.add_repository(repo.installation_id, OWNER, "gadgets", files={"g": "1\n"})
    added = repo.payloads.installation_repositories("added", repositories=[(gadgets.id, "gadgets")])
    assert repo.send("installation_repositories", added) == 202
    container.worker.run_once()
    names = {i.repository.ref.name for i in container.admin.list_repositories(org_slug=OWNER)}
    assert names == {NAME, "gadgets"}

    fake.remove_repository(OWNER, "gadgets")
    removed = repo.payloads.installation_repositories(
        "removed", repositories=[(gadgets.id, "gadgets")]
    )
    assert repo.send("installation_repositories", removed) == 202
    container.worker.run_once()
    names = {i.repository.ref.name for i in container.admin.list_repositories(org_slug=OWNER)}
    assert names == {NAME}

    deleted = repo.payloads.installation(
        "deleted", account=OWNER, repositories=[(fake.repo(OWNER, NAME).id, NAME)]
    )
    assert repo.send("installation", deleted) == 202
    container.worker.run_once()
    assert container.github_installations is not None
    assert container.github_installations.all() == []
    names = {i.repository.ref.name for i in container.admin.list_repositories(org_slug=OWNER)}
    assert names == {NAME}


def test_a_place_in_line_is_sent_at_most_every_two_minutes_and_never_in_the_comment(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub, clock: FakeClock
) -> None:
    numbers = [
        fake.open_pull_request(OWNER, NAME, branch=f"q{i}", files={f"q{i}": "1\n"}, author=WRITER)
        for i in range(3)
    ]
    for number in numbers:
        repo.comment(number, "/keepgreen merge", author=WRITER)
    container.worker.run_once()
    last = numbers[-1]

    def check_title() -> str:
        return fake.check_runs_for(OWNER, NAME, head_sha=fake.head_sha(OWNER, NAME, last))[0].title

    assert check_title() == "Queued: position 3 of 3"
    assert repo.answer_ci(lambda _files: "success") == 1  # the first PR's run, alone so far
    for _ in range(4):  # the first PR merges; the second starts testing
        container.worker.run_once()
    assert entry(container, numbers[0]).state is PrState.MERGED
    assert entry(container, numbers[1]).state is PrState.TESTING
    assert check_title() == "Queued: position 3 of 3"  # moved up, told later

    clock.advance(seconds=121)
    container.worker.run_once()
    assert check_title() == "Queued: position 2 of 2"
    [comment] = fake.comments_on(OWNER, NAME, last)
    assert comment.history == []  # the comment tells milestones only
    assert comment.body.startswith(f"**keepgreen** · #{last}: **Queued**")


def test_deliveries_github_failed_wait_a_backoff_then_are_acted_on(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    number = fake.open_pull_request(OWNER, NAME, branch="w", files={"w.txt": "1\n"}, author=WRITER)
    container.worker.run_once()  # a pass first: the installation's token is minted
    fake.fail(502, times=1)  # the permission check of the comment below
    assert repo.comment(number, "/keepgreen merge", author=WRITER) == 202
    container.worker.run_once()
    with container.unit_of_work() as uow:
        assert len(uow.github_deliveries.pending(limit=5)) == 1  # given back, not lost
    container.worker.run_once()  # GitHub answers again, but the backoff (1 s) is not over
    with container.unit_of_work() as uow:
        assert len(uow.github_deliveries.pending(limit=5)) == 1
    time.sleep(1.1)
    container.worker.run_once()
    assert entry(container, number).state in {PrState.PENDING, PrState.TESTING}


def test_a_queue_with_its_own_label_takes_that_label_and_not_the_instances(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    configure(container, QueueUpdate(enqueueing_label="ship-it"))
    instance = fake.open_pull_request(OWNER, NAME, branch="i", files={"i": "1\n"}, author=WRITER)
    own = fake.open_pull_request(OWNER, NAME, branch="o", files={"o": "1\n"}, author=WRITER)
    assert repo.label(instance, "keepgreen-merge", sender=WRITER) == 202
    assert repo.label(own, "ship-it", sender=WRITER) == 202
    container.worker.run_once()
    assert not is_submitted(container, instance)
    assert fake.comments_on(OWNER, NAME, instance) == []  # another label: no answer
    assert is_submitted(container, own)

    # Removing the instance's label does nothing; removing the queue's cancels.
    assert repo.label(own, "keepgreen-merge", sender=WRITER, action="unlabeled") == 202
    container.worker.run_once()
    assert is_submitted(container, own)
    assert repo.label(own, "ship-it", sender=WRITER, action="unlabeled") == 202
    container.worker.run_once()
    assert entry(container, own).state is PrState.CANCELLED


def test_with_label_commands_off_labels_do_nothing_and_comments_still_queue(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    configure(container, QueueUpdate(label_commands_enabled=False))
    labelled = fake.open_pull_request(OWNER, NAME, branch="l", files={"l": "1\n"}, author=WRITER)
    commented = fake.open_pull_request(OWNER, NAME, branch="c", files={"c": "1\n"}, author=WRITER)
    assert repo.label(labelled, "keepgreen-merge", sender=WRITER) == 202
    assert repo.comment(commented, "/keepgreen merge", author=WRITER) == 202
    container.worker.run_once()
    assert not is_submitted(container, labelled)
    assert is_submitted(container, commented)

    # Nor does removing the label take a PR queued by comment out.
    assert repo.label(commented, "keepgreen-merge", sender=WRITER, action="unlabeled") == 202
    container.worker.run_once()
    assert is_submitted(container, commented)


def test_with_commands_off_comments_do_nothing_and_say_so_and_labels_still_queue(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    configure(container, QueueUpdate(commands_enabled=False))
    commented = fake.open_pull_request(OWNER, NAME, branch="c", files={"c": "1\n"}, author=WRITER)
    labelled = fake.open_pull_request(OWNER, NAME, branch="l", files={"l": "1\n"}, author=WRITER)
    assert repo.comment(commented, "/keepgreen merge", author=WRITER) == 202
    assert repo.label(labelled, "keepgreen-merge", sender=WRITER) == 202
    container.worker.run_once()
    assert not is_submitted(container, commented)
    assert is_submitted(container, labelled)
    (reply,) = fake.comments_on(OWNER, NAME, commented)
    assert f"@{WRITER}" in reply.body
    assert "commandsEnabled" in reply.body
    assert "label" in reply.body

    # Nor does a comment cancel; turned back on, comments act again.
    assert repo.comment(labelled, "/keepgreen cancel", author=WRITER) == 202
    container.worker.run_once()
    assert is_submitted(container, labelled)
    configure(container, QueueUpdate(commands_enabled=True))
    assert repo.comment(commented, "/keepgreen merge", author=WRITER) == 202
    container.worker.run_once()
    assert is_submitted(container, commented)


def test_with_state_labels_a_pr_carries_the_label_of_its_state_until_it_merges(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    configure(container, QueueUpdate(state_labels_enabled=True))

    def state_labels(number: int) -> list[str]:
        labels = fake.repo(OWNER, NAME).pulls[number].labels
        return [label for label in labels if label.startswith("keepgreen:")]

    def label_calls() -> int:
        return sum("/labels" in request.path for request in fake.requests)

    good = fake.open_pull_request(OWNER, NAME, branch="g", files={"g.txt": "1\n"}, author=WRITER)
    bad = fake.open_pull_request(OWNER, NAME, branch="b", files={"bad.txt": "1\n"}, author=WRITER)
    gone = fake.open_pull_request(OWNER, NAME, branch="x", files={"x.txt": "1\n"}, author=WRITER)
    for number in (good, bad, gone):
        assert repo.comment(number, "/keepgreen merge", author=WRITER) == 202
    container.worker.run_once()
    for number in (good, bad, gone):
        assert state_labels(number) == [STATE_LABELS[entry(container, number).state]]
    assert "keepgreen:testing" in {label for n in (good, bad, gone) for label in state_labels(n)}
    assert "keepgreen:queued" in {label for n in (good, bad, gone) for label in state_labels(n)}
    calls = label_calls()
    container.worker.run_once()  # nothing moved: no label is sent again
    assert label_calls() == calls

    assert repo.comment(gone, "/keepgreen cancel", author=WRITER) == 202
    fake.set_labels(OWNER, NAME, bad, [])  # someone took the label off by hand
    settle(container, repo)

    assert entry(container, good).state is PrState.MERGED
    assert entry(container, bad).state is PrState.FAILED
    assert state_labels(good) == []  # merged: GitHub shows that itself
    assert state_labels(gone) == []  # cancelled
    assert state_labels(bad) == ["keepgreen:failed"]  # it stays after the PR left the queue

    # Turned off, the labels come off.
    configure(container, QueueUpdate(state_labels_enabled=False))
    container.worker.run_once()
    assert state_labels(bad) == []


def test_a_bot_the_queue_lists_queues_and_cancels_without_write_permission(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    bot = "renovate[bot]"  # reads on the repository, like any account not given more
    configure(container, QueueUpdate(allowed_bot_submitters=("Renovate[bot]",)))
    labelled = fake.open_pull_request(OWNER, NAME, branch="r1", files={"r1": "1\n"}, author=bot)
    commented = fake.open_pull_request(OWNER, NAME, branch="r2", files={"r2": "1\n"}, author=bot)
    asked = len(fake.requests)
    assert repo.label(labelled, "keepgreen-merge", sender=bot) == 202
    assert repo.comment(commented, "/keepgreen merge --priority high", author=bot) == 202
    container.worker.run_once()
    assert is_submitted(container, labelled)
    assert entry(container, commented).priority.name == "high"
    assert not [r for r in fake.requests[asked:] if "/collaborators/" in r.path]

    assert repo.comment(commented, "/keepgreen cancel", author=bot) == 202
    container.worker.run_once()
    assert entry(container, commented).state is PrState.CANCELLED
    assert is_submitted(container, labelled)


def test_a_bot_the_queue_does_not_list_is_told_so_and_people_still_need_write_access(
    container: Container, repo: GithubRepoDriver, fake: FakeGithub
) -> None:
    # A person named in the list is no bot: the list does not spare them the write check.
    configure(container, QueueUpdate(allowed_bot_submitters=("renovate[bot]", READER)))
    bot = "dependabot[bot]"
    by_bot = fake.open_pull_request(OWNER, NAME, branch="d", files={"d": "1\n"}, author=bot)
    by_reader = fake.open_pull_request(OWNER, NAME, branch="m", files={"m": "1\n"}, author=READER)
    assert repo.label(by_bot, "keepgreen-merge", sender=bot) == 202
    assert repo.comment(by_bot, "/keepgreen merge", author=bot) == 202
    assert repo.label(by_reader, "keepgreen-merge", sender=READER) == 202
    container.worker.run_once()

    assert not is_submitted(container, by_bot)
    assert not is_submitted(container, by_reader)
    # The label is answered once; another App's comment is not answered (no bot chatter).
    [to_bot] = fake.comments_on(OWNER, NAME, by_bot)
    assert to_bot.body.startswith(f"@{bot} ")
    assert f"add `{bot}` to the queue's allowedBotSubmitters" in to_bot.body
    assert "write access" not in to_bot.body
    [to_reader] = fake.comments_on(OWNER, NAME, by_reader)
    assert f"@{READER} only people with write access" in to_reader.body
