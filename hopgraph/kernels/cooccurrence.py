"""Co-occurrence from postings (an items × features incidence matrix), block by block.

Shared-feature counts come from sparse products ``incidence[block] @ incidence.T``. Only one
block of rows is held at a time and it stays sparse: blocks are cut so that their products hold at
most ``max_products`` entries, and only pairs that share something appear, never all pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from hopgraph.kernels.backend import module_of, sparse_module, to_numpy

# Scalar products allowed in one block: bounds its product entries (~20 bytes each with the
# sorting copies), so a block stays in the tens of MB; smaller blocks measured no slower.
MAX_PRODUCTS = 1_000_000
# Up to this k, top-k on the CPU takes k rounds of row maxima per block (linear); above it, and on a
# GPU, where sorting is cheap, two stable sorts.
SELECT_ROUNDS = 8


def _check(min_count: int, block_size: int) -> None:
    if min_count < 1:
        raise ValueError(f"min_count must be at least 1, got {min_count}")
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")


def _binary(incidence: Any) -> Any:
    """Canonical float32 CSR copy holding 1 where a feature is present and 0 where a stored entry is zero.

    Stored zeros are kept rather than eliminated (the CUDA routine for that is deprecated); they
    add nothing to a product, and every count is compared with ``min_count ≥ 1``.
    """
    xp = module_of(incidence.data)
    matrix = sparse_module(xp).csr_matrix(incidence, dtype=xp.float32, copy=True)
    matrix.sum_duplicates()
    matrix.data = (matrix.data != 0).astype(xp.float32)
    return matrix


def _row_blocks(matrix: Any, transposed: Any, block_size: int, max_products: int) -> list[tuple[int, int]]:
    """(start, stop) row ranges of at most ``block_size`` rows whose products stay under ``max_products``.

    A row's product with the transposed incidence touches, for each of its features, every item with
    that feature: that count bounds the entries the row adds to a block's product, so frequent
    features get small blocks and the memory of one block stays bounded whatever the corpus.
    """
    xp = module_of(matrix.data)
    per_row = to_numpy(matrix @ xp.diff(transposed.indptr).astype(xp.float64)).astype(np.int64)
    blocks, start, load = [], 0, 0
    for row, cost in enumerate(per_row.tolist()):
        if row > start and (row - start >= block_size or load + cost > max_products):
            blocks.append((start, row))
            start, load = row, 0
        load += cost
    if start < len(per_row):
        blocks.append((start, len(per_row)))
    return blocks


def _block_products(matrix: Any, block_size: int, max_products: int) -> Iterator[tuple[int, Any]]:
    """Per block of rows: (first row, CSR shared-feature counts of the block's rows with every row)."""
    transposed = matrix.T.tocsr()
    for start, stop in _row_blocks(matrix, transposed, block_size, max_products):
        yield start, (matrix[start:stop] @ transposed).tocsr()


def _block_pairs(
    matrix: Any, block_size: int, min_count: int, max_products: int, ordered: bool = True
) -> Iterator[tuple[Any, Any, Any]]:
    """Per block of rows: (rows, cols, counts) int64 of pairs i ≠ j with count ≥ min_count, by row,
    and within a row by column when ``ordered`` (sorting the columns costs more than the product)."""
    xp = module_of(matrix.data)
    for start, product in _block_products(matrix, block_size, max_products):
        if ordered:
            product.sort_indices()
        product = product.tocoo()
        rows = product.row.astype(xp.int64) + start
        cols = product.col.astype(xp.int64)
        keep = (product.data >= min_count) & (rows != cols)
        yield rows[keep], cols[keep], product.data[keep].astype(xp.int64)


def _select_topk(product: Any, own: np.ndarray, k: int, min_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best partners in a product of rows with partners (numpy), by k rounds of row
    maxima: (counts, partner columns), each rows × k (-1 and 0 where there are fewer). A row's
    ``own`` column (-1: none) is never its partner.

    A round takes each row's largest remaining count and, among the entries holding it, the lowest
    column (as the largest ``n - col``), then retires that entry. Each round is linear in the
    block's entries and needs no sort, so the product's column order does not matter.
    """
    n = product.shape[1]
    counts = np.zeros((product.shape[0], k), dtype=np.int64)
    indices = np.full((product.shape[0], k), -1, dtype=np.int64)
    sizes = np.diff(product.indptr)
    filled = np.flatnonzero(sizes > 0)
    firsts = product.indptr[:-1][filled]
    local = np.repeat(np.arange(product.shape[0]), sizes)
    cols = product.indices.astype(np.int64)
    eligible = (product.data >= min_count) & (cols != np.asarray(own, dtype=np.int64)[local])
    remaining = np.where(eligible, product.data, 0).astype(np.int64)

    def row_max(values: np.ndarray) -> np.ndarray:
        out = np.zeros(product.shape[0], dtype=np.int64)
        out[filled] = np.maximum.reduceat(values, firsts)
        return out

    for slot in range(k):
        best = row_max(remaining)
        found = np.flatnonzero(best > 0)
        if found.shape[0] == 0:
            break
        tied = (remaining > 0) & (remaining == best[local])
        chosen = n - row_max(np.where(tied, n - cols, 0))
        counts[found, slot] = best[found]
        indices[found, slot] = chosen[found]
        remaining[tied & (cols == chosen[local])] = 0
    return counts, indices


def partners_topk(
    rows: Any,
    partners: Any,
    own: np.ndarray,
    k: int,
    *,
    min_count: int = 1,
    block_size: int = 2048,
    max_products: int = MAX_PRODUCTS,
) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``rows`` (items × features, numpy CSR), the k ``partners`` sharing the most
    features with it, as :func:`cooccurrence_topk` ranks them (descending count, ties to the lower
    partner, at least ``min_count``): (counts, partner positions), both int64. ``own[i]`` is row i's
    own position among the partners (-1: none), never listed: all items against themselves, or an
    update's changed chunks against the whole index."""
    _check(min_count, block_size)
    matrix = _binary(rows)
    transposed = (matrix if partners is rows else _binary(partners)).T.tocsr()
    counts = np.zeros((matrix.shape[0], k), dtype=np.int64)
    indices = np.full((matrix.shape[0], k), -1, dtype=np.int64)
    for start, stop in _row_blocks(matrix, transposed, block_size, max_products) if k else ():
        product = (matrix[start:stop] @ transposed).tocsr()
        counts[start:stop], indices[start:stop] = _select_topk(product, own[start:stop], k, min_count)
    return counts, indices


def cooccurrence_topk(
    incidence: Any, k: int, *, block_size: int = 2048, min_count: int = 1, max_products: int = MAX_PRODUCTS
) -> tuple[Any, Any]:
    """For each item, the k other items sharing the most features: (counts, indices), both int64, n × k.

    Descending count, ties to the lower index; only pairs sharing at least ``min_count`` features
    are listed, the remaining slots hold index -1 and count 0. Each block's pairs are ranked
    sparsely (two stable sorts), since dense blocks of small integer counts are mostly ties.
    """
    _check(min_count, block_size)
    xp = module_of(incidence.data)
    n = incidence.shape[0]
    k = max(0, min(k, n - 1))
    counts = xp.zeros((n, k), dtype=xp.int64)
    indices = xp.full((n, k), -1, dtype=xp.int64)
    if k == 0:
        return counts, indices
    if k <= SELECT_ROUNDS and xp is np:
        options = {"min_count": min_count, "block_size": block_size, "max_products": max_products}
        return partners_topk(incidence, incidence, np.arange(n), k, **options)
    matrix = _binary(incidence)
    for rows, cols, shared in _block_pairs(matrix, block_size, min_count, max_products):
        # Pairs arrive by row then column; sorting stably by count, then by row, gives each row's
        # partners by descending count with ties in column order.
        order = xp.argsort(-shared, kind="stable")
        order = order[xp.argsort(rows[order], kind="stable")]
        rows, cols, shared = rows[order], cols[order], shared[order]
        rank = xp.arange(rows.shape[0]) - xp.searchsorted(rows, rows)
        top = rank < k
        counts[rows[top], rank[top]] = shared[top]
        indices[rows[top], rank[top]] = cols[top]
    return counts, indices


def iter_cooccurrence_pairs(
    incidence: Any,
    *,
    min_count: int = 1,
    block_size: int = 2048,
    max_products: int = MAX_PRODUCTS,
    ordered: bool = True,
) -> Iterator[tuple[Any, Any, Any]]:
    """Blocks of (rows, cols, counts), int64: pairs i ≠ j of rows sharing ≥ ``min_count`` columns.

    Both directions are listed, ordered by row, then by column unless ``ordered`` is false (for
    callers that only filter the pairs). Rows with fewer than ``min_count`` stored columns cannot
    qualify and are left out of the products.
    """
    _check(min_count, block_size)
    xp = module_of(incidence.data)
    matrix = _binary(incidence)
    active = xp.flatnonzero(xp.diff(matrix.indptr) >= min_count)
    if active.shape[0] == 0:
        return
    for rows, cols, shared in _block_pairs(matrix[active], block_size, min_count, max_products, ordered):
        yield active[rows].astype(xp.int64), active[cols].astype(xp.int64), shared


def cooccurrence_pairs(incidence: Any, *, min_count: int = 1, block_size: int = 2048) -> tuple[Any, Any, Any]:
    """All pairs of :func:`iter_cooccurrence_pairs` at once, as (rows, cols, counts)."""
    xp = module_of(incidence.data)
    blocks = list(iter_cooccurrence_pairs(incidence, min_count=min_count, block_size=block_size))
    if not blocks:
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty.copy(), empty.copy()
    rows, cols, counts = (xp.concatenate(parts) for parts in zip(*blocks))
    return rows, cols, counts


def cooccurrence_matrix(incidence: Any, *, min_count: int = 1) -> Any:
    """:func:`cooccurrence_pairs` as a square sparse matrix (items × items, shared-feature counts,
    symmetric, no diagonal) on the array module of ``incidence``."""
    xp = module_of(incidence.data)
    rows, cols, counts = cooccurrence_pairs(incidence, min_count=min_count)
    n = incidence.shape[0]
    return sparse_module(xp).csr_matrix((counts.astype(xp.float32), (rows, cols)), shape=(n, n))
