"""Failure summaries: a failure's message made comparable across runs, and its templates.

Two failures of the same cause differ in the noise of the run that produced them: addresses,
ids, timestamps, temporary directories, ports, durations, colours. `normalise` masks that noise
(Drain3-style masks such as `<num>` and `<hex>`), `failure_summary` picks the text worth showing
from a JUnit failure's message and body, and `mine_templates` groups one test's summaries that
still differ in a word or two (a host name, a key) under one template (field notes §5).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import eq

MAX_SUMMARY_CHARS = 300
WILDCARD = "<*>"
_ELLIPSIS = "…"

# --- ANSI colours ---------------------------------------------------------------------------
# CSI and OSC sequences; then SGR codes whose ESC was lost on the way (XML 1.0 cannot carry
# U+001B, so reporters drop it and leave "[31m") or was written out as an escape ("\u001b[").
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]?"
    r"|(?:\\u001[bB]|\\x1[bB]|\\033|\\e)?\[[0-9]{1,3}(?:;[0-9]{1,3})*m"
)
# Controls other than whitespace carry no meaning once the colours are gone.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# --- Masks, applied in this order -----------------------------------------------------------
# Temporary paths. A path token runs up to whitespace, a quote or a bracket; from the start of a
# temporary directory to the token's end (less a closing ':' or '.', so "open /tmp/x/f: no such
# file" keeps its colon) it becomes one mask.
_PATH_TOKEN = re.compile(r"[^\s'\"`<>|()\[\]{},;]+")
_TEMP_START = re.compile(
    r"(?<![\w.~-])(?:/(?:private/)?(?:var/)?tmp(?=/|$)"  # /tmp, /var/tmp, /private/tmp
    r"|/(?:private/)?var/folders/"  # macOS $TMPDIR
    r"|(?i:[a-z]:[\\/]+(?:users[\\/]+[^\\/]+[\\/]+appdata[\\/]+local[\\/]+temp"
    r"|windows[\\/]+temp|temp)(?=[\\/]|$)))"  # Windows %TEMP%
    # Inside another directory: GitHub Actions' $RUNNER_TEMP and pytest's tmp_path root.
    r"|(?:(?<=[\\/=:])|^)(?:_temp(?=[\\/]|$)|pytest-of-[^\\/]+[\\/]+pytest-\d+)"
)
_UUID = re.compile(
    r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"(?![0-9A-Za-z])"
)
# ISO 8601 and log-style date-times ("2024-03-01T10:00:00.123Z", "2024/03/01 10:00:00 +0000"),
# dates alone, and clock times with seconds (hh:mm alone is too often line:column).
_DATETIME = re.compile(
    r"(?<![\w:])"
    r"(?:\d{4}[-/]\d{2}[-/]\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?"
    r"|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?)"
    r"(?: ?(?:Z|[+-]\d{2}:?\d{2})(?![\w:]))?"
    r"(?![\w:])"
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
# IPv6 needs "::" or the full eight groups, and a digit, so that C++'s "a::b" stays.
_IPV6 = re.compile(
    r"(?<![\w:])(?=[0-9a-fA-F:]{0,38}\d)"
    r"(?:(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}"
    r"|(?:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*)?::(?:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*)?)"
    r"(?![\w:])"
)
# 0x-prefixed values, Java's identity hashes (Foo@1b6d3586, even when they happen to be all
# digits) and runs of hex digits long enough to be a sha or an address, with a digit and a
# letter in them (a word such as "deadbeef" or a number stays what it is).
_HEX = re.compile(
    r"(?<![0-9A-Za-z])0[xX][0-9a-fA-F]+(?![0-9A-Za-z])"
    r"|(?<=[\w$]@)[0-9a-fA-F]{5,8}(?![\w.])"
    r"|(?<![0-9A-Za-z])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}"
    r"(?![0-9A-Za-z])"
)
# A duration is one mask whatever its unit, since runners print 999ms, then 1.001s, then 1m2s.
_DURATION_UNIT = r"(?:h|m|s|ms|us|µs|μs|ns|sec|secs|min|mins)"
_DURATION_WORD = (
    r"(?:ms|ns|us|µs|μs|secs?|seconds?|mins?|minutes?|hours?"
    r"|milliseconds?|microseconds?|nanoseconds?)"
)
_DURATION = re.compile(
    r"(?<![\w.])"
    rf"(?:(?:\d+(?:\.\d+)?{_DURATION_UNIT})+|\d+(?:\.\d+)? {_DURATION_WORD})"
    r"(?!\w|\.\d)"
)
# Numbers standing on their own: not the digits of an identifier such as utf8 or gw3.
_NUMBER = re.compile(r"(?<![A-Za-z_\d])\d+(?:\.\d+)*(?:[eE][-+]?\d+)?")
_WHITESPACE = re.compile(r"\s+")

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_UUID, "<uuid>"),
    (_DATETIME, "<time>"),
    (_IPV4, "<ip>"),
    (_IPV6, "<ip>"),
    (_HEX, "<hex>"),
    (_DURATION, "<duration>"),
    (_NUMBER, "<num>"),
)
# A mask can expose another match (a colour code split by a colour code, a value cut in two by
# the length limit); the passes repeat until nothing changes, so normalise is idempotent.
_MAX_PASSES = 8
_MAX_INPUT_CHARS = 20_000


def normalise(message: str) -> str:
    """`message` without what differs between runs of the same failure.

    ANSI colours go; temporary paths, UUIDs, date-times, IP addresses, hex values, durations and
    numbers become `<path>`, `<uuid>`, `<time>`, `<ip>`, `<hex>`, `<duration>` and `<num>`;
    whitespace runs become one space. At most MAX_SUMMARY_CHARS characters, cut at a space when
    one is near and ended with "…". Idempotent: normalise(normalise(m)) == normalise(m).
    """
    # Only the start can show; the cap keeps the regular expressions' work bounded.
    text = message[:_MAX_INPUT_CHARS]
    for _ in range(_MAX_PASSES):
        masked = _truncate(_mask(text))
        if masked == text:
            break
        text = masked
    return text


def _strip_ansi(text: str) -> str:
    while True:
        stripped = _CONTROL.sub("", _ANSI.sub("", text))
        if stripped == text:
            return text
        text = stripped


def _mask(text: str) -> str:
    text = _PATH_TOKEN.sub(_mask_temp_path, _strip_ansi(text))
    for pattern, token in _MASKS:
        text = pattern.sub(token, text)
    return _WHITESPACE.sub(" ", text).strip()


def _mask_temp_path(match: re.Match[str]) -> str:
    token = match[0]
    start = _TEMP_START.search(token)
    if start is None:
        return token
    end = len(token.rstrip(":."))
    return f"{token[: start.start()]}<path>{token[end:]}"


def _truncate(text: str) -> str:
    if len(text) <= MAX_SUMMARY_CHARS:
        return text
    limit = MAX_SUMMARY_CHARS - len(_ELLIPSIS)
    cut = text.rfind(" ", 0, limit + 1)
    # Cut between words unless that loses more than a sixth of the room.
    end = cut if cut >= limit * 5 // 6 else limit
    return text[:end].rstrip() + _ELLIPSIS


# --- Picking the text of a failure ----------------------------------------------------------
# An exception type: dotted and ending in a capitalised name (java.lang.IllegalStateException,
# System.InvalidOperationException, Foo$Bar), or a bare name ending in Error or Exception.
_QUALIFIED_TYPE = r"(?:[A-Za-z_$][\w$]*\.)+[A-Z][\w$]*"
_BARE_TYPE = r"[A-Z][\w$]*(?:Error|Exception)|Error"
_TYPED_LINE = re.compile(rf"(?P<type>{_QUALIFIED_TYPE}|{_BARE_TYPE})(?:(?::| :) (?P<text>.*))?")
_EXCEPTION_NAME = re.compile(r"(?:Error|Exception|Failure|Throwable|Fault)$")
# pytest's "E       ValueError: bad value" (any capitalised name: "Failed: DID NOT RAISE").
_PYTEST_TYPED = re.compile(r"E\s+(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*): (?P<text>.*)")
_PYTEST_E_LINE = re.compile(r"E\s+(?P<text>\S.*)")
# pytest's crash line under the traceback: "tests/test_x.py:3: AssertionError".
_PYTEST_CRASH = re.compile(r"\S+:\d+: (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)")
# Where a stack trace starts: a frame of Java, .NET or JavaScript ("at a.B.c(B.java:3)",
# "at Object.<anonymous> (x.js:1:2)", "at /x.js:1:2"; not "at least 3 items"), a Python
# traceback, a goroutine dump, go test's verdict.
_STACK_LINE = re.compile(
    r"\s*(?:at\s+(?:async\s+|new\s+)?\S+?(?:\s\[as\s\S+\])?\s?\(|at\s+\S+:\d+"
    r"|File \"|Traceback \(most recent call last\)|goroutine \d+ \[|--- FAIL)"
)
# Lines that frame a failure without saying anything: go test's progress lines, testify's
# "Error Trace:", a lone "foo_test.go:12:" before t.Errorf's indented text.
_NOISE_LINE = re.compile(
    r"(?:=== (?:RUN|PAUSE|CONT|NAME)\b.*|--- FAIL\b.*|FAIL\b.*|Error Trace:.*|\S+:\d+:)"
)
# Messages some reporters write in place of one (go-junit-report and gotestsum: "Failed").
_GENERIC_MESSAGES = frozenset({"failed", "failure", "error", "test failed", "fail"})


def failure_summary(message: str | None, detail: str | None) -> str | None:
    """What to show a user for one failure, normalised; None when there is nothing to show.

    The text is the failure's message, else the first informative line of its body (`detail`),
    cut where a stack trace starts. When the body names the exception, the summary says
    "ExceptionType: text": pytest's last "E   Type: text" line (or its crash line's type in
    front of the message), or a first line such as "java.lang.IllegalStateException: boom".
    A generic message such as go test's "Failed" counts as no message.
    """
    message_text = _strip_ansi(message) if message else ""
    detail_lines = [line.rstrip() for line in _strip_ansi(detail).splitlines()] if detail else []
    headline = _headline(message_text)
    raised = _raised(detail_lines)
    if raised is None:
        chosen = headline or _first_informative(detail_lines)
    else:
        chosen = _with_type(*raised, headline=headline)
    summary = normalise(chosen) if chosen else ""
    return summary or None


def _headline(message: str) -> str | None:
    """The message up to its stack trace, with .NET's "Type : text" written "Type: text"."""
    kept: list[str] = []
    for line in message.strip().splitlines():
        if kept and _STACK_LINE.match(line):
            break
        kept.append(line)
    headline = "\n".join(kept).strip()
    if not headline or headline.lower().rstrip(".:!") in _GENERIC_MESSAGES:
        return None
    typed = _TYPED_LINE.fullmatch(kept[0].strip())
    if typed is not None and typed["text"] is not None:
        rest = "\n".join(kept[1:])
        return f"{typed['type']}: {typed['text']}\n{rest}".strip()
    return headline


