"""CODEOWNERS: a repository's owners file read from git, and the owners of a path in it.

Matching is the `codeowners` package's (a port of hmarr/codeowners: gitignore-style patterns,
the last matching line wins). GitLab's sections are handled here, because the package keeps one
last match for the whole file while GitLab combines the owners of every section (field notes
§1.3 and §5):

- `[Name]`, `^[Name]` (optional), `[Name][2]` (approvals) and `[Name] @owner ...` (default
  owners) start a section; names are compared without case, so `[Docs]` and `[DOCS]` are one.
- Within a section the last matching line wins; a matching line without owners takes its
  section's default owners, if any.
- The lines before the first heading are one more, unnamed section. A file without headings
  (GitHub's, Bitbucket's) is only that section, so GitHub's rule falls out: last match wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from codeowners import CodeOwners

from keepgreen.adapters.git.merging import Git
from keepgreen.app.telemetry import Telemetry

# Where the file is looked for, first found first; relative to the repository root.
CODEOWNERS_PATHS = (
    "CODEOWNERS",
    ".github/CODEOWNERS",
    ".gitlab/CODEOWNERS",
    "docs/CODEOWNERS",
    ".bitbucket/CODEOWNERS",
)
# A bigger file is not read at all (GitHub likewise ignores a CODEOWNERS over its limit).
MAX_CODEOWNERS_BYTES = 1024 * 1024

# A GitLab section heading: optional '^', the name, an optional approval count, default owners.
_HEADING = re.compile(r"\^?\[(?P<name>[^\]]+)\](?:\[\d+\])?(?:\s+(?P<owners>.*))?")
# What the package accepts as an owner: @user, @org/team, @@role, or an email address.
_OWNER = re.compile(r"\S*@\S+")


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where a rule line sits: its section (casefolded name, "" before any heading) and the
    default owners of the heading above it.
    """

    section: str
    defaults: tuple[str, ...]


class OwnersFile:
    """One CODEOWNERS file, parsed once and asked about many paths."""

    def __init__(self, matcher: CodeOwners, placements: dict[int, _Placement]) -> None:
        self._matcher = matcher
        self._placements = placements  # by 1-based line number, for rule lines only
        # Sections in the order they first appear, the unnamed one first.
        self._section_order = {"": 0}
        for number, placement in sorted(placements.items()):
            self._section_order.setdefault(placement.section, number)

    @classmethod
    def parse(cls, text: str) -> OwnersFile:
        """The rules of `text`. Never raises: a line the matcher cannot compile (an
        unterminated `[` class, say) is skipped, and the other lines keep their meaning.
        """
        kept: list[str] = []  # one entry per line of `text`, so line numbers carry over
        placements: dict[int, _Placement] = {}
        current = _Placement("", ())
        for number, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
            line = raw.strip()
            heading = _HEADING.fullmatch(line)
            if heading is not None:
                defaults = tuple(_owner_tokens(heading["owners"]))
                current = _Placement(heading["name"].strip().casefold(), defaults)
            if heading is not None or not line or line.startswith("#") or not _compiles(line):
                kept.append("")
                continue
            kept.append(line)
            placements[number] = current
        return cls(CodeOwners("\n".join(kept)), placements)

    def owners_of(self, path: str | None) -> list[str]:
        """The owners of `path` as written in the file ("@org/team", "user@example.com"), each
        once, in the order of the sections that name them; [] for None or an unowned path.

        `path` is taken relative to the repository root: a leading "./" or "/" is dropped and
        Windows separators become "/", as JUnit reports from other machines have them.
        """
        relative = _repository_path(path)
        if not relative:
            return []
        winners: dict[str, list[str]] = {}
        # The package yields matching lines last first: the first seen per section wins.
        for owners, number, _, _ in self._matcher.matching_lines(relative):
            placement = self._placements[number] if number is not None else _Placement("", ())
            if placement.section not in winners:
                written = [owner for _, owner in owners]
                winners[placement.section] = written or list(placement.defaults)
        combined: dict[str, None] = {}
        for section in sorted(winners, key=self._section_order.__getitem__):
            combined.update(dict.fromkeys(winners[section]))
        return list(combined)


def _owner_tokens(text: str | None) -> list[str]:
    return [token for token in (text or "").split() if _OWNER.fullmatch(token)]


def _compiles(line: str) -> bool:
    try:
        CodeOwners(line)
    except (ValueError, re.error):
        return False
    return True


def _repository_path(path: str | None) -> str:
    if path is None:
        return ""
    relative = path.strip().replace("\\", "/")
    while relative.startswith("./"):
        relative = relative[2:]
    return relative.lstrip("/")


def read_codeowners(git_dir: Path, ref: str, *, telemetry: Telemetry | None = None) -> str | None:
    """The text of the first of CODEOWNERS_PATHS in `ref`'s tree, in the repository at
    `git_dir` (a work tree, its .git, or a bare repository). None when `ref` names no commit,
    when there is no such file, or when the one found is over MAX_CODEOWNERS_BYTES.

    Bytes that are not UTF-8 read as U+FFFD. Failing to run git is a CodeHostError.
    """
    # Refs reach git as arguments and as lines of a batch: no options, no line breaks.
    if not ref or ref.startswith("-") or any(ch.isspace() or ch < " " for ch in ref):
        return None
    if (git_dir / ".git").exists():
        git_dir = git_dir / ".git"
    git = Git(git_dir, telemetry=telemetry)
    commit = git.resolve(ref)
    if commit is None:
        return None
    # One process asks for all the places: "<oid> <type> <size>", or "<name> missing".
    found = git.run(
        "cat-file",
        "--batch-check",
        stdin="".join(f"{commit}:{path}\n" for path in CODEOWNERS_PATHS),
        check=True,
    )
    for line in found.stdout.splitlines():
        fields = line.split()
        if len(fields) != 3 or fields[1] != "blob":
            continue  # missing, or a directory of that name
        oid, _, size = fields
        if int(size) > MAX_CODEOWNERS_BYTES:
            return None
        blob = git.run("cat-file", "blob", oid, check=True)
        # Git.run decodes with surrogateescape; undo it, then replace what is not UTF-8.
        raw = blob.stdout.encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", "replace").removeprefix("\ufeff")
    return None
