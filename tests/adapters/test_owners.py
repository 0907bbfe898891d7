"""CODEOWNERS: GitHub's last match, GitLab's sections, and the file read from real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from keepgreen.adapters.owners import (
    CODEOWNERS_PATHS,
    MAX_CODEOWNERS_BYTES,
    OwnersFile,
    read_codeowners,
)
from tests.support.gitrepo import GitRepo

# --- GitHub: the last matching line wins ----------------------------------------------------
GITHUB = """\
# Everyone reviews everything, then specialists take over.
*                       @acme/everyone
*.py                    @acme/python
/src/app/               @acme/app   ada@example.com
/src/app/generated/
docs/**/*.md            @acme/docs
path\\ with\\ spaces/    @acme/spaces
"""


@pytest.mark.parametrize(
    ("path", "owners"),
    [
        ("README.md", ["@acme/everyone"]),
        ("tools/lint.py", ["@acme/python"]),
        # The /src/app/ line comes after *.py, so it wins for Python files there too.
        ("src/app/test_x.py", ["@acme/app", "ada@example.com"]),
        # A later line without owners leaves its files unowned.
        ("src/app/generated/models.py", []),
        ("docs/guide/deep/intro.md", ["@acme/docs"]),
        ("path with spaces/a.txt", ["@acme/spaces"]),
    ],
)
def test_github_last_matching_line_wins(path: str, owners: list[str]) -> None:
    assert OwnersFile.parse(GITHUB).owners_of(path) == owners


@pytest.mark.parametrize(
    "path",
    ["src/app/test_x.py", "./src/app/test_x.py", "/src/app/test_x.py", "src\\app\\test_x.py"],
)
def test_paths_are_taken_from_the_repository_root(path: str) -> None:
    assert OwnersFile.parse(GITHUB).owners_of(path) == ["@acme/app", "ada@example.com"]


@pytest.mark.parametrize("path", [None, "", "   ", "./"])
def test_no_path_has_no_owners(path: str | None) -> None:
    assert OwnersFile.parse(GITHUB).owners_of(path) == []


def test_a_path_no_line_matches_has_no_owners() -> None:
    owners = OwnersFile.parse("/src/ @acme/src\n*.go @acme/go\n")
    assert owners.owners_of("lib/x.py") == []
    assert owners.owners_of("src/x.py") == ["@acme/src"]


def test_an_empty_file_owns_nothing() -> None:
    assert OwnersFile.parse("").owners_of("src/x.py") == []


def test_odd_lines_are_skipped_and_the_rest_still_counts() -> None:
    text = (
        "\ufeff* @acme/everyone\n"
        "src/[unterminated @acme/broken\n"
        "^[Half a heading\n"
        "lib/ not-an-owner @acme/lib\n"
        "\t   \n"
        "src/ @acme/src\n"
    )
    owners = OwnersFile.parse(text)
    assert owners.owners_of("src/x.py") == ["@acme/src"]
    assert owners.owners_of("lib/x.py") == ["@acme/lib"]  # the word that is no owner is dropped
    assert owners.owners_of("README") == ["@acme/everyone"]  # the BOM is not part of "*"


# --- GitLab: owners combine across sections -------------------------------------------------
GITLAB = """\
# Required for all files, as an unnamed section.
* @general

[Backend] @backend-leads
src/
src/api/ @api-team
src/api/generated/

^[Documentation][2] @docs-team
*.md
src/api/README.md @api-writers

[Security][2]
src/api/auth/ @security alice@example.com

