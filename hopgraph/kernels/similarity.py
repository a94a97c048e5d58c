"""Blocked cosine top-k: queries and corpus are both cut into blocks, so memory is O(block²), never n × n.

Every selection orders by descending score and then by ascending index, so results do not depend
on the backend, the block size or the order a partition happens to leave ties in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from hopgraph.kernels.backend import module_of


def normalize_rows(x: Any) -> Any:
    """Unit-length rows (zero rows stay zero), float32, same array module as the input."""
    xp = module_of(x)
    x = xp.asarray(x, dtype=xp.float32)
    norms = xp.linalg.norm(x, axis=1, keepdims=True)
    return x / xp.maximum(norms, xp.float32(1e-12))


def _sort_candidates(xp: Any, values: Any, indices: Any) -> tuple[Any, Any]:
    """Sort each row by (descending value, ascending index); indices must be unique within a row."""
    by_index = xp.argsort(indices, axis=1)
    values = xp.take_along_axis(values, by_index, axis=1)
    indices = xp.take_along_axis(indices, by_index, axis=1)
    by_value = xp.argsort(-values, axis=1, kind="stable")
    return xp.take_along_axis(values, by_value, axis=1), xp.take_along_axis(indices, by_value, axis=1)


def merge_topk(values: Any, indices: Any, k: int) -> tuple[Any, Any]:
    """The k best (value, index) pairs of each row, in the order every selection here uses
    (descending value, then ascending index); indices must be unique within a row."""
    values, indices = _sort_candidates(module_of(values), values, indices)
    return values[:, :k], indices[:, :k]


def drop_own(values: Any, indices: Any, own: Any, k: int) -> tuple[Any, Any]:
    """The first k of each row's k + 1 results leaving out row i's own index ``own[i]`` (or its
    last slot where its own index was not returned): a search of rows among themselves, self removed."""
    xp = module_of(indices)
    n = indices.shape[0]
    mine = indices == xp.asarray(own).reshape(-1, 1)
    drop = xp.where(mine.any(axis=1), mine.argmax(axis=1), k)
    keep = xp.ones_like(mine)
    keep[xp.arange(n), drop] = False
    return values[keep].reshape(n, k), indices[keep].reshape(n, k)


def _topk_rows(xp: Any, scores: Any, k: int) -> tuple[Any, Any]:
    """(values, columns) of the k best columns of each row of a dense block, ties to the lower column.

    A partition finds each row's k-th best value and everything at least as good is kept; only
    rows with more than k such columns (ties at the k-th value) are trimmed, keeping the leftmost
    tied columns. Extra memory is a copy of the block and a mask, with no index matrix.
    """
    rows, m = scores.shape
    k = min(k, m)
    if k == 0:
        return scores[:, :0], xp.zeros((rows, 0), dtype=xp.int64)
    if k == m:
        columns = xp.broadcast_to(xp.arange(m, dtype=xp.int64), (rows, m))
    else:
        kth = xp.partition(scores, m - k, axis=1)[:, m - k : m - k + 1]
        keep = scores >= kth
        excess = xp.flatnonzero(xp.count_nonzero(keep, axis=1) > k)
        if excess.size:
            block, block_kth = scores[excess], kth[excess]
            above = block > block_kth
            tied = block == block_kth
            room = k - xp.count_nonzero(above, axis=1)[:, None]
            keep[excess] = above | (tied & (xp.cumsum(tied, axis=1, dtype=xp.int32) <= room))
        columns = xp.nonzero(keep)[1].reshape(rows, k).astype(xp.int64)
    values = xp.take_along_axis(scores, columns, axis=1)
    # Columns are ascending within each row, so a stable sort on the value settles ties by index.
    order = xp.argsort(-values, axis=1, kind="stable")
    return xp.take_along_axis(values, order, axis=1), xp.take_along_axis(columns, order, axis=1)


def cosine_topk(
    queries: Any, corpus: Any, k: int, *, block_size: int = 4096, exclude_self: bool = False
) -> tuple[Any, Any]:
    """(scores, indices) of the k most similar corpus rows per query row (inputs row-normalised float32).

    ``exclude_self`` means query ``i`` is corpus row ``i`` (a KNN graph) and never returns itself.
    ``k`` is capped at the number of candidates; results are nq × k, best first.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    xp = module_of(corpus)
    queries = xp.asarray(queries, dtype=xp.float32)
    corpus = xp.asarray(corpus, dtype=xp.float32)
    nq, n = queries.shape[0], corpus.shape[0]
    k = max(0, min(k, n - 1 if exclude_self else n))
    all_scores = xp.zeros((nq, k), dtype=xp.float32)
    all_indices = xp.zeros((nq, k), dtype=xp.int64)
    if k == 0:
        return all_scores, all_indices
    for q0 in range(0, nq, block_size):
        q1 = min(q0 + block_size, nq)
        best_scores, best_indices = all_scores[q0:q1, :0], all_indices[q0:q1, :0]
        for c0 in range(0, n, block_size):
            c1 = min(c0 + block_size, n)
            block = queries[q0:q1] @ corpus[c0:c1].T
            if exclude_self and max(q0, c0) < min(q1, c1):
                own = xp.arange(max(q0, c0), min(q1, c1))
                block[own - q0, own - c0] = -xp.inf
            scores, columns = _topk_rows(xp, block, k)
            merged = _sort_candidates(
                xp, xp.concatenate([best_scores, scores], axis=1), xp.concatenate([best_indices, columns + c0], axis=1)
            )
            best_scores, best_indices = merged[0][:, :k], merged[1][:, :k]
        all_scores[q0:q1], all_indices[q0:q1] = best_scores, best_indices
    return all_scores, all_indices


