"""PageRank and personalised PageRank by power iteration on CSR (networkx semantics)."""
from __future__ import annotations

from typing import Any

from hopgraph.kernels.backend import module_of, sparse_module


def _xp_of_sparse(matrix: Any) -> Any:
    return module_of(matrix.data)


class RandomWalk:
    """The row-normalised transition of a graph, built once and reused for many (personalised) runs."""

    def __init__(self, adjacency: Any):
        n, m = adjacency.shape
        if n != m:
            raise ValueError(f"adjacency must be square, got {n}×{m}")
        self.xp = xp = _xp_of_sparse(adjacency)
        sparse = sparse_module(xp)
        self.n = n
        matrix = sparse.csr_matrix(adjacency, dtype=xp.float64)
        out_weight = xp.asarray(matrix.sum(axis=1)).ravel()
        self.dangling = out_weight == 0
        inverse = xp.where(self.dangling, 0.0, 1.0 / xp.where(self.dangling, 1.0, out_weight))
        self.transition_t = (sparse.diags(inverse) @ matrix).T.tocsr()

    def run(self, *, damping: float = 0.85, personalization: Any = None, tol: float = 1e-10, max_iter: int = 200) -> Any:
        """Power iteration; dangling mass and teleports follow ``personalization`` (networkx semantics)."""
        xp, n = self.xp, self.n
        if n == 0:
            return xp.zeros(0, dtype=xp.float64)
        if personalization is None:
            p = xp.full(n, 1.0 / n)
        else:
            p = xp.asarray(personalization, dtype=xp.float64).ravel()
            total = float(p.sum()) if p.shape[0] == n else 0.0
            if total <= 0 or bool((p < 0).any()):
                raise ValueError("personalization must be a non-negative vector of length n with a positive sum")
            p = p / total
        x = p.copy()
        for _ in range(max_iter):
            previous = x
            x = damping * (self.transition_t @ x + float(x[self.dangling].sum()) * p) + (1.0 - damping) * p
            if float(xp.abs(x - previous).sum()) < n * tol:
                break
        return x


def pagerank(adjacency: Any, *, damping: float = 0.85, personalization: Any = None, tol: float = 1e-10, max_iter: int = 200) -> Any:
    """Stationary vector of the walk on ``adjacency`` (A[i, j] = weight of i→j); sums to 1.

    Same results as ``networkx.pagerank(G, alpha=damping, personalization=..., weight="weight")``.
    """
    return RandomWalk(adjacency).run(damping=damping, personalization=personalization, tol=tol, max_iter=max_iter)


def personalized_pagerank(adjacency: Any, seeds: Any, **kwargs: Any) -> Any:
    """PageRank restarting at ``seeds`` (a dense weight vector or {node: weight})."""
    if isinstance(seeds, dict):
        xp = _xp_of_sparse(adjacency)
        vector = xp.zeros(adjacency.shape[0], dtype=xp.float64)
        for node, weight in seeds.items():
            vector[int(node)] = float(weight)
        seeds = vector
    return pagerank(adjacency, personalization=seeds, **kwargs)
