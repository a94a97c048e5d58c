"""Blocked cosine top-k: memory O(block × n), never n × n."""
from __future__ import annotations

from typing import Any

from hopgraph.kernels.backend import module_of


def normalize_rows(x: Any) -> Any:
    """Unit-length rows (zero rows stay zero), float32, same array module as the input."""
    xp = module_of(x)
    x = xp.asarray(x, dtype=xp.float32)
    norms = xp.linalg.norm(x, axis=1, keepdims=True)
    return x / xp.maximum(norms, 1e-12)


def _topk_rows(xp: Any, scores: Any, k: int) -> tuple[Any, Any]:
    """Top-k per row, descending score, ties by lower column index."""
    n = scores.shape[1]
    if k < n:
        part = xp.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = xp.take_along_axis(scores, part, axis=1).min(axis=1, keepdims=True)
        # Any column scoring above the k-th value is in; among ties at the k-th value keep the lowest indices.
        above = scores > kth
        tied = scores == kth
        rank_key = xp.where(above, 0, xp.where(tied, 1, 2)).astype(xp.int64) * n + xp.arange(n)[None, :]
        cand = xp.argpartition(rank_key, k - 1, axis=1)[:, :k]
    else:
        cand = xp.broadcast_to(xp.arange(n)[None, :], scores.shape)
    vals = xp.take_along_axis(scores, cand, axis=1)
    order = xp.lexsort(xp.stack([cand, -vals]), axis=-1) if xp.__name__ == "numpy" else _lexsort_rows(xp, vals, cand)
    return xp.take_along_axis(vals, order, axis=1), xp.take_along_axis(cand, order, axis=1)


def _lexsort_rows(xp: Any, vals: Any, cand: Any) -> Any:
    # Sort by index first, then stably by descending value: equal values keep index order.
    by_index = xp.argsort(cand, axis=1)
    vals_sorted = xp.take_along_axis(vals, by_index, axis=1)
    by_value = xp.argsort(-vals_sorted, axis=1, kind="stable")
    return xp.take_along_axis(by_index, by_value, axis=1)


def cosine_topk(queries: Any, corpus: Any, k: int, *, block_size: int = 4096, exclude_self: bool = False) -> tuple[Any, Any]:
    """(scores, indices) of the k most similar corpus rows for each query row (inputs row-normalised)."""
    xp = module_of(corpus)
    n = corpus.shape[0]
    k = max(0, min(k, n - 1 if exclude_self else n))
    all_scores, all_index = [], []
    for start in range(0, queries.shape[0], block_size):
        block = queries[start : start + block_size] @ corpus.T
        if exclude_self:
            rows = xp.arange(block.shape[0])
            block[rows, rows + start] = -xp.inf
        s, i = _topk_rows(xp, block, k)
        all_scores.append(s)
        all_index.append(i.astype(xp.int64))
    if not all_scores:
        return xp.zeros((0, k), dtype=xp.float32), xp.zeros((0, k), dtype=xp.int64)
    return xp.concatenate(all_scores), xp.concatenate(all_index)
