"""What the worker asks git at each pass over a waiting queue: every PR's head in one read,
and whether a pending PR merges onto the branch only when its head or the branch's tip moved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app import worker as worker_module
from keepgreen.core.enums import Mergeability
from keepgreen.core.model import PullRequestInfo, Repository
from tests.support.scenario import Scenario


class Counting(LocalGitHost):
    """The local host, counting the reads the worker makes of it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def pull_request(self, repo: Repository, number: int) -> PullRequestInfo | None:
        self.calls["pull_request"] += 1
        return super().pull_request(repo, number)

    def pull_request_heads(
        self, repo: Repository, numbers: Sequence[int], *, fresh: bool = False
    ) -> dict[int, str | None]:
        self.calls["pull_request_heads"] += 1
        return super().pull_request_heads(repo, numbers, fresh=fresh)

    def mergeability(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> Mergeability:
        self.calls["mergeability"] += 1
        self.calls["target resolved again"] += target_sha is None
        return super().mergeability(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )

    def is_up_to_date(
        self,
        repo: Repository,
        *,
        head_sha: str,
        target_branch: str,
        target_sha: str | None = None,
    ) -> bool:
        self.calls["is_up_to_date"] += 1
        self.calls["target resolved again"] += target_sha is None
        return super().is_up_to_date(
            repo, head_sha=head_sha, target_branch=target_branch, target_sha=target_sha
        )


@pytest.fixture
def code_host() -> Counting:
    return Counting()


def test_a_waiting_queue_costs_one_head_read_a_pass(
    scenario: Scenario, code_host: Counting
) -> None:
    """PR 1 tests (CI silent) while PRs 2 and 3 wait. Passes over the unchanged queue read
    the heads once each and ask nothing about merging; a new commit on main has each waiting
    PR asked again, and a conflict it brings is seen.
    """
    scenario.create_queue(concurrency=1)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.pr(2, {"b.txt": "b\n"})
    scenario.pr(3, {"shared.txt": "from PR 3\n"})
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.settle()
    assert scenario.states() == {1: "testing", 2: "pending", 3: "pending"}

    code_host.calls.clear()
    for _ in range(3):
        scenario.work()
    assert code_host.calls["pull_request_heads"] == 3
    assert code_host.calls["pull_request"] == 0
    assert code_host.calls["mergeability"] == 0
    assert code_host.calls["is_up_to_date"] == 0

    scenario.push_to_main({"shared.txt": "from main\n"}, "main takes shared.txt")
    code_host.calls.clear()
    scenario.settle()
    assert code_host.calls["mergeability"] >= 2  # PRs 2 and 3, against the new tip
    assert scenario.entry(3).readiness.mergeability is Mergeability.NOT_MERGEABLE
    assert scenario.entry(2).readiness.mergeability is Mergeability.MERGEABLE


def test_a_new_head_is_asked_about_again(scenario: Scenario, code_host: Counting) -> None:
    scenario.create_queue(concurrency=1)
    scenario.ci_answers = False
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.pr(2, {"b.txt": "b\n"})
    scenario.submit(1)
    scenario.submit(2)
    scenario.settle()
    assert scenario.states() == {1: "testing", 2: "pending"}
    assert scenario.entry(2).readiness.mergeability is Mergeability.MERGEABLE

    scenario.push_to_main({"b.txt": "main's b\n"}, "main takes b.txt")
    scenario.settle()
    assert scenario.entry(2).readiness.mergeability is Mergeability.NOT_MERGEABLE
    # PR 2's author resolves the conflict (a new head takes a PR out of the queue) and
    # submits it again: its new head merges.
    new_head = scenario.push_to_pr(2, {"b.txt": "main's b\n", "c.txt": "c\n"}, "Resolve")
    scenario.settle()
    assert scenario.api_state(2) == "cancelled"
    scenario.submit(2)
    scenario.settle()
    assert scenario.entry(2).head_sha == new_head
    assert scenario.entry(2).readiness.mergeability is Mergeability.MERGEABLE


def test_a_first_submit_asks_git_nothing_and_the_next_pass_reads_it_once(
    scenario: Scenario, code_host: Counting
) -> None:
    """The merge button answers without git: PRs 1 and 2 are submitted and read as `not_ready`
    with no head. The worker's next pass reads each once (its head, title, author, whether it
    merges), admits both and tests the first; a number git does not have leaves as
    `pr_not_found`.
    """
    scenario.create_queue(concurrency=1)
    scenario.ci_answers = False
    head1 = scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.work()
    code_host.calls.clear()
    for number in (1, 2, 404):
        scenario.submit(number)
    assert sum(code_host.calls.values()) == 0
    pr = scenario.get_pr(1)
    assert (pr["state"], pr["prSha"], pr["prTitle"]) == ("not_ready", "", "")
    assert pr["explanation"]["summary"].startswith("Submitted: keepgreen is reading")

    scenario.work()
    assert code_host.calls["pull_request"] == 3  # 1, 2 and 404, once each
    assert code_host.calls["mergeability"] == 2
    # Against the tip the pass read at its start, not a git process per PR to read it again.
    assert code_host.calls["target resolved again"] == 0
    pr = scenario.get_pr(1)
    assert (pr["state"], pr["prSha"], pr["prTitle"]) == ("testing", head1, "Add a")
    assert scenario.api_state(2) == "pending"
    missing = scenario.get_pr(404)
    assert (missing["state"], missing["explanation"]["reasonCode"]) == ("cancelled", "pr_not_found")

    code_host.calls.clear()
    scenario.work()
    assert code_host.calls["pull_request"] == 0  # read once, never again


def test_a_pass_reads_at_most_its_share_of_submitted_prs_oldest_first(
    scenario: Scenario, code_host: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submits cost the request no git, so a token could submit numbers by the thousand: a
    pass reads at most `READS_PER_PASS` of them (here 2), the oldest first, and the passes
    after read the rest.
    """
    monkeypatch.setattr(worker_module, "READS_PER_PASS", 2)
    scenario.create_queue(concurrency=1)
    scenario.ci_answers = False
    for number in (3, 1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"})
        scenario.submit(number)
    code_host.calls.clear()
    scenario.work()
    assert code_host.calls["pull_request"] == 2
    assert {n: scenario.get_pr(n)["prSha"] != "" for n in (3, 1, 2)} == {3: True, 1: True, 2: False}
    scenario.work()
    assert code_host.calls["pull_request"] == 3
    assert scenario.states() == {3: "testing", 1: "pending", 2: "pending"}
