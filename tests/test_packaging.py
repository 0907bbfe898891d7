"""The lock file keeps up with pyproject.toml: every declared requirement is pinned, and allowed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        requirement = line.split("#", 1)[0].split(";", 1)[0].strip()
        if "==" in requirement:
            name, version = requirement.split("==", 1)
            pins[canonicalize_name(name.split("[", 1)[0])] = version.strip()
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("requirement", _declared(), ids=str)
def test_every_declared_requirement_is_pinned_within_its_range(requirement: Requirement) -> None:
    pins = _pins()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{requirement.name} is missing from constraints.txt: re-lock"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"constraints.txt pins {requirement.name}=={pins[name]}, outside {requirement.specifier}"
    )
