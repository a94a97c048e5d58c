"""Every kernel on CuPy gives the numpy result on the same inputs (skipped without a CUDA device)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.kernels import (
    RandomWalk,
    cooccurrence_pairs,
    cooccurrence_topk,
    cosine_topk,
    iter_cooccurrence_pairs,
    normalize_rows,
    pagerank,
    personalized_pagerank,
    to_numpy,
)
from hopgraph.kernels.backend import cupy_available

if not cupy_available():
    pytest.skip("CuPy with a usable CUDA device is not available", allow_module_level=True)

import cupy  # noqa: E402
import cupyx.scipy.sparse as cusp  # noqa: E402

pytestmark = pytest.mark.gpu


def integer_vectors(seed: int, rows: int, dim: int) -> np.ndarray:
    """Small integers: dot products are exact on both backends, so tie-breaking is compared too."""
    return np.random.default_rng(seed).integers(-2, 3, size=(rows, dim)).astype(np.float32)


def incidence(seed: int, items: int = 300, features: int = 120) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    return sp.random(items, features, density=0.05, format="csr", random_state=rng, dtype=np.float32)


def weighted_graph(seed: int, n: int = 500) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    graph = sp.random(n, n, density=0.01, format="csr", random_state=rng, dtype=np.float64)
    keep = np.ones(n)
    keep[rng.choice(n, 25, replace=False)] = 0.0  # dangling nodes: no out-edges
    return (sp.diags(keep) @ graph).tocsr()


def test_normalize_rows():
    x = np.random.default_rng(0).standard_normal((50, 8))
    x[3] = 0.0
    np.testing.assert_allclose(to_numpy(normalize_rows(cupy.asarray(x))), normalize_rows(x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("block_size", [16, 4096])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_cosine_topk(block_size, exclude_self):
    vectors = integer_vectors(1, 200, 6)
    want = cosine_topk(vectors, vectors, 12, block_size=block_size, exclude_self=exclude_self)
    got = cosine_topk(
        cupy.asarray(vectors), cupy.asarray(vectors), 12, block_size=block_size, exclude_self=exclude_self
    )
    assert isinstance(got[0], cupy.ndarray) and isinstance(got[1], cupy.ndarray)
    np.testing.assert_array_equal(to_numpy(got[0]), want[0])
    np.testing.assert_array_equal(to_numpy(got[1]), want[1])


def test_cosine_topk_normalised_scores():
    rng = np.random.default_rng(2)
    corpus, queries = normalize_rows(rng.standard_normal((400, 32))), normalize_rows(rng.standard_normal((40, 32)))
    want_scores, _ = cosine_topk(queries, corpus, 10, block_size=128)
    got_scores, _ = cosine_topk(cupy.asarray(queries), cupy.asarray(corpus), 10, block_size=128)
    np.testing.assert_allclose(to_numpy(got_scores), want_scores, atol=1e-5)


def test_pagerank_and_personalized():
    graph = weighted_graph(3)
    restart = np.zeros(graph.shape[0])
    restart[[4, 9, 100]] = [1.0, 2.0, 0.5]
    gpu_graph = cusp.csr_matrix(graph)
    got = pagerank(gpu_graph, tol=1e-12, max_iter=1000)
    assert isinstance(got, cupy.ndarray) and got.dtype == cupy.float64
    np.testing.assert_allclose(to_numpy(got), pagerank(graph, tol=1e-12, max_iter=1000), atol=1e-10)
    np.testing.assert_allclose(
        to_numpy(pagerank(gpu_graph, personalization=cupy.asarray(restart), tol=1e-12, max_iter=1000)),
        pagerank(graph, personalization=restart, tol=1e-12, max_iter=1000),
        atol=1e-10,
    )
    seeds = {4: 1.0, 9: 2.0}
    np.testing.assert_allclose(
        to_numpy(personalized_pagerank(gpu_graph, seeds, damping=0.5)),
        personalized_pagerank(graph, seeds, damping=0.5),
        atol=1e-10,
    )
    np.testing.assert_allclose(
        to_numpy(RandomWalk(gpu_graph).run(personalization=restart, damping=0.3)),
        RandomWalk(graph).run(personalization=restart, damping=0.3),
        atol=1e-10,
    )


@pytest.mark.parametrize("min_count", [1, 2])
def test_cooccurrence_topk(min_count):
    postings = incidence(4)
    want = cooccurrence_topk(postings, 8, block_size=64, min_count=min_count)
    got = cooccurrence_topk(cusp.csr_matrix(postings), 8, block_size=64, min_count=min_count)
    np.testing.assert_array_equal(to_numpy(got[0]), want[0])
    np.testing.assert_array_equal(to_numpy(got[1]), want[1])


@pytest.mark.parametrize("min_count", [1, 2])
def test_cooccurrence_pairs(min_count):
    postings = incidence(5).T.tocsr()  # concepts × chunks
    want = cooccurrence_pairs(postings, min_count=min_count, block_size=32)
    got = cooccurrence_pairs(cusp.csr_matrix(postings), min_count=min_count, block_size=32)
    for got_part, want_part in zip(got, want):
        np.testing.assert_array_equal(to_numpy(got_part), want_part)
    blocks = list(iter_cooccurrence_pairs(cusp.csr_matrix(postings), min_count=min_count, block_size=32))
    assert sum(int(b[0].shape[0]) for b in blocks) == want[0].shape[0]
