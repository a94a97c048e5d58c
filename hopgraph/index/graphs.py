"""LLM-free graphs: chunk KNN graph (KET Alg. 3 lines 2–7), concept graph (G2ConS §3.2), rankings.

Each builder takes postings and vectors and returns a scipy CSR matrix; the heavy lifting is in
:mod:`hopgraph.kernels` (blocked top-k, co-occurrence from postings, PageRank), so nothing here
materialises all pairs. With ``xp`` = cupy the kernels' inputs go to the device (one helper,
:func:`hopgraph.kernels.sparse_on`) and their results come back as numpy before anything is stored.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import scipy.sparse as sp

from hopgraph.kernels import (
    cooccurrence_topk,
    cosine_topk,
    drop_own,
    iter_cooccurrence_pairs,
    merge_topk,
    pagerank,
    partners_topk,
    sparse_on,
)
from hopgraph.kernels.ann import ivf_cosine_topk
from hopgraph.kernels.backend import to_numpy


def _common(document_frequency: np.ndarray, rows: int, max_df: float, max_postings: int) -> np.ndarray:
    """Keywords in more than max_df of ``rows`` rows or more than max_postings rows: they link
    everything to everything, and their pairs would grow with the square of the corpus."""
    return np.asarray(document_frequency) > max(min(max_df * rows, max_postings), 2)


def _drop_common(postings: sp.csr_matrix, max_df: float, max_postings: int) -> sp.csr_matrix:
    """The postings without their :func:`_common` keywords."""
    document_frequency = np.asarray((postings > 0).sum(axis=0)).ravel()
    keep = ~_common(document_frequency, postings.shape[0], max_df, max_postings)
    return postings[:, np.flatnonzero(keep)].tocsr()


def lexical_candidates(
    chunk_postings: sp.csr_matrix, k: int, *, max_df: float, max_postings: int, xp: ModuleType = np
) -> tuple[np.ndarray, np.ndarray]:
    """(counts, indices) of each chunk's ⌈K/2⌉ lexical neighbours: the chunks sharing the most
    keywords with it, ties to the lower index (-1 and 0 where there are fewer)."""
    counts, indices = cooccurrence_topk(sparse_on(xp, _drop_common(chunk_postings, max_df, max_postings)), (k + 1) // 2)
    return to_numpy(counts), to_numpy(indices)


def _renumbered(same_as: np.ndarray, old_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(held, lists, old): the rows the edited version held (``same_as`` ≥ 0, one row there each),
    their lists of that version as they were (``old``; an entry beyond its rows made -1) and
    renumbered to this version's rows (``lists``; -1 where the entry was -1 or its row is gone)."""
    rows_before = old_indices.shape[0]
    held = np.flatnonzero(same_as >= 0)
    new_of_old = np.full(rows_before, -1, dtype=np.int64)
    new_of_old[same_as[held]] = held
    old = np.asarray(old_indices[same_as[held]], dtype=np.int64)
    old[old >= rows_before] = -1
    return held, np.where(old >= 0, new_of_old[np.maximum(old, 0)], -1), old


