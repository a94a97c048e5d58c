"""Co-occurrence top-k and pair lists against a dense brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.kernels import cooccurrence_pairs, cooccurrence_topk, iter_cooccurrence_pairs
from hopgraph.kernels.cooccurrence import SELECT_ROUNDS


def random_incidence(seed: int, items: int = 40, features: int = 25, density: float = 0.2) -> sp.csr_matrix:
    """Random postings with non-unit weights and a few explicit zeros (which must not count)."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((items, features)) < density) * rng.integers(1, 5, size=(items, features))
    matrix = sp.csr_matrix(dense.astype(np.float64))
    matrix.data[rng.random(matrix.nnz) < 0.1] = 0.0  # stored zeros
    return matrix


def shared_counts(incidence: sp.csr_matrix) -> np.ndarray:
    binary = (incidence.toarray() != 0).astype(np.int64)
    counts = binary @ binary.T
    np.fill_diagonal(counts, 0)
    return counts


def brute_topk(incidence: sp.csr_matrix, k: int, min_count: int) -> tuple[np.ndarray, np.ndarray]:
    counts = shared_counts(incidence)
    n = counts.shape[0]
    k = min(k, n - 1)
    out_counts, out_index = np.zeros((n, k), np.int64), np.full((n, k), -1, np.int64)
    for i in range(n):
        candidates = [j for j in range(n) if j != i and counts[i, j] >= min_count]
        best = sorted(candidates, key=lambda j: (-counts[i, j], j))[:k]
        out_index[i, : len(best)] = best
        out_counts[i, : len(best)] = counts[i, best]
    return out_counts, out_index


@pytest.mark.parametrize("block_size", [1, 6, 2048])
@pytest.mark.parametrize("min_count", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 4, 100])
def test_topk_matches_brute_force(block_size, min_count, k):
    incidence = random_incidence(block_size + 10 * min_count + k)
    counts, indices = cooccurrence_topk(incidence, k, block_size=block_size, min_count=min_count)
    want_counts, want_indices = brute_topk(incidence, k, min_count)
    assert counts.dtype == indices.dtype == np.int64
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(counts, want_counts)


def brute_pairs(incidence: sp.csr_matrix, min_count: int) -> set[tuple[int, int, int]]:
    counts = shared_counts(incidence)
    rows, cols = np.nonzero(counts >= min_count)
    return {(int(r), int(c), int(counts[r, c])) for r, c in zip(rows, cols)}


@pytest.mark.parametrize("block_size", [1, 7, 2048])
@pytest.mark.parametrize("min_count", [1, 2, 4])
def test_pairs_match_brute_force(block_size, min_count):
    incidence = random_incidence(block_size * 3 + min_count, items=35, features=40)
    rows, cols, counts = cooccurrence_pairs(incidence, min_count=min_count, block_size=block_size)
    assert rows.dtype == cols.dtype == counts.dtype == np.int64
    listed = list(zip(rows.tolist(), cols.tolist(), counts.tolist()))
    assert len(listed) == len(set(listed))
    assert set(listed) == brute_pairs(incidence, min_count)
    assert listed == sorted(listed), "pairs come ordered by row, then column"


def test_iterated_blocks_cover_the_same_pairs():
    incidence = random_incidence(9)
    blocks = list(iter_cooccurrence_pairs(incidence, min_count=2, block_size=4))
    assert len(blocks) > 1
    joined = {(r, c, n) for b in blocks for r, c, n in zip(*(part.tolist() for part in b))}
    assert joined == brute_pairs(incidence, 2)


def test_duplicate_entries_count_once():
    # Row 0 stores column 1 twice; rows 0 and 1 still share exactly one feature.
    incidence = sp.csr_matrix((np.ones(4), np.array([1, 1, 1, 2]), np.array([0, 2, 4])), shape=(2, 3))
    assert cooccurrence_pairs(incidence)[2].tolist() == [1, 1]
    assert cooccurrence_topk(incidence, 3)[0].tolist() == [[1], [1]]


def test_empty_and_degenerate_inputs():
    empty = sp.csr_matrix((0, 5))
    assert cooccurrence_topk(empty, 3)[1].shape == (0, 0)
    assert all(part.size == 0 for part in cooccurrence_pairs(empty))
    lonely = sp.csr_matrix(np.eye(3))
    counts, indices = cooccurrence_topk(lonely, 2)
    assert (indices == -1).all() and (counts == 0).all()
    assert cooccurrence_pairs(lonely)[0].size == 0
    with pytest.raises(ValueError, match="min_count"):
        cooccurrence_topk(lonely, 2, min_count=0)
    with pytest.raises(ValueError, match="block_size"):
        cooccurrence_pairs(lonely, block_size=0)


def test_product_budget_cuts_blocks_without_changing_results():
    incidence = random_incidence(11, items=60, features=30)
    blocks = list(iter_cooccurrence_pairs(incidence, min_count=1, block_size=2048, max_products=40))
    assert len(blocks) > 3
    joined = {(r, c, n) for b in blocks for r, c, n in zip(*(part.tolist() for part in b))}
    assert joined == brute_pairs(incidence, 1)
    tight = cooccurrence_topk(incidence, 3, max_products=1)
    loose = cooccurrence_topk(incidence, 3)
    assert all(np.array_equal(a, b) for a, b in zip(tight, loose))


@pytest.mark.parametrize("min_count", [1, 2])
def test_selection_rounds_equal_sorted_ranking(min_count):
    # Up to SELECT_ROUNDS the CPU path picks row maxima round by round instead of sorting the pairs;
    # on a larger incidence with many tied counts, its top-k is the sorted ranking's first k columns.
    incidence = random_incidence(21 + min_count, items=400, features=60, density=0.08)
    k = SELECT_ROUNDS
    selected = cooccurrence_topk(incidence, k, min_count=min_count, max_products=5000)
    ranked = cooccurrence_topk(incidence, k + 1, min_count=min_count, max_products=5000)
    np.testing.assert_array_equal(selected[1], ranked[1][:, :k])
    np.testing.assert_array_equal(selected[0], ranked[0][:, :k])
    assert (selected[1] >= 0).mean() > 0.5


def test_unordered_pairs_are_the_same_pairs():
    incidence = random_incidence(5, items=60, features=30)
    for min_count in (1, 3):
        ordered = cooccurrence_pairs(incidence, min_count=min_count, block_size=7)
        unordered = [
            part
            for block in iter_cooccurrence_pairs(incidence, min_count=min_count, block_size=7, ordered=False)
            for part in zip(*(p.tolist() for p in block))
        ]
        assert sorted(unordered) == list(zip(*(p.tolist() for p in ordered)))
