"""The pipeline stages that build graphs: the chunk KNN graph, the concept graph and the entity layer.

Each reads what earlier stages stored (postings, vectors, sentences) and writes its graphs and
rankings; an update patches the neighbour lists of the version it edits where that costs less
than a fresh search (:mod:`hopgraph.index.reuse`).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp

from hopgraph.artifacts import (
    CHUNK_VECTORS,
    CHUNKS,
    CONCEPTS,
    KEYWORD_VECTORS,
    KEYWORDS,
    KNN_COSINE_INDICES,
    KNN_COSINE_SCORES,
    KNN_LEXICAL_COUNTS,
    KNN_LEXICAL_INDICES,
    POSTINGS_CHUNKS,
)
from hopgraph.index import entities, graphs
from hopgraph.index.chunking import searchable
from hopgraph.index.context import BuildContext
from hopgraph.index.reuse import CHUNK_LEXICAL, CHUNK_ROWS, KEYWORD_VECTOR_ROWS
from hopgraph.kernels.backend import array_module


def stage_knn_graph(ctx: BuildContext) -> dict[str, int]:
    cfg = ctx.config.graph
    xp = array_module(ctx.config.embedding.device)
    vectors = ctx.store.read_array(CHUNK_VECTORS)
    scores, cosine = _cosine_candidates(ctx, vectors, xp)
    ctx.store.write_array(KNN_COSINE_SCORES, scores)
    ctx.store.write_array(KNN_COSINE_INDICES, cosine)
    postings = ctx.store.read_graph("postings_chunks")
    counts, lexical = _lexical_candidates(ctx, postings, xp)
    ctx.store.write_array(KNN_LEXICAL_COUNTS, counts)
    ctx.store.write_array(KNN_LEXICAL_INDICES, lexical)
    knn = graphs.knn_graph(
        vectors,
        postings,
        cfg.knn_k,
        max_df=ctx.config.keywords.max_df,
        max_postings=ctx.config.keywords.max_postings,
        exact_limit=cfg.exact_knn_limit,
        xp=xp,
        cosine=cosine,
        lexical=lexical,
    )
    ctx.store.write_graph("knn", knn)
    ctx.store.write_array("chunk_rank_knn", graphs.node_rank(knn, cfg.damping, xp))
    return {"knn_edges": int(knn.nnz // 2)}


def _cosine_candidates(ctx: BuildContext, vectors: np.ndarray, xp: ModuleType) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices) of the chunks' cosine candidates. Above the exact limit an update patches
    those of the version it edits, whose kept rows count as taken from it (a fresh FAISS search costs
    ~10 s at 100k chunks whatever the change). So there, unlike everywhere else, an update is not
    bitwise a rebuild: its untouched rows keep the edited version's approximate candidates, and its
    touched rows get exact ones."""
    cfg = ctx.config.graph
    n = vectors.shape[0]
    width = graphs.cosine_width(cfg.knn_k, n)
    if width and n > cfg.exact_knn_limit:
        old_scores, old_indices = ctx.previous.array(KNN_COSINE_SCORES), ctx.previous.array(KNN_COSINE_INDICES)
        if old_indices is not None and old_scores is not None and old_indices.shape[1] == width:
            chunks = ctx.store.read_table(CHUNKS, ["heading", "text"])
            same_as = ctx.previous.same_rows(CHUNK_ROWS, searchable(chunks), vectors)
            if same_as is not None:
                patched = graphs.patched_cosine_candidates(vectors, same_as, old_scores, old_indices, xp=xp)
                if patched is not None:
                    scores, indices, searched = patched
                    ctx.previous.taken += n - searched
                    return scores, indices
    return graphs.cosine_candidates(vectors, cfg.knn_k, exact_limit=cfg.exact_knn_limit, xp=xp)