# Rows of ``vectors`` converted to float64 at a time by mean_vectors: whole, that copy is twice the
# input (~18 GB for 6M sentence vectors of dim 384); smaller inputs are summed in one product.
MEAN_BLOCK_ROWS = 1 << 18


def mean_vectors(
    incidence: sp.spmatrix, vectors: np.ndarray, block_rows: int = MEAN_BLOCK_ROWS, columns: Any = None
) -> np.ndarray:
    """Row j: the unit-length mean of ``vectors[i]`` over the rows i where ``incidence[i, j]`` ≠ 0
    (all zero where there are none). A keyword's vector from the sentences containing it (KET,
    G2ConS Eq. 1), a chunk's from its sub-chunks, a long text's from its windows: one rule.
    Sums are float64, taken over ``block_rows`` rows at a time.

    With ``columns``, only the rows of those columns, bitwise as the whole computation makes them
    (each column adds its rows in row order, block by block, whatever the other columns hold), and
    only the rows of ``vectors`` they hold are read: an update's few changed keywords."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be positive, got {block_rows}")
    members = sp.csr_matrix(incidence, dtype=np.float64, copy=True)  # the caller's weights are not set to 1
    members.data[:] = 1.0
    if columns is not None:
        members = members[:, np.asarray(columns, dtype=np.int64)]
    vectors = np.asarray(vectors)  # a memory-mapped array stays mapped: only the rows used are read

    def block_sums(start: int) -> np.ndarray:
        block = members[start : start + block_rows]
        if columns is None:
            return np.asarray(block.T @ np.asarray(vectors[start : start + block_rows], dtype=np.float64))
        held = np.flatnonzero(np.diff(block.indptr))  # rows no chosen column holds add nothing
        return np.asarray(block[held].T @ np.asarray(vectors[start + held], dtype=np.float64))

    # Few and in place: on a 100k-row input each fresh float64 temporary costs more in page faults
    # than the product itself.
    sums = block_sums(0)
    for start in range(block_rows, members.shape[0], block_rows):
        sums += block_sums(start)
    sums /= np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return sums.astype(np.float32)


def group_mean_vectors(
    vectors: np.ndarray, group: Any, groups: int, first: int = 0, block_rows: int = MEAN_BLOCK_ROWS
) -> np.ndarray:
    """Row g: the unit-length mean of the rows of ``vectors`` whose ``group`` is g (see :func:`mean_vectors`).

    With ``first``, only the rows g ≥ ``first``, bitwise as the whole computation makes them:
    ``group`` must then be sorted. Where every group from ``first`` on has one row, in order, those
    rows are the means (:func:`_own_means`); otherwise the sums start at the block boundary the whole
    computation has below the first row of group ``first`` (a sum over a block's rows and one over
    all rows differ in their last bits)."""
    group = np.asarray(group, dtype=np.int64)
    if first:
        start = int(np.searchsorted(group, first))
        if np.array_equal(group[start:], np.arange(first, groups)):  # one row each from ``first`` on
            return _own_means(vectors[start:])
        aligned = start // block_rows * block_rows
        low = min(int(group[aligned]), first) if aligned < len(group) else first  # group ``first`` may be empty
        return group_mean_vectors(vectors[aligned:], group[aligned:] - low, groups - low, 0, block_rows)[first - low :]
    if groups == len(group) and np.array_equal(group, np.arange(groups)):
        return _own_means(vectors)
    membership = sp.csr_matrix((np.ones(len(group)), (np.arange(len(group)), group)), shape=(len(group), groups))
    return mean_vectors(membership, vectors, block_rows)


def _own_means(vectors: np.ndarray) -> np.ndarray:
    """The means of groups of one row each, in order (one sub-chunk per chunk): the rows themselves.
    The product of :func:`mean_vectors` adds a group's only row to 0.0 in float64 (-0.0 becomes
    0.0), whatever block it is in, before the same normalisation: so does this, for the same bits at
    a fraction of the cost, and row by row (the rows of an update's new groups alone)."""
    rows = np.array(vectors, dtype=np.float64)
    rows += 0.0
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows.astype(np.float32)
