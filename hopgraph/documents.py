"""The document record that flows from ingestion to retrieved evidence."""

from __future__ import annotations

import bisect
import dataclasses
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from hopgraph.errors import InputError, cut

# C0 control characters and DEL, except tab, line feed and carriage return.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What no name (a document id, an uploaded file's name) may hold: C0, DEL, C1 and the line and paragraph
# separators (U+0085, U+2028 and U+2029 break lines too, for str.splitlines and some readers), and the
# invisible characters that make one name show as another: Unicode's bidirectional controls (U+061C,
# U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: "memo\u202e3202-sserp" shows as "memopress-2023"),
# the zero-width space U+200B, the word joiner and invisible operators U+2060-U+2064, and U+FEFF
# ("press-2023\u200b" listed as press-2023 twice). ZWNJ and ZWJ (U+200C, U+200D) stay: scripts need them.
NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def name_control(name: str) -> str | None:
    """The first control character in ``name`` as "U+XXXX", or None. A document id is one field of a
    listing's line and the argument of --delete; every way in (files, records, inserts, uploads) asks."""
    found = NAME_CONTROL.search(name)
    return f"U+{ord(found.group()):04X}" if found else None


def id_problem(doc_id: str) -> str | None:
    """Why ``doc_id`` cannot name a document, or None: the rule of every way in that takes an id as
    given (records, inserts). A control character (:func:`name_control`) would break listings; "."
    and ".." are path segments every URL parser removes, so ``DELETE /v1/documents/..`` from a
    browser or most clients reached another address, and such a document could not be deleted."""
    found = name_control(doc_id)
    if found:
        return f"holds the control character {found}"
    if doc_id.strip() in (".", ".."):
        return "is '.' or '..', which a URL cannot carry"
    return None


def canonical_id(name: str) -> str:
    """``name`` in Unicode's composed form (NFC), the one spelling every document id is stored in: "é"
    typed on one machine is one code point, in a file name from macOS two (e + U+0301), and both
    look the same, so without this a re-upload would add a second document instead of replacing."""
    return unicodedata.normalize("NFC", name)


def repeated_id(names: list[str]) -> str | None:
    """The first of ``names`` given twice as a document id (in composed form, :func:`canonical_id`:
    "é" typed and "é" from macOS are one id), or None."""
    seen: set[str] = set()
    for name in names:
        if canonical_id(name) in seen:
            return name
        seen.add(canonical_id(name))
    return None


# Tabs and what breaks a line (for str.splitlines too): each run becomes one space in :func:`one_line`.
_BREAKS = re.compile(r"[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]+")


def one_line(value: str) -> str:
    """``value`` as one plain line: tabs and line breaks (U+2028 and U+0085 too) as one space, the
    other control and invisible characters of :data:`NAME_CONTROL` dropped, other spaces kept (a
    source is a path). Titles and sources are shown as one field of a line (listings, a chat
    answer's "Sources:" lines), where a title read from a file's properties could otherwise add
    lines of its own or reorder what is shown."""
    return NAME_CONTROL.sub("", _BREAKS.sub(" ", value)).strip()


# Longest title kept: a DOCX's or PDF's properties may hold megabytes (a 45 kB DOCX gave a
# 9,000,000-character title), past every bound on a document's text.
MAX_TITLE_CHARS = 500


def clip_title(title: str) -> str:
    """``title`` cut to :data:`MAX_TITLE_CHARS` (with "…" where cut): a document's title and a
    section's heading are shown with every citation of their text."""
    return title if len(title) <= MAX_TITLE_CHARS else title[: MAX_TITLE_CHARS - 1].rstrip() + "…"


def canonical_document(document: Document) -> Document:
    """``document`` as it is stored: its id and title composed (:func:`canonical_id`; a title is
    often the file's name), its title (at most :data:`MAX_TITLE_CHARS`) and source on one line
    (:func:`one_line`). Every way in (files, records, uploads, inserts, the Python API's builds and
    updates) passes through it; an id
    no way in takes (:func:`id_problem`) is an InputError."""
    problem = id_problem(document.id)
    if problem:
        raise InputError(f"document id {cut(document.id)!r} {problem}")
    doc_id, source = canonical_id(document.id), one_line(document.source)
    title = clip_title(canonical_id(one_line(document.title)))  # shown, cited and embedded with every chunk
    if (doc_id, title, source) == (document.id, document.title, document.source):
        return document
    return dataclasses.replace(document, id=doc_id, title=title, source=source)


def timestamp_of(metadata: dict[str, Any]) -> Any:
    """A document's time: its own ``timestamp``, else its file's modification time (``modified``).

    Listing, filtering and freshness all use this one rule, so a filter on ``timestamp`` matches
    what ``hopgraph documents`` shows.
    """
    return metadata.get("timestamp") or metadata.get("modified")


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be indexed as a document, or None if it can.

    The one rule for every way in (corpus files, JSONL records, the server's inserts): text that is
    only whitespace has nothing to retrieve, and control characters other than tab and line breaks
    mean binary or corrupted input that would reach prompts and responses unseen.
    """
    if not text.strip():
        return "text is empty or only whitespace"
    problem = unicode_problem(text)
    if problem:
        return f"text {problem}"
    found = _CONTROL.search(text)
    if found:
        return f"text contains the control character U+{ord(found.group()):04X} at character {found.start()}"
    return None


# Containers nested in a request body or a document's metadata, at most: a real one has a handful,
# and JSON a thousand levels deep broke code that walks it (a 500 instead of a 422).
MAX_JSON_DEPTH = 32


def unicode_problem(text: str) -> str | None:
    """Why ``text`` is not Unicode text, or None: JSON may spell a lone surrogate ("\\ud800"), which
    Python reads into a string that no UTF-8 file, table or response can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains the lone surrogate U+{ord(text[exc.start]):04X} at character {exc.start} (not Unicode text)"
    return None


def _children(value: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple)):
        return iter(enumerate(value))
    return iter(())


