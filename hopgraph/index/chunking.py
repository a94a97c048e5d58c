"""Text granularities: ℓ-token chunks, 2^τ sub-chunks per chunk (KET), and punkt sentences.

Consecutive documents with the same ACL are cut as one token stream when packing is on (this is
how the papers chunk their corpora: KET-RAG's MuSiQue file is one document of 6,761 passages), so a
chunk may cover several documents; every piece records which documents it covers. Documents with
different ACLs never share a chunk, so access control stays exact per piece.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from hopgraph.config import ChunkingConfig
from hopgraph.documents import Document
from hopgraph.models import get_encoding, sentence_spans

SEPARATOR = "\n\n"


@dataclass
class Pieces:
    """Parallel columns for one granularity (chunks, units or sentences)."""

    text: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    docs: list[list[int]] = field(default_factory=list)  # indices into the document list
    parent: list[int] = field(default_factory=list)  # units → chunk, sentences → unit; chunks: -1

    def add(self, text: str, tokens: int, docs: list[int], parent: int = -1) -> int:
        self.text.append(text)
        self.tokens.append(tokens)
        self.docs.append(docs)
        self.parent.append(parent)
        return len(self.text) - 1

    def __len__(self) -> int:
        return len(self.text)


@dataclass
class TextLayers:
    chunks: Pieces
    units: Pieces  # sub-chunks; with τ=0 one unit per chunk
    sentences: Pieces


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


def cut_points(n_tokens: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) token windows of ≤ size tokens, consecutive windows sharing ``overlap`` tokens."""
    if n_tokens == 0:
        return []
    step = size - overlap
    windows = [(0, min(size, n_tokens))]
    while windows[-1][1] < n_tokens:
        start = windows[-1][0] + step
        windows.append((start, min(start + size, n_tokens)))
    return windows


def split_equal(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    bounds = [start + round(k * (end - start) / parts) for k in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def build_layers(documents: Sequence[Document], config: ChunkingConfig, analyse: Analyse = analyse_texts) -> TextLayers:
    """Cut documents into chunks, sub-chunks and sentences with exact token offsets.

    ``analyse`` tokenises and sentence-splits the documents (the costly part, one document at a
    time); cutting the token streams into pieces is arithmetic on its results.
    """
    enc = get_encoding(config.encoding)
    analyses = analyse([doc.text for doc in documents], config.encoding)
    sep_tokens = len(enc.encode(SEPARATOR))
    layers = TextLayers(Pieces(), Pieces(), Pieces())
    parts = 2**config.effective_splits
    for group in stream_groups(documents, config.pack_documents):
        text_parts: list[str] = []
        token_char: list[int] = []  # char offset (in the stream text) where each token starts
        doc_token_start: list[int] = []
        sentence_pos: list[tuple[int, int, int, int]] = []  # (token start, token count, doc, span index)
        char_base = 0
        spans_by_doc: dict[int, list[tuple[int, int]]] = {}
        for k, d in enumerate(group):
            if k:
                text_parts.append(SEPARATOR)
                token_char.extend([char_base] * sep_tokens)
                char_base += len(SEPARATOR)
            text = documents[d].text
            offsets, spans = analyses[d].offsets, analyses[d].spans
            doc_token_start.append(len(token_char))
            token_char.extend(char_base + off for off in offsets)
            spans_by_doc[d] = spans
            for s, (a, b) in enumerate(spans):
                first = max(bisect.bisect_right(offsets, a) - 1, 0)
                last = bisect.bisect_left(offsets, b)
                sentence_pos.append((doc_token_start[-1] + first, max(last - first, 1), d, s))
            text_parts.append(text)
            char_base += len(text)
        stream = "".join(text_parts)
        n_tokens = len(token_char)

        def char_at(pos: int) -> int:
            return token_char[pos] if pos < n_tokens else len(stream)

        def docs_in(start: int, end: int) -> list[int]:
            lo = bisect.bisect_right(doc_token_start, start) - 1
            hi = bisect.bisect_left(doc_token_start, end)
            return [group[j] for j in range(max(lo, 0), max(hi, lo + 1))]

        unit_starts: list[int] = []
        unit_ids: list[int] = []
        for start, end in cut_points(n_tokens, config.size, config.overlap):
            chunk = layers.chunks.add(stream[char_at(start) : char_at(end)].strip(), end - start, docs_in(start, end))
            for a, b in split_equal(start, end, parts):
                unit = layers.units.add(stream[char_at(a) : char_at(b)].strip(), b - a, docs_in(a, b), chunk)
                if not unit_starts or a > unit_starts[-1]:
                    unit_starts.append(a)
                    unit_ids.append(unit)
        for pos, count, d, s in sentence_pos:
            a, b = spans_by_doc[d][s]
            unit = unit_ids[max(bisect.bisect_right(unit_starts, pos) - 1, 0)] if unit_ids else -1
            layers.sentences.add(documents[d].text[a:b], count, [d], unit)
    return layers
