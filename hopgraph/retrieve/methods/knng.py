"""KNNG-RAG: dense seeds plus their KNN-graph neighbours, read at sub-chunk granularity.

A chunk's score is its own cosine or a share of its best neighbour's, whichever is higher, so a
passage linked to a strong seed (lexically or semantically) rises with it. Sub-chunks then take the
mean of their own cosine and their chunk's score (KET's rewiring of chunk nodes to sub-chunks).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from hopgraph.config import RetrievalConfig
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import Query, Scope, ranked, unit_cosine


def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    own = index.array("chunk_vectors") @ query.vector
    own = np.where(scope.chunks, own, -1.0)
    knn = index.graph("knn")
    shifted = knn.copy()
    shifted.data = own[shifted.indices] + 2.0  # positive, so the sparse row max ignores absent edges
    best_neighbour = shifted.max(axis=1).toarray().ravel() - 2.0
    via = np.asarray(shifted.argmax(axis=1)).ravel()
    lifted = config.knng.neighbour_weight * best_neighbour
    chunk_score = np.maximum(own, lifted)
    unit_chunk = index.unit_chunk

    def path(unit: int) -> str:
        c = unit_chunk[unit]
        return f"knn: chunk {via[c]} -> chunk {c}" if lifted[c] > own[c] else "dense seed"

    scores = 0.5 * unit_cosine(index, query, config.sentence_mix) + 0.5 * chunk_score[unit_chunk]
    return ranked("unit", scores, scope.units, path)
