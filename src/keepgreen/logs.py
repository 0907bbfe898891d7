"""Log output: structlog and the standard library's loggers as one timestamped stream.

keepgreen's own code logs with `structlog.get_logger(__name__)` and key-value pairs
(`log.info("pr merged", queue="github.com/acme/app:main", pr=7, sha=...)`); the libraries
underneath (uvicorn, alembic, SQLAlchemy) log through the standard library. Both reach one
stream (stderr), every line rendered the same way: `console` for people, `json` (one object per
line) for a log shipper. Entry points call `configure_logging` once at start.

keepgreen's own lines are rendered by structlog and written straight to the handler's stream,
under the handler's lock: a served process writes an access line per request, and through the
standard library's records and its formatter a line cost three times as much. Tests route
structlog through the standard library instead (`route_structlog_to_stdlib`), where pytest's
capture and `log_handler` see it; both routes render a line alike.

Secrets never reach a line: every string passes `scrub`, which hides the password or token of
a URL, and values under keys that name a secret are replaced whole. The call sites do not log
secrets in the first place; this is the second line of defence.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import sys
from collections.abc import MutableMapping
from typing import IO, Literal

import structlog
from structlog.typing import EventDict, Processor

LogFormat = Literal["console", "json"]

_SECRET_KEYS = re.compile(r"token|password|passwd|secret|authorization|cookie|api_key", re.I)
# The userinfo of a URL (`https://user:secret@host`, `https://ghp_x@host`): all of it goes,
# since a lone "user" part is often the token itself.
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
# keepgreen's own API tokens, wherever they turn up in a message.
_API_TOKEN = re.compile(r"\bkg_[A-Za-z0-9_-]{20,}")
_HIDDEN = "***"


def scrub(text: str) -> str:
    """`text` with URL credentials and keepgreen API tokens hidden."""
    if "@" in text:
        text = _URL_USERINFO.sub(rf"\g<scheme>{_HIDDEN}@", text)
    if "kg_" in text:
        text = _API_TOKEN.sub(_HIDDEN, text)
    return text


@functools.lru_cache(maxsize=1024)
def _names_a_secret(key: str) -> bool:
    # Every line asks this of each of its keys, and the keys are few: asked once each.
    return key != "event" and _SECRET_KEYS.search(key) is not None


def _scrub_event(_logger: object, _method: str, event: EventDict) -> EventDict:
    for key, value in event.items():
        if _names_a_secret(key):
            event[key] = _HIDDEN
        elif isinstance(value, str):
            event[key] = scrub(value)
    return event


def _scrub_traces(_logger: object, _method: str, event: EventDict) -> EventDict:
    # What reaches a line after `_scrub_event` has run: its stack and its traceback as text.
    for key in ("stack", "exception"):
        if isinstance(text := event.get(key), str):
            event[key] = scrub(text)
    return event


def _drop_color_message(_logger: object, _method: str, event: EventDict) -> EventDict:
    # uvicorn passes a second, ANSI-coloured copy of its message as `color_message`.
    event.pop("color_message", None)
    return event


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_color_message,
        _scrub_event,
    ]


def route_structlog_to_stdlib() -> None:
    """Make structlog's loggers hand their events to the standard library's, where handlers
    (`configure_logging`'s, or a test's capture) render them. Without it structlog prints
    on its own.
    """
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            *_shared_processors(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: configuring again (tests) must take effect for loggers made before.
        cache_logger_on_first_use=False,
    )


class _HandlerLines:
    """structlog's logger of a served process: each rendered line goes to the stream of the
    handler that writes the libraries' records, under that handler's lock, so that lines of
    both never mix. `name` is what `add_logger_name` reads.
    """

    __slots__ = ("_handler", "name")

    def __init__(self, handler: logging.StreamHandler[IO[str]], name: str) -> None:
        self._handler = handler
        self.name = name

    def msg(self, message: str) -> None:
        handler = self._handler
        with handler.lock or contextlib.nullcontext():
            try:
                handler.stream.write(message + "\n")
                handler.stream.flush()
            except (OSError, ValueError):
                # stderr closed or its reader gone: the line is lost, as the standard
                # library's handler loses it, and what was logged goes on.
                pass

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def configure_logging(
    *, log_format: LogFormat = "console", level: str = "info", stream: IO[str] | None = None
) -> None:
    """Send every log line, ours and the libraries', to `stream` (stderr) in one format."""
    handler = log_handler(log_format, stream if stream is not None else sys.stderr)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.processors.StackInfoRenderer(),
            *_rendering(log_format),
        ],
        logger_factory=lambda *names: _HandlerLines(handler, str(names[0]) if names else ""),
        wrapper_class=structlog.make_filtering_bound_logger(root.level),
        # Not cached: configuring again (tests) must take effect for loggers made before.
        cache_logger_on_first_use=False,
    )
    # uvicorn configures its own loggers unless told not to (log_config=None, and a server
    # started before may have): its lines propagate here, at the root's level, and its access
    # log is replaced by keepgreen's (request id, latency).
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    # Libraries' chatter that says nothing an operator acts on.
    for name, floor in _QUIET.items():
        logging.getLogger(name).setLevel(max(floor, root.level))


