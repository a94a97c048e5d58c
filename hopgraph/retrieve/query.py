"""What every method starts from: the embedded query and the pieces the reader may see."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hopgraph.config import RerankConfig
from hopgraph.deadline import check_deadline
from hopgraph.kernels import mean_vectors
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.text import words


@dataclass
class Query:
    text: str
    vector: np.ndarray  # normalised query embedding
    keyword_ids: list[int]  # query words that are keywords of the index
    device: str = "cpu"  # embedding.device of the retriever: where graph kernels (PPR) run for this query
    rerank: RerankConfig | None = None  # the retriever's reranker settings (None: the index's own)
    seeds: list[str] = field(default_factory=list)  # what the method started from, as labels (for traces)


@dataclass
class Scope:
    """Boolean masks of usable pieces (after metadata/ACL filtering).

    ``derived`` caches what is recomputed per reader from readable material only (keyword vectors,
    entity vectors, the random walk cut to readable pieces): computed once per reader's scope,
    which the Retriever keeps for the reader's next requests, however many channels use it.
    """

    units: np.ndarray
    chunks: np.ndarray
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # With a ``where`` filter: the scope of the reader's groups alone. What derives from readable
    # material (keyword vectors) is computed there, once per reader, not once per filter: a new
    # filter per request recomputed it every time (~60 ms on 850 sub-chunks, growing with the corpus).
    readable: Scope | None = field(default=None, repr=False, compare=False)
    # Re-entrant: one derived value may be computed from another. Concurrent first requests of a
    # reader wait for one computation instead of each doing it.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    @property
    def acl(self) -> Scope:
        """The scope access control alone allows (itself, without a ``where`` filter)."""
        return self.readable or self

    @property
    def full(self) -> bool:
        """Every piece is usable: stored corpus-wide vectors are then the reader's own."""
        return bool(self.units.all() and self.chunks.all())

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per scope (thread-safe)."""
        try:
            return self.derived[key]
        except KeyError:
            pass
        with self._lock:
            if key not in self.derived:
                self.derived[key] = compute()
            return self.derived[key]


MANY_EQUAL = 8  # top_indices sets aside the lowest value once it fills more than 1/MANY_EQUAL of the scores
SEEDS_TRACED = 10  # seeds a method names in a retrieval's trace (the strongest first)


def make_query(
    index: LoadedIndex, text: str, vector: np.ndarray, device: str = "cpu", rerank: RerankConfig | None = None
) -> Query:
    lookup = index.keyword_lookup
    ids = list(dict.fromkeys(lookup[w] for w in words(text, index.config.keywords.min_length) if w in lookup))
    return Query(text=text, vector=vector.astype(np.float32), keyword_ids=ids, device=device, rerank=rerank)


def ranked(
    kind: str, scores: np.ndarray, mask: np.ndarray, path: str | Callable[[int], str], pool: np.ndarray | None = None
) -> Iterator[Candidate]:
    """Candidates of ``kind`` in descending score (ties: lower index first), restricted to ``mask``.

    ``path`` is a label or a function of the piece index, called only for pieces actually taken.
    """
    ids = np.flatnonzero(mask) if pool is None else pool[mask[pool]]
    order = ids[np.lexsort((ids, -scores[ids]))]
    for i in order:
        check_deadline()
        yield Candidate(kind, int(i), float(scores[i]), path if isinstance(path, str) else path(int(i)))


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, best first, ties to the lower index, without a full sort.

    Entries at the lowest value come last, in index order, and when they are many (masked-out
    -inf for a reader who may read a tenth of the corpus, zeros of a sparse seed vector) the
    selection runs over the others only: ``np.partition`` over many equal values was ten to
    twenty times slower than over the rest.
    """
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        floor = scores.min()
        at_floor = scores == floor
        if np.count_nonzero(at_floor) * MANY_EQUAL > n:
            kept = np.flatnonzero(~at_floor)
            best = kept[top_indices(scores[kept], k)]
            return np.concatenate([best, np.flatnonzero(at_floor)[: k - len(best)]])
        kth = np.partition(scores, n - k)[n - k]
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(n)
    return candidates[np.lexsort((candidates, -scores[candidates]))][:k]


