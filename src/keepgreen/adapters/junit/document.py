"""Report bytes to parser events: size, encoding and DTD checks, then a hardened parse.

Everything here assumes the bytes come from a stranger.

- The size is bounded before parsing (also while decompressing).
- The text is brought to UTF-8 first, whatever encoding the report declares that Python knows
  and that writes ASCII as ASCII (Latin-1, KOI8-R, Shift_JIS, UTF-16...): the checks on bytes
  below, and libxml2 itself, then only ever see UTF-8. A byte that is not text in the report's
  own (non-UTF-8) encoding becomes U+FFFD. The XML declaration is blanked out in
  the text given to libxml2 (it would name the old encoding), which also lets a report start
  with blank lines before it.
- A document whose DTD declares an entity is refused before any other parse: the check reads
  only up to the root element, with libxml2's own limits on, so no entity is ever expanded. A
  document with a DTD may not use entities it does not declare either (they would come from a
  DTD that is never loaded). No DTD, external entity or URL is ever loaded.
- The document is then parsed by a target that builds nothing (no tree, no element objects):
  libxml2 calls it at each start tag, end tag and piece of text, and the parse stops as soon
  as it raises. Texts may be as long as the report (libxml2's huge mode), since nothing is
  kept that the target does not keep; the target counts depth, elements and attributes, and
  testcases at each start tag, and refuses the first past a limit.
- A character XML forbids (a raw ANSI escape in a log, say) makes libxml2 stop. Rather than
  refuse a report a tool wrote that way, the report is read once more with each such character
  replaced by U+FFFD: the report is read, and the text shows where the character was. Bytes
  that are not UTF-8 are still refused, with the line and column of the first.
"""

from __future__ import annotations

import codecs
import re
import zlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

# lxml ships no type stubs: its objects are `Any` in this module.
from lxml import etree  # type: ignore[import-untyped]

MAX_REPORT_BYTES = 50 * 1024 * 1024  # per report, after decompression
_MAX_REPORT_MIB = MAX_REPORT_BYTES // (1024 * 1024)
MAX_DEPTH = 64  # levels of elements, the root being level 1
# Elements plus attributes: a report at the test-case cap (200,000 cases with four or five
# attributes each, some with a failure) stays under it. Nothing is built, so this bounds the
# time a report takes, not its memory.
MAX_NODES = 2_000_000
MAX_TEST_CASES = 200_000  # testcase elements per report, named or not
DEPTH_PROBLEM = f"elements are nested deeper than {MAX_DEPTH} levels"
ENTITY_PROBLEM = "entity declarations are not allowed"
_MAX_PROBLEM_CHARS = 300
NODES_PROBLEM = f"more than {MAX_NODES:,} elements and attributes"
TEST_CASES_PROBLEM = f"more than {MAX_TEST_CASES:,} test cases"
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024  # output bytes per inflate call, so a bomb stops near the limit
_FEED_STEP = 256 * 1024  # bytes per feed of the DTD check, which stops at the root element

R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")


class ReportError(Exception):
    """A report that cannot be read: names the file and the problem."""

    def __init__(self, filename: str, problem: str) -> None:
        # Both go to Exception so the error pickles (to a worker process and back).
        super().__init__(filename, problem)
        self.filename = filename
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.filename}: {self.problem}"


class EventTarget(Protocol[R_co]):
    """A parser target: libxml2 calls it at each tag and text, and it builds what it reads.

    `start` must refuse (ReportError) the first element past one of the limits: deeper than
    MAX_DEPTH (DEPTH_PROBLEM), past MAX_NODES elements and attributes (NODES_PROBLEM), past
    MAX_TEST_CASES testcases (TEST_CASES_PROBLEM). Counting as the parse goes costs less than
    a pass over the bytes before it. What a method raises stops the parse at once and comes
    out of read_document as it is.
    """

    def start(self, tag: str, attrib: dict[str, str]) -> None: ...

    def end(self, tag: str) -> None: ...

    def data(self, text: str) -> None: ...

    def close(self) -> R_co: ...


def report_bytes(filename: str, data: bytes) -> bytes:
    """A report's XML as uploaded, gzip or plain (told apart by its first bytes), inflated,
    checked for size and DTD, and in UTF-8; raises ReportError when it cannot be read.
    """
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(filename, data)
    elif len(data) > MAX_REPORT_BYTES:
        raise ReportError(filename, f"larger than {_MAX_REPORT_MIB} MiB")
    if not data.strip():
        raise ReportError(filename, "the file is empty")
    data = _as_utf8(filename, data)
    _check_dtd(filename, data)
    return data


def read_document(filename: str, data: bytes, new_target: Callable[[], EventTarget[R]]) -> R:
    """Runs a target from `new_target` over a report's XML (from report_bytes) and answers
    what its `close` does.

    When the report holds characters XML forbids, it is read again, by a new target, with
    those replaced (see the module's docstring). A report that is not well-formed XML is a
    ReportError saying where.
    """
    try:
        return _parse(data, new_target())
    except etree.LxmlError as error:
        repaired = _with_forbidden_characters_replaced(data)
        if repaired is None:
            raise ReportError(filename, _syntax_problem(error, data)) from None
    # The DTD check may have stopped at the character too: it runs again on what is parsed.
    _check_dtd(filename, repaired)
    try:
        return _parse(repaired, new_target())
    except etree.LxmlError as error:
        raise ReportError(filename, _syntax_problem(error, repaired)) from None


