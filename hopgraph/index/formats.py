"""Text out of the files people have: plain text in any encoding, Markdown, PDF, DOCX and HTML.

Library choice (base dependencies, all from PyPI wheels, nothing fetched at run time): pypdf (0.4 MB
wheel, pure Python) for PDF, python-docx (0.25 MB, with lxml 5.2 MB) for DOCX and BeautifulSoup
(0.1 MB, stdlib ``html.parser``) for HTML: 6.1 MB downloaded, 21 MB installed into an empty folder.
markitdown with its PDF and DOCX extras: 90 MB downloaded, 268 MB installed the same way (onnxruntime,
magika for guessing file types, pdfminer.six, pdfplumber, pypdfium2, mammoth, numpy); on the same files it joins a
PDF's pages without their numbers or title, and keeps an HTML page's navigation and every link's
URL in the text (``[Omar Haddad](/p/omar)``), which would become keywords. trafilatura (19 MB with
its dependencies) strips the boilerplate of crawled pages; an exported wiki or intranet page needs
its headings kept more than that, and dropping ``nav``/``aside``/``script``/``style`` does the rest.

Where a citation should point inside a document, metadata keeps it: ``pages`` (PDF) is the
character offset at which each page starts, ``sections`` (DOCX, HTML) is ``[offset, level,
heading]`` per heading; :func:`hopgraph.documents.place` turns an offset into "p. 3" or "Heading"
(retrieval names it in citations). A PDF stays one document (its id is its file's), so replacing or
deleting the file by id takes all its pages.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hopgraph.documents import clip_title, strip_control

PDF, DOCX, HTML = (".pdf",), (".docx",), (".html", ".htm", ".xhtml")
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".text", ".rst")
_BINARY_PROBE = 8192
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"))
_BOMS16 = ((codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# Ties among single-byte code pages are ranked arbitrarily by charset-normalizer (Latin-1 text
# often comes out as cp1250, turning "Æ" into "Ć"); Windows-1252, a superset of Latin-1's printable
# characters, is by far the most common of them, so it wins a tie.
_PREFERRED_ON_TIE = "cp1252"
_HTML_DROPPED = ("script", "style", "noscript", "template", "svg", "nav", "aside", "head")
_HTML_BLOCKS = (
    "p", "div", "section", "article", "main", "header", "footer", "li", "ul", "ol", "table", "tr", "pre",
    "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "dt", "dd", "dl", "figure", "figcaption", "hr", "form",
)  # fmt: skip
# A crafted file can be small on disk and huge to parse. A DOCX is a zip: the sizes its parts
# declare (zipfile never inflates a part past its declared size) may sum to 100 MB at most, about
# twenty times the largest text-heavy DOCX seen in practice, while lxml's tree of 100 MB of XML
# already takes around a gigabyte. A PDF may have at most 5,000 pages (a long manual has under
# 2,000); each page is parsed on its own, so the page count bounds the work.
MAX_DOCX_UNZIPPED = 100_000_000
MAX_PDF_PAGES = 5000
# Within those bounds a file can still be cheap to send and dear to read. A DOCX's text part may
# hold at most 500,000 XML elements (a 300-page report has about 100,000; 2.8 million empty
# paragraphs in 99 MB took 320 s and 2.6 GB to parse). A PDF's pages may hold at most 4 MB of
# decoded content, or 50 times the file's size where that is more (text PDFs compress 3-10 times):
# twenty pages sharing one 1 MB stream made a 6 KB file that took 53 s to read.
MAX_DOCX_ELEMENTS = 500_000
MAX_PDF_CONTENT_BYTES = 4_000_000
MAX_PDF_EXPANSION = 50
# An HTML page's cost is its tree's, not its size's: 10 MB of "<p>x</p>" is over a million elements.
# At most 100,000 elements (about 1.2 KB of memory and 30 us of parsing each, so 120 MB and 3 s;
# a long wiki or manual page has under 20,000) and 512 levels of nesting (where browsers stop
# nesting too). The text is then read in one walk over the tree, in time linear in its size.
MAX_HTML_ELEMENTS = 100_000
MAX_HTML_DEPTH = 512
_HTML_BLOCK_SET = frozenset(_HTML_BLOCKS)
_HEADING = re.compile(r"h[1-6]")
_BLOCK_MARK = "\x1e"  # a block boundary (record separator): split on, and tidy() makes any left a space
_SPACES = re.compile(r"[ \t\u00a0\u200b]+")
_BLANK_LINES = re.compile(r"\n{3,}")
# What html.parser (Python 3.11) reads as a character reference, and marked sections by the ending
# each kind needs; see _defused.
_BAD_CHARREF = re.compile(r"&#(?![0-9]+(?![0-9a-fA-F])|[xX][0-9a-fA-F])")
_MARKED_SECTION = re.compile(r"<!\[(?:(?i:(temp|cdata|ignore|include|rcdata)|(if|else|endif))(?![-_.a-zA-Z0-9]))?")
_CDATA_END, _SECTION_END = re.compile(r"\]\s*\]\s*>"), re.compile(r"\]\s*>")


class Unreadable(Exception):
    """The file cannot give text; the message says why (it becomes the skipped file's reason)."""


@contextmanager
def _parser_failure(kind: str) -> Iterator[None]:
    """A parser's failure on a malformed file becomes that file's :class:`Unreadable` (skipped with
    the parser's reason), not the run's; our own refusals and the reader's memory bound
    (``serve.upload_memory_mb``, a MemoryError) pass through."""
    try:
        yield
    except (Unreadable, MemoryError):
        raise
    except Exception as error:
        raise Unreadable(f"{kind} could not be read ({type(error).__name__}: {error})") from None


@dataclass
class Extracted:
    """Text read from one file, its title if the file names one, and format metadata."""

    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


def _mostly_utf8(data: bytes, *, marked: bool = False) -> tuple[str, str] | None:
    """UTF-8 with a few stray bytes (a copyright sign pasted from a legacy editor, a cut file), read
    as UTF-8 with each bad byte replaced by U+FFFD, or None for text in another encoding.

    A legacy-encoded text all but never holds a valid multi-byte UTF-8 sequence ("Ã©" in Latin-1),
    so at least as many of those as bad bytes say UTF-8: guessing a code page for the whole file
    instead turned every "ü" of a German UTF-8 text into "Ã¼" because of one stray byte. A file
    ``marked`` UTF-8 (its byte-order mark) is UTF-8 whatever its stray bytes.
    """
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode())
    good = len(text) - len(text.encode("ascii", errors="ignore")) - text.count("\ufffd")
    if good < max(bad, 1) and not marked:
        return None
    return text, f"utf-8, {bad} invalid byte{'s' if bad > 1 else ''} replaced by U+FFFD"


