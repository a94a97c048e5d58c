"""G2ConS concept-graph local search (§3.2.1): the k concepts nearest the query, their sub-chunks
reranked by cosine (local rerank); then concepts reached by BFS to depth N over the concept graph,
all their sub-chunks reranked together (global rerank). Packing stops at the budget."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from hopgraph.config import RetrievalConfig
from hopgraph.deadline import check_deadline
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import (
    SEEDS_TRACED,
    Query,
    Scope,
    keyword_cosine,
    ranked,
    readable_keywords,
    top_indices,
    unit_cosine,
    units_of,
)
from hopgraph.retrieve.registry import register


def bfs(graph, seeds: np.ndarray, depth: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """Nodes within ``depth`` hops of ``seeds`` (seeds excluded), in discovery order, passing only
    through ``allowed`` nodes (all when None)."""
    seen = set(int(s) for s in seeds)
    frontier, found = list(seen), []
    for _ in range(depth):
        nxt = []
        for node in frontier:
            check_deadline()
            for nb in graph.indices[graph.indptr[node] : graph.indptr[node + 1]]:
                if int(nb) not in seen and (allowed is None or allowed[nb]):
                    seen.add(int(nb))
                    nxt.append(int(nb))
        found.extend(nxt)
        frontier = nxt
    return np.asarray(found, dtype=np.int64)


@register(
    "concept",
    order=40,
    needs=(),
    settings="concept",
    description="Sub-chunks reached from the query's nearest concepts and their BFS neighbours in the concept "
    "graph (G2ConS).",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    cfg = config.concept
    similarity = keyword_cosine(index, query, scope)
    # Concepts with a sub-chunk the reader may see; the others are neither seeds nor BFS steps.
    reachable = scope.cached(
        "concepts_reachable", lambda: np.asarray(index.keyword_units @ scope.units.astype(np.float32)).ravel() > 0
    )
    direct = top_indices(np.where(reachable, similarity, -np.inf), cfg.top_k)
    query.seeds.extend(f"concept:{index.keywords[k]}" for k in direct[:SEEDS_TRACED] if reachable[k])
    scores = unit_cosine(index, query, config.sentence_mix)
    local = units_of(index, direct, scope)
    yield from ranked("unit", scores, scope.units, "concept (direct)", pool=local)
    expanded = bfs(index.graph("concepts"), direct, cfg.depth, None if scope.full else readable_keywords(index, scope))
    wider = np.setdiff1d(units_of(index, expanded, scope), local)
    yield from ranked("unit", scores, scope.units, f"concept (BFS ≤{cfg.depth} hops)", pool=wider)
