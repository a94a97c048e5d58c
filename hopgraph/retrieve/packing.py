"""Context packing: ranked pieces into a token budget λ, with provenance for every piece kept."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

from hopgraph.deadline import check_deadline
from hopgraph.documents import Places
from hopgraph.models import count_tokens
from hopgraph.retrieve.loaded import LoadedIndex


@dataclass
class Candidate:
    """A ranked piece; ``path`` says how the graph reached it.

    ``kind`` names a table of the index ("chunk", "unit" = sub-chunk, "cue_unit" = CUE knowledge
    unit), whose row ``index`` gives text, tokens and documents. Pieces composed at query time
    (an entity with the descriptions the reader may see, a relation) carry their own ``text``,
    ``chunk`` and ``docs`` instead.
    """

    kind: str
    index: int
    score: float
    path: str
    text: str | None = None
    chunk: int = -1
    docs: list[int] | None = None


@dataclass
class Evidence:
    kind: str
    index: int
    score: float
    path: str
    tokens: int
    text: str
    chunk: int
    doc_ids: list[str]
    titles: list[str]
    places: list[str] = field(default_factory=list)  # per document: "p. 3", a heading, or "" (see ``places_of``)

    def sources(self) -> list[str]:
        return source_names(self.doc_ids, self.titles, self.places)


def source_names(doc_ids: list[str], titles: list[str], places: list[str] | None = None) -> list[str]:
    """How a citation names its documents: the title (the id where there is none) and where in it the
    piece starts, e.g. "Q3 report (p. 2)" or "Handbook (Tools)"."""
    where = places or [""] * len(doc_ids)
    return [(t or d) + (f" ({p})" if p else "") for d, t, p in zip(doc_ids, titles, where)]


def places_of(index: LoadedIndex, table: dict[str, list], row: int, doc_idx: list[int]) -> list[str]:
    """Where piece ``row`` starts in each of its documents, as a page or section where the document's
    format keeps them (PDF, DOCX, HTML). ``starts`` (the piece's start offset in each of its documents,
    parallel to ``docs``) is read where the index has it; without it, or for plain text, places are ""."""
    starts = table.get("starts")
    if starts is None:
        return [""] * len(doc_idx)
    metadata = index.documents["metadata"]

    def places(d: int) -> Places:  # read once per document and index
        return index.memo("places", str(d), lambda: Places.of(metadata[d]))

    return [places(d).at(int(offset)) for d, offset in zip(doc_idx, starts[row])]


@dataclass
class RetrievalResult:
    query: str
    method: str
    budget: int
    evidence: list[Evidence] = field(default_factory=list)
    seconds: float = 0.0
    seeds: list[str] = field(default_factory=list)  # what the method started from (a trace; not in to_dict)

    @property
    def context(self) -> str:
        return "\n\n".join(e.text for e in self.evidence)

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.evidence)

    @property
    def doc_ids(self) -> list[str]:
        seen: dict[str, None] = {}
        for e in self.evidence:
            seen.update(dict.fromkeys(e.doc_ids))
        return list(seen)

    def to_dict(self) -> dict:
        return {
            "query": self.query,
            "method": self.method,
            "budget": self.budget,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 6),
            "evidence": [asdict(e) for e in self.evidence],
        }


MAX_MISSES = 64  # stop scanning after this many pieces in a row that no longer fit


def pack(index: LoadedIndex, candidates: Iterable[Candidate], budget: int) -> list[Evidence]:
    """Greedy fill in rank order; a piece that does not fit is skipped (smaller ones may still fit)."""
    docs = index.documents
    taken: set[tuple[str, int]] = set()
    packed: list[Evidence] = []

    def untaken() -> Iterator[Candidate]:  # read lazily: ``taken`` grows as pieces are packed
        for cand in candidates:
            check_deadline()
            if (cand.kind, cand.index) not in taken:
                yield cand

    for cand, tokens in fitting(index, untaken(), budget):
        if cand.text is not None:
            text, doc_idx, chunk = cand.text, cand.docs or [], cand.chunk
            places = [""] * len(doc_idx)
        else:  # read only for pieces that fit: up to MAX_MISSES may not
            table = index.pieces(cand.kind)
            text, doc_idx = table["text"][cand.index], table["docs"][cand.index]
            chunk = int(table["chunk"][cand.index]) if "chunk" in table else int(cand.index)
            places = places_of(index, table, cand.index, doc_idx)
        taken.add((cand.kind, cand.index))
        packed.append(
            Evidence(
                kind=cand.kind,
                index=int(cand.index),
                score=float(cand.score),
                path=cand.path,
                tokens=tokens,
                text=text,
                chunk=chunk,
                doc_ids=[docs["id"][d] for d in doc_idx],
                titles=[docs["title"][d] for d in doc_idx],
                places=places,
            )
        )
    return packed


def piece_tokens(index: LoadedIndex, cand: Candidate) -> int:
    return count_tokens(cand.text) if cand.text is not None else int(index.pieces(cand.kind)["tokens"][cand.index])


def fitting(index: LoadedIndex, candidates: Iterable[Candidate], budget: float) -> Iterator[tuple[Candidate, int]]:
    """(candidate, its tokens) in rank order while they fit ``budget``, skipping those that no longer
    do; gives up after MAX_MISSES misses in a row or with under 8 tokens left."""
    used, misses = 0, 0
    for cand in candidates:
        tokens = piece_tokens(index, cand)
        if used + tokens > budget:
            misses += 1
            if misses >= MAX_MISSES or budget - used < 8:
                return
            continue
        misses = 0
        used += tokens
        yield cand, tokens


def within(index: LoadedIndex, candidates: Iterable[Candidate], budget: float) -> Iterator[Candidate]:
    """The candidates one channel may contribute: rank order, skipping pieces that no longer fit its share."""
    return (cand for cand, _ in fitting(index, candidates, budget))