def patched_lexical_candidates(
    chunk_postings: sp.csr_matrix,
    same_as: np.ndarray,
    old_counts: np.ndarray,
    old_indices: np.ndarray,
    frequency_before: np.ndarray,
    k: int,
    *,
    max_df: float,
    max_postings: int,
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The lexical neighbours of the version an update edits, patched to its new chunks: (counts,
    indices, rows searched again), exactly :func:`lexical_candidates`; None where more than
    :data:`PATCH_ROWS_PER_ROOT`·√n rows would be searched again, or the old lists do not fit.

    ``same_as[i]`` is the edited version's row holding chunk i's text (-1: new or changed);
    ``frequency_before`` per keyword (column) the chunks that held it then (0: none). A chunk's
    counts with unchanged chunks change only through a keyword left out then and listed now (or the
    reverse), so a chunk is searched again, over every chunk, where it is new, holds such a
    keyword, or lost a listed neighbour; the others keep their lists, merged with their best new
    chunks. Ties go to the lower index in both, so unchanged chunks must keep their order.
    """
    n, n_before = chunk_postings.shape[0], old_indices.shape[0]
    width = max(0, min((k + 1) // 2, n - 1))
    if old_counts.shape != old_indices.shape or old_indices.shape[1] != width:
        return None
    same_as = np.asarray(same_as, dtype=np.int64)
    held = np.flatnonzero(same_as >= 0)
    if len(held) and (np.diff(same_as[held]) <= 0).any():
        return None  # unchanged chunks reordered (or one row given twice): ties would fall otherwise
    held, lists, old = _renumbered(same_as, old_indices)
    lost = ((old >= 0) & (lists < 0)).any(axis=1)
    frequency = np.asarray((chunk_postings > 0).sum(axis=0)).ravel()
    common = _common(frequency, n, max_df, max_postings)
    flipped = (common != _common(frequency_before, n_before, max_df, max_postings)) & (frequency_before > 0)
    touched = np.zeros(n, dtype=bool)
    postings = chunk_postings.tocsr()
    touched[np.repeat(np.arange(n), np.diff(postings.indptr))[flipped[postings.indices]]] = True
    new = np.flatnonzero(same_as < 0)
    again = np.union1d(np.union1d(new, held[lost]), np.flatnonzero(touched))
    if len(again) > PATCH_ROWS_PER_ROOT * np.sqrt(n):
        return None
    lexical = postings[:, np.flatnonzero(~common)].tocsr()
    counts = np.zeros((n, width), dtype=np.int64)
    indices = np.full((n, width), -1, dtype=np.int64)
    counts[again], indices[again] = partners_topk(lexical[again], lexical, again, width)
    stays = ~np.isin(held, again)
    stay = held[stays]
    if len(stay):
        listed, listed_counts = lists[stays], np.where(lists[stays] >= 0, old_counts[same_as[stay]], 0)
        if len(new):  # each listed row's best new chunks, then the best of both lists
            best_counts, best = partners_topk(lexical[stay], lexical[new], np.full(len(stay), -1), width)
            listed_counts = np.concatenate([listed_counts, best_counts], axis=1)
            listed = np.concatenate([listed, np.where(best >= 0, new[np.maximum(best, 0)], -1)], axis=1)
        counts[stay], indices[stay] = merge_topk(listed_counts, listed, width)
    return counts, indices, len(again)


def cosine_width(k: int, n: int) -> int:
    """Cosine candidates listed per chunk of an n-chunk KNN graph: its ⌊K/2⌋ cosine neighbours plus
    ⌈K/2⌉ spares, since candidates that are already lexical neighbours are skipped."""
    return min(k // 2 + (k + 1) // 2, n - 1) if k // 2 and n > 1 else 0


def cosine_candidates(
    chunk_vectors: np.ndarray, k: int, *, exact_limit: int, xp: ModuleType = np
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices) of each chunk's nearest other chunks by cosine, best first, ``cosine_width``
    per chunk: exact up to ``exact_limit`` chunks, from a FAISS IVF index above it (index -1 where
    it found none)."""
    return nearest_others(chunk_vectors, cosine_width(k, chunk_vectors.shape[0]), exact_limit=exact_limit, xp=xp)


def nearest_others(
    vectors: np.ndarray, width: int, *, exact_limit: int, xp: ModuleType = np
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices) of each row's ``width`` nearest other rows by cosine, best first: exact up
    to ``exact_limit`` rows, from a FAISS IVF index above it (index -1 where it found none)."""
    n = vectors.shape[0]
    if width == 0:
        return np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)
    if n <= exact_limit:
        rows = xp.asarray(vectors)
        scores, indices = cosine_topk(rows, rows, width, exclude_self=True)
        return to_numpy(scores), to_numpy(indices)
    return ivf_cosine_topk(vectors, width, device="cpu" if xp is np else "cuda")


# Patching gives way to a fresh search above PATCH_ROWS_PER_ROOT·√n rows to search again: those
# cost rows·n dot products, a fresh IVF index ~50·n^1.5 (training on 4√n lists, then searching), so
# the bound keeps a patch well under a fresh search at every size.
PATCH_ROWS_PER_ROOT = 10.0


def patched_cosine_candidates(
    chunk_vectors: np.ndarray,
    same_as: np.ndarray,
    old_scores: np.ndarray,
    old_indices: np.ndarray,
    *,
    xp: ModuleType = np,
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The cosine candidates of the version an update edits, patched to its new chunks:
    (scores, indices, rows searched again), or None where more than :data:`PATCH_ROWS_PER_ROOT`·√n
    rows would be searched again (a fresh :func:`cosine_candidates` costs about as much then) or
    the old candidates do not fit ``same_as``.

    ``same_as[i]`` is the edited version's row holding chunk i's vector bitwise (-1: new or changed).
    A chunk that is new, or lost a candidate (deleted, changed, or none found), is searched again,
    exactly, over every chunk; the others keep their candidates, merged with their best new chunks
    and sorted again by (score, new index). So where the edited version's candidates were exact so
    are these, up to which of several tied candidates fills the last place; where they were
    approximate (FAISS), touched rows become exact and the rest stay as approximate as they were.
    """
    n, width = chunk_vectors.shape[0], old_indices.shape[1]
    rows_before = old_indices.shape[0]
    if old_scores.shape != old_indices.shape or (len(same_as) and int(np.max(same_as)) >= rows_before):
        return None
    same_as = np.asarray(same_as, dtype=np.int64).copy()
    held = np.flatnonzero(same_as >= 0)
    _, first = np.unique(same_as[held], return_index=True)
    repeated = np.ones(len(held), dtype=bool)
    repeated[first] = False
    same_as[held[repeated]] = -1  # one new row per old row (PreviousVersion.same_rows never gives two)
    held, mapped, _ = _renumbered(same_as, old_indices)
    complete = (mapped >= 0).all(axis=1)
    stay, new = held[complete], np.flatnonzero(same_as < 0)
    again = np.union1d(new, held[~complete])
    if len(again) > PATCH_ROWS_PER_ROOT * np.sqrt(n):
        return None
    scores = np.empty((n, width), dtype=np.float32)
    indices = np.empty((n, width), dtype=np.int64)
    corpus = xp.asarray(chunk_vectors)
    if len(again):
        found = cosine_topk(corpus[xp.asarray(again)], corpus, width + 1)
        scores[again], indices[again] = drop_own(to_numpy(found[0]), to_numpy(found[1]), again, width)
    if len(stay):
        kept_scores, kept_indices = np.asarray(old_scores[same_as[stay]], dtype=np.float32), mapped[complete]
        if len(new):  # each listed row's best new chunks, then the best of both lists
            best = cosine_topk(corpus[xp.asarray(stay)], corpus[xp.asarray(new)], width)
            kept_scores = np.concatenate([kept_scores, to_numpy(best[0])], axis=1)
            kept_indices = np.concatenate([kept_indices, new[to_numpy(best[1])]], axis=1)
        scores[stay], indices[stay] = merge_topk(kept_scores, kept_indices, width)
    return scores, indices, len(again)


def knn_graph(
    chunk_vectors: np.ndarray,
    chunk_postings: sp.csr_matrix,
    k: int,
    *,
    max_df: float,
    max_postings: int,
    exact_limit: int,
    xp: ModuleType = np,
    cosine: np.ndarray | None = None,
    lexical: np.ndarray | None = None,
) -> sp.csr_matrix:
    """Undirected chunk graph: each chunk links to its top ⌈K/2⌉ lexical and ⌊K/2⌋ cosine neighbours.

    Lexical similarity is the number of shared keywords (computed blockwise from postings); cosine
    neighbours already chosen lexically are skipped, as in KET Alg. 3 line 5. Cosine neighbours come
    from ``cosine`` (the indices of :func:`cosine_candidates`, or of a patch of them) if given, and
    lexical ones from ``lexical`` (those of :func:`lexical_candidates`, or of a patch).
    """
    n = chunk_vectors.shape[0]
    if n < 2:
        return sp.csr_matrix((n, n), dtype=np.float32)
    k_semantic = k // 2
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    if lexical is None:
        lexical = lexical_candidates(chunk_postings, k, max_df=max_df, max_postings=max_postings, xp=xp)[1]
    for j in range(lexical.shape[1]):
        valid = lexical[:, j] >= 0
        rows.append(np.flatnonzero(valid))
        cols.append(lexical[valid, j])
    if k_semantic:
        if cosine is None:
            cosine = cosine_candidates(chunk_vectors, k, exact_limit=exact_limit, xp=xp)[1]
        taken = np.zeros(n, dtype=np.int64)
        for j in range(cosine.shape[1]):
            candidate = cosine[:, j]
            fresh = (taken < k_semantic) & (candidate >= 0) & ~(lexical == candidate[:, None]).any(axis=1)
            rows.append(np.flatnonzero(fresh))
            cols.append(candidate[fresh])
            taken += fresh
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    graph = sp.csr_matrix((np.ones(len(r), dtype=np.float32), (r, c)), shape=(n, n))
    graph = ((graph + graph.T) > 0).astype(np.float32)
    return graph.tocsr()


def concept_graph(
    keyword_vectors: np.ndarray,
    keyword_chunk_postings: sp.csr_matrix,
    *,
    theta_sem: float,
    theta_co: int,
    xp: ModuleType = np,
) -> sp.csr_matrix:
    """Concept edges iff cos ≥ θ_sem and co-occurrence ≥ θ_co; weight = Dice = 2·Co/(|T_i|+|T_j|).

    Candidate pairs arrive block by block from the postings and are filtered at once, so only
    surviving edges are ever held in memory. Both measures are symmetric, so each pair is scored
    once (i < j; gathering the two vectors is the costly part) and its edge stored both ways.
    """
    n = keyword_vectors.shape[0]
    chunk_counts = np.asarray((keyword_chunk_postings > 0).sum(axis=1)).ravel().astype(np.float64)
    edges = []
    for rows, cols, co in iter_cooccurrence_pairs(
        sparse_on(xp, keyword_chunk_postings), min_count=theta_co, ordered=False
    ):
        rows, cols, co = to_numpy(rows), to_numpy(cols), to_numpy(co)
        upper = cols > rows
        edges.append(_concept_edges(keyword_vectors, chunk_counts, rows[upper], cols[upper], co[upper], theta_sem))
    return _both_ways(edges, n)


def _concept_edges(
    vectors: np.ndarray, chunk_counts: np.ndarray, low: np.ndarray, high: np.ndarray, co: np.ndarray, theta_sem: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs (``low`` < ``high``, sharing ``co`` chunks) whose vectors' cosine is ≥ θ_sem, with
    their Dice weights: the one place this arithmetic is done, so a patched graph is a fresh one."""
    cosine = np.einsum("ij,ij->i", vectors[low], vectors[high])
    keep = cosine >= theta_sem
    low, high, co = low[keep], high[keep], co[keep].astype(np.float64)
    return low, high, (2.0 * co / (chunk_counts[low] + chunk_counts[high])).astype(np.float32)


def _both_ways(edges: list[tuple[np.ndarray, np.ndarray, np.ndarray]], n: int) -> sp.csr_matrix:
    """The n × n graph of (low, high, weight) edge lists, each edge stored both ways."""
    if not edges:
        return sp.csr_matrix((n, n), dtype=np.float32)
    low, high, weights = (np.concatenate(part) for part in zip(*edges))
    both = (np.concatenate([weights, weights]), (np.concatenate([low, high]), np.concatenate([high, low])))
    return sp.csr_matrix(both, shape=(n, n))


# Above this share of the postings held by keywords an update touched, a fresh concept graph costs
# about as much as patching the edited version's.
PATCH_POSTINGS_SHARE = 0.25


def patched_concept_graph(
    keyword_vectors: np.ndarray,
    keyword_chunk_postings: sp.csr_matrix,
    same_as: np.ndarray,
    old_graph: sp.csr_matrix,
    old_postings: sp.csr_matrix,
    *,
    theta_sem: float,
    theta_co: int,
) -> tuple[sp.csr_matrix, int] | None:
    """:func:`concept_graph` from the one of the version an update edits, with the number of
    keywords whose pairs were counted again; None where more than :data:`PATCH_POSTINGS_SHARE` of
    the postings would be counted again.

    ``same_as[i]`` is the edited version's keyword whose vector is bitwise keyword i's (-1: none;
    no two keywords name one row there); ``old_graph`` is that version's concept graph under the
    same θs, and ``old_postings`` (keywords × chunks) the postings it was made from. A keyword is
    touched where it has no such row or its chunks differ from that keyword's there (chunks are
    compared by number: a chunk removed early shifts every later one, and touches their keywords).
    Two untouched keywords share the same chunks, counts and vectors as before, so their edge (or
    its absence) is the edited version's; every pair with a touched keyword is counted and scored
    again, by the same arithmetic as :func:`concept_graph`, so the graph is bitwise the fresh one.
    """
    n = keyword_vectors.shape[0]
    present = (keyword_chunk_postings > 0).astype(np.float32).tocsr()
    held = np.flatnonzero(same_as >= 0)
    if old_graph.shape[0] != old_postings.shape[0] or (len(held) and same_as[held].max() >= old_postings.shape[0]):
        return None
    touched = np.ones(n, dtype=bool)
    if len(held):
        width = max(present.shape[1], old_postings.shape[1])
        mine, theirs = present[held], (old_postings[same_as[held]] > 0).astype(np.float32).tocsr()
        mine.resize((len(held), width))
        theirs.resize((len(held), width))
        touched[held] = (mine != theirs).getnnz(axis=1) > 0
    again = np.flatnonzero(touched)
    sizes = np.diff(present.indptr)
    if sizes[again].sum() > PATCH_POSTINGS_SHARE * max(present.nnz, 1):
        return None
    # Edges of two untouched keywords, in this version's numbers (each once: stored both ways there).
    number = np.full(old_graph.shape[0], -1, dtype=np.int64)
    number[same_as[~touched]] = np.flatnonzero(~touched)
    old = sp.triu(old_graph, k=1).tocoo()
    a, b = number[old.row], number[old.col]
    stay = (a >= 0) & (b >= 0)
    kept = (np.minimum(a, b)[stay], np.maximum(a, b)[stay], old.data[stay].astype(np.float32))
    # Pairs with a touched keyword: shared chunks counted again (a pair of two touched ones once).
    product = (present[again] @ present.T).tocoo()
    rows, cols, co = again[product.row], product.col.astype(np.int64), product.data
    pair = (co >= theta_co) & (rows != cols) & (~touched[cols] | (cols > rows))
    low, high = np.minimum(rows, cols)[pair], np.maximum(rows, cols)[pair]
    counted = _concept_edges(keyword_vectors, sizes.astype(np.float64), low, high, co[pair], theta_sem)
    return _both_ways([kept, counted], n), len(again)


def node_rank(graph: sp.csr_matrix, damping: float, xp: ModuleType = np) -> np.ndarray:
    """PageRank of every node (isolated nodes keep the teleport share), computed with ``xp``."""
    return to_numpy(pagerank(sparse_on(xp, graph), damping=damping)).astype(np.float64)


def chunk_rank_from_concepts(chunk_postings: sp.csr_matrix, concept_rank: np.ndarray) -> np.ndarray:
    """A chunk's importance = total PageRank of the concepts it contains (G2ConS core-chunk ranking)."""
    return np.asarray(chunk_postings @ concept_rank).ravel()


def core_chunks(chunk_scores: np.ndarray, fraction: float) -> np.ndarray:
    """Indices of the top ⌈fraction·n⌉ chunks by score (β of KET, κ of G2ConS), best first."""
    n = len(chunk_scores)
    count = int(np.ceil(fraction * n))
    order = np.lexsort((np.arange(n), -chunk_scores))
    return order[:count]