def _raised(lines: list[str]) -> tuple[str, str | None] | None:
    """The exception type (and its text when shown) a failure body names, if any."""
    python_typed = [m for line in lines if (m := _PYTEST_TYPED.match(line))]
    if python_typed:
        # A chained traceback shows the cause first; the exception raised is the last one.
        last = python_typed[-1]
        return last["type"], last["text"].strip() or None
    crashes = [m for line in lines if (m := _PYTEST_CRASH.fullmatch(line.strip()))]
    if crashes:
        first_e = next((m["text"] for line in lines if (m := _PYTEST_E_LINE.match(line))), None)
        return crashes[-1]["type"], first_e.strip() if first_e else None
    first = _first_informative(lines)
    typed = _TYPED_LINE.fullmatch(first) if first else None
    if typed is None:
        return None
    text = (typed["text"] or "").strip() or None
    # A dotted name alone may be a class or a module; alone, only an exception's name counts.
    if text is None and not _EXCEPTION_NAME.search(typed["type"]):
        return None
    # Java and JavaScript print the outer exception first; "Caused by:" lines come later.
    return typed["type"], text


def _with_type(kind: str, text: str | None, *, headline: str | None) -> str:
    if text:
        return f"{kind}: {text}"
    if not headline:
        return kind
    short = kind.rsplit(".", 1)[-1]
    if headline.startswith((kind, short)):
        return headline
    return f"{kind}: {headline}"


