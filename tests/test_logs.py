"""Log output: one timestamped line per event, JSON or console, with secrets hidden."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Literal

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from keepgreen.logs import (
    configure_logging,
    console_line,
    log_handler,
    route_structlog_to_stdlib,
    scrub,
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging replaces the root handlers; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    route_structlog_to_stdlib()


def _json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_time_level_logger_event_and_fields() -> None:
    stream = io.StringIO()
    configure_logging(log_format="json", level="info", stream=stream)
    structlog.get_logger("keepgreen.queue").info("pr merged", queue="h/o/n:main", pr=7)
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
    first, second = _json_lines(stream)
    assert {k: first[k] for k in ("event", "level", "logger", "queue", "pr")} == {
        "event": "pr merged",
        "level": "info",
        "logger": "keepgreen.queue",
        "queue": "h/o/n:main",
        "pr": 7,
    }
    stamp = datetime.fromisoformat(str(first["timestamp"]))
    assert stamp.tzinfo is not None
    assert stamp.utcoffset() == UTC.utcoffset(None)
    # The standard library's records (uvicorn, alembic) come out in the same shape.
    assert second["event"] == "Started server process [42]"
    assert second["logger"] == "uvicorn.error"
    assert "timestamp" in second


@pytest.mark.usefixtures("restore_logging")
def test_console_lines_are_one_line_each_with_a_timestamp() -> None:
    stream = io.StringIO()
    configure_logging(log_format="console", level="info", stream=stream)
    structlog.get_logger("keepgreen.queue").warning("pr failed", pr=2, reason="tests_failed")
    (line,) = stream.getvalue().splitlines()
    assert line.startswith(datetime.now(UTC).strftime("%Y-"))
    assert "warning" in line
    assert "pr failed" in line
    assert "reason=tests_failed" in line


@pytest.mark.usefixtures("restore_logging")
def test_the_level_setting_drops_lines_below_it() -> None:
    stream = io.StringIO()
    configure_logging(log_format="json", level="warning", stream=stream)
    log = structlog.get_logger("keepgreen.queue")
    log.info("pr submitted", pr=1)
    log.debug("noise")
    log.warning("pr failed", pr=1)
    assert [line["event"] for line in _json_lines(stream)] == ["pr failed"]


@pytest.mark.usefixtures("restore_logging")
def test_secrets_never_reach_a_line() -> None:
    stream = io.StringIO()
    configure_logging(log_format="json", level="info", stream=stream)
    log = structlog.get_logger("keepgreen.test")
    secret = "kg_" + "s3cr3t" * 8
    log.info("cannot fetch", url="https://user:hunter2@git.example.com/acme/app.git")
    log.info("registered", git_token="plain-value", password="pw", api_token=secret)
    log.warning(f"an error that quotes {secret} in its words")
    logging.getLogger("some.library").warning("GET https://ghp_abc123@example.com/x failed")
    try:
        raise RuntimeError("push to https://x-access-token:tok9876@example.com/r.git failed")
    except RuntimeError:
        log.exception("effect failed")
    text = stream.getvalue()
    for leaked in ("hunter2", "plain-value", "s3cr3t", "ghp_abc123", "tok9876", '"pw"'):
        assert leaked not in text
    lines = _json_lines(stream)
    assert lines[0]["url"] == "https://***@git.example.com/acme/app.git"
    assert lines[1]["git_token"] == "***"
    assert "Traceback" in str(lines[-1]["exception"])  # the traceback is kept, scrubbed


def _log_a_sample() -> None:
    """Lines of every kind keepgreen writes: fields, a secret, positional arguments, bound
    context, a traceback, a line below the level, and a library's record between them.
    """
    log = structlog.get_logger("keepgreen.sample")
    log.info("request", method="POST", route="/v1/getQueue", status=200, duration_ms=1.5)
    log.debug("below the level")
    log.warning("cannot fetch", url="https://user:pw@git.example.com/r.git", api_token="x")
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
    log.info("pr %s of %d", "seven", 7)
    with structlog.contextvars.bound_contextvars(worker="w-1"):
        log.info("worker pass", queues=2)
    try:
        raise RuntimeError("push failed")
    except RuntimeError as error:
        log.exception("effect failed", pr=3)
        log.error("effect failed again", exc_info=error)


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


@pytest.mark.parametrize("log_format", ["json", "console"])
@pytest.mark.usefixtures("restore_logging")
def test_served_lines_are_rendered_as_the_standard_library_route_renders_them(
    log_format: Literal["json", "console"],
) -> None:
    # A served process renders keepgreen's lines in structlog and writes them to the handler's
    # stream; tests route them through the standard library. Both give the same lines.
    served = io.StringIO()
    configure_logging(log_format=log_format, level="info", stream=served)
    _log_a_sample()
    routed = io.StringIO()
    route_structlog_to_stdlib()
    root = logging.getLogger()
    root.handlers[:] = [log_handler(log_format, routed)]
    _log_a_sample()
    lines = _STAMP.sub("<time>", served.getvalue())
    assert lines == _STAMP.sub("<time>", routed.getvalue())
    assert lines.count("<time>") == 7  # seven lines: the debug line is dropped on both
    assert "pw@" not in lines
    assert "Traceback" in lines
    assert "pr seven of 7" in lines


@pytest.mark.usefixtures("restore_logging")
def test_a_closed_stream_loses_the_line_and_not_the_work() -> None:
    stream = io.StringIO()
    configure_logging(log_format="json", level="info", stream=stream)
    log = structlog.get_logger("keepgreen.queue")
    log.info("pr merged", pr=1)
    assert [line["pr"] for line in _json_lines(stream)] == [1]
    stream.close()
    log.info("pr merged", pr=2)  # no exception reaches the caller
    log.exception("effect failed")


def test_scrub_leaves_plain_text_and_ssh_style_remotes_alone() -> None:
    assert scrub("queue github.com/acme/app:main merged 1a2b") == (
        "queue github.com/acme/app:main merged 1a2b"
    )
    # scp-like remotes name a user, not a secret, and have no scheme.
    assert scrub("git@github.com:acme/app.git") == "git@github.com:acme/app.git"
    assert scrub("ssh://git:pw@host/x") == "ssh://***@host/x"


_KEYS = st.one_of(
    st.sampled_from(["timestamp", "level", "event", "logger", "logger_name", "pr", "queue"]),
    # A line with a stack or a traceback goes to the renderer itself (tested below).
    st.text(min_size=1, max_size=12).filter(
        lambda key: key not in ("stack", "exception", "exc_info")
    ),
)
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["a b", "k=v", "it's", 'say "hi"', "tab\there", "line\nbreak", "x\ry"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=500, deadline=None)
@given(
    fields=st.dictionaries(_KEYS, _VALUES, max_size=8),
    level=st.sampled_from(["debug", "info", "warning", "error", "critical", "exception"]),
)
def test_console_lines_are_the_console_renderers_lines(
    fields: dict[str, object], level: str
) -> None:
    """keepgreen writes its console lines itself (`console_line`, for speed): each is the
    line structlog's console renderer writes for the same event, character for character.
    """
    event = {**fields, "level": level}
    theirs = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=28)(None, level, dict(event))
    assert console_line(None, level, dict(event)) == theirs


def test_a_line_with_a_traceback_is_the_console_renderers_too() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        event = structlog.processors.format_exc_info(
            None, "error", {"event": "failed", "level": "error", "exc_info": True}
        )
    theirs = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=28)(
        None, "error", dict(event)
    )
    line = console_line(None, "error", dict(event))
    assert line == theirs
    assert "ValueError: boom" in line
