"""Untrusted report bytes to a stream of checked lxml elements: limits, gzip, hardened parsing.

Everything here assumes the bytes come from a stranger. The size is bounded before parsing
(also while decompressing); the document is then read as a stream of events, each checked as it
comes: elements and attributes, depth and testcases are counted and the parse stops at the first
one past a limit, and each element is dropped once read, so memory stays flat however many
results a report holds. The parser never loads a DTD, an external entity or anything over the
network, and a document is refused when its DTD declares entities or when it holds entity
references.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

# lxml ships no type stubs: its objects are `Any` in this module, and the parser sees the tree
# through the XmlElement protocol below.
from lxml import etree  # type: ignore[import-untyped]

MAX_REPORT_BYTES = 50 * 1024 * 1024  # per report, after decompression
_MAX_REPORT_MIB = MAX_REPORT_BYTES // (1024 * 1024)
MAX_DEPTH = 64  # levels of elements, the root being level 1
# Elements plus attributes: a report at the test-case cap (200,000 cases with four or five
# attributes each, some with a failure) stays under it. Elements are dropped once read, so this
# bounds the time a report takes, not its memory.
MAX_NODES = 2_000_000
MAX_TEST_CASES = 200_000  # testcase elements per report, named or not
_MAX_PROBLEM_CHARS = 300
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024  # output bytes per inflate call, so a bomb stops near the limit
_FEED_STEP = 256 * 1024  # bytes per feed of the parser


class ReportError(Exception):
    """A report that cannot be read: names the file and the problem."""

    def __init__(self, filename: str, problem: str) -> None:
        # Both go to Exception so the error pickles (to a worker process and back).
        super().__init__(filename, problem)
        self.filename = filename
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.filename}: {self.problem}"


class XmlElement(Protocol):
    """The part of lxml's `_Element` the parser uses (lxml ships no type stubs)."""

    @property
    def tag(self) -> str: ...

    @property
    def text(self) -> str | None: ...

    def get(self, key: str) -> str | None: ...

    def iterchildren(self, *tags: str) -> Iterator[XmlElement]: ...


def _hardened_parser() -> Any:
    """A parser that reads only the bytes it is given: no DTD, entity, file or network access."""
    return etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,  # keeps libxml2's limits: 256 levels, 10 MB per text or attribute
        dtd_validation=False,
        remove_comments=True,
        remove_pis=True,
    )


class CountingTarget(Protocol):
    """A parser target: called at each element's start and end tag, it builds nothing."""

    def start(self, tag: str, attrib: Mapping[str, str]) -> None: ...

    def end(self, tag: str) -> None: ...

    def close(self) -> object: ...


def count_document(filename: str, data: bytes, target: CountingTarget) -> None:
    """Runs `target` over the elements of a report's XML (from report_bytes), building nothing
    (no tree, no element objects): the quickest pass for counting. What the target raises stops
    the parse and comes out as it is; a syntax error is a ReportError.
    """
    parser = etree.XMLParser(
        target=target,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        dtd_validation=False,
    )
    try:
        # Fed in slices: libxml2 reads on after a callback raises, to the end of what it was given.
        for start in range(0, len(data), _FEED_STEP):
            parser.feed(data[start : start + _FEED_STEP])
        parser.close()
    except etree.LxmlError as error:
        raise ReportError(filename, _syntax_problem(error, data)) from None


def report_bytes(filename: str, data: bytes) -> bytes:
    """A report's XML as uploaded, gzip or plain (told apart by its first bytes), inflated and
    checked for size and encoding; raises ReportError when it cannot be read.
    """
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(filename, data)
    elif len(data) > MAX_REPORT_BYTES:
        raise ReportError(filename, f"larger than {_MAX_REPORT_MIB} MiB")
    if not data.strip():
        raise ReportError(filename, "the file is empty")
    _check_encoding(filename, data)
    _check_node_count(filename, data)
    return data