def decode(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 (or a byte-order mark's encoding) first, else charset-normalizer's guess.

    A legacy-encoded file (Latin-1, Windows-1252, Shift-JIS, ...) is read, not dropped; a UTF-8 file
    with a few invalid bytes is read as UTF-8 with those replaced (the encoding says how many); bytes
    that fit no encoding raise :class:`Unreadable`.
    """
    marked = data.startswith(codecs.BOM_UTF8)  # UTF-8 for sure: read as any UTF-8 file, but never guessed
    data = data[len(codecs.BOM_UTF8) :] if marked else data
    for bom, encoding in () if marked else _BOMS + _BOMS16:  # (UTF-32's marks first: UTF-16's begin them)
        if data.startswith(bom):  # the mark says the encoding: stray bytes replaced
            try:
                return data.decode(encoding), encoding
            except UnicodeDecodeError:
                return data.decode(encoding, errors="replace"), f"{encoding}, invalid bytes replaced by U+FFFD"
    if b"\0" in data[:_BINARY_PROBE]:
        raise Unreadable("binary file (NUL byte in the first 8 KiB)")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    mostly = _mostly_utf8(data, marked=marked)
    if mostly is not None:
        return mostly
    from charset_normalizer import from_bytes  # noqa: PLC0415  (only legacy-encoded files need it)

    matches = list(from_bytes(data))
    if not matches:
        raise Unreadable("not UTF-8, and no other text encoding fits its bytes")
    best = matches[0]
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    chosen = next((m for m in tied if m.encoding == _PREFERRED_ON_TIE), best)
    return str(chosen), chosen.encoding


def tidy(text: str) -> str:
    """Text from a layout (PDF, HTML, DOCX): control characters as spaces, runs of spaces and blank lines cut."""
    lines = (_SPACES.sub(" ", line).strip() for line in strip_control(text.replace("\r\n", "\n")).split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def read_pdf(data: bytes) -> Extracted:
    """Pages joined by blank lines; ``pages`` holds each page's start offset."""
    from pypdf import PdfReader  # noqa: PLC0415

    # pypdf logs what it repairs ("EOF marker not found") on a line that names no file; a file it
    # cannot read is skipped with the reason below instead.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    with _parser_failure("PDF"):
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Unreadable("encrypted PDF (a password is needed)")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise Unreadable(f"PDF has {len(reader.pages)} pages, over the {MAX_PDF_PAGES} read")
        allowed = max(MAX_PDF_CONTENT_BYTES, MAX_PDF_EXPANSION * len(data))
        content = 0
        maps: dict[Any, int] = {}  # the decoded size of each font's character map, by object number
        for pdf_page in reader.pages:
            content += _content_bytes(pdf_page, allowed - content, maps)
            if content > allowed:
                break
        if content > allowed:
            raise Unreadable(
                f"PDF pages hold {content} bytes of content, over the {allowed} read for a {len(data)}-byte file"
            )
        texts = [tidy(page.extract_text() or "") for page in reader.pages]
        info = reader.metadata
        title = str(info.title).strip() if info is not None and info.title else ""
    if not any(texts):
        raise Unreadable(f"PDF has no text layer in its {len(texts)} page(s) (a scan needs OCR first)")
    text, starts = "", []
    for page in texts:
        text += "\n\n" if text and page else ""
        starts.append(len(text))  # an empty page starts where the next one does
        text += page
    return Extracted(text, title, {"format": "pdf", "pages": starts})


_DRAWN = re.compile(rb"/([^\s/\[\]()<>{}%]+)\s+Do\b")  # "/Name Do": draw the resource Name
MAX_FORM_DEPTH = 8  # forms drawing forms: deeper nesting is counted as over any bound


def _content_bytes(page: Any, budget: int, maps: dict[Any, int]) -> int:
    """Decoded bytes a PDF page has text extraction parse: its content streams (a stream shared by
    pages counts for each), each form (Form XObject) once per time it is drawn, forms inside forms
    too (a 1 kB page drawing one form thousands of times took 21 s to read), and the character
    maps of the fonts each uses (a 100,000-entry map shared by 60 pages took 29 s: it is parsed
    again for every page). Streams are decoded one at a time, and counting stops once past
    ``budget`` (4 pages of 70 MB streams each held 371 MB before the first was counted); ``maps``
    keeps each map's size, so a shared one is decoded once."""
    from pypdf.generic import ArrayObject  # noqa: PLC0415

    contents = page.get("/Contents")
    if contents is None:
        return 0
    contents = contents.get_object()
    streams = contents if isinstance(contents, ArrayObject) else [contents]
    datas = (stream.get_object().get_data() for stream in streams)
    return _drawn_bytes(datas, page.get("/Resources"), budget, 0, maps)


def _drawn_bytes(datas: Iterable[bytes], resources: Any, budget: int, depth: int, maps: dict[Any, int]) -> int:
    if depth > MAX_FORM_DEPTH:
        return budget + 1
    resources = resources.get_object() if resources is not None else None
    total = _font_map_bytes(resources, maps)
    forms = (resources.get("/XObject") if resources is not None else None) or {}
    forms = forms.get_object() if hasattr(forms, "get_object") else forms
    for data in datas:
        total += len(data)
        for name in _DRAWN.findall(data):
            if total > budget:
                return total
            form = forms.get("/" + name.decode("latin-1"))
            form = form.get_object() if form is not None else None
            if form is None or form.get("/Subtype") != "/Form":
                continue  # an image, or a name that is not there: nothing parsed again
            drawn = [form.get_data()]
            total += _drawn_bytes(drawn, form.get("/Resources") or resources, budget - total, depth + 1, maps)
        if total > budget:
            return total
    return total


def _font_map_bytes(resources: Any, maps: dict[Any, int]) -> int:
    """Decoded bytes of the character maps (ToUnicode, an embedded CMap encoding) of the fonts in
    ``resources``, each decoded once per file (``maps``, by object number)."""
    from pypdf.generic import StreamObject  # noqa: PLC0415

    fonts = resources.get("/Font") if resources is not None else None
    fonts = fonts.get_object() if fonts is not None else {}
    total = 0
    for font in fonts.values() if hasattr(fonts, "values") else ():
        font = font.get_object()
        for name in ("/ToUnicode", "/Encoding"):
            entry = font.raw_get(name) if hasattr(font, "raw_get") and name in font else None
            where = getattr(entry, "idnum", None)
            if where is None or where not in maps:
                stream = entry.get_object() if entry is not None else None
                size = len(stream.get_data()) if isinstance(stream, StreamObject) else 0
                if where is None:
                    total += size
                    continue
                maps[where] = size
            total += maps[where]
    return total


def _with_sections(blocks: list[tuple[int, str]]) -> tuple[str, list[list[Any]]]:
    """Blocks of (heading level or 0, text) joined by blank lines, with each heading's offset."""
    text, sections = "", []
    for level, block in blocks:
        block = tidy(block)
        if not block:
            continue
        text += "\n\n" if text else ""
        if level:
            sections.append([len(text), level, clip_title(block)])
        text += block
    return text, sections


def read_docx(data: bytes) -> Extracted:
    """Paragraphs and tables in document order; "Heading N" and "Title" paragraphs become ``sections``."""
    import docx  # noqa: PLC0415
    from docx.table import Table  # noqa: PLC0415

    # An encrypted part, an unknown compression method or a corrupt deflate stream is the file's problem.
    with _parser_failure("DOCX"):
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as error:
            raise Unreadable(f"DOCX could not be read (not a zip archive: {error})") from None
        with archive:
            unzipped = sum(info.file_size for info in archive.infolist())
            if unzipped > MAX_DOCX_UNZIPPED:
                raise Unreadable(f"DOCX unzips to {unzipped} bytes, over the {MAX_DOCX_UNZIPPED} read (a zip bomb?)")
            # python-docx parses every XML part its relationships reach (styles, headers, a main part
            # of any name), so the bound is on all of them: 170 KB of zipped styles.xml took 2 GB.
            elements = sum(map(_xml_elements, map(archive.read, archive.infolist())))
    if elements > MAX_DOCX_ELEMENTS:
        raise Unreadable(f"DOCX parts have {elements} XML elements, over the {MAX_DOCX_ELEMENTS} read")
    blocks: list[tuple[int, str]] = []
    with _parser_failure("DOCX"):
        document = docx.Document(io.BytesIO(data))
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                rows = (" | ".join(cell.text.strip() for cell in row.cells) for row in item.rows)
                blocks.append((0, "\n".join(rows)))
                continue
            style = (item.style.name if item.style is not None else "") or ""
            level = 1 if style == "Title" else int(style[8:]) if re.fullmatch(r"Heading [1-9]", style) else 0
            blocks.append((level, item.text))
        given_title = (document.core_properties.title or "").strip()
    text, sections = _with_sections(blocks)
    title = given_title or next((s[2] for s in sections), "")
    return Extracted(text, title, {"format": "docx", "sections": sections})


def _xml_elements(part: bytes) -> int:
    """Elements a zip part opens if it is XML (its first byte past a byte-order mark and blanks is
    "<", in UTF-8 or UTF-16), else 0: a JPEG's stray "<" bytes count for nothing."""
    head = part[:64]
    for bom in (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        head = head.removeprefix(bom)
    if not head.replace(b"\0", b"").lstrip().startswith(b"<"):
        return 0
    return part.count(b"<") - part.count(b"</")  # an element opens once, closed or not


def _defused(markup: str) -> str:
    """``markup`` with the constructs that make Python 3.11's html.parser misread or crawl written as text.

    After a second "&#" that starts no character reference the parser took the rest of the page
    as text, tags, scripts and navigation included. A "<" it cannot close (a tag after the page's
    last ">", a comment after its last "-->") it searched to the end of the page for each one, so
    200 KB of "<a b=" took 160 s; it then gave that markup as text, which "&lt;" gives at once.
    """
    markup = _BAD_CHARREF.sub("&amp;#", markup)
    ends = [m.end() for m in _CDATA_END.finditer(markup)], [m.end() for m in _SECTION_END.finditer(markup)]
    cdata_end, section_end = (found[-1] if found else 0 for found in ends)

    def marked(match: re.Match[str]) -> str:
        closed = match.start() < (cdata_end if match.group(1) else section_end if match.group(2) else -1)
        return match.group() if closed else "&lt;" + match.group()[1:]

    markup = _MARKED_SECTION.sub(marked, markup)
    for opener, closer in (("<!--", "-->"), ("<", ">")):
        cut = markup.rfind(closer) + len(closer) if closer in markup else 0
        markup = markup[:cut] + markup[cut:].replace(opener, "&lt;" + opener[1:])
    return markup


def _bounded_soup(data: bytes | str) -> Any:
    """The page's tree, built by html.parser, refused (:class:`Unreadable`) at the first element past
    :data:`MAX_HTML_ELEMENTS` or nested deeper than :data:`MAX_HTML_DEPTH`, with its line and column."""
    from bs4 import BeautifulSoup  # noqa: PLC0415

    class BoundedSoup(BeautifulSoup):
        elements = 0

        def pushTag(self, tag: Any) -> None:  # noqa: N802 (bs4's name)
            super().pushTag(tag)
            if tag is self:  # the document itself
                return
            self.elements += 1
            depth = len(self.tagStack) - 1
            if self.elements <= MAX_HTML_ELEMENTS and depth <= MAX_HTML_DEPTH:
                return
            where = f"line {tag.sourceline}, column {(tag.sourcepos or 0) + 1}"
            if depth > MAX_HTML_DEPTH:
                raise Unreadable(f"HTML nests elements deeper than {MAX_HTML_DEPTH} levels (<{tag.name}> at {where})")
            raise Unreadable(
                f"HTML has more than {MAX_HTML_ELEMENTS} elements (the next one is <{tag.name}> at {where})"
            )

    return BoundedSoup(data, "html.parser")


def _html_flow(soup: Any) -> tuple[list[str], list[tuple[int, int, int]]]:
    """The visible strings of a page in document order, a marker at each block's start and end, a
    newline per ``<br>`` and a space after each table cell; and each heading as (level, start, end)
    in that list. One walk over the tree, which is left unchanged: each edit of a bs4 tree costs time
    in the number of an element's siblings or descendants, so editing every block is quadratic."""
    from bs4 import CData, NavigableString, Tag  # noqa: PLC0415

    flow: list[str] = []
    headings: list[list[int]] = []
    stack: list[tuple[Any, Iterator[Any], list[int] | None]] = [(soup, iter(soup.contents), None)]
    while stack:
        tag, children, heading = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if tag.name in _HTML_BLOCK_SET:
                flow.append(_BLOCK_MARK)
            elif tag.name in ("td", "th"):
                flow.append(" ")  # cells of a row stay on the row's line, apart
            if heading is not None:
                heading[2] = len(flow)
            continue
        if isinstance(child, Tag):
            if child.name in _HTML_DROPPED:
                continue
            if child.name == "br":
                flow.append("\n")
                continue
            if child.name in _HTML_BLOCK_SET:
                flow.append(_BLOCK_MARK)
            entry = None
            if _HEADING.fullmatch(child.name):
                entry = [int(child.name[1]), len(flow), len(flow)]
                headings.append(entry)
            stack.append((child, iter(child.contents), entry))
        elif type(child) in (NavigableString, CData):  # as get_text(): no comments, doctypes or scripts
            flow.append(child)
    return flow, [(level, start, end) for level, start, end in headings]


# Text codecs of Python's that no page is written in (UTF-7 browsers never honour; the rest turn
# escapes or domain names into text, or raise).
_NOT_CHARSETS = ("utf-7", "idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape", "mbcs", "oem")


def _codec(label: str) -> str | None:
    """Python's codec for a declared charset, None for one that is no text encoding a page may use
    (Python also knows "base64", "zlib" or "rot13", which decode bytes into no text, and UTF-7,
    which browsers never honour); Latin-1 and ASCII are read as Windows-1252, as browsers read
    them (the HTML standard's table)."""
    try:
        codec = codecs.lookup(label)
    except LookupError:
        return None
    if not getattr(codec, "_is_text_encoding", True) or codec.name in _NOT_CHARSETS:
        return None
    return "cp1252" if codec.name in ("iso8859-1", "ascii") else codec.name


def read_html(data: bytes) -> Extracted:
    """Visible text by blocks (navigation, scripts and styles left out); h1-h6 become ``sections``.

    The page's declared charset is honoured; without one its encoding is detected. A page past
    :data:`MAX_HTML_ELEMENTS` elements or :data:`MAX_HTML_DEPTH` levels of nesting is not read.
    """
    from bs4.builder import ParserRejectedMarkup  # noqa: PLC0415  (bs4.exceptions only from 4.13)
    from bs4.dammit import EncodingDetector  # noqa: PLC0415

    declared = EncodingDetector.find_declared_encoding(data, is_html=True, search_entire_document=False)
    # As the HTML standard has it: a byte-order mark wins over a stale <meta charset>, and a declared
    # UTF-16 or UTF-32 is wrong in a page whose 8-bit <meta> could be read (UTF-8 first, then detection).
    bom = data.startswith(tuple(mark for mark, _ in _BOMS + _BOMS16))
    if bom or (declared and declared.lower().replace("_", "-").startswith(("utf-16", "utf-32", "utf16", "utf32"))):
        declared = None
    codec = _codec(declared) if declared else None
    # In its declared encoding, a stray byte replaced (bs4 went on to other encodings, and one bad
    # byte in a UTF-8 page made every "ü" of it "ĂĽ"); an encoding Python does not know: detected.
    try:
        markup = data.decode(codec, errors="replace") if codec else decode(data)[0]
    except (UnicodeError, LookupError):  # a codec that refuses even with replacement: read as undeclared
        markup = decode(data)[0]
    try:
        soup = _bounded_soup(_defused(markup))
    except ParserRejectedMarkup as error:  # bs4 gives up on some malformed markup ("<![ x")
        raise Unreadable(f"HTML could not be read ({str(error).splitlines()[-1].strip()})") from None
    # The page's <title>, not an inline SVG's (a tooltip) in a page that has none.
    title_tag = next((tag for tag in soup.find_all("title") if tag.find_parent("svg") is None), None)
    title = tidy(title_tag.get_text(" ")) if title_tag else ""
    flow, headings = _html_flow(soup)
    pending = [(level, heading) for level, start, end in headings if (heading := tidy(" ".join(flow[start:end])))]
    blocks: list[tuple[int, str]] = []
    for piece in "".join(flow).split(_BLOCK_MARK):
        piece = tidy(piece)
        if not piece:
            continue
        level = 0
        for i, (heading_level, heading) in enumerate(pending[:4]):  # a heading split by inner blocks is passed
            if piece == heading:
                level = heading_level
                del pending[: i + 1]
                break
        blocks.append((level, piece))
    text, sections = _with_sections(blocks)
    return Extracted(text, title or next((s[2] for s in sections), ""), {"format": "html", "sections": sections})


MARKDOWN = (".md", ".markdown")
_MARKDOWN_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FRONT_MATTER_TITLE = re.compile(r"^title:(.*)$")
_SINGLE_QUOTED = re.compile(r"'((?:[^']|'')*)'")
_YAML_KEY = re.compile(r"[A-Za-z_][\w-]*:(\s|$)")


def _front_matter_end(lines: list[str]) -> int:
    """The line closing a YAML front matter ("---" first, then "key: value" lines, then "---" or
    "..."), or 0 where the text has none (a "---" rule opening a page is no front matter)."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    end = next((n for n, line in enumerate(lines[1:], 1) if line.rstrip() in ("---", "...")), 0)
    first = next((line for line in lines[1:end] if line.strip() and not line.lstrip().startswith("#")), "")
    return end if end and _YAML_KEY.match(first) else 0


def _yaml_scalar(value: str) -> str:
    """A plain or quoted one-line YAML scalar as text: "" for null, a block scalar (``>``, ``|``),
    a list or map, an alias or a tag; a comment after it left out."""
    value = value.strip()
    if value[:1] == "'":  # '' is a quote inside
        quoted = _SINGLE_QUOTED.match(value)
        return (quoted.group(1) if quoted else value[1:]).replace("''", "'").strip()
    if value[:1] == '"':  # backslash escapes, as JSON's (YAML's are a superset of them)
        try:
            return str(json.JSONDecoder().raw_decode(value)[0]).strip()
        except json.JSONDecodeError:
            return value[1:].split('"', 1)[0].strip()
    value = re.split(r"\s#", value, maxsplit=1)[0].strip()
    if value in ("null", "Null", "NULL", "~") or value[:1] in (">", "|", "[", "{", "&", "*", "!"):
        return ""
    return value


def markdown_title(text: str) -> str | None:
    """The front matter's ``title:``, else the first level-1 heading outside front matter and fenced
    code (a shell comment "# install" or a YAML comment "# draft" is none)."""
    lines = text.splitlines()
    end = _front_matter_end(lines)
    if end:
        # Read line by line, not as YAML: a small YAML with aliases can expand without bound.
        given = next((m.group(1) for m in map(_FRONT_MATTER_TITLE.match, lines[1:end]) if m), "")
        title = _yaml_scalar(given)
        if title:
            return title
        lines = lines[end + 1 :]
    fence = ""
    for line in lines:
        marker = _MARKDOWN_FENCE.match(line)
        if fence:  # inside: only a run of the same character, at least as long, closes it
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = "" if not line[marker.end() :].strip() else fence
            continue
        if marker:
            fence = marker.group(1)
            continue
        heading = _level_one_heading(line)
        if heading:
            return heading
    return None


def _level_one_heading(line: str) -> str:
    """The text of a Markdown "# Heading #" line ("" for any other line). String methods, not a
    regular expression: one of "#", 20,000 spaces and a letter took 1.7 s to backtrack through."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3 or body[:1] != "#" or body[1:2] not in (" ", "\t"):
        return ""
    text = body[1:].strip(" \t")
    bare = text.rstrip("#")  # a closing run of "#" counts only after a space
    if bare != text and (not bare or bare[-1] in " \t"):
        text = bare
    return text.strip()


READERS: dict[str, Callable[[bytes], Extracted]] = {
    **dict.fromkeys(PDF, read_pdf),
    **dict.fromkeys(DOCX, read_docx),
    **dict.fromkeys(HTML, read_html),
}
DOCUMENT_SUFFIXES = TEXT_SUFFIXES + tuple(READERS)
