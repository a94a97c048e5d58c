"""FAISS inverted-list top-k against exact blocked top-k."""

from __future__ import annotations

import numpy as np
import pytest

from hopgraph.kernels import cosine_topk, normalize_rows
from hopgraph.kernels.ann import ivf_cosine_topk

# faiss-cpu is a dependency; only a GPU image that carries neither FAISS wheel lacks the module.
pytest.importorskip("faiss", reason="FAISS is not installed in this environment")


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n // 100, dim))
    return normalize_rows(centers[rng.integers(0, len(centers), n)] + 0.3 * rng.standard_normal((n, dim)))


def test_ivf_topk_never_returns_self_and_finds_the_exact_neighbours():
    vectors = clustered(5000, 24, seed=3)
    scores, indices = ivf_cosine_topk(vectors, 3)
    assert indices.shape == (5000, 3) and not (indices == np.arange(5000)[:, None]).any()
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    exact = cosine_topk(vectors, vectors, 3, exclude_self=True)[1]
    recall = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(indices.tolist(), exact.tolist())])
    assert recall > 0.97, recall


def test_ivf_topk_small_inputs():
    vectors = clustered(100, 8, seed=1)[:2]
    scores, indices = ivf_cosine_topk(vectors, 5)
    assert indices.tolist() == [[1], [0]]
    assert ivf_cosine_topk(vectors[:1], 2)[1].shape == (1, 0)


def test_cuda_without_a_gpu_faiss_builds_the_same_index_on_the_cpu():
    import faiss

    from hopgraph.kernels.ann import faiss_gpu_usable

    if faiss_gpu_usable(faiss):
        pytest.skip("this FAISS has GPU support: tests/kernels/test_gpu.py compares the GPU index")
    vectors = clustered(2000, 16, seed=4)
    on_cpu = ivf_cosine_topk(vectors, 4, device="cpu")
    asked_cuda = ivf_cosine_topk(vectors, 4, device="cuda")
    np.testing.assert_array_equal(asked_cuda[1], on_cpu[1])
    np.testing.assert_array_equal(asked_cuda[0], on_cpu[0])