[backend]
src/api/ @api-oncall
"""


@pytest.mark.parametrize(
    ("path", "owners"),
    [
        # Unnamed section, then [Backend]'s default owners for a line without any.
        ("src/worker.py", ["@general", "@backend-leads"]),
        # [Backend] and [backend] are one section: its last match is "src/api/ @api-oncall".
        ("src/api/handlers.py", ["@general", "@api-oncall"]),
        ("src/api/generated/client.py", ["@general", "@api-oncall"]),
        # Three sections match; each gives its own last match.
        (
            "src/api/auth/token.py",
            ["@general", "@api-oncall", "@security", "alice@example.com"],
        ),
        # The optional section's default owners apply to "*.md"; a later line names its own.
        ("docs/index.md", ["@general", "@docs-team"]),
        ("src/api/README.md", ["@general", "@api-oncall", "@api-writers"]),
        ("Makefile", ["@general"]),
    ],
)
def test_gitlab_sections_combine(path: str, owners: list[str]) -> None:
    assert OwnersFile.parse(GITLAB).owners_of(path) == owners


def test_within_a_gitlab_section_the_last_match_wins() -> None:
    text = "[Backend]\nsrc/ @first\nsrc/api/ @second\n[Frontend]\nsrc/api/ @web\n"
    owners = OwnersFile.parse(text)
    assert owners.owners_of("src/api/x.py") == ["@second", "@web"]
    assert owners.owners_of("src/x.py") == ["@first"]


def test_a_line_without_owners_in_a_section_without_defaults_owns_nothing_there() -> None:
    text = "[Backend]\nsrc/ @backend\nsrc/vendor/\n[Legal]\nsrc/vendor/ @legal\n"
    assert OwnersFile.parse(text).owners_of("src/vendor/lib.c") == ["@legal"]


def test_an_owner_named_in_two_sections_is_listed_once() -> None:
    text = "* @ada\n[Docs]\n*.md @ada @docs\n"
    assert OwnersFile.parse(text).owners_of("README.md") == ["@ada", "@docs"]


# --- Reading the file from git --------------------------------------------------------------
OWNERS_TEXT = "* @acme/everyone\n"


def make_repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


@pytest.mark.parametrize("location", CODEOWNERS_PATHS)
def test_read_finds_the_file_at_each_location(tmp_path: Path, location: str) -> None:
    repo = make_repo(tmp_path)
    repo.commit({location: f"# at {location}\n{OWNERS_TEXT}"}, "Add owners")
    assert read_codeowners(repo.path, "HEAD") == f"# at {location}\n{OWNERS_TEXT}"


def test_read_takes_the_first_location_when_there_are_several(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    repo.commit(
        {
            "docs/CODEOWNERS": "* @from-docs\n",
            ".gitlab/CODEOWNERS": "* @from-gitlab\n",
            ".github/CODEOWNERS": "* @from-github\n",
        },
        "Add owners in three places",
    )
    assert read_codeowners(repo.path, "main") == "* @from-github\n"


def test_read_follows_the_ref(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    repo.git("checkout", "-q", "-b", "add-owners")
    sha = repo.commit({".github/CODEOWNERS": OWNERS_TEXT}, "Add owners")
    repo.git("checkout", "-q", "main")
    assert read_codeowners(repo.path, "main") is None
    assert read_codeowners(repo.path, "HEAD") is None
    assert read_codeowners(repo.path, "add-owners") == OWNERS_TEXT
    assert read_codeowners(repo.path, "refs/heads/add-owners") == OWNERS_TEXT
    assert read_codeowners(repo.path, sha) == OWNERS_TEXT


def test_read_works_on_a_bare_repository_and_on_the_git_dir(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    repo.commit({"CODEOWNERS": OWNERS_TEXT}, "Add owners")
    bare = tmp_path / "bare.git"
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(repo.path), str(bare)],
        check=True,
        capture_output=True,
    )
    assert read_codeowners(bare, "main") == OWNERS_TEXT
    assert read_codeowners(repo.path / ".git", "main") == OWNERS_TEXT


@pytest.mark.parametrize(
    "ref", ["no-such-branch", "v9.9.9", "0" * 40, "", "--output=/dev/null", "main\nHEAD"]
)
def test_read_of_a_missing_or_malformed_ref_is_none(tmp_path: Path, ref: str) -> None:
    repo = make_repo(tmp_path)
    repo.commit({"CODEOWNERS": OWNERS_TEXT}, "Add owners")
    assert read_codeowners(repo.path, ref) is None


def test_read_outside_a_repository_is_none(tmp_path: Path) -> None:
    assert read_codeowners(tmp_path, "HEAD") is None


def test_read_without_a_codeowners_file_is_none(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert read_codeowners(repo.path, "HEAD") is None


def test_a_directory_named_codeowners_is_passed_over(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    repo.commit({"CODEOWNERS/README": "not the file\n", ".github/CODEOWNERS": OWNERS_TEXT}, "Add")
    assert read_codeowners(repo.path, "HEAD") == OWNERS_TEXT


def test_a_codeowners_over_the_cap_is_not_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    line = "/src/a/very/long/path/that/nobody/owns/really/ @acme/nobody\n"
    at_cap = (line * (MAX_CODEOWNERS_BYTES // len(line) + 1))[:MAX_CODEOWNERS_BYTES]
    repo.commit({"CODEOWNERS": at_cap}, "Owners at the cap")
    assert read_codeowners(repo.path, "HEAD") == at_cap
    repo.commit({"CODEOWNERS": at_cap + "x"}, "Owners one byte over")
    assert read_codeowners(repo.path, "HEAD") is None


def test_bytes_that_are_not_utf8_do_not_stop_the_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo.path / "CODEOWNERS").write_bytes(b"\xef\xbb\xbf# caf\xe9\n* @acme/everyone\n")
    repo.git("add", "CODEOWNERS")
    repo.git("commit", "-q", "-m", "Latin-1 comment")
    text = read_codeowners(repo.path, "HEAD")
    assert text == "# caf\ufffd\n* @acme/everyone\n"
    assert OwnersFile.parse(text).owners_of("any/file") == ["@acme/everyone"]


def test_read_then_parse_answers_for_a_junit_file_path(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    repo.commit({".gitlab/CODEOWNERS": GITLAB}, "Add GitLab owners")
    text = read_codeowners(repo.path, "main")
    assert text is not None
    owners = OwnersFile.parse(text)
    assert owners.owners_of("./src/api/auth/test_token.py") == [
        "@general",
        "@api-oncall",
        "@security",
        "alice@example.com",
    ]
