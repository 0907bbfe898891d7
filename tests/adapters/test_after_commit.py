"""The unit of work's after-commit callbacks: only a committed transaction runs them."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

import pytest

from keepgreen.bootstrap import Container
from keepgreen.core.ids import OrgId
from keepgreen.core.model import Org


def test_callbacks_run_after_the_commit_and_see_the_data_committed(container: Container) -> None:
    seen: list[bool] = []

    def check() -> None:
        # A fresh transaction finds the org: the callback runs after the commit, not before.
        with container.unit_of_work() as other:
            seen.append(other.orgs.get_by_slug("acme") is not None)

    with container.unit_of_work() as uow:
        uow.orgs.add(Org(OrgId(str(uuid.uuid4())), "acme", datetime.now(UTC)))
        uow.on_commit(check)
        assert seen == []
        uow.commit()
    assert seen == [True]


def test_a_rolled_back_unit_runs_none_of_its_callbacks(container: Container) -> None:
    ran: list[str] = []
    with container.unit_of_work() as uow:
        uow.on_commit(lambda: ran.append("left without commit"))

    def fail_midway() -> None:
        with container.unit_of_work() as uow:
            uow.on_commit(lambda: ran.append("failed"))
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_midway()
    assert ran == []


def test_callbacks_run_once_per_commit(container: Container) -> None:
    ran: list[int] = []
    with container.unit_of_work() as uow:
        uow.on_commit(lambda: ran.append(1))
        uow.commit()
        uow.commit()
    assert ran == [1]


def test_a_failing_callback_is_logged_not_raised(
    container: Container, caplog: pytest.LogCaptureFixture
) -> None:
    """The transaction committed: the caller must not be told it failed."""
    ran: list[str] = []

    def broken() -> None:
        raise ValueError("a bug in a metric")

    with caplog.at_level(logging.ERROR), container.unit_of_work() as uow:
        uow.on_commit(broken)
        uow.on_commit(lambda: ran.append("next"))
        uow.commit()
    assert ran == ["next"]
    assert "after-commit callback failed" in caplog.text