def _first_informative(lines: list[str]) -> str | None:
    for line in lines:
        stripped = line.strip()
        if not stripped or _NOISE_LINE.fullmatch(stripped) or _STACK_LINE.match(stripped):
            continue
        return stripped
    return None


def summary_key(summary: str) -> str:
    """A short stable key for a summary (16 hex digits of its SHA-256), to count by."""
    return hashlib.sha256(summary.encode("utf-8")).hexdigest()[:16]


# --- Templates ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FailureCount:
    """How often one test failed with one summary, and when last."""

    summary: str
    count: int
    last_at: datetime


@dataclass(frozen=True, slots=True)
class FailureTemplate:
    """A group of summaries: `summary` has WILDCARD where its members disagree."""

    summary: str
    count: int
    last_at: datetime


# The share of positions that must agree for a summary to join a template. Half: a two-word
# summary then joins on its exception type alone ("KeyError: 'cache_372'" and "KeyError:
# 'user_528'" make "KeyError: <*>"; at 0.6 each key stayed a template of its own, so a failure
# that happened 28 times with 28 keys never showed among the most common). Drain3's default is
# 0.4; at 0.5 "a b c d e" and "a x y z e" still stay apart.
SIMILARITY = 0.5


@dataclass(slots=True)
class _Group:
    tokens: list[str]
    summary: str  # the first member's summary while no token has become a wildcard
    count: int
    last_at: datetime
    wildcards: int = 0  # how many of `tokens` are WILDCARD


