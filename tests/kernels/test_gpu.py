"""Every kernel on CuPy gives the numpy result on the same inputs, and so do the pipeline's graph
builders, retrieval's PPR and FAISS on the GPU (skipped without a CUDA device)."""

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
    sparse_on,
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


def test_sparse_on_moves_a_scipy_matrix_to_the_device():
    counts = incidence(6).astype(np.int32)  # cupyx holds no integers: they travel as float64
    moved = sparse_on(cupy, counts)
    assert isinstance(moved, cusp.csr_matrix) and moved.dtype == cupy.float64
    np.testing.assert_array_equal(to_numpy(moved.toarray()), counts.toarray())
    assert sparse_on(cupy, incidence(6)).dtype == cupy.float32


def test_graph_builders_on_cupy_give_the_numpy_graphs(sample_index):
    from hopgraph.index import graphs
    from hopgraph.store import IndexStore

    store = IndexStore(sample_index)
    vectors, postings = store.read_array("chunk_vectors"), store.read_graph("postings_chunks")
    knn = {
        xp: graphs.knn_graph(vectors, postings, 4, max_df=0.5, max_postings=50, exact_limit=10_000, xp=xp)
        for xp in (np, cupy)
    }
    assert isinstance(knn[cupy], sp.csr_matrix) and knn[np].nnz and (knn[np] != knn[cupy]).nnz == 0
    concepts = {
        xp: graphs.concept_graph(
            store.read_array("keyword_vectors"), postings.T.tocsr(), theta_sem=0.3, theta_co=1, xp=xp
        )
        for xp in (np, cupy)
    }
    assert concepts[np].nnz and (concepts[np] != concepts[cupy]).nnz == 0
    np.testing.assert_allclose(concepts[cupy].data, concepts[np].data)
    for graph in (knn[np], concepts[np]):
        rank = graphs.node_rank(graph, 0.85, cupy)
        assert isinstance(rank, np.ndarray)
        np.testing.assert_allclose(rank, graphs.node_rank(graph, 0.85, np), atol=1e-12)


def test_patched_cosine_candidates_on_cupy_give_the_numpy_patch(monkeypatch):
    from hopgraph.index import graphs

    monkeypatch.setattr(graphs, "PATCH_ROWS_PER_ROOT", 100.0)  # a small corpus: every change is large
    vectors = integer_vectors(5, 400, 6)  # exact dot products: ties are broken alike too
    old_scores, old_indices = graphs.cosine_candidates(vectors[:380], 4, exact_limit=1000)
    same_as = np.concatenate([np.arange(380), np.full(20, -1)])
    same_as[7] = -1  # a changed chunk: its old row's neighbours lose a candidate
    patched = {
        xp: graphs.patched_cosine_candidates(vectors, same_as, old_scores, old_indices, xp=xp) for xp in (np, cupy)
    }
    assert patched[np] is not None and patched[cupy] is not None
    np.testing.assert_array_equal(patched[cupy][1], patched[np][1])
    np.testing.assert_allclose(patched[cupy][0], patched[np][0])
    assert patched[cupy][2] == patched[np][2]


def test_ppr_retrieval_on_cuda_ranks_as_on_the_cpu(sample_index):
    from hopgraph.retrieve.methods import METHODS
    from hopgraph.retrieve.query import make_query
    from hopgraph.retrieve.retriever import Retriever

    retriever = Retriever(sample_index, device="cpu")
    question = "Who founded the laboratory that the first director of the Halvern Harbor Institute had previously led?"
    vector = retriever.embed([question])[0]
    scope = retriever.scope(None)
    ranked = {
        device: [
            (c.index, round(c.score, 9))
            for c in METHODS["ppr"](
                retriever.index, make_query(retriever.index, question, vector, device), scope, retriever.config
            )
        ]
        for device in ("cpu", "cuda")
    }
    assert ranked["cpu"] and ranked["cuda"] == ranked["cpu"]
    assert retriever.index.memo("walk", "open:cupy", lambda: None).xp is cupy  # the walk was built on the device


def test_faiss_on_the_gpu_finds_what_the_cpu_index_finds():
    faiss = pytest.importorskip("faiss")
    from hopgraph.kernels.ann import faiss_gpu_usable, ivf_cosine_topk

    if not faiss_gpu_usable(faiss):
        pytest.skip("the installed FAISS has no GPU support")
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((50, 24))
    vectors = normalize_rows(centers[rng.integers(0, 50, 5000)] + 0.3 * rng.standard_normal((5000, 24)))
    exact = cosine_topk(vectors, vectors, 3, exclude_self=True)[1]
    on_cpu, on_gpu = ivf_cosine_topk(vectors, 3, device="cpu")[1], ivf_cosine_topk(vectors, 3, device="cuda")[1]
    assert on_gpu.shape == (5000, 3) and not (on_gpu == np.arange(5000)[:, None]).any()

    def recall(found):
        return np.mean([len(set(a) & set(b)) / 3 for a, b in zip(found.tolist(), exact.tolist())])

    assert recall(on_gpu) > 0.97 and recall(on_gpu) >= recall(on_cpu) - 0.01


def test_index_graph_stages_on_cuda_store_the_cpu_graphs(tmp_path, sample_documents):
    """embedding.device=cuda moves the knn/concept/rank stages to CuPy; what they store is the CPU's."""
    from hopgraph.config import load_config
    from hopgraph.index.pipeline import build_index
    from hopgraph.store import IndexStore
    from tests.conftest import SAMPLE_SETTINGS

    cache = str(tmp_path / "vectors.sqlite")  # the CPU build's vectors serve both: only the graph kernels differ
    stores = {}
    for device in ("cpu", "cuda"):
        config = load_config(None, {**SAMPLE_SETTINGS, "embedding.device": device, "embedding.cache": cache})
        build_index(sample_documents, tmp_path / device, config, progress=False)
        stores[device] = IndexStore(tmp_path / device)
    for name in ("knn", "concepts"):
        cpu, gpu = stores["cpu"].read_graph(name), stores["cuda"].read_graph(name)
        assert cpu.nnz and (cpu != gpu).nnz == 0
    for name in ("chunk_rank_knn", "concept_rank", "chunk_rank_concept"):
        np.testing.assert_allclose(stores["cuda"].read_array(name), stores["cpu"].read_array(name), atol=1e-12)
