"""What every method starts from: the embedded query and the pieces the reader may see."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from hopgraph.deadline import check_deadline
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.text import words


@dataclass
class Query:
    text: str
    vector: np.ndarray  # normalised query embedding
    keyword_ids: list[int]  # query words that are keywords of the index


@dataclass
class Scope:
    """Boolean masks of usable pieces (after metadata/ACL filtering)."""

    units: np.ndarray
    chunks: np.ndarray


def make_query(index: LoadedIndex, text: str, vector: np.ndarray) -> Query:
    lookup = index.keyword_lookup
    ids = list(dict.fromkeys(lookup[w] for w in words(text, index.config.keywords.min_length) if w in lookup))
    return Query(text=text, vector=vector.astype(np.float32), keyword_ids=ids)


def ranked(kind: str, scores: np.ndarray, mask: np.ndarray, path: str | Callable[[int], str], pool: np.ndarray | None = None) -> Iterator[Candidate]:
    """Candidates of ``kind`` in descending score (ties: lower index first), restricted to ``mask``.

    ``path`` is a label or a function of the piece index, called only for pieces actually taken.
    """
    ids = np.flatnonzero(mask) if pool is None else pool[mask[pool]]
    order = ids[np.lexsort((ids, -scores[ids]))]
    for i in order:
        check_deadline()
        yield Candidate(kind, int(i), float(scores[i]), path if isinstance(path, str) else path(int(i)))


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, best first, ties to the lower index, without a full sort."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
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


def keyword_cosine(index: LoadedIndex, query: Query) -> np.ndarray:
    return index.array("keyword_vectors") @ query.vector
