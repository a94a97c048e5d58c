"""Co-occurrence from postings (items × features incidence), block by block, never all pairs."""
from __future__ import annotations

from typing import Any

from hopgraph.kernels.backend import module_of, sparse_module
from hopgraph.kernels.similarity import _topk_rows


def _binary(incidence: Any) -> Any:
    xp = module_of(incidence.data)
    matrix = sparse_module(xp).csr_matrix(incidence, dtype=xp.float32, copy=True)
    matrix.data[:] = 1.0
    return matrix


def cooccurrence_topk(incidence: Any, k: int, *, block_size: int = 2048, min_count: int = 1) -> tuple[Any, Any]:
    """For each item, the k other items sharing the most features: (counts, indices), -1 padded."""
    xp = module_of(incidence.data)
    matrix = _binary(incidence)
    n = matrix.shape[0]
    transposed = matrix.T.tocsr()
    k = min(k, max(n - 1, 0))
    counts, indices = [], []
    for start in range(0, n, block_size):
        block = (matrix[start : start + block_size] @ transposed).toarray()
        rows = xp.arange(block.shape[0])
        block[rows, rows + start] = -1.0
        c, i = _topk_rows(xp, block, k)
        valid = c >= min_count
        counts.append(xp.where(valid, c, 0).astype(xp.int64))
        indices.append(xp.where(valid, i, -1).astype(xp.int64))
    if not counts:
        return xp.zeros((0, k), dtype=xp.int64), xp.zeros((0, k), dtype=xp.int64)
    return xp.concatenate(counts), xp.concatenate(indices)


def cooccurrence_pairs(incidence: Any, *, min_count: int = 1, block_size: int = 2048) -> tuple[Any, Any, Any]:
    """All (i, j), i ≠ j, rows sharing ≥ min_count columns, with the count (both directions)."""
    xp = module_of(incidence.data)
    matrix = _binary(incidence)
    transposed = matrix.T.tocsr()
    rows, cols, counts = [], [], []
    for start in range(0, matrix.shape[0], block_size):
        product = (matrix[start : start + block_size] @ transposed).tocoo()
        keep = (product.data >= min_count) & (product.row + start != product.col)
        rows.append(product.row[keep].astype(xp.int64) + start)
        cols.append(product.col[keep].astype(xp.int64))
        counts.append(product.data[keep].astype(xp.int64))
    if not rows:
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty, empty
    return xp.concatenate(rows), xp.concatenate(cols), xp.concatenate(counts)
