"""Approximate cosine top-k with FAISS inverted lists, for KNN graphs too large for exact search.

Exact blocked top-k does n² dot products; an IVF index compares each vector only with the lists
nearest to it, about √n clusters of √n vectors each, so a 100k-chunk KNN graph costs seconds
instead of minutes. Results are approximate (a true neighbour in an unprobed list is missed).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hopgraph.errors import DependencyError
from hopgraph.kernels.backend import to_numpy
from hopgraph.kernels.similarity import drop_own


def faiss_gpu_usable(faiss: Any) -> bool:
    """True where the installed FAISS was built with GPU support and sees a device (faiss-cpu: never)."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def ivf_cosine_topk(
    vectors: Any, k: int, *, probes: int = 16, seed: int = 0, device: str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices) of the k nearest other rows of ``vectors`` (row-normalised), best first.

    Slots with no neighbour found hold index -1. With ``device`` cuda (or auto) and a FAISS built
    with GPU support, the index is trained, filled and searched on GPU 0; otherwise on the CPU.
    Either way the same seeded IVF index is built, so results agree up to float summation order.
    """
    try:
        import faiss
    except ImportError:
        raise DependencyError(
            "approximate KNN needs faiss: pip install faiss-cpu (on a GPU machine instead: faiss-gpu-cu12)"
        ) from None
    data = np.ascontiguousarray(to_numpy(vectors), dtype=np.float32)
    n, dim = data.shape
    k = max(0, min(k, n - 1))
    if k == 0:
        return np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)
    lists = max(1, min(int(4 * math.sqrt(n)), n // 39))  # FAISS wants ≥ 39 training points per list
    quantizer = faiss.IndexFlatIP(dim)
    index: Any = faiss.IndexIVFFlat(quantizer, dim, lists, faiss.METRIC_INNER_PRODUCT)  # or its GPU copy below
    index.cp.seed = seed
    index.nprobe = min(probes, lists)  # set before a GPU copy, which takes it over
    if device != "cpu" and faiss_gpu_usable(faiss):
        resources = faiss.StandardGpuResources()  # must outlive the GPU index: both are locals of this call
        index = faiss.index_cpu_to_gpu(resources, 0, index)
        index.nprobe = min(probes, lists)
        if hasattr(index, "cp"):  # the GPU index trains its own k-means: same seed as on the CPU
            index.cp.seed = seed
    index.train(data)
    index.add(data)
    scores, indices = index.search(data, k + 1)
    scores, indices = drop_own(scores, indices, np.arange(n), k)
    return scores, indices.astype(np.int64)
