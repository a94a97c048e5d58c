"""PDFs that are small to send and dear to read are refused before they are read: content streams
shared by many pages, forms drawn thousands of times, font character maps parsed again on every
page, and streams that decode to far more than the file (``hopgraph.index.formats.read_pdf``)."""

from __future__ import annotations

import time
import zlib

import pytest

from hopgraph.index.formats import Unreadable, read_pdf
from tests.index.test_ingest_formats import pdf_file


def shared_stream_pdf(content: bytes, pages: int) -> bytes:
    """A PDF whose ``pages`` pages all show one compressed content stream: small to send, dear to read."""
    packed = zlib.compress(content, 9)
    kids = b" ".join(b"%d 0 R" % (5 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed),
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
    return pdf_file(objects + [page + b"/Contents 4 0 R >>"] * pages)


def test_a_small_pdf_whose_pages_expand_to_megabytes_of_content_is_refused_before_it_is_read() -> None:
    operations = b"BT /F1 12 Tf 72 712 Td (a) Tj ET\n" * 30_000  # ~1 MB, compressing to a few kB
    data = shared_stream_pdf(operations, pages=20)
    assert len(data) < 20_000
    started = time.perf_counter()
    with pytest.raises(Unreadable, match="bytes of content, over the 4000000 read"):
        read_pdf(data)
    assert time.perf_counter() - started < 5  # reading it took ~50 s
    assert read_pdf(shared_stream_pdf(operations[:3400], pages=2)).text  # a small one is read


def form_drawing_pdf(form: bytes, draws: int) -> bytes:
    """A one-page PDF whose page draws one form (Form XObject) ``draws`` times: a kilobyte to send."""
    packed_form, packed_page = zlib.compress(form, 9), zlib.compress(b"q /X0 Do Q\n" * draws, 9)
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /XObject << /X0 5 0 R >> /Font << /F1 6 0 R >> >> >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed_page), packed_page),
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 6 0 R >> >> "
            b"/Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed_form), packed_form),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )


def test_a_pdf_drawing_one_form_thousands_of_times_is_refused_before_it_is_read() -> None:
    """Text extraction parses a form again at every draw: a 1 kB PDF drawing one form 200 times took
    21 s, in `hopgraph index` with no time limit. Each draw now counts its form's bytes."""
    form = b"BT /F1 12 Tf 10 10 Td (water board) Tj ET\n" * 2000  # 86 kB, compressing to a few hundred bytes
    data = form_drawing_pdf(form, draws=200)
    assert len(data) < 3_000
    started = time.perf_counter()
    with pytest.raises(Unreadable, match="bytes of content, over the 4000000 read"):
        read_pdf(data)
    assert time.perf_counter() - started < 5
    assert read_pdf(form_drawing_pdf(b"BT /F1 12 Tf 10 10 Td (water board) Tj ET\n", draws=3)).text.count("water") == 3


def character_map_pdf(entries: int, pages: int) -> bytes:
    """A PDF whose ``pages`` pages use one font with a ToUnicode map of ``entries`` codes: the map
    compresses to kilobytes, and text extraction parses it again for every page."""
    blocks = []
    for start in range(0, entries, 100):
        codes = range(start, min(start + 100, entries))
        pairs = b"".join(b"<%04X> <%04X>\n" % (code, 0x41 + code % 26) for code in codes)
        blocks.append(b"%d beginbfchar\n%sendbfchar\n" % (len(codes), pairs))
    cmap = b"begincmap 1 begincodespacerange <0000> <FFFF> endcodespacerange\n" + b"".join(blocks) + b"endcmap"
    packed, text = zlib.compress(cmap, 9), b"BT /F1 12 Tf 72 720 Td <0001000200030004> Tj ET"
    kids = b" ".join(b"%d 0 R" % (6 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< /Type /Font /Subtype /Type0 /BaseFont /X /Encoding /Identity-H /ToUnicode 4 0 R /DescendantFonts "
        b"[<< /Type /Font /Subtype /CIDFontType2 /BaseFont /X /CIDSystemInfo << /Registry (Adobe) "
        b"/Ordering (Identity) /Supplement 0 >> >>] >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text),
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
    return pdf_file(objects + [page + b"/Contents 5 0 R >>"] * pages)


def test_a_font_map_shared_by_many_pages_counts_for_each_page_it_is_parsed_on() -> None:
    """A 295 kB PDF of 60 pages sharing a 100,000-code map took 29 s to read (0.5 s a page), so a
    5,000-page one, about 40 minutes: the map was counted by no bound."""
    data = character_map_pdf(60_000, pages=40)
    started = time.perf_counter()
    with pytest.raises(Unreadable, match="bytes of content, over the"):
        read_pdf(data)
    assert time.perf_counter() - started < 5  # reading it took ~12 s
    assert read_pdf(character_map_pdf(60_000, pages=2)).text == "BCDE\n\nBCDE"  # a short one is read


def test_the_streams_of_a_page_are_decoded_one_at_a_time_and_counting_stops_past_the_bound() -> None:
    """Every content stream of a page was decoded before any was counted: four 70 MB streams
    (273 kB to send) held 371 MB. Now the first one over the bound ends the reading."""
    import tracemalloc

    packed = zlib.compress(b"BT /F1 12 Tf 72 712 Td (a) Tj ET\n" * 600_000, 9)  # 20 MB each
    streams = [b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed)] * 4
    data = pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [4 0 R 5 0 R 6 0 R 7 0 R] >>",
            *streams,
        ]
    )
    tracemalloc.start()
    try:
        with pytest.raises(Unreadable, match="bytes of content, over the"):
            read_pdf(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 60_000_000  # one stream at a time (and pypdf's copy of it); all four: over 80 MB
