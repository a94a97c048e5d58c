"""PageRank / personalised PageRank against networkx on random weighted digraphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.kernels import RandomWalk, pagerank, personalized_pagerank

TOL = 1e-12  # both sides iterate to this, so atol=1e-8 compares converged vectors


def random_graph(seed: int, n: int = 60, density: float = 0.06, dangling: int = 8) -> sp.csr_matrix:
    """Weighted digraph with self-loops allowed and ``dangling`` nodes without out-edges."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, n)) < density) * rng.uniform(0.1, 3.0, size=(n, n))
    dense[rng.choice(n, size=dangling, replace=False)] = 0.0
    return sp.csr_matrix(dense)


def networkx_rank(adjacency: sp.csr_matrix, damping: float, personalization: dict | None = None) -> np.ndarray:
    graph = nx.from_scipy_sparse_array(adjacency, create_using=nx.DiGraph)
    ranks = nx.pagerank(graph, alpha=damping, personalization=personalization, weight="weight", tol=TOL, max_iter=1000)
    return np.array([ranks[i] for i in range(adjacency.shape[0])])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_matches_networkx(seed, damping):
    adjacency = random_graph(seed)
    ranks = pagerank(adjacency, damping=damping, tol=TOL, max_iter=1000)
    assert ranks.dtype == np.float64 and ranks.shape == (60,)
    assert ranks.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(ranks, networkx_rank(adjacency, damping), atol=1e-8)


@pytest.mark.parametrize("seed", [3, 4])
def test_personalization_matches_networkx(seed):
    adjacency = random_graph(seed, dangling=10)
    rng = np.random.default_rng(seed)
    weights = np.where(rng.random(60) < 0.2, rng.uniform(0.5, 2.0, 60), 0.0)
    weights[0] = 1.0
    ranks = pagerank(adjacency, personalization=weights, tol=TOL, max_iter=1000)
    want = networkx_rank(adjacency, 0.85, {i: float(w) for i, w in enumerate(weights) if w > 0})
    np.testing.assert_allclose(ranks, want, atol=1e-8)


def test_personalized_pagerank_dict_and_vector_seeds():
    adjacency = random_graph(5)
    seeds = {2: 1.0, 17: 3.0}
    from_dict = personalized_pagerank(adjacency, seeds, damping=0.6, tol=TOL, max_iter=1000)
    vector = np.zeros(60)
    vector[[2, 17]] = [1.0, 3.0]
    np.testing.assert_array_equal(
        from_dict, personalized_pagerank(adjacency, vector, damping=0.6, tol=TOL, max_iter=1000)
    )
    np.testing.assert_allclose(from_dict, networkx_rank(adjacency, 0.6, seeds), atol=1e-8)


def test_random_walk_is_reusable_and_matches_pagerank():
    adjacency = random_graph(6)
    walk = RandomWalk(adjacency)
    for seed in (1, 30):
        restart = np.zeros(60)
        restart[seed] = 1.0
        np.testing.assert_array_equal(walk.run(personalization=restart), pagerank(adjacency, personalization=restart))


def test_edge_cases():
    assert pagerank(sp.csr_matrix((0, 0))).shape == (0,)
    np.testing.assert_allclose(pagerank(sp.csr_matrix((4, 4))), np.full(4, 0.25))
    duplicated = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 2))
    np.testing.assert_allclose(
        pagerank(duplicated, tol=TOL), pagerank(sp.csr_matrix(duplicated.toarray()), tol=TOL), atol=1e-14
    )


def test_bad_input_raises():
    adjacency = random_graph(7)
    with pytest.raises(ValueError, match="square"):
        pagerank(sp.csr_matrix(np.ones((3, 4))))
    with pytest.raises(ValueError, match="non-negative"):
        pagerank(sp.csr_matrix(np.array([[0.0, -1.0], [1.0, 0.0]])))
    with pytest.raises(ValueError, match="positive sum"):
        pagerank(adjacency, personalization=np.zeros(60))
    with pytest.raises(ValueError, match="shape"):
        pagerank(adjacency, personalization=np.ones(59))
    with pytest.raises(ValueError, match="non-negative"):
        pagerank(adjacency, personalization=-np.ones(60))
    with pytest.raises(ValueError, match="outside"):
        personalized_pagerank(adjacency, {60: 1.0})
    with pytest.raises(ValueError, match="damping"):
        pagerank(adjacency, damping=1.5)


def test_warns_when_not_converged():
    with pytest.warns(RuntimeWarning, match="did not converge"):
        pagerank(random_graph(8), max_iter=2)