def _parse(data: bytes, target: EventTarget[R]) -> R:
    parser = etree.XMLParser(
        target=target,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=True,  # texts as long as the report; the target checks depth and counts
    )
    # Parsed in place, in one go: lxml stops libxml2 as soon as the target raises.
    result: R = etree.fromstring(data, parser)
    return result


# --- encodings ---

_UTF8_BOM = b"\xef\xbb\xbf"
# UTF-32's marks first: UTF-32LE's begins with UTF-16LE's.
_BYTE_ORDER_MARKS = (
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xff\xfe", "utf-16-le"),
)
_DECLARATION = re.compile(rb"[ \t\r\n]*(<\?xml[ \t\r\n][^>]*>)")  # .match()ed from a position
_DECLARED_ENCODING = re.compile(rb"""encoding[ \t\r\n]*=[ \t\r\n]*["']([^"']*)["']""")
_TEXT_DECLARATION = re.compile(r"\A[ \t\r\n]*(<\?xml[ \t\r\n][^>]*>)")
_ASCII = bytes(range(0x20, 0x7F)) + b"\t\n\r"
_ASCII_TEXT = _ASCII.decode("ascii")


def _as_utf8(filename: str, data: bytes) -> bytes:
    """The report in UTF-8 without a declaration of another encoding (module docstring)."""
    for mark, codec in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return _transcoded(data[len(mark) :], codec)
    wide = _wide_encoding(data)
    if wide is not None:
        return _transcoded(data, wide)
    bom = data.startswith(_UTF8_BOM)
    declaration = _DECLARATION.match(data, len(_UTF8_BOM) if bom else 0)
    if declaration is None:
        return data  # UTF-8, the default
    declared = _DECLARED_ENCODING.search(declaration.group(1))
    name = declared.group(1).decode("ascii", errors="replace") if declared else "UTF-8"
    at_start = declaration.start(1) == (len(_UTF8_BOM) if bom else 0)
    if bom or _is_utf8(name):
        # A byte order mark wins over the declaration, as XML says; libxml2 is only given a
        # declaration it reads the same way.
        if at_start and name.upper() in ("UTF-8", "UTF8"):
            return data
        return _blanked(data, declaration.span(1))
    if not _writes_ascii_as_ascii(name):
        raise ReportError(filename, f"the encoding {name[:40]!r} is not supported (use UTF-8)")
    return _transcoded(data, name)


def _wide_encoding(data: bytes) -> str | None:
    """UTF-16 or UTF-32 without a byte order mark, told by where the zero bytes of the first
    character are (XML 1.0 appendix F); no other document starts with a zero byte.
    """
    head = data[:4]
    if len(head) < 4 or 0 not in head[:2]:
        return None
    if head[:2] == b"\x00\x00":
        return "utf-32-be"
    if head[1:] == b"\x00\x00\x00":
        return "utf-32-le"
    return "utf-16-be" if head[0] == 0 else "utf-16-le"


def _is_utf8(name: str) -> bool:
    try:
        return codecs.lookup(name).name == "utf-8"
    except LookupError:
        return False


def _writes_ascii_as_ascii(name: str) -> bool:
    """Whether `name` is a text encoding Python knows in which ASCII is ASCII: one a report
    whose declaration could be read in ASCII may really be written in (not UTF-7, EBCDIC or
    UTF-16, say).
    """
    try:
        return _ASCII.decode(name) == _ASCII_TEXT
    except (LookupError, UnicodeDecodeError):
        return False


def _transcoded(data: bytes, codec: str) -> bytes:
    # A byte that is not text in the report's own encoding becomes U+FFFD: the encoding
    # was the tool's to get right, and the rest of the report is still worth reading.
    text = data.decode(codec, errors="replace")
    declaration = _TEXT_DECLARATION.match(text)
    if declaration is not None:
        start, end = declaration.span(1)
        text = text[:start] + " " * (end - start) + text[end:]
    return text.encode()


def _blanked(data: bytes, span: tuple[int, int]) -> bytes:
    """`data` with the declaration at `span` turned into spaces (lines and columns kept)."""
    start, end = span
    return data[:start] + b" " * (end - start) + data[end:]


# --- forbidden characters ---

# C0 controls other than tab, newline and carriage return, in UTF-8 always one byte each.
_FORBIDDEN_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_NON_CHARACTERS = (b"\xef\xbf\xbe", b"\xef\xbf\xbf")  # U+FFFE, U+FFFF
_REPLACEMENT = "\ufffd".encode()


def _with_forbidden_characters_replaced(data: bytes) -> bytes | None:
    """`data` with the characters XML forbids replaced by U+FFFD, or None when it has none
    (or is not UTF-8 at all, which is refused as it is).
    """
    try:
        data.decode()
    except UnicodeDecodeError:
        return None
    repaired = _FORBIDDEN_CONTROL.sub(_REPLACEMENT, data)
    for character in _NON_CHARACTERS:
        repaired = repaired.replace(character, _REPLACEMENT)
    return None if repaired == data else repaired


