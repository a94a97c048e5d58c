"""Blocked cosine top-k against a brute-force reference (exact ties through small-integer data)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.kernels import cosine_topk, mean_vectors, normalize_rows
from hopgraph.kernels.similarity import group_mean_vectors


def brute_topk(
    queries: np.ndarray, corpus: np.ndarray, k: int, exclude_self: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T
    if exclude_self:
        own = np.arange(min(scores.shape))
        scores[own, own] = -np.inf
    k = min(k, corpus.shape[0] - (1 if exclude_self else 0))
    order = np.array([np.lexsort((np.arange(len(row)), -row))[:k] for row in scores], dtype=np.int64).reshape(
        len(scores), k
    )
    return np.take_along_axis(scores, order, axis=1), order


def integer_matrix(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    """Values in {-2..2}: every dot product is exact in float32, and many of them tie."""
    return rng.integers(-2, 3, size=(rows, dim)).astype(np.float32)


def test_normalize_rows_units_and_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]])
    out = normalize_rows(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0], [1.0, 0.0]], rtol=1e-6)


@pytest.mark.parametrize("block_size", [1, 7, 32, 4096])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_matches_brute_force_with_ties(block_size, k):
    rng = np.random.default_rng(k * 1000 + block_size)
    queries, corpus = integer_matrix(rng, 23, 6), integer_matrix(rng, 37, 6)
    scores, indices = cosine_topk(queries, corpus, k, block_size=block_size)
    want_scores, want_indices = brute_topk(queries, corpus, k)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(scores, want_scores)


@pytest.mark.parametrize("block_size", [1, 5, 16, 4096])
def test_exclude_self(block_size):
    rng = np.random.default_rng(block_size)
    vectors = integer_matrix(rng, 31, 4)
    scores, indices = cosine_topk(vectors, vectors, 6, block_size=block_size, exclude_self=True)
    want_scores, want_indices = brute_topk(vectors, vectors, 6, exclude_self=True)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(scores, want_scores)
    assert not (indices == np.arange(31)[:, None]).any()


def test_k_larger_than_corpus_is_capped():
    rng = np.random.default_rng(3)
    vectors = integer_matrix(rng, 9, 3)
    scores, indices = cosine_topk(vectors[:4], vectors, 50, block_size=2)
    assert indices.shape == (4, 9)
    np.testing.assert_array_equal(indices, brute_topk(vectors[:4], vectors, 9)[1])
    _, own_excluded = cosine_topk(vectors, vectors, 50, block_size=4, exclude_self=True)
    assert own_excluded.shape == (9, 8)
    assert all(sorted(row) == sorted(set(range(9)) - {i}) for i, row in enumerate(own_excluded.tolist()))


def test_all_tied_rows_return_lowest_indices():
    corpus = np.ones((10, 2), dtype=np.float32)
    _, indices = cosine_topk(np.ones((2, 2), dtype=np.float32), corpus, 4, block_size=3)
    np.testing.assert_array_equal(indices, [[0, 1, 2, 3], [0, 1, 2, 3]])


def test_normalised_random_data_scores():
    rng = np.random.default_rng(11)
    corpus = normalize_rows(rng.standard_normal((200, 16)))
    queries = normalize_rows(rng.standard_normal((50, 16)))
    scores, indices = cosine_topk(queries, corpus, 10, block_size=64)
    want_scores, want_indices = brute_topk(queries, corpus, 10)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)
    assert (indices == want_indices).mean() > 0.99
    assert (np.diff(scores, axis=1) <= 0).all()


def test_empty_inputs_and_zero_k():
    corpus = np.ones((5, 2), dtype=np.float32)
    scores, indices = cosine_topk(np.zeros((0, 2), dtype=np.float32), corpus, 3)
    assert scores.shape == indices.shape == (0, 3)
    assert cosine_topk(corpus, corpus, 0)[1].shape == (5, 0)
    assert cosine_topk(corpus[:1], corpus[:1], 3, exclude_self=True)[1].shape == (1, 0)
    with pytest.raises(ValueError):
        cosine_topk(corpus, corpus, 2, block_size=0)


def test_mean_vectors_in_row_blocks_equal_one_product_and_bound_memory():
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((40_000, 32)).astype(np.float32)
    incidence = sp.random(40_000, 50, density=0.05, format="csr", random_state=5)
    whole = mean_vectors(incidence, vectors)  # under the default block: one product, as before
    tracemalloc.start()
    blocked = mean_vectors(incidence, vectors, block_rows=4096)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(blocked, whole, atol=1e-6)
    assert blocked.dtype == np.float32 and np.allclose(np.linalg.norm(blocked, axis=1), 1, atol=1e-5)
    # A float64 copy of all vectors would be 10 MB; a block's copy is 1 MB (+ the incidence's copy).
    assert peak < vectors.nbytes, peak
    with pytest.raises(ValueError, match="block_rows"):
        mean_vectors(incidence, vectors, block_rows=0)


def test_one_row_per_group_gives_the_bits_of_the_product():
    """The shortcut for one sub-chunk per chunk equals the sparse product bit for bit: negative
    zeros (which the product's 0.0 + x turns positive), an all-zero row, and the caller's array
    left as it was."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors[3, :5] = -0.0
    vectors[4] = 0.0
    before = vectors.copy()
    membership = sp.identity(300, format="csr")
    fast = group_mean_vectors(vectors, np.arange(300), 300)
    product = mean_vectors(membership, vectors)
    assert fast.dtype == product.dtype == np.float32
    assert fast.tobytes() == product.tobytes()
    assert vectors.tobytes() == before.tobytes()
    shuffled = rng.permutation(300)  # not in order: the product, whatever it gives
    assert (
        group_mean_vectors(vectors, shuffled, 300).tobytes()
        == mean_vectors(sp.csr_matrix((np.ones(300), (np.arange(300), shuffled)), shape=(300, 300)), vectors).tobytes()
    )


def test_the_means_of_the_last_groups_alone_are_bitwise_those_of_all_groups():
    """An update computes only the chunks after those it kept: the same bits as the whole product,
    whatever block the first of them starts in. Blocks of 7 rows and 3 rows per group here, so
    group 2 (rows 6-8) straddles a block: summed as 1e20 + (-1e20 + 1e-20) its first component is
    0, summed in one go 1e-20; only sums that start where the whole product's blocks do agree."""
    rng = np.random.default_rng(11)
    group = np.repeat(np.arange(40), 3)
    vectors = rng.standard_normal((len(group), 8)).astype(np.float32)
    vectors[6:9, 0] = [1e20, -1e20, 1e-20]
    vectors[12, :3] = -0.0
    whole = group_mean_vectors(vectors, group, 40, block_rows=7)
    for first in (0, 1, 2, 3, 9, 17, 39, 40):
        tail = group_mean_vectors(vectors, group, 40, first=first, block_rows=7)
        assert tail.shape == (40 - first, 8) and tail.tobytes() == whole[first:].tobytes(), first
    # A first group with no rows, whose next row starts a block: still one row per group from it on.
    ones = np.ones((4, 2), np.float32)
    assert group_mean_vectors(ones, [0, 0, 2, 2], 3, first=1, block_rows=2).shape == (2, 2)
    whole_of_two = group_mean_vectors(ones[:2], [2, 2], 3)
    assert group_mean_vectors(ones[:2], [2, 2], 3, first=1).tobytes() == whole_of_two[1:].tobytes()
    identity = group_mean_vectors(vectors, np.arange(len(group)), len(group), first=23, block_rows=7)
    assert identity.tobytes() == group_mean_vectors(vectors, np.arange(len(group)), len(group))[23:].tobytes()
    # Groups of several rows, then one row each (an update's appended chunks of one sub-chunk): the
    # rows from ``first`` on are taken alone, and are still the bits of the whole blocked product.
    mixed = np.concatenate([np.repeat(np.arange(5), 4), np.arange(5, 5 + 30)])
    rows = vectors[: len(mixed)].copy()
    rows[25, :2] = -0.0  # a group's only row: 0.0 in the whole product
    whole = group_mean_vectors(rows, mixed, 35, block_rows=7)
    for first in (1, 4, 5, 6, 20, 34, 35):
        tail = group_mean_vectors(rows, mixed, 35, first=first, block_rows=7)
        assert tail.shape == (35 - first, 8) and tail.tobytes() == whole[first:].tobytes(), first


def test_the_means_of_some_columns_are_bitwise_those_of_all_columns():
    """An update recomputes only the keywords whose sentences changed: their rows alone must be the
    bits of the whole blocked product, with the rows no chosen column holds left out of each block."""
    rng = np.random.default_rng(5)
    incidence = sp.random(61, 23, density=0.15, format="lil", random_state=rng)
    vectors = rng.standard_normal((61, 6)).astype(np.float32)
    # Column 0 sums 1e20 in one block of 4 rows and -1e20 + 1e-20 in the next: 0 by blocks, 1e-20 in one go.
    vectors[3, 0], vectors[4, 0], vectors[5, 0] = 1e20, -1e20, 1e-20
    vectors[10, :2] = -0.0
    incidence[:, 0] = 0.0
    incidence[[3, 4, 5, 10], 0] = 1.0
    incidence = incidence.tocsr()
    for block_rows in (4, 7, 1000):
        whole = mean_vectors(incidence, vectors, block_rows=block_rows)
        for columns in ([0], [0, 5, 22], list(range(23)), [], [7, 3]):
            some = mean_vectors(incidence, vectors, block_rows=block_rows, columns=columns)
            assert some.tobytes() == whole[columns].tobytes(), (block_rows, columns)


def test_mean_vectors_leaves_the_caller_s_incidence_as_it_was():
    """A float64 CSR incidence was taken without a copy, and its weights were then all set to 1."""
    weights = sp.csr_matrix(np.array([[0.5, 0.0], [2.0, 3.0]]))
    mean_vectors(weights, np.eye(2, dtype=np.float32))
    assert weights.data.tolist() == [0.5, 2.0, 3.0]
