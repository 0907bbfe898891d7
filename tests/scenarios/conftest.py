"""Fixtures for scenario tests: a registered repository, its queue, and a Scenario driver."""

from __future__ import annotations

import pytest

from keepgreen.bootstrap import Container
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.wire import Api


@pytest.fixture
def scenario(
    container: Container, api: Api, registered_repo: GitRepo, clock: FakeClock
) -> Scenario:
    return Scenario(container=container, api=api, repo=registered_repo, clock=clock)
