"""KNNG-RAG: dense seeds plus their KNN-graph neighbours, read at sub-chunk granularity.

A chunk's score is its own cosine or a share of its best neighbour's, whichever is higher, so a
passage linked to a strong seed (lexically or semantically) rises with it. Sub-chunks then take the
mean of their own cosine and their chunk's score (KET's rewiring of chunk nodes to sub-chunks).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from hopgraph.config import RetrievalConfig
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import Query, Scope, ranked, unit_cosine
from hopgraph.retrieve.registry import register


def _best_neighbour(graph: sp.csr_matrix, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``graph``: the highest score among its neighbours and which neighbour (first on ties).

    Rows without neighbours get -inf and -1. Vectorised over the CSR arrays; scipy's sparse argmax
    loops over rows in Python.
    """
    n = graph.shape[0]
    best, via = np.full(n, -np.inf), np.full(n, -1, dtype=np.int64)
    counts = np.diff(graph.indptr)
    rows = np.flatnonzero(counts)
    if len(rows) == 0:
        return best, via
    values = scores[graph.indices]
    best[rows] = np.maximum.reduceat(values, graph.indptr[rows])
    owner = np.repeat(np.arange(n), counts)
    hits = np.flatnonzero(values == best[owner])
    _, first = np.unique(owner[hits], return_index=True)
    via[rows] = graph.indices[hits[first]]
    return best, via


@register(
    "knng",
    order=20,
    needs=(),
    settings="knng",
    description="Sub-chunks by their own and their chunk's similarity; a chunk inherits a share of its best KNN "
    "neighbour's score (KET).",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    # Only readable neighbours lift a chunk: a forbidden one (-inf here) neither lifts nor names a path.
    own = np.where(scope.chunks, index.array("chunk_vectors") @ query.vector, -np.inf)
    best_neighbour, via = _best_neighbour(index.graph("knn"), own)
    lifted = np.full(len(own), -np.inf)
    # A share of a negative or of no similarity, or a share of 0, lifts nothing.
    lifting = (best_neighbour > 0) & (config.knng.neighbour_weight > 0)
    lifted[lifting] = config.knng.neighbour_weight * best_neighbour[lifting]
    chunk_score = np.maximum(own, lifted)
    unit_chunk = index.unit_chunk

    def path(unit: int) -> str:
        c = unit_chunk[unit]
        return f"knn: chunk {via[c]} -> chunk {c}" if lifted[c] > own[c] else "dense seed"

    scores = 0.5 * unit_cosine(index, query, config.sentence_mix) + 0.5 * chunk_score[unit_chunk]
    return ranked("unit", scores, scope.units, path)
