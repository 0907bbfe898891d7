"""Untrusted report bytes to a checked lxml tree: size limits, gzip, hardened parsing.

Everything here assumes the bytes come from a stranger. Before the tree is built, the size is
bounded (also while decompressing), and so are the elements and attributes, because lxml's tree
takes about 30 times the bytes of a flood of tiny elements. The parser never loads a DTD, an
external entity or anything over the network, and a document is refused when its DTD declares
entities, when it still holds entity references, or when it nests too deep.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, cast

# lxml ships no type stubs: its objects are `Any` in this module, and the parser sees the tree
# through the XmlElement protocol below.
from lxml import etree  # type: ignore[import-untyped]

MAX_REPORT_BYTES = 50 * 1024 * 1024  # per report, after decompression
_MAX_REPORT_MIB = MAX_REPORT_BYTES // (1024 * 1024)
MAX_DEPTH = 64  # levels of elements, the root being level 1
# Elements plus attributes. A report at the test-case cap (200,000 cases with four or five
# attributes each, some with a failure) stays under it; a tree this size takes a few hundred MB,
# and stays well under libxml2's 10 million nodes per XPath result.
MAX_NODES = 2_000_000
MAX_TEST_CASES = 200_000  # testcase elements per report, named or not
_MAX_PROBLEM_CHARS = 300
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024  # output bytes per inflate call, so a bomb stops near the limit
_COUNT_STEP = 256 * 1024  # bytes per feed of the counting parse


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


def _hardened_parser(**options: object) -> Any:
    """A parser that reads only the bytes it is given: no DTD, entity, file or network access."""
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,  # keeps libxml2's limits: 256 levels, 10 MB per text or attribute
        dtd_validation=False,
        remove_comments=True,
        remove_pis=True,
        **options,
    )


def load_document(filename: str, data: bytes) -> XmlElement:
    """The root element of a report, gzip or plain, once every check passed.

    Raises ReportError for anything but a bounded, well-formed, entity-free XML document whose
    root is `testsuites` or `testsuite` and which holds at most MAX_TEST_CASES testcases.
    """
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(filename, data)
    elif len(data) > MAX_REPORT_BYTES:
        raise ReportError(filename, f"larger than {_MAX_REPORT_MIB} MiB")
    if not data.strip():
        raise ReportError(filename, "the file is empty")
    _check_encoding(filename, data)
    _check_node_count(filename, data)
    try:
        root = etree.fromstring(data, _hardened_parser())
    except etree.LxmlError as error:
        raise ReportError(filename, _syntax_problem(error, data)) from None
    _check_entities(filename, root)
    _check_depth(filename, root)
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportError(
            filename, f"the root element is <{root.tag}>, not <testsuites> or <testsuite>"
        )
    # Counted in C before a single result is built.
    if root.xpath("count(//testcase)") > MAX_TEST_CASES:
        raise ReportError(filename, f"more than {MAX_TEST_CASES:,} test cases")
    return cast("XmlElement", root)


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

    def close(self) -> int:
        return self.nodes


def _check_node_count(filename: str, data: bytes) -> None:
    # Every element needs a `<` and every attribute an `=`, so their count bounds the nodes and
    # takes milliseconds. Only a report with more of them (long logs, or an attack) pays for an
    # exact count, which streams through the parser and stops at the limit.
    if data.count(b"<") + data.count(b"=") <= MAX_NODES:
        return
    parser = _hardened_parser(target=_NodeCounter())
    try:
        # Fed in slices: libxml2 reads on after a callback raises, to the end of what it was given.
        for start in range(0, len(data), _COUNT_STEP):
            parser.feed(data[start : start + _COUNT_STEP])
        parser.close()
    except _TooManyNodes:
        raise ReportError(filename, f"more than {MAX_NODES:,} elements and attributes") from None
    except etree.LxmlError as error:
        raise ReportError(filename, _syntax_problem(error, data)) from None


_ENTITY_PROBLEM = "entity declarations are not allowed"


def _check_entities(filename: str, root: Any) -> None:
    # Nothing was resolved (no file, no URL); the document is refused whole so that no entity
    # text, not even an internal one libxml2 put into an attribute, reaches a result.
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and next(dtd.iterentities(), None) is not None:
        raise ReportError(filename, _ENTITY_PROBLEM)
    # A reference to an entity of an external DTD, which was not loaded, stays in the tree.
    if next(root.iter(etree.Entity), None) is not None:
        raise ReportError(filename, "entity references are not allowed")


_DEPTH_PROBLEM = f"elements are nested deeper than {MAX_DEPTH} levels"


def _check_depth(filename: str, root: Any) -> None:
    # libxml2 already stops at 256 levels; an XPath step per level finds anything past ours.
    too_deep = "boolean(/" + "/".join(["*"] * (MAX_DEPTH + 1)) + ")"
    if root.xpath(too_deep):
        raise ReportError(filename, _DEPTH_PROBLEM)


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