# --- DTDs and entities ---

_PROLOG_SPACE = re.compile(rb"[ \t\r\n]*")
_ENTITY_REFERENCE = re.compile(rb"&(?!(?:lt|gt|amp|quot|apos);|#)")


def _check_dtd(filename: str, data: bytes) -> None:
    """Refuses a DTD that declares entities, and a DTD with entities it does not declare.

    The DTD comes before the root element, so it is read whole by the time libxml2 reaches
    the root's start tag; the parse stops there. It keeps libxml2's limits (huge mode off),
    which cap how far an entity in the root's own attributes may expand.
    """
    if not _has_doctype(data):
        return  # no DTD: an undeclared entity is a syntax error of the main parse
    parser = etree.XMLPullParser(
        events=("start",),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
    )
    try:
        for start in range(0, len(data), _FEED_STEP):
            parser.feed(data[start : start + _FEED_STEP])
            for _event, root in parser.read_events():
                _check_declarations(filename, root.getroottree().docinfo, data)
                return
        parser.close()
    except etree.LxmlError as error:
        repaired = _with_forbidden_characters_replaced(data)
        if repaired is None:
            raise ReportError(filename, _syntax_problem(error, data)) from None
        # The replacement touches no markup: the DTD of `repaired` is the report's.
        _check_dtd(filename, repaired)


def _has_doctype(data: bytes) -> bool:
    """Whether the prolog (what comes before the root element) holds a document type
    declaration, the one place XML has for it: found by stepping over the prolog's whitespace,
    processing instructions and comments rather than by searching the whole report.
    """
    position = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    while True:
        position = _PROLOG_SPACE.match(data, position).end()  # type: ignore[union-attr]  # `*` always matches
        if data.startswith(b"<?", position):
            opening, closing = b"<?", b"?>"
        elif data.startswith(b"<!--", position):
            opening, closing = b"<!--", b"-->"
        else:
            return data.startswith(b"<!DOCTYPE", position)
        end = data.find(closing, position + len(opening))
        if end < 0:
            return False  # cut short: the parse says where
        position = end + len(closing)


def _check_declarations(filename: str, docinfo: Any, data: bytes) -> None:
    # Nothing was resolved (no file, no URL); the document is refused whole so that no entity
    # text, not even an internal one libxml2 put into an attribute, reaches a result.
    dtd = docinfo.internalDTD
    if dtd is not None and next(dtd.iterentities(), None) is not None:
        raise ReportError(filename, ENTITY_PROBLEM)
    # An entity the DTD does not declare may be declared in an external subset, which is never
    # loaded: libxml2 then drops the reference without a word. It is refused instead; a `&`
    # that starts no reference can only be in CDATA or a comment of such a report.
    if docinfo.doctype and _ENTITY_REFERENCE.search(data):
        raise ReportError(filename, "entity references are not allowed")


# --- sizes and counts ---


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


# --- what libxml2 says, for a person ---

_LXML_POSITION = re.compile(r",? line \d+, column \d+$")
_ENTITY_DECLARATIONS = tuple(
    "<!ENTITY".encode(codec) for codec in ("utf-8", "utf-16-le", "utf-16-be")
)


def _syntax_problem(error: Exception, data: bytes) -> str:
    """What a person should read for one of lxml's parse errors."""
    message = str(getattr(error, "msg", None) or error).strip()
    if "Excessive depth" in message:
        return DEPTH_PROBLEM
    if _is_about_entities(message) and any(mark in data for mark in _ENTITY_DECLARATIONS):
        # A declared entity broke the parse: an external one in an attribute, a loop, or the
        # amplification limit on the expansion libxml2 does in attribute values whatever
        # resolve_entities says. Had it parsed, the declarations would have been refused.
        return ENTITY_PROBLEM
    if "XML_PARSE_HUGE" in message or "too big" in message:
        # Only the DTD check runs with libxml2's size limits.
        return f"a text or attribute is longer than 10 MB ({_position(error)})"
    if message.startswith(("Document is empty", "Start tag expected")):
        return "not an XML document"
    if "Invalid bytes" in message or "not proper UTF-8" in message:
        return f"bytes that are not text in the document's encoding ({_position(error)})"
    if message.startswith("Unregistered error message"):
        # lxml has no text for some of libxml2's newer error codes.
        message = f"libxml2 error {getattr(error, 'code', '?')}"
    # libxml2 appends a piece of the text after a newline to some messages, and lxml the
    # position, which comes first here.
    summary = _LXML_POSITION.sub("", message.partition("\n")[0]).strip()
    return f"not well-formed XML at {_position(error)}: {summary}"[:_MAX_PROBLEM_CHARS]


def _is_about_entities(message: str) -> bool:
    return any(word in message for word in ("ntity", "PEReference", "amplification"))


def _position(error: Exception) -> str:
    line, column = getattr(error, "position", (0, 0))
    return f"line {line}, column {column}"