def log_handler(log_format: LogFormat, stream: IO[str]) -> logging.StreamHandler[IO[str]]:
    """A handler that writes records, structlog's and the standard library's, to `stream`."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *_rendering(log_format),
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    return handler


# structlog's console format, without colours: what `console_line` writes.
_CONSOLE = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=28)
_EVENT_WIDTH = 28
_LEVEL_WIDTH = len("exception")  # the longest level name: the level column's width
# A string with any of these is written as its repr (quoted), as the console format does.
_NEEDS_QUOTES = re.compile(r"[ \t=\r\n\"']")
_TRACES = ("stack", "exception", "exc_info")
_ABSENT = object()


def _value(value: object) -> str:
    if isinstance(value, str):
        return repr(value) if _NEEDS_QUOTES.search(value) else value
    return repr(value)


def console_line(logger: object, method: str, event: EventDict) -> str:
    """The line structlog's `ConsoleRenderer(colors=False, pad_event_to=28)` renders, in a
    fraction of its time: a served process writes one per request and one per queue event,
    and the renderer's general machinery (a formatter and a buffer per column) cost most of
    the line. A line with a traceback or a stack is left to the renderer itself.
    """
    if any(key in event for key in _TRACES):
        return str(_CONSOLE(logger, method, event))
    fields = []
    if (timestamp := event.pop("timestamp", _ABSENT)) is not _ABSENT:
        fields.append(str(timestamp))
    if (level := event.pop("level", _ABSENT)) is not _ABSENT:
        fields.append(f"[{level:<{_LEVEL_WIDTH}}]")
    if (message := event.pop("event", _ABSENT)) is not _ABSENT:
        fields.append(f"{message!s:<{_EVENT_WIDTH}}")
    names = (event.pop(key, _ABSENT) for key in ("logger", "logger_name"))
    fields += [f"[{name}]" for name in names if name is not _ABSENT]
    fields += [f"{key}={_value(event[key])}" for key in sorted(event)]
    return " ".join(field for field in fields if field).rstrip(" ")


def _rendering(log_format: LogFormat) -> list[Processor]:
    """The last processors of every line: its traceback as text, scrubbed like every other
    string (the line's fields were scrubbed before), then the line in `log_format`.
    """
    renderer: Processor = (
        structlog.processors.JSONRenderer() if log_format == "json" else console_line
    )
    return [structlog.processors.format_exc_info, _scrub_traces, renderer]


_QUIET: MutableMapping[str, int] = {
    "alembic.runtime.plugins": logging.WARNING,  # announces each plugin on every start
    "alembic.runtime.migration": logging.WARNING,  # "Context impl SQLiteImpl" at each start
    "uvicorn.access": logging.WARNING,  # replaced by keepgreen.access
    "httpx": logging.WARNING,
}


__all__ = [
    "LogFormat",
    "configure_logging",
    "log_handler",
    "route_structlog_to_stdlib",
    "scrub",
]