def first_place(value: Any, bad: Callable[[Any], bool], where: str = "") -> str | None:
    """The dotted place ("params.ppr.damping", "where.year.1") of the first value or key in nested
    JSON data for which ``bad`` holds, or None (show it with :func:`hopgraph.errors.cut`).
    Depth-first with a stack of its own: JSON nested a thousand levels deep must not hit Python's
    recursion limit."""
    if bad(value):
        return where or "value"
    stack = [(where, _children(value))]
    while stack:
        prefix, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            continue
        key, item = child
        place = f"{prefix}.{key}" if prefix else str(key)
        if bad(key) or bad(item):
            return place
        stack.append((place, _children(item)))
    return None


def too_deep_at(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The place of the first value nested more than ``limit`` containers deep in JSON data, or None."""
    stack = [("", value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth >= limit:
                return where or "value"
            stack.extend((f"{where}.{key}" if where else str(key), child, depth + 1) for key, child in _children(item))
    return None


def more_values_than(value: Any, limit: int) -> bool:
    """Whether nested JSON data holds more than ``limit`` values (containers, items, scalars). The walk
    stops as soon as it knows: at most ``limit`` steps in Python, besides copying (in C) the item
    references of the containers it opened."""
    seen, stack = 0, [value]
    while stack:
        seen += 1
        if seen > limit:
            return True
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def invalid_unicode_at(value: Any) -> str | None:
    """The place of the first string (value or key) in nested JSON data that is not Unicode text
    (:func:`unicode_problem`), or None."""
    return first_place(value, lambda item: isinstance(item, str) and unicode_problem(item) is not None)


def strip_control(text: str) -> str:
    """``text`` with the control characters :func:`text_problem` refuses replaced by spaces.

    For text taken out of a layout (PDF, DOCX, HTML), where such characters are artefacts of the
    format rather than signs of a corrupted file.
    """
    return _CONTROL.sub(" ", text)


@dataclass(frozen=True)
class Places:
    """A document's pages and headings, for citations: read from its metadata once (per index and
    document, see :meth:`hopgraph.retrieve.loaded.LoadedIndex.memo`), so a citation is a binary
    search, not a pass over every heading (100,000 headings cost 18 ms per citation).

    ``metadata`` is what the format's reader kept (:mod:`hopgraph.index.formats`): ``pages`` (PDF),
    each page's start offset; ``sections`` (DOCX, HTML), ``[offset, level, heading]`` per heading.
    """

    pages: list[int]
    starts: list[int]
    headings: list[str]

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> Places:
        pages = metadata.get("pages")
        sections = metadata.get("sections")
        starts: list[int] = []
        headings: list[str] = []
        if isinstance(sections, list) and all(isinstance(s, list) and len(s) == 3 for s in sections):
            starts = [s[0] for s in sections]
            # Cut as titles are: an HTML <h1> or DOCX heading of 100 kB was copied into every citation
            # after it (a reader's request returned 22 MB). Indexes built before the cut are cut here.
            headings = [clip_title(str(s[2])) for s in sections] if _offsets(starts) else []
        return cls(pages if _offsets(pages) else [], starts if headings else [], headings)

    def at(self, offset: int) -> str:
        """Where character ``offset`` lies: "p. 3", a heading, both, or ""."""
        parts = []
        if self.pages:
            parts.append(f"p. {bisect.bisect_right(self.pages, offset)}")
        at = bisect.bisect_right(self.starts, offset)
        if at:
            parts.append(self.headings[at - 1])
        return ", ".join(parts)


def place(metadata: dict[str, Any], offset: int) -> str:
    """Where character ``offset`` of a document lies, for a citation (:class:`Places`)."""
    return Places.of(metadata).at(offset)


def _offsets(value: Any) -> TypeGuard[list[int]]:
    """Whether ``value`` is a non-empty ascending list of offsets, as a format's reader writes them.
    A user's own ``pages`` (a page count, say) is metadata like any other, never a reason a
    version cannot be loaded."""
    if not isinstance(value, list) or not value:
        return False
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return False
    return all(a <= b for a, b in zip(value, value[1:]))


@dataclass
class Document:
    """One source document.

    ``metadata`` is carried unchanged to every chunk cut from the document. Two keys have a
    meaning of their own: ``acl`` (list of group names allowed to read the document; absent means
    "follow the configured default") and ``timestamp`` (ISO-8601 string).
    """

    id: str
    text: str
    title: str = ""
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def acl(self) -> list[str] | None:
        acl = self.metadata.get("acl")
        return None if acl is None else [str(group) for group in acl]
