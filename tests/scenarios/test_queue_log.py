"""The log tells the queue's story: each PR from submit to merge or failure, with its ids.

An operator reading `keepgreen serve`'s log (here in its JSON form) sees a PR submitted, the
run started on which predicted branch, the status CI reported, the run's result, and the PR
merged as which commit or failed and why; a git host that cannot be read is told once and
its recovery too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import LogLines
from tests.support.scenario import Scenario

QUEUE = "github.com/acme/widgets:main"


def _story(lines: LogLines, pr: int) -> list[str]:
    """The events about PR `pr`: its own lines and those of the runs that test it."""
    runs = {line["run"] for line in lines.events("run started") if pr in line["prs"]}
    return [
        line["event"]
        for line in lines.all()
        if line.get("pr") == pr or (line.get("run") in runs and "pr" not in line)
    ]


def test_a_good_and_a_bad_pr_are_told_from_submit_to_merge_and_failure(
    scenario: Scenario, log_lines: LogLines, token: str
) -> None:
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue"), 2: ("failed", "tests_failed")}
    assert _story(log_lines, 1) == [
        "pr submitted",
        "pr state changed",  # not_ready -> pending: ready
        "run started",
        "pr testing",
        "run built",
        "run passed",
        "pr passed",
        "pr merged",
    ]
    assert _story(log_lines, 2)[-3:] == ["run failed", "pr failure pending", "pr failed"]
    (submitted,) = [line for line in log_lines.events("pr submitted") if line["pr"] == 1]
    assert submitted["queue"] == QUEUE
    assert "sha" not in submitted  # the submit does not read git; the worker does
    (ready,) = [line for line in log_lines.events("pr state changed") if line["pr"] == 1]
    assert (ready["reason"], ready["sha"]) == ("ready", scenario.repo.tip("refs/pull/1/head"))
    # PR 2 was tested on the predicted branch: main as it was, with PR 1 ahead of it.
    started = {line["prs"][0]: line for line in log_lines.events("run started")}
    assert started[2]["ahead"] == [1]
    assert started[2]["base_sha"] == started[1]["base_sha"]
    assert started[2]["branch"] == f"keepgreen-merge/pr-2/{started[2]['run']}"
    (merged,) = log_lines.events("pr merged")
    assert merged["sha"] == scenario.main_commits()[0]  # the commit main holds now
    (failed,) = log_lines.events("pr failed")
    assert (failed["pr"], failed["reason"], failed["level"]) == (2, "tests_failed", "warning")
    received = {(line["sha"], line["result"]) for line in log_lines.events("status received")}
    assert received == {(_built(log_lines, 1), "success"), (_built(log_lines, 2), "failure")}
    assert all("timestamp" in line for line in log_lines.all())
    assert token not in log_lines.text()


def _built(lines: LogLines, pr: int) -> str:
    runs = {line["run"] for line in lines.events("run started") if pr in line["prs"]}
    (built,) = [line for line in lines.events("run built") if line["run"] in runs]
    return str(built["sha"])


def test_an_unreadable_git_host_is_told_once_then_its_recovery(
    scenario: Scenario, log_lines: LogLines, tmp_path: Path
) -> None:
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.submit(1)
    moved = tmp_path / "away"
    shutil.move(scenario.repo.path, moved)

    for _ in range(10):  # ten passes, as ten seconds of a worker
        scenario.work()

    (told,) = log_lines.events("git server failing; the queue waits")
    assert told["queue"] == QUEUE
    assert told["level"] == "warning"
    assert told["kind"] == "git_error"  # the repository is gone from where it was
    assert log_lines.events("git server still failing; the queue waits") == []
    shutil.move(moved, scenario.repo.path)
    scenario.settle()
    (back,) = log_lines.events("git server answering again")
    assert back["queue"] == QUEUE
    assert scenario.final() == {1: ("merged", "merged_by_queue")}
