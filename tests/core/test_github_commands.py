"""`/keepgreen` comment commands: what each line means, and that no comment can break parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepgreen.core.github_commands import (
    CancelCommand,
    CommandError,
    MergeCommand,
    parse_command,
)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/keepgreen merge", MergeCommand()),
        ("LGTM!\n\n  /keepgreen   merge  --no-batch\nthanks", MergeCommand(no_batch=True)),
        ("/KeepGreen Merge --priority HIGH", "high"),
        ("/keepgreen merge --priority=urgent", "urgent"),
        ("/keepgreen merge --priority 42", "custom"),
        ("/keepgreen cancel", CancelCommand()),
        ("please /keepgreen merge this", None),  # not at the start of a line: prose
        ("no command here", None),
    ],
)
def test_commands(body: str, expected: object) -> None:
    command = parse_command(body)
    if isinstance(expected, str):
        assert isinstance(command, MergeCommand)
        assert command.priority is not None
        assert command.priority.name == expected
    else:
        assert command == expected


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("/keepgreen", "a command follows"),
        ("/keepgreen deploy", "unknown command `deploy`"),
        ("/keepgreen merge --priority", "needs a value"),
        ("/keepgreen merge --priority 5000000000", "between 0 and 4294967295"),
        ("/keepgreen merge --priority " + "9" * 5000, "between 0 and 4294967295"),
        ("/keepgreen merge --priority ²", "unknown name `²`"),
        ("/keepgreen merge --priority soon", "unknown name `soon`"),
        ("/keepgreen merge --priority @acme/everyone", "unknown name `?acme?everyone`"),
        ("/keepgreen `@acme/everyone", "unknown command `??acme?everyone`"),
        ("/keepgreen merge --force", "unknown option `--force`"),
        ("/keepgreen cancel now", "takes no options"),
    ],
)
def test_mistakes_are_answered_with_what_is_wrong(body: str, says: str) -> None:
    command = parse_command(body)
    assert isinstance(command, CommandError)
    assert says in command.message


@given(st.text(max_size=300))
def test_any_comment_parses_to_a_command_an_error_or_nothing(body: str) -> None:
    command = parse_command("/keepgreen " + body)
    assert isinstance(command, MergeCommand | CancelCommand | CommandError)
    mentions = any(
        line.split()[:1] and line.split()[0].lower() == "/keepgreen" for line in body.splitlines()
    )
    assert (parse_command(body) is None) == (not mentions)


@given(st.text(alphabet=st.sampled_from("ab@`/- _=.\n"), max_size=40))
def test_a_reply_never_mentions_anyone_or_leaves_its_code_span(word: str) -> None:
    for body in (f"/keepgreen {word}", f"/keepgreen merge --priority {word}x"):
        command = parse_command(body)
        if isinstance(command, CommandError):
            said = command.message.split(": `/keepgreen merge")[0]  # what is not the usage
            assert "@" not in said
            assert said.count("`") % 2 == 0
