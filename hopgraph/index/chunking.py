"""Text granularities: ℓ-token chunks, 2^τ sub-chunks per chunk (KET), and punkt sentences.

Consecutive documents with the same ACL are cut as one token stream when packing is on (this is
how the papers chunk their corpora: KET-RAG's MuSiQue file is one document of 6,761 passages), so a
chunk may cover several documents; every piece records which documents it covers. Documents with
different ACLs never share a chunk, so access control stays exact per piece.

Each cut depends only on the tokens and sentences near it, so a corpus whose first documents were
cut before can be cut again from the last chunk those documents decide alone (:class:`Resume`):
an insert re-cuts the stream's tail, not the whole stream, and the pieces come out as a cut of
the whole corpus makes them.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hopgraph.config import ChunkingConfig
from hopgraph.documents import Document
from hopgraph.models import get_encoding, sentence_spans

SEPARATOR = "\n\n"


@dataclass
class Pieces:
    """Parallel columns for one granularity (chunks, units or sentences); row ids count from
    ``first`` (the rows before it are kept from an earlier cut, see :class:`Resume`)."""

    first: int = 0
    text: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    docs: list[list[int]] = field(default_factory=list)  # indices into the document list
    parent: list[int] = field(default_factory=list)  # units → chunk, sentences → unit; chunks: -1
    starts: list[list[int]] = field(default_factory=list)  # per doc in ``docs``: where the text starts in it
    token_start: list[int] = field(default_factory=list)  # where the piece starts in its token stream

    def add(self, text: str, tokens: int, docs: list[int], starts: list[int], at: int, parent: int = -1) -> int:
        self.text.append(text)
        self.tokens.append(tokens)
        self.docs.append(docs)
        self.starts.append(starts)
        self.token_start.append(at)
        self.parent.append(parent)
        return self.first + len(self.text) - 1

    def __len__(self) -> int:
        return len(self.text)


@dataclass
class TextLayers:
    chunks: Pieces
    units: Pieces  # sub-chunks; with τ=0 one unit per chunk
    sentences: Pieces
    # Each document's first token position in its stream, and its tokens (from the resume point's
    # document on, where the cut resumed).
    document_tokens: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Resume:
    """Where to pick up the cut of a corpus whose leading documents an earlier cut already covered.

    Chunks, sub-chunks and sentences before the given row counts, and documents before
    ``document``, are the earlier cut's. Cutting starts again at token ``start`` of the stream that
    holds ``document``, whose first token lies at ``first_token`` of that stream; ``unit_starts`` /
    ``unit_ids`` are the kept sub-chunks of that stream that sentences of re-cut documents may
    still begin in: of those starting beyond every earlier one (those a sentence is placed in by its
    start), the last that starts at ``first_token`` or before, and the ones after it.
    """

    document: int
    first_token: int
    start: int
    chunks: int
    units: int
    sentences: int
    unit_starts: tuple[int, ...] = ()
    unit_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class TextAnalysis:
    """What chunking needs from one document's text; computed per document, so anywhere (Ray tasks)."""

    offsets: list[int]  # character offset at which each token starts
    spans: list[tuple[int, int]]  # sentences as character spans


Analyse = Callable[[Sequence[str], str], list[TextAnalysis]]  # (texts, tiktoken encoding) -> one per text


def analyse_texts(texts: Sequence[str], encoding: str) -> list[TextAnalysis]:
    """Token offsets and sentence spans of each text, in this process."""
    enc = get_encoding(encoding)
    out = []
    for text in texts:
        _, offsets = enc.decode_with_offsets(enc.encode(text, disallowed_special=()))
        out.append(TextAnalysis(offsets, sentence_spans(text)))
    return out


def _acl_key(doc: Document) -> tuple[str, ...] | None:
    acl = doc.acl
    return None if acl is None else tuple(sorted(set(acl)))


def stream_groups(documents: Sequence[Document], pack: bool) -> Iterable[list[int]]:
    """Runs of consecutive documents cut as one stream (same ACL), or one document each."""
    run: list[int] = []
    for i, doc in enumerate(documents):
        if run and (not pack or _acl_key(documents[run[-1]]) != _acl_key(doc)):
            yield run
            run = []
        run.append(i)
    if run:
        yield run