def mine_templates(
    counts: Sequence[FailureCount], *, similarity: float = SIMILARITY, limit: int = 5
) -> list[FailureTemplate]:
    """The `limit` most common templates of one test's (normalised) summaries.

    Drain-style: a summary joins the most similar group with its number of tokens and its first
    token (Drain's prefix tree, which keeps "TypeError: x" and "ValueError: x" apart) when at
    least `similarity` of the positions agree (a wildcard agrees with anything); the group's
    template turns the disagreeing tokens into WILDCARD. Counts add up and `last_at` is the
    latest. The input is sorted first (most counted first, which seeds the groups with the
    common forms), so the result does not depend on its order. Ties in the result are broken
    by the latest `last_at`, then by summary.
    """
    templates = absorb_failures((), counts, similarity=similarity)
    templates.sort(key=lambda t: t.summary)
    templates.sort(key=lambda t: (t.count, t.last_at), reverse=True)
    return templates[: max(limit, 0)]


def absorb_failures(
    templates: Sequence[FailureTemplate],
    counts: Sequence[FailureCount],
    *,
    similarity: float = SIMILARITY,
) -> list[FailureTemplate]:
    """`templates` (mined before) with `counts` mined into them, as `mine_templates` mines.

    What an upload does to the templates stored for a test and a day: position i of the
    answer is `templates[i]`, grown by the summaries that joined it (so a template keeps its
    place, and the caller rewrites only those that changed); the templates the new summaries
    started follow, in the order they were started. Stored templates are never merged with
    each other, only joined.
    """
    if not 0.0 < similarity <= 1.0:
        raise ValueError(f"similarity must be in (0, 1], not {similarity}")
    groups: dict[tuple[int, str], list[_Group]] = {}
    started = [_start(groups, t.summary, t.count, t.last_at) for t in templates]
    for item in sorted(counts, key=lambda c: (-c.count, c.summary, c.last_at)):
        tokens = item.summary.split()
        candidates = groups.get((len(tokens), tokens[0] if tokens else ""), [])
        best = _most_similar(candidates, tokens, similarity)
        if best is None:
            started.append(_start(groups, item.summary, item.count, item.last_at))
            continue
        merged = [a if a == b else WILDCARD for a, b in zip(best.tokens, tokens, strict=True)]
        if merged != best.tokens:
            best.tokens = merged
            best.summary = " ".join(merged)
            best.wildcards = merged.count(WILDCARD)
        best.count += item.count
        best.last_at = max(best.last_at, item.last_at)
    return [FailureTemplate(group.summary, group.count, group.last_at) for group in started]


def _start(
    groups: dict[tuple[int, str], list[_Group]], summary: str, count: int, last_at: datetime
) -> _Group:
    tokens = summary.split()
    group = _Group(tokens, summary, count, last_at, tokens.count(WILDCARD))
    groups.setdefault((len(tokens), tokens[0] if tokens else ""), []).append(group)
    return group


def _most_similar(groups: list[_Group], tokens: list[str], similarity: float) -> _Group | None:
    best: _Group | None = None
    best_score = -1.0
    # A position agrees when the group's token is the summary's or a wildcard. Counted in C
    # (equal tokens, plus the group's wildcards) unless the summary itself holds a wildcard
    # token, which would be counted twice: a test's summaries are compared pairwise, so this
    # is most of the time of a listing's page.
    plain = WILDCARD not in tokens
    for group in groups:
        if plain:
            agree = sum(map(eq, group.tokens, tokens)) + group.wildcards
        else:
            agree = sum(a in (b, WILDCARD) for a, b in zip(group.tokens, tokens, strict=True))
        score = agree / len(tokens) if tokens else 1.0
        # The first group created wins a tie, so the outcome follows the (sorted) input order.
        if score >= similarity and score > best_score:
            best, best_score = group, score
    return best
