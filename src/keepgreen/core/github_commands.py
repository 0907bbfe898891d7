"""The `/keepgreen` commands of PR comments: `/keepgreen merge [--priority P] [--no-batch]` and
`/keepgreen cancel`.

A command is the first line of a comment that starts with `/keepgreen`; anything else in the
comment is prose. A comment without one is no command at all (most comments are talk).
"""

from __future__ import annotations

from dataclasses import dataclass

from keepgreen.core.priority import (
    MAX_PRIORITY_NUMBER,
    Priority,
    PriorityError,
    priority_from_name,
    priority_from_value,
)

PREFIX = "/keepgreen"
USAGE = (
    "`/keepgreen merge [--priority urgent|high|medium|low|0-255] [--no-batch]` "
    "or `/keepgreen cancel`"
)


@dataclass(frozen=True, slots=True)
class MergeCommand:
    """Queue the PR (or update its priority and batching when it is queued)."""

    priority: Priority | None = None
    no_batch: bool | None = None


@dataclass(frozen=True, slots=True)
class CancelCommand:
    """Take the PR out of its queue."""


@dataclass(frozen=True, slots=True)
class CommandError:
    """A `/keepgreen` line that says nothing keepgreen understands; `message` says why."""

    message: str


Command = MergeCommand | CancelCommand | CommandError


def parse_command(body: str) -> Command | None:
    """The command of a comment body, or None when no line starts with `/keepgreen`."""
    for line in body.splitlines():
        words = line.strip().split()
        if words and words[0].lower() == PREFIX:
            return _parse(words[1:])
    return None


def _parse(words: list[str]) -> Command:
    if not words:
        return CommandError(f"a command follows `/keepgreen`: {USAGE}")
    verb, options = words[0].lower(), words[1:]
    if verb == "cancel":
        if options:
            return CommandError(f"`/keepgreen cancel` takes no options: {USAGE}")
        return CancelCommand()
    if verb != "merge":
        return CommandError(f"unknown command `{_quoted(verb)}`: {USAGE}")
    priority: Priority | None = None
    no_batch: bool | None = None
    remaining = list(options)
    while remaining:
        option = remaining.pop(0).lower()
        name, _, inline = option.partition("=")
        if name == "--no-batch" and not inline:
            no_batch = True
        elif name == "--priority":
            value = inline or (remaining.pop(0) if remaining else "")
            if not value:
                return CommandError(
                    "`--priority` needs a value: urgent, high, medium, low or 0-255"
                )
            # ASCII digits only (`int` refuses `²`, which `isdigit` takes); a number longer
            # than the largest allowed is out of range without reading it (`int` refuses a
            # number of thousands of digits).
            number = value.isascii() and value.isdigit()
            if number and len(value) > len(str(MAX_PRIORITY_NUMBER)):
                return CommandError(
                    f"`--priority`: priority must be between 0 and {MAX_PRIORITY_NUMBER}"
                )
            try:
                priority = priority_from_value(int(value)) if number else priority_from_name(value)
            except PriorityError as error:
                if number:
                    return CommandError(f"`--priority`: {error}")
                # The name is not repeated as given: it is the commenter's text.
                return CommandError(
                    f"`--priority`: unknown name `{_quoted(value)}`; use urgent, high, medium, "
                    "low or a number 0-255"
                )
        else:
            return CommandError(f"unknown option `{_quoted(option)}`: {USAGE}")
    return MergeCommand(priority=priority, no_batch=no_batch)


def _quoted(word: str) -> str:
    """A word of the comment, safe to repeat in keepgreen's reply: short, and without what
    would leave the code span or mention someone (`@team` in a reply notifies the team).
    """
    return "".join(ch if ch.isalnum() or ch in "-_.=" else "?" for ch in word[:40])


__all__ = ["CancelCommand", "Command", "CommandError", "MergeCommand", "parse_command"]