def split_equal(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    bounds = [start + round(k * (end - start) / parts) for k in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


_WORD = re.compile(r"\w")


def chunk_slack(size: int) -> int:
    """How far a chunk's cut may move to find a clean place."""
    return max(size // 8, 1)


class Boundaries:
    """Where a token stream may be cut so that no piece starts or ends inside a word.

    A cut before token ``pos`` is clean when whitespace lies on either side of it. Sentence starts
    are preferred: a cut moves to the nearest one within its slack, else to the nearest clean
    position, else (a run with no whitespace, such as a long URL) stays where arithmetic put it.
    """

    def __init__(self, stream: str, token_char: Sequence[int], sentence_starts: Sequence[int]) -> None:
        self.stream, self.token_char, self.n = stream, token_char, len(token_char)
        self.sentences = sorted(set(sentence_starts))

    def clean(self, pos: int) -> bool:
        if pos <= 0 or pos >= self.n:
            return True
        c = self.token_char[pos]
        return c <= 0 or c >= len(self.stream) or self.stream[c - 1].isspace() or self.stream[c].isspace()

    def snap(self, target: int, lo: int, hi: int) -> int:
        """The best cut in [lo, hi] (clamped to the stream) for a piece meant to end at ``target``."""
        lo, hi = max(lo, 0), min(hi, self.n)
        if target >= self.n or target <= 0:
            return min(max(target, 0), self.n)
        i = bisect.bisect_left(self.sentences, lo)
        inside = self.sentences[i : bisect.bisect_right(self.sentences, hi)]
        if inside:
            return min(inside, key=lambda pos: (abs(pos - target), pos))
        for distance in range(max(target - lo, hi - target) + 1):
            for pos in (target - distance, target + distance):
                if lo <= pos <= hi and self.clean(pos):
                    return pos
        return target

    def chunks(self, size: int, overlap: int, start: int = 0) -> list[tuple[int, int]]:
        """[start, end) token windows of ≤ size tokens from ``start`` on, consecutive ones sharing
        about ``overlap`` tokens, each cut moved back to a clean place by at most an eighth of the
        size. A window and where the next one starts depend on the tokens and sentence starts
        inside [its start, its start + size + slack] and on whether the stream ends before its
        start + size, nothing else (:func:`resume_point` relies on it)."""
        slack = chunk_slack(size)
        windows: list[tuple[int, int]] = []
        while start < self.n:
            end = self.n if start + size >= self.n else self.snap(start + size, start + size - slack, start + size)
            end = end if end > start else min(start + size, self.n)
            windows.append((start, end))
            if end >= self.n:
                break
            nxt = end if not overlap else self.snap(end - overlap, end - overlap - slack, end - overlap + slack)
            start = nxt if windows[-1][0] < nxt <= end else end - overlap
        return windows

    def units(self, start: int, end: int, parts: int, target: int) -> list[tuple[int, int]]:
        """At most ``parts`` sub-chunks of about ``target`` tokens (fewer for short chunks, never one
        below half the target unless the chunk is), with clean cuts."""
        parts = max(1, min(parts, round((end - start) / max(target, 1))))
        if parts == 1:  # the chunk is its one sub-chunk (τ = 0, or a short chunk)
            return [(start, end)]
        bounds = [start]
        for a, b in split_equal(start, end, parts)[:-1]:
            slack = max((b - a) // 4, 1)
            cut = self.snap(b, max(b - slack, bounds[-1] + 1), min(b + slack, end - 1))
            if bounds[-1] < cut < end:
                bounds.append(cut)
        bounds.append(end)
        return list(zip(bounds, bounds[1:]))


def build_layers(
    documents: Sequence[Document],
    config: ChunkingConfig,
    analyse: Analyse = analyse_texts,
    resume: Resume | None = None,
) -> TextLayers:
    """Cut documents into chunks, sub-chunks and sentences with exact token offsets.

    ``analyse`` tokenises and sentence-splits the documents (the costly part, one document at a
    time); cutting the token streams into pieces is arithmetic on its results. With ``resume``
    only the pieces from that point on are made (and only the documents from there analysed).
    """
    first = resume.document if resume else 0
    analyses = analyse([doc.text for doc in documents[first:]], config.encoding)
    layers = TextLayers(
        Pieces(resume.chunks if resume else 0),
        Pieces(resume.units if resume else 0),
        Pieces(resume.sentences if resume else 0),
    )
    cutter = _Cutter(documents, config, layers, dict(zip(range(first, len(documents)), analyses)))
    for group in stream_groups(documents, config.pack_documents):
        if group[-1] < first:
            continue
        if resume and group[0] <= first:  # the stream the kept pieces end in: its tail is cut again
            cutter.cut([d for d in group if d >= first], resume)
        else:
            cutter.cut(group)
    return layers


class _Cutter:
    """Cuts one token stream (a run of documents) into the pieces of ``layers``."""

    def __init__(
        self,
        documents: Sequence[Document],
        config: ChunkingConfig,
        layers: TextLayers,
        analyses: dict[int, TextAnalysis],
    ) -> None:
        self.documents, self.config, self.layers, self.analyses = documents, config, layers, analyses
        self.sep_tokens = len(get_encoding(config.encoding).encode(SEPARATOR))
        self.parts = 2**config.effective_splits
        self.unit_target = max(config.size // self.parts, 1)

    def cut(self, group: list[int], resume: Resume | None = None) -> None:
        """Cut the stream of ``group`` (from ``resume``'s point where given: ``group`` then starts at
        ``resume.document``, and positions count from that document's first token)."""
        documents, layers = self.documents, self.layers
        base = resume.first_token if resume else 0  # stream position of the group's first token
        text_parts: list[str] = []
        token_char: list[int] = []  # char offset (in the stream text) where each token starts
        doc_chars: list[tuple[int, int]] = []  # each document's [start, end) in the stream text
        sentence_pos: list[tuple[int, int, int, int]] = []  # (token start, token count, doc, span index)
        char_base = 0
        spans_by_doc: dict[int, list[tuple[int, int]]] = {}
        for k, d in enumerate(group):
            if k:
                text_parts.append(SEPARATOR)
                token_char.extend([char_base] * self.sep_tokens)
                char_base += len(SEPARATOR)
            text = documents[d].text
            offsets, spans = self.analyses[d].offsets, self.analyses[d].spans
            first_token = len(token_char)
            layers.document_tokens.append((base + first_token, len(offsets)))
            token_char.extend(char_base + off for off in offsets)
            spans_by_doc[d] = spans
            for s, (a, b) in enumerate(spans):
                first = max(bisect.bisect_right(offsets, a) - 1, 0)
                last = bisect.bisect_left(offsets, b)
                sentence_pos.append((first_token + first, max(last - first, 1), d, s))
            text_parts.append(text)
            doc_chars.append((char_base, char_base + len(text)))
            char_base += len(text)
        stream = "".join(text_parts)
        n_tokens = len(token_char)
        doc_starts = [a for a, _ in doc_chars]
        doc_offset = dict(zip(group, doc_starts))

        def char_at(pos: int) -> int:
            return token_char[pos] if pos < n_tokens else len(stream)

        def docs_in(start: int, end: int) -> list[int]:
            """The documents that give real text (a letter or digit, not a stray "." or "#") to a piece."""
            a, b = char_at(start), char_at(end)
            lo = max(bisect.bisect_right(doc_starts, a) - 1, 0)
            hi = max(bisect.bisect_left(doc_starts, b), lo + 1)
            near = range(lo, hi)
            real = [j for j in near if _WORD.search(stream, max(a, doc_chars[j][0]), min(b, doc_chars[j][1]))]
            return [group[j] for j in (real or near[:1])]

        def piece(start: int, end: int) -> tuple[str, int, list[int], list[int], int]:
            """Text, tokens, documents and, per document, the offset in it where the text begins
            (a citation turns it into a page or a section); and where it starts in the stream."""
            raw = stream[char_at(start) : char_at(end)]
            begin, docs = char_at(start) + len(raw) - len(raw.lstrip()), docs_in(start, end)
            return raw.strip(), end - start, docs, [max(begin - doc_offset[d], 0) for d in docs], base + start

        cuts = Boundaries(stream, token_char, [pos for pos, *_ in sentence_pos])
        unit_starts = [pos - base for pos in resume.unit_starts] if resume else []
        unit_ids = list(resume.unit_ids) if resume else []
        for start, end in cuts.chunks(self.config.size, self.config.overlap, resume.start - base if resume else 0):
            whole = piece(start, end)
            chunk = layers.chunks.add(*whole)
            for a, b in cuts.units(start, end, self.parts, self.unit_target):
                unit = layers.units.add(*(whole if (a, b) == (start, end) else piece(a, b)), parent=chunk)
                if not unit_starts or a > unit_starts[-1]:
                    unit_starts.append(a)
                    unit_ids.append(unit)
        for pos, count, d, s in sentence_pos:
            a, b = spans_by_doc[d][s]
            unit = unit_ids[max(bisect.bisect_right(unit_starts, pos) - 1, 0)] if unit_ids else -1
            layers.sentences.add(documents[d].text[a:b], count, [d], [a], base + pos, unit)


def resume_point(
    unchanged: int,
    stream_start: int,
    document_tokens: np.ndarray,
    chunk_start: np.ndarray,
    chunk_document: np.ndarray,
    unit_start: np.ndarray,
    unit_chunk: np.ndarray,
    sentence_document: np.ndarray,
    size: int,
) -> Resume:
    """Where to resume an earlier cut (made with the same settings, tokeniser and sentence
    splitter) whose first ``unchanged`` documents are those of the corpus to cut now.

    The arrays describe the earlier cut: each document's (first token, tokens), each chunk's and
    sub-chunk's start position, each chunk's first document, each sub-chunk's chunk, each
    sentence's document. ``stream_start`` is the first document of the stream that holds document
    ``unchanged - 1``: earlier streams are kept whole. In that stream, a chunk that starts more than
    size + slack tokens before the first changed token (where document ``unchanged`` or the
    separator before it begins) is kept with everything it decides (:meth:`Boundaries.chunks`);
    cutting resumes at the next chunk's start, re-reading from the document that holds it.
    """
    if unchanged < 1:
        raise ValueError("nothing to resume: no unchanged document")
    changed = int(document_tokens[unchanged - 1].sum())
    first_chunk = int(np.searchsorted(chunk_document, stream_start))  # chunks are in document order
    later = np.flatnonzero(chunk_start[first_chunk + 1 :] == 0)  # a stream's chunks start at 0, then rise
    stream_chunks = chunk_start[first_chunk : first_chunk + 1 + int(later[0]) if len(later) else None]
    fits = stream_chunks + size + chunk_slack(size) < changed
    # The stream's last chunk reaches its end, so it never fits: kept chunks are followed by one that is not.
    kept = first_chunk + (int(np.argmin(fits)) if len(fits) and not fits.all() else 0)
    start = int(chunk_start[kept]) if kept > first_chunk else 0
    in_stream = document_tokens[stream_start:unchanged, 0]
    document = stream_start + int(np.searchsorted(in_stream, start, side="right")) - 1 if start else stream_start
    units = int(np.searchsorted(unit_chunk, kept))
    stream_units = np.arange(int(np.searchsorted(unit_chunk, first_chunk)), units)
    starts = unit_start[stream_units]
    earlier = np.maximum.accumulate(np.concatenate([[-1], starts]))[:-1]
    new = np.flatnonzero(starts > earlier)  # a sub-chunk counts where it starts further on than every earlier one
    first_token = int(document_tokens[document, 0])
    # Re-made sentences start at first_token or later: the last sub-chunk starting there or before and
    # those after it are all they can begin in.
    new = new[max(int(np.searchsorted(starts[new], first_token, side="right")) - 1, 0) :]
    return Resume(
        document=document,
        first_token=first_token,
        start=start,
        chunks=kept,
        units=units,
        sentences=int(np.searchsorted(sentence_document, document)),
        unit_starts=tuple(starts[new].tolist()),
        unit_ids=tuple(stream_units[new].tolist()),
    )


def headings(
    piece_docs: Sequence[Sequence[int]], piece_text: Sequence[str], documents: Sequence[Document]
) -> list[str]:
    """Per piece, the titles of its documents that its own text does not already say.

    A passage rarely repeats its title ("He was born in 1921." under "Omar Haddad"), so a question
    naming the subject would miss it; the heading is embedded and keyword-indexed with the piece
    (see :func:`searchable`) but not shown as part of it.
    """
    out = []
    for docs, text in zip(piece_docs, piece_text):
        lowered = text.casefold()
        titles = dict.fromkeys(t for d in docs if (t := documents[d].title.strip()) and t.casefold() not in lowered)
        out.append(" · ".join(titles))
    return out


def searchable(table: dict[str, list]) -> list[str]:
    """The text a piece is embedded and keyword-indexed by: its heading, if any, then its text
    (tables written before headings existed have none)."""
    heads = table.get("heading") or [""] * len(table["text"])
    return [f"{head}\n{text}" if head else text for head, text in zip(heads, table["text"])]
