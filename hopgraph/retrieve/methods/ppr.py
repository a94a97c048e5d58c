"""Hybrid fused score (KG-RAG practice §3): s = α·text + β·PPR + γ·path + δ·meta + ε·entities + λ·BM25
over sub-chunks.

Seeds are the query's own keywords (exact words, IDF-weighted) and the keywords whose sentence-level
vectors are nearest the query. Personalised PageRank runs on the keyword–sub-chunk bipartite graph,
so a sub-chunk scores when it is close to several seeds, directly or through shared keywords.
The entity term walks the index's entity layer (:mod:`hopgraph.retrieve.entities`), including a
second hop from the best first-hop passages; the lexical term is the ``bm25`` method's score.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import numpy as np
import scipy.sparse as sp

from hopgraph.config import RetrievalConfig
from hopgraph.kernels import RandomWalk, array_module, sparse_on, to_numpy
from hopgraph.retrieve.entities import HOP_UNITS, entity_layer, entity_path, entity_walk
from hopgraph.retrieve.filters import stamp_seconds
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods.bm25 import bm25_scores
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import (
    SEEDS_TRACED,
    Query,
    Scope,
    keyword_cosine,
    ranked,
    readable_query_keywords,
    top_indices,
    unit_cosine,
)
from hopgraph.retrieve.registry import register


def bipartite(index: LoadedIndex) -> sp.csr_matrix:
    """Symmetric adjacency over [sub-chunks; keywords]."""
    postings = index.graph("postings_units")
    return sp.bmat([[None, postings], [postings.T, None]], format="csr")


def open_walk(index: LoadedIndex, xp: ModuleType = np) -> RandomWalk:
    """The walk over the whole bipartite graph, built once per opened index and array module (the unfiltered case)."""
    return index.memo("walk", f"open:{xp.__name__}", lambda: RandomWalk(sparse_on(xp, bipartite(index))))


def scope_walk(index: LoadedIndex, scope: Scope, xp: ModuleType = np) -> RandomWalk:
    """The walk the reader's scope allows: forbidden sub-chunks are cut out of the graph, so no
    score flows through them. Built once per scope (the Retriever keeps a reader's scope), not per
    request."""
    if scope.units.all():
        return open_walk(index, xp)

    def build() -> RandomWalk:
        keep = np.concatenate([scope.units, np.ones(len(index.keywords), dtype=bool)]).astype(np.float32)
        allowed = sp.diags(keep)
        return RandomWalk(sparse_on(xp, allowed @ bipartite(index) @ allowed))

    return scope.cached(f"ppr_walk:{xp.__name__}", build)


def _minmax(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if not mask.any():
        return np.zeros_like(values)
    lo, hi = values[mask].min(), values[mask].max()
    return (values - lo) / (hi - lo) if hi > lo else np.zeros_like(values)


def _freshness(index: LoadedIndex, scope: Scope) -> np.ndarray:
    """Per sub-chunk, 0..1 rank of its newest document timestamp among the documents of the pieces the
    reader may use (0 where none). Ranked over every document, a reader's scores told how many
    distinct timestamps forbidden documents hold, and that one was added."""

    def compute() -> np.ndarray:
        docs_of = index.units["docs"]
        stamps = stamp_seconds(index)
        usable = {d for u in np.flatnonzero(scope.units) for d in docs_of[u]}  # all readable (piece_scopes)
        ranks = {s: i for i, s in enumerate(sorted({stamps[d] for d in usable} - {None}))}
        fresh = [(ranks[s] + 1) / len(ranks) if s in ranks else 0.0 for s in stamps]
        return np.array([max((fresh[d] for d in docs), default=0.0) for docs in docs_of])

    return scope.cached("ppr_freshness", compute)


@register(
    "ppr",
    order=50,
    needs=(),
    settings="ppr",
    description="Hybrid score: text cosine + personalised PageRank over keywords and over entities (with a second "
    "hop) + seed paths + freshness + BM25 (KG-RAG practice).",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    cfg = config.ppr
    n_units, n_keywords = len(index.unit_tokens), len(index.keywords)
    similarity = keyword_cosine(index, query, scope)  # -inf for keywords the reader cannot read
    seeds = np.zeros(n_keywords)
    nearest = top_indices(similarity, cfg.seed_keywords)
    seeds[nearest] = np.maximum(similarity[nearest], 0)
    own = readable_query_keywords(index, query, scope)
    if own:
        df = index.keyword_units.getnnz(axis=1)[own]
        idf = np.log1p(n_units / np.maximum(df, 1))
        seeds[own] += idf / idf.max()
    query.seeds.extend(f"keyword:{index.keywords[k]}" for k in top_indices(seeds, SEEDS_TRACED) if seeds[k] > 0)
    xp = array_module(query.device)  # the walk runs where the retriever's device says (CuPy on cuda)
    walker = scope_walk(index, scope, xp)
    personal = xp.asarray(np.concatenate([np.zeros(n_units), seeds]))
    # No seed with positive weight (no readable keyword near the query): nothing to walk from.
    walked = (
        to_numpy(walker.run(personalization=personal, damping=cfg.damping, tol=1e-7))
        if seeds.any()
        else np.zeros(n_units + n_keywords)
    )
    walk, keyword_walk = walked[:n_units], walked[n_units:]
    unit_keywords = index.graph("postings_units")
    seed_hits = unit_keywords @ seeds
    text = _minmax(unit_cosine(index, query, config.sentence_mix), scope.units)
    score = (
        cfg.text_weight * text
        + cfg.graph_weight * _minmax(walk, scope.units)
        + cfg.path_weight * _minmax(seed_hits, scope.units)
    )
    if cfg.meta_weight:
        score = score + cfg.meta_weight * _freshness(index, scope)
    if cfg.lexical_weight:
        score = score + cfg.lexical_weight * _minmax(bm25_scores(index, query.keyword_ids, scope.units)[0], scope.units)
    layer = entity_layer(index) if cfg.entity_weight else None
    entities = None
    if layer is not None:
        first_hop = top_indices(np.where(scope.units, score, -np.inf), HOP_UNITS)
        entities = entity_walk(
            index,
            layer,
            query,
            scope,
            text,
            first_hop,
            seed_entities=cfg.seed_entities,
            bridges=cfg.bridge_entities,
            damping=cfg.damping,
            cooccurrence_weight=cfg.entity_cooccurrence_weight,
            xp=xp,
        )
        score = score + cfg.entity_weight * _minmax(entities.units, scope.units)

    def path(unit: int) -> str:
        bridged = entity_path(layer, entities, unit) if layer is not None and entities is not None else None
        if bridged:
            return bridged
        return keyword_path(unit)

    in_query = set(own)

    def keyword_path(unit: int) -> str:
        """How the keyword walk reached a piece: a seed keyword it holds (one of the question's words
        or one near the query), else the keyword through which most of the walk arrived and the best
        seeded piece it shares that keyword with (piece → shared term → piece)."""
        held = unit_keywords.indices[unit_keywords.indptr[unit] : unit_keywords.indptr[unit + 1]]
        if not len(held):
            return "ppr"
        best = held[np.argmax(seeds[held])]
        if seeds[best] > 0:
            return (
                f"ppr via keyword:{index.keywords[best]} ({'in the query' if best in in_query else 'near the query'})"
            )
        shared = held[np.argmax(keyword_walk[held])]
        holders = index.keyword_units.indices[
            index.keyword_units.indptr[shared] : index.keyword_units.indptr[shared + 1]
        ]
        holders = holders[scope.units[holders] & (holders != unit) & (seed_hits[holders] > 0)]
        if keyword_walk[shared] <= 0 or not len(holders):
            return "ppr"
        source = int(holders[np.argmax(seed_hits[holders])])
        return f"ppr via unit {source} → shared keyword:{index.keywords[shared]}"

    return ranked("unit", score, scope.units, path)
