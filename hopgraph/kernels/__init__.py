"""Array kernels written once against numpy or cupy (see :mod:`hopgraph.kernels.backend`)."""

from hopgraph.kernels.backend import array_module, cupy_available, resolve_device, sparse_on, to_numpy
from hopgraph.kernels.cooccurrence import (
    cooccurrence_matrix,
    cooccurrence_pairs,
    cooccurrence_topk,
    iter_cooccurrence_pairs,
    partners_topk,
)
from hopgraph.kernels.pagerank import RandomWalk, pagerank, personalized_pagerank
from hopgraph.kernels.similarity import (
    cosine_topk,
    drop_own,
    group_mean_vectors,
    mean_vectors,
    merge_topk,
    normalize_rows,
)

__all__ = [
    "array_module",
    "cupy_available",
    "resolve_device",
    "sparse_on",
    "to_numpy",
    "cooccurrence_matrix",
    "cooccurrence_pairs",
    "cooccurrence_topk",
    "iter_cooccurrence_pairs",
    "partners_topk",
    "RandomWalk",
    "pagerank",
    "personalized_pagerank",
    "cosine_topk",
    "drop_own",
    "group_mean_vectors",
    "mean_vectors",
    "merge_topk",
    "normalize_rows",
]
