"""`keepgreen simulate`, run as the command is: from parameters, and from a queue's history in
the test's database (a history the real scheduler wrote, in a simulated world of known CI time
and bad PRs), as a table and as JSON; bad input refused with exit code 2 and no traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from keepgreen.bootstrap import Container
from keepgreen.cli.main import app
from keepgreen.core.ids import PullRequestId, QueueId, RepositoryId
from keepgreen.core.model import QueueConfig, RepoRef, Repository
from keepgreen.simulation.throughput import MAX_WRONGLY_FAILED, STRATEGIES
from keepgreen.simulation.world import SimulatedWorld
from tests.support.builders import entry_id, make_entry, make_queue

QUEUE_ID = QueueId("00000000-0000-0000-0000-0000000000b7")
SMALL = ("--prs", "40", "--seeds", "2")


@dataclass(frozen=True)
class Cli:
    env: Mapping[str, str]

    def __call__(self, *args: str) -> Result:
        return CliRunner().invoke(app, ["simulate", *args], env=dict(self.env))

    def json(self, *args: str) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Cli:
    return Cli({"KEEPGREEN_DATABASE_URL": database_url, "KEEPGREEN_DATA_DIR": str(tmp_path)})


def assert_recommendation_respects_the_constraint(answer: Any) -> None:
    rows = answer["strategies"]
    for row in rows:
        assert row["safe"] == (
            row["badLanded"]["max"] == 0 and row["goodWronglyFailed"]["max"] <= MAX_WRONGLY_FAILED
        )
    safe = [row for row in rows if row["safe"]]
    if not safe:
        assert answer["recommendation"] is None
        return
    (chosen,) = [row for row in rows if row["name"] == answer["recommendation"]]
    assert chosen["safe"]
    best = max(round(row["mergedPerHour"]["mean"], 1) for row in safe)
    assert round(chosen["mergedPerHour"]["mean"], 1) == best


def test_parameters_give_every_candidate_and_a_safe_recommendation(cli: Cli) -> None:
    answer = cli.json(
        *SMALL, "--ci-minutes", "20", "--bad-rate", "0.1", "--flaky-rate", "0.1", "--runners", "4"
    )
    assert set(answer) == {"workload", "history", "strategies", "recommendation", "summary"}
    assert answer["history"] is None
    assert answer["workload"] == {
        "ciMinutes": 20.0,
        "ciSpreadMinutes": 0.0,
        "runners": 4,
        "badRate": 0.1,
        "flakyRate": 0.1,
        "arrivalsPerHour": None,
        "burstSize": 1,
        "prs": 40,
        "seeds": 2,
    }
    assert [row["name"] for row in answer["strategies"]] == [s.name for s in STRATEGIES]
    serial = answer["strategies"][0]
    # Serial with 20-minute runs merges at most 3 PRs an hour.
    assert 0 < serial["mergedPerHour"]["max"] <= 3.0
    assert all(row["badLanded"]["max"] == 0 for row in answer["strategies"])
    # 10% flaky runs and no flake tolerance: serial ejects good PRs.
    assert serial["goodWronglyFailed"]["max"] > MAX_WRONGLY_FAILED
    assert not serial["safe"]
    assert_recommendation_respects_the_constraint(answer)


def test_the_table_names_every_strategy_and_the_time_to_merge_under_arrivals(cli: Cli) -> None:
    result = cli(*SMALL, "--arrivals-per-hour", "3", "--burst-size", "3", "--flaky-rate", "0")
    assert result.exit_code == 0, result.stderr
    for strategy in STRATEGIES:
        assert strategy.name in result.stdout
    assert "merge p95 min" in result.stdout
    assert "3 PRs/h in bursts of 3" in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(("Recommended: ", "No candidate"))


def test_the_same_command_gives_the_same_answer(cli: Cli) -> None:
    args = (*SMALL, "--ci-spread-minutes", "5")
    assert cli.json(*args) == cli.json(*args)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--bad-rate", "1.5"), "--bad-rate"),
        (("--runners", "0"), "--runners"),
        (("--prs", "ten"), "--prs"),
        (("--queue", "widgets:main"), "HOST/OWNER/NAME:BRANCH"),
        (("--saturated", "--arrivals-per-hour", "2"), "not both"),
        (("--org", "acme"), "--org goes with --queue"),
    ],
)
def test_bad_input_is_a_usage_error_without_a_traceback(
    cli: Cli, args: tuple[str, ...], says: str
) -> None:
    result = cli(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert says in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_unknown_queue_is_refused_in_one_line(cli: Cli, container: Container) -> None:
    result = cli("--queue", "github.com/acme/nowhere:main")
    assert result.exit_code == 1
    assert result.stderr == "error: repository github.com/acme/nowhere is not registered\n"


# -- a real history ------------------------------------------------------------------------------


def store_history(container: Container, *, ends: datetime) -> int:
    """Run 40 PRs through the real scheduler (2 runs at once, 20-minute CI, PRs 5, 17 and 29
    bad, one flaky failure forgiven by a successor) and store the history it wrote in the
    database as the queue `github.com/acme/widgets:main`, ending at `ends`. Returns how many
    PRs merged.
    """
    config = QueueConfig(concurrency=2, pending_failure_depth=1, can_optimistically_merge=True)
    world = SimulatedWorld(config=config, bad={5, 17, 29}, fail_once={12})
    world.ci_seconds = 20 * 60
    for number in range(1, 41):
        world.submit(number)
    world.run_effects()
    while world.advance():
        pass
    assert not world.state.entries
    shift = ends - world.now
    container.admin.ensure_org("acme")
    with container.unit_of_work() as uow:
        org = uow.orgs.get_by_slug("acme")
        assert org is not None
        repository = Repository(
            id=RepositoryId("3d6f0f5e-0b4c-4c55-9b0f-1f0c2a4b5d6e"),
            org_id=org.id,
            ref=RepoRef("github.com", "acme", "widgets"),
            git_url="https://git.example.com/acme/widgets.git",
            ci_command=None,
            created_at=ends - timedelta(days=30),
        )
        uow.repositories.add(repository)
        uow.queues.add(make_queue(id=QUEUE_ID, repository_id=repository.id, config=config))
        for number, final in world.final.items():
            uow.entries.add(
                make_entry(
                    number=number,
                    queue_id=QUEUE_ID,
                    state=final.state,
                    state_reason=final.state_reason,
                    state_changed_at=final.state_changed_at + shift,
                    is_submitted=False,
                )
            )
        for change in world.history:
            number = int(change.pull_request_id.removeprefix("pr-"))
            uow.history.add(
                replace(
                    change,
                    pull_request_id=PullRequestId(entry_id(number)),
                    queue_id=QUEUE_ID,
                    at=change.at + shift,
                )
            )
        uow.commit()
    return len(world.landings)


def test_a_queues_history_gives_its_workload_and_its_own_settings_as_a_candidate(
    cli: Cli, container: Container
) -> None:
    merged = store_history(container, ends=datetime.now(UTC) - timedelta(hours=1))
    answer = cli.json("--queue", "github.com/acme/widgets:main", "--days", "2", *SMALL)
    history = answer["history"]
    assert history["queue"] == "github.com/acme/widgets:main"
    assert history["ciMinutes"] == pytest.approx(20.0)
    assert history["ciSpreadMinutes"] == pytest.approx(0.0, abs=1e-6)
    assert history["submitted"] == 40
    assert history["merged"] == merged == 37
    assert history["failed"] == 3
    assert history["badRate"] == pytest.approx(3 / 40)
    assert history["spuriousRate"] > 0  # PR 12's failure was forgiven: it merged
    assert history["arrivalsPerHour"] == pytest.approx(40 / 48)
    # What was simulated is what the history said (no parameter given).
    workload = answer["workload"]
    assert workload["ciMinutes"] == pytest.approx(20.0)
    assert workload["badRate"] == pytest.approx(3 / 40)
    assert workload["runners"] == 2
    assert workload["arrivalsPerHour"] == pytest.approx(40 / 48)
    names = [row["name"] for row in answer["strategies"]]
    assert names == [*(s.name for s in STRATEGIES), "this queue's settings"]
    assert "mergeMinutesP50" in answer["strategies"][0]  # arrivals over time: time to merge
    assert_recommendation_respects_the_constraint(answer)

    # A parameter given overrides the history; --saturated ignores its arrivals.
    overridden = cli.json(
        "--queue", "github.com/acme/widgets:main", "--days", "2", "--ci-minutes", "45",
        "--saturated", *SMALL,
    )  # fmt: skip
    assert overridden["workload"]["ciMinutes"] == 45.0
    assert overridden["workload"]["arrivalsPerHour"] is None
    assert overridden["workload"]["badRate"] == pytest.approx(3 / 40)

    # By id, and as a table.
    table = cli("--queue", QUEUE_ID, "--days", "2", *SMALL)
    assert table.exit_code == 0, table.stderr
    assert "History of github.com/acme/widgets:main, last 2 days: " in table.stdout
    assert "this queue's settings" in table.stdout


def test_a_queue_without_finished_runs_in_the_window_is_refused(
    cli: Cli, container: Container
) -> None:
    store_history(container, ends=datetime.now(UTC) - timedelta(days=10))
    result = cli("--queue", "github.com/acme/widgets/main", "--days", "1", *SMALL)
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: queue github.com/acme/widgets:main has no finished test run in the last 1 days"
    )