def descending(scores: np.ndarray, head: int = 1024) -> Iterator[int]:
    """All indices by descending score (ties to the lower index); sorts everything only if the
    caller reads past the first ``head``."""
    first = top_indices(scores, head)
    yield from first.tolist()
    if len(first) < len(scores):
        rest = np.ones(len(scores), dtype=bool)
        rest[first] = False
        others = np.flatnonzero(rest)
        yield from others[np.lexsort((others, -scores[others]))].tolist()


def units_of(index: LoadedIndex, keyword_ids: np.ndarray | list[int], scope: Scope) -> np.ndarray:
    """Usable sub-chunks containing any of the keywords."""
    if len(keyword_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = index.keyword_units[np.asarray(keyword_ids)]
    units = np.unique(rows.indices)
    return units[scope.units[units]]


def unit_cosine(index: LoadedIndex, query: Query, sentence_mix: float = 0.0) -> np.ndarray:
    """Query similarity per sub-chunk: its own vector, blended with its best sentence's.

    A sub-chunk vector averages every topic in it, so one decisive sentence is diluted; the best
    sentence cosine restores it, and the blend keeps the sub-chunk's overall relevance. A sentence
    belongs to the sub-chunk it starts in; a sub-chunk with none keeps its own score.
    """
    own = index.array("unit_vectors") @ query.vector
    if sentence_mix <= 0:
        return own
    sentences = index.array("sentence_vectors") @ query.vector
    best = own.copy()
    starts, units = index.sentence_runs
    best[units] = np.maximum.reduceat(sentences, starts)
    return (1.0 - sentence_mix) * own + sentence_mix * best


def readable_keywords(index: LoadedIndex, scope: Scope) -> np.ndarray:
    """Keywords that occur in a chunk the reader may see; a keyword found only in forbidden text
    must not take a seed slot or label a path (it would confirm a guessed word); with a ``where``
    filter, those of the chunks it leaves (a seed elsewhere would lead nowhere)."""
    if scope.full:
        return np.ones(len(index.keywords), dtype=bool)
    return scope.cached(
        "keywords", lambda: np.asarray(index.graph("postings_chunks").T @ scope.chunks.astype(np.float32)).ravel() > 0
    )


def scoped_keyword_vectors(index: LoadedIndex, scope: Scope) -> np.ndarray:
    """Keyword vectors as the reader may compute them: the mean of readable sentences only.

    A stored vector averages every sentence holding the keyword, forbidden ones included, so it is
    recomputed (with the same formula) for each keyword that has a forbidden sentence; keywords
    the reader cannot read get a zero vector.
    """
    stored, scope = index.array("keyword_vectors"), scope.acl
    if scope.full:
        return stored

    def compute() -> np.ndarray:
        postings = index.graph("postings_sentences")
        readable = scope.units[index.sentence_units]
        touched = np.flatnonzero(np.asarray(postings[~readable].sum(axis=0)).ravel() > 0)
        vectors = stored.copy()
        if len(touched):
            vectors[touched] = mean_vectors(postings[readable][:, touched], index.array("sentence_vectors")[readable])
        vectors[~readable_keywords(index, scope)] = 0.0  # (scope is the groups' own here)
        return vectors

    return scope.cached("keyword_vectors", compute)


def keyword_cosine(index: LoadedIndex, query: Query, scope: Scope) -> np.ndarray:
    """Query cosine per keyword from readable material; -inf for keywords the reader cannot read."""
    similarity = scoped_keyword_vectors(index, scope) @ query.vector
    return similarity if scope.full else np.where(readable_keywords(index, scope), similarity, -np.inf)


def readable_query_keywords(index: LoadedIndex, query: Query, scope: Scope) -> list[int]:
    """The query's own words that are keywords of text the reader may see."""
    readable = readable_keywords(index, scope)
    return [k for k in query.keyword_ids if readable[k]]