def _lexical_candidates(ctx: BuildContext, postings: Any, xp: ModuleType) -> tuple[np.ndarray, np.ndarray]:
    """(counts, indices) of the chunks' lexical neighbours. On the CPU an update patches those of the
    version it edits, exactly (a fresh count cost ~3 s at 100k chunks whatever the change)."""
    keywords_cfg, k = ctx.config.keywords, ctx.config.graph.knn_k
    old_counts, old_indices = ctx.previous.array(KNN_LEXICAL_COUNTS), ctx.previous.array(KNN_LEXICAL_INDICES)
    before = ctx.previous.table(KEYWORDS, ["keyword", "chunk_df"])
    # With tf-idf keywords an unchanged chunk's own keywords move with the corpus: counted afresh.
    tokens = keywords_cfg.method == "tokens"
    if tokens and xp is np and old_counts is not None and old_indices is not None and before is not None:
        same_as = ctx.previous.rows(CHUNK_LEXICAL, searchable(ctx.store.read_table(CHUNKS, ["heading", "text"])))
        if same_as is not None:
            frequency = dict(zip(before["keyword"], before["chunk_df"]))
            vocabulary = ctx.store.read_table(KEYWORDS, ["keyword"])["keyword"]
            frequency_before = np.fromiter((frequency.get(w, 0) for w in vocabulary), np.int64, len(vocabulary))
            patched = graphs.patched_lexical_candidates(
                postings,
                same_as,
                old_counts,
                old_indices,
                frequency_before,
                k,
                max_df=keywords_cfg.max_df,
                max_postings=keywords_cfg.max_postings,
            )
            if patched is not None:
                counts, indices, searched = patched
                ctx.previous.taken += len(same_as) - searched
                return counts, indices
    return graphs.lexical_candidates(
        postings, k, max_df=keywords_cfg.max_df, max_postings=keywords_cfg.max_postings, xp=xp
    )


def stage_concept_graph(ctx: BuildContext) -> dict[str, int]:
    cfg = ctx.config.graph
    xp = array_module(ctx.config.embedding.device)
    chunk_postings = ctx.store.read_graph(POSTINGS_CHUNKS)
    vectors, postings = ctx.store.read_array(KEYWORD_VECTORS), chunk_postings.T.tocsr()
    concepts = _patched_concepts(ctx, vectors, postings)
    if concepts is None:
        concepts = graphs.concept_graph(vectors, postings, theta_sem=cfg.theta_sem, theta_co=cfg.theta_co, xp=xp)
    ctx.store.write_graph("concepts", concepts)
    concept_rank = graphs.node_rank(concepts, cfg.damping, xp)
    ctx.store.write_array("concept_rank", concept_rank)
    ctx.store.write_array("chunk_rank_concept", graphs.chunk_rank_from_concepts(chunk_postings, concept_rank))
    return {"concept_edges": int(concepts.nnz // 2)}


def _patched_concepts(ctx: BuildContext, vectors: np.ndarray, postings: sp.csr_matrix) -> sp.csr_matrix | None:
    """The edited version's concept graph patched where keywords' chunks or vectors changed
    (:func:`hopgraph.index.graphs.patched_concept_graph`), or None where it has none to patch: a
    fresh graph then costs ~1 s whatever the change, at 10k chunks as at 100k."""
    cfg = ctx.config.graph
    store = ctx.previous.holding(
        ("graphs", CONCEPTS), ("graphs", POSTINGS_CHUNKS), ("arrays", KEYWORD_VECTORS), stage="concept_graph"
    )
    if store is None or not ctx.previous.same_settings("graph.theta_sem", "graph.theta_co"):
        return None
    vocabulary = ctx.store.read_table(KEYWORDS, ["keyword"])["keyword"]
    same_as = ctx.previous.same_rows(KEYWORD_VECTOR_ROWS, vocabulary, vectors)
    if same_as is None:
        return None
    old_graph, old_postings = store.read_graph(CONCEPTS), store.read_graph(POSTINGS_CHUNKS).T.tocsr()
    patched = graphs.patched_concept_graph(
        vectors, postings, same_as, old_graph, old_postings, theta_sem=cfg.theta_sem, theta_co=cfg.theta_co
    )
    if patched is None:
        return None
    concepts, counted_again = patched
    ctx.previous.taken += len(vocabulary) - counted_again  # keywords whose pairs kept their edges
    return concepts


def stage_entities(ctx: BuildContext) -> dict[str, int]:
    """The LLM-free entity layer: spaCy names and titles per sub-chunk, name vectors, synonym edges."""
    cfg = ctx.config.graph
    return entities.write_entity_layer(
        ctx.store,
        ctx.embed,
        functools.partial(ctx.entity_names, phrases=cfg.entity_phrases),
        synonym_threshold=cfg.synonym_threshold,
        synonym_k=cfg.synonym_k,
        exact_limit=cfg.exact_synonym_limit,
        previous=ctx.previous,
    )
