"""PageRank and personalised PageRank by power iteration on CSR, with networkx's semantics.

The transposed, row-normalised transition is built once, so each iteration is one sparse
mat-vec plus a few vector operations; the same code runs on scipy.sparse and cupyx.scipy.sparse.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from hopgraph.deadline import check_deadline
from hopgraph.kernels.backend import module_of, sparse_module


class RandomWalk:
    """The walk over a weighted directed graph (A[i, j] = weight of i → j), reusable for many runs.

    Building the transition dominates a single run on large graphs, so callers that rank many
    seed sets (personalised PageRank per query) build this once.
    """

    def __init__(self, adjacency: Any):
        if len(adjacency.shape) != 2 or adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"adjacency must be a square matrix, got shape {tuple(adjacency.shape)}")
        self.xp = xp = module_of(adjacency.data)
        sparse = sparse_module(xp)
        self.n = adjacency.shape[0]
        matrix = sparse.csr_matrix(adjacency, dtype=xp.float64, copy=True)
        matrix.sum_duplicates()
        if matrix.nnz and bool((matrix.data < 0).any()):
            raise ValueError("adjacency weights must be non-negative")
        out_weight = xp.asarray(matrix.sum(axis=1)).ravel()
        dangling = out_weight == 0
        inverse = xp.where(dangling, 0.0, 1.0 / xp.where(dangling, 1.0, out_weight))
        self.transition_t = (sparse.diags(inverse) @ matrix).T.tocsr()
        self.dangling = xp.flatnonzero(dangling)

    def run(
        self, *, damping: float = 0.85, personalization: Any = None, tol: float = 1e-10, max_iter: int = 200
    ) -> Any:
        """Stationary vector (float64, sums to 1); dangling mass and teleports follow ``personalization``.

        Starts from the uniform vector and stops once ``sum|x_new - x| < n * tol``, as networkx
        does; if ``max_iter`` runs out first, the last iterate is returned with a RuntimeWarning.
        """
        if not 0.0 <= damping <= 1.0:
            raise ValueError(f"damping must lie in [0, 1], got {damping}")
        xp, n = self.xp, self.n
        if n == 0:
            return xp.zeros(0, dtype=xp.float64)
        p = xp.full(n, 1.0 / n) if personalization is None else self._restart(personalization)
        x = xp.full(n, 1.0 / n)
        for _ in range(max_iter):
            check_deadline()  # a request's deadline stops the walk between iterations
            previous = x
            # Dangling mass stays on the device (0-d array): one host sync per iteration, for the check.
            x = damping * (self.transition_t @ x + x[self.dangling].sum() * p) + (1.0 - damping) * p
            if float(xp.abs(x - previous).sum()) < n * tol:
                return x
        warnings.warn(
            f"PageRank did not converge within {max_iter} iterations (tol={tol})", RuntimeWarning, stacklevel=2
        )
        return x

    def _restart(self, personalization: Any) -> Any:
        """The personalization as a probability vector on this walk's device."""
        xp = self.xp
        p = xp.asarray(personalization, dtype=xp.float64)
        if p.shape != (self.n,):
            raise ValueError(f"personalization must have shape ({self.n},), got {tuple(p.shape)}")
        if bool((p < 0).any()) or not bool(xp.isfinite(p).all()):
            raise ValueError("personalization must be finite and non-negative")
        total = float(p.sum())
        if total <= 0:
            raise ValueError("personalization must have a positive sum (all-zero restart vector)")
        return p / total


def pagerank(
    adjacency: Any, *, damping: float = 0.85, personalization: Any = None, tol: float = 1e-10, max_iter: int = 200
) -> Any:
    """PageRank of every node of ``adjacency`` (square CSR, A[i, j] = weight of i → j); sums to 1.

    Same results as ``networkx.pagerank(G, alpha=damping, personalization=..., weight="weight")``.
    """
    return RandomWalk(adjacency).run(damping=damping, personalization=personalization, tol=tol, max_iter=max_iter)


def personalized_pagerank(adjacency: Any, seeds: Any, **kwargs: Any) -> Any:
    """PageRank restarting at ``seeds``: a dense weight vector, or {node index: weight}."""
    if isinstance(seeds, Mapping):
        n = adjacency.shape[0]
        vector = np.zeros(n, dtype=np.float64)
        for node, weight in seeds.items():
            if not 0 <= int(node) < n:
                raise ValueError(f"seed node {node} is outside 0..{n - 1}")
            vector[int(node)] += float(weight)
        seeds = module_of(adjacency.data).asarray(vector)
    return pagerank(adjacency, personalization=seeds, **kwargs)