def stream_document(filename: str, data: bytes) -> Iterator[tuple[str, XmlElement]]:
    """The ("start" | "end", element) events of a report's XML (from report_bytes), checked as
    they come.

    Raises ReportError, at the first event past a limit, for anything but a bounded,
    well-formed, entity-free XML document whose root is `testsuites` or `testsuite` and which
    holds at most MAX_TEST_CASES testcases. Only the elements still open are kept: once the
    caller has read an "end" event, that element is dropped, so memory does not grow with the
    document (the caller reads an element's text and attributes at its events, not later).
    """
    parser = _hardened_parser()
    limits = _Limits(filename)
    try:
        # Fed in slices so that a refusal comes within one slice of the element past a limit,
        # and the elements built ahead of the events read stay few.
        for start in range(0, len(data), _FEED_STEP):
            parser.feed(data[start : start + _FEED_STEP])
            yield from limits.events(parser.read_events())
        parser.close()
        yield from limits.events(parser.read_events())
    except etree.LxmlError as error:
        raise ReportError(filename, _syntax_problem(error, data)) from None


class _Limits:
    """Checks each event of one document against the limits, and drops elements once read."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.nodes = 0
        self.depth = 0
        self.test_cases = 0

    def events(self, events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, XmlElement]]:
        # The counters live in locals for the loop: it runs for every element of the report.
        filename, nodes, depth, test_cases = self.filename, self.nodes, self.depth, self.test_cases
        entity = etree.Entity
        try:
            for event, element in events:
                if event == "start":
                    nodes += 1 + len(element.attrib)
                    depth += 1
                    if nodes > MAX_NODES:
                        raise ReportError(
                            filename, f"more than {MAX_NODES:,} elements and attributes"
                        )
                    if depth > MAX_DEPTH:
                        raise ReportError(filename, _DEPTH_PROBLEM)
                    if depth == 1:
                        _check_root(filename, element)
                    if element.tag == "testcase":
                        test_cases += 1
                        if test_cases > MAX_TEST_CASES:
                            raise ReportError(filename, f"more than {MAX_TEST_CASES:,} test cases")
                    yield event, element
                    continue
                depth -= 1
                # Every child element was dropped at its own end, so what is left of the
                # children are entity references: they stay in the tree when an external DTD
                # was not loaded.
                if len(element) and any(child.tag is entity for child in element):
                    raise ReportError(filename, "entity references are not allowed")
                yield event, element
                # Dropped, tail text included, now that the caller has read it.
                parent = element.getparent()
                element.clear()
                if parent is not None:
                    parent.remove(element)
        finally:
            self.nodes, self.depth, self.test_cases = nodes, depth, test_cases


def _check_root(filename: str, root: Any) -> None:
    # The DTD comes before the root element, so it is whole by the root's start event.
    # Nothing was resolved (no file, no URL); the document is refused whole so that no entity
    # text, not even an internal one libxml2 put into an attribute, reaches a result.
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and next(dtd.iterentities(), None) is not None:
        raise ReportError(filename, _ENTITY_PROBLEM)
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportError(
            filename, f"the root element is <{root.tag}>, not <testsuites> or <testsuite>"
        )


def _gunzip(filename: str, data: bytes) -> bytes:
    """Inflates gzip members one bounded step at a time, stopping as soon as the limit is passed.

    A gzip bomb never costs more than about the limit in memory and in time.
    """
    chunks: list[bytes] = []
    size = 0
    pending = data
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing only
    try:
        while True:
            chunk = inflater.decompress(pending, _INFLATE_STEP)
            size += len(chunk)
            if size > MAX_REPORT_BYTES:
                raise ReportError(filename, f"larger than {_MAX_REPORT_MIB} MiB when decompressed")
            chunks.append(chunk)
            pending = inflater.unconsumed_tail
            if inflater.eof:
                # `gzip a b > c` makes a file of several members; Python's gzip reads them all.
                pending = inflater.unused_data
                if not pending:
                    break
                inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            elif not chunk and not pending:
                raise ReportError(filename, "the gzip data is truncated")
    except zlib.error as error:
        raise ReportError(filename, f"not valid gzip data ({error})") from None
    return b"".join(chunks)


# Encodings in which every `<` and `=` of the markup is the byte 0x3C or 0x3D (in UTF-16 and
# UTF-32 as one byte of the code unit), so counting those bytes bounds the elements and
# attributes. UTF-7, which libxml2 also reads, can spell `<` as `+ADw-`.
_COUNTABLE_ENCODING = re.compile(
    r"utf-?(8|16|32)(-?(le|be))?|(us-)?ascii|iso[-_]?8859[-_]\d{1,2}|latin-?\d|(windows|cp)-?125\d"
    r"|shift[_-]jis|euc-(jp|kr)|gb2312|gbk|gb18030|big5",
    re.IGNORECASE,
)
_DECLARED_ENCODING = re.compile(
    rb"\A(?:\xef\xbb\xbf)?\s*<\?xml\s[^>]*?encoding\s*=\s*[\"']([^\"']*)[\"']"
)


def _check_encoding(filename: str, data: bytes) -> None:
    # A UTF-16 or UTF-32 document keeps its encoding whatever its declaration says, and its
    # declaration is not ASCII, so the pattern only finds declarations libxml2 would follow.
    declared = _DECLARED_ENCODING.match(data)
    if declared is None:
        return
    name = declared.group(1).decode("ascii", errors="replace")
    if not _COUNTABLE_ENCODING.fullmatch(name):
        raise ReportError(filename, f"the encoding {name[:40]!r} is not supported (use UTF-8)")


class _TooManyNodes(Exception):
    """Raised from inside the counting parse to stop it at the limit."""


class _NodeCounter:
    """A parser target that counts elements and attributes and builds nothing."""

    def __init__(self) -> None:
        self.nodes = 0

    def start(self, _tag: str, attrib: Mapping[str, str]) -> None:
        self.nodes += 1 + len(attrib)
        if self.nodes > MAX_NODES:
            raise _TooManyNodes

    def end(self, _tag: str) -> None:
        pass

    def close(self) -> int:
        return self.nodes


def _check_node_count(filename: str, data: bytes) -> None:
    # Every element needs a `<` and every attribute an `=`, so their count bounds the nodes and
    # takes milliseconds. Only a report with more of them (long logs, or an attack) pays for an
    # exact count, which streams through the parser and stops at the limit.
    if data.count(b"<") + data.count(b"=") <= MAX_NODES:
        return
    try:
        count_document(filename, data, _NodeCounter())
    except _TooManyNodes:
        raise ReportError(filename, f"more than {MAX_NODES:,} elements and attributes") from None


_ENTITY_PROBLEM = "entity declarations are not allowed"


_DEPTH_PROBLEM = f"elements are nested deeper than {MAX_DEPTH} levels"


_LXML_POSITION = re.compile(r",? line \d+, column \d+$")
_ENTITY_DECLARATIONS = tuple(
    "<!ENTITY".encode(codec) for codec in ("utf-8", "utf-16-le", "utf-16-be")
)


def _syntax_problem(error: Exception, data: bytes) -> str:
    """What a person should read for one of lxml's parse errors."""
    message = str(getattr(error, "msg", None) or error).strip()
    if "Excessive depth" in message:
        return _DEPTH_PROBLEM
    if _is_about_entities(message) and any(mark in data for mark in _ENTITY_DECLARATIONS):
        # A declared entity broke the parse: an external one in an attribute, a loop, or the
        # amplification limit on the expansion libxml2 does in attribute values whatever
        # resolve_entities says. Had it parsed, the declarations would have been refused.
        return _ENTITY_PROBLEM
    if "XML_PARSE_HUGE" in message or "too big" in message:
        return f"a text or attribute is longer than 10 MB ({_position(error)})"
    if message.startswith(("Document is empty", "Start tag expected")):
        return "not an XML document"
    if "Invalid bytes" in message or "not proper UTF-8" in message:
        return f"bytes that are not text in the document's encoding ({_position(error)})"
    # libxml2 appends a piece of the text after a newline to some messages, and lxml the
    # position, which comes first here.
    summary = _LXML_POSITION.sub("", message.partition("\n")[0]).strip()
    return f"not well-formed XML at {_position(error)}: {summary}"[:_MAX_PROBLEM_CHARS]


def _is_about_entities(message: str) -> bool:
    return any(word in message for word in ("ntity", "PEReference", "amplification"))


def _position(error: Exception) -> str:
    line, column = getattr(error, "position", (0, 0))
    return f"line {line}, column {column}"
