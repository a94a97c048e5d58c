"""Kernels on CuPy against the same kernels on numpy: time and agreement, on one GPU machine.

Each kernel runs on seeded inputs first with numpy (host) and then with CuPy (device, after a
warm-up that keeps compilation and handle creation out of the numbers; device work is
synchronised before the clock is read). Times include moving the result back to the host, since
that is what the index builder pays. Agreement is measured on the outputs, not assumed:

- cosine top-k: fraction of identical neighbour lists and largest score difference (float32
  sums in a different order can swap near-ties);
- PageRank / personalised PageRank: largest absolute difference of the stationary vectors;
- co-occurrence top-k: integer counts, so the lists must be identical.

    python3 scripts/bench_gpu.py                       # needs CuPy and a CUDA device
    python3 scripts/bench_gpu.py --scale 0.1 --out /tmp/gpu.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pagerank import knn_like_graph  # noqa: E402

from hopgraph.evaluate.report import provenance, write_json  # noqa: E402
from hopgraph.kernels import (  # noqa: E402
    cooccurrence_topk,
    cosine_topk,
    normalize_rows,
    pagerank,
    personalized_pagerank,
    sparse_on,
    to_numpy,
)
from hopgraph.kernels.backend import cupy_available  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "gpu_kernels.json"


def timed(run: Callable[[], Any], repeats: int, sync: Callable[[], None], warm_up: bool) -> tuple[float, Any]:
    """Median seconds over ``repeats`` runs (after one untimed run if ``warm_up``), and the last output on the host."""
    if warm_up:
        to_numpy_tree(run())
        sync()
    times, out = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        out = to_numpy_tree(run())
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def to_numpy_tree(value: Any) -> Any:
    return tuple(to_numpy(v) for v in value) if isinstance(value, tuple) else to_numpy(value)


def compare(
    name: str,
    shape: dict[str, int],
    numpy_run: Callable[[], Any],
    cupy_run: Callable[[], Any],
    agreement: Callable[[Any, Any], dict[str, float]],
    repeats: int,
    cupy_sync: Callable[[], None],
) -> dict[str, Any]:
    # numpy needs no warm-up and its heavy runs take seconds: a third as many runs, at least one.
    host_seconds, host_out = timed(numpy_run, max(1, repeats // 3), lambda: None, warm_up=False)
    device_seconds, device_out = timed(cupy_run, repeats, cupy_sync, warm_up=True)
    row = {
        "kernel": name,
        **shape,
        "numpy_seconds": round(host_seconds, 5),
        "cupy_seconds": round(device_seconds, 5),
        "speedup": round(host_seconds / device_seconds, 1),
        **agreement(host_out, device_out),
    }
    print(
        f"{name:24s} numpy {host_seconds:9.4f} s   cupy {device_seconds:9.4f} s   {row['speedup']:7.1f}x   "
        + ", ".join(f"{k} {v:.3g}" for k, v in agreement(host_out, device_out).items()),
        flush=True,
    )
    return row


def topk_agreement(host: tuple[np.ndarray, np.ndarray], device: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    return {
        "identical_rows": float((host[1] == device[1]).all(axis=1).mean()),
        "max_score_diff": float(np.abs(host[0].astype(np.float64) - device[0]).max()),
    }


def vector_agreement(host: np.ndarray, device: np.ndarray) -> dict[str, float]:
    return {"max_abs_diff": float(np.abs(host - device).max()), "sum": float(device.sum())}


def exact_agreement(host: tuple[np.ndarray, np.ndarray], device: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    return {"identical_rows": float(((host[0] == device[0]) & (host[1] == device[1])).all(axis=1).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiplies every problem size (0.1 for a quick check)"
    )
    parser.add_argument(
        "--repeats", type=int, default=9, help="timed CuPy runs per kernel (numpy runs a third as many)"
    )
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    if not cupy_available():
        sys.exit("bench_gpu.py needs CuPy with a usable CUDA device (pip install 'hopgraph[gpu]' on a GPU machine)")
    import cupy  # noqa: PLC0415

    def size(n: int) -> int:
        return max(100, int(n * args.scale))

    sync = cupy.cuda.Device().synchronize
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []

    corpus_n, query_n, dim, k = size(100_000), size(20_000), 384, 10
    corpus = normalize_rows(rng.standard_normal((corpus_n, dim)).astype(np.float32))
    queries = normalize_rows(rng.standard_normal((query_n, dim)).astype(np.float32))
    gpu_corpus, gpu_queries = cupy.asarray(corpus), cupy.asarray(queries)
    rows.append(
        compare(
            "cosine_topk",
            {"queries": query_n, "corpus": corpus_n, "dim": dim, "k": k},
            lambda: cosine_topk(queries, corpus, k),
            lambda: cosine_topk(gpu_queries, gpu_corpus, k),
            topk_agreement,
            args.repeats,
            sync,
        )
    )
    graph_n = size(50_000)  # a KNN graph: every row against every row
    rows.append(
        compare(
            "cosine_topk_self",
            {"queries": graph_n, "corpus": graph_n, "dim": dim, "k": k},
            lambda: cosine_topk(corpus[:graph_n], corpus[:graph_n], k, exclude_self=True),
            lambda: cosine_topk(gpu_corpus[:graph_n], gpu_corpus[:graph_n], k, exclude_self=True),
            topk_agreement,
            3,
            sync,
        )
    )

    for nodes in (size(50_000), size(1_000_000)):
        graph = knn_like_graph(nodes, 10, 0.01, seed=0)
        gpu_graph = sparse_on(cupy, graph)
        shape = {"nodes": nodes, "edges": int(graph.nnz)}
        rows.append(
            compare(
                "pagerank",
                shape,
                lambda: pagerank(graph),
                lambda: pagerank(gpu_graph),
                vector_agreement,
                args.repeats,
                sync,
            )
        )
        seeds = {int(i): 1.0 for i in rng.choice(nodes, 20, replace=False)}
        rows.append(
            compare(
                "personalized_pagerank",
                shape,
                lambda: personalized_pagerank(graph, seeds, damping=0.5),
                lambda: personalized_pagerank(gpu_graph, seeds, damping=0.5),
                vector_agreement,
                args.repeats,
                sync,
            )
        )

    items, features = size(100_000), size(40_000)
    incidence = sp.random(items, features, density=20 / features, format="csr", random_state=rng, dtype=np.float32)
    gpu_incidence = sparse_on(cupy, incidence)
    rows.append(
        compare(
            "cooccurrence_topk",
            {"items": items, "features": features, "nnz": int(incidence.nnz), "k": k},
            lambda: cooccurrence_topk(incidence, k, min_count=2),
            lambda: cooccurrence_topk(gpu_incidence, k, min_count=2),
            exact_agreement,
            3,
            sync,
        )
    )

    versions = {
        "numpy": np.__version__,
        "cupy": cupy.__version__,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
    }
    write_json(
        args.out,
        {
            "benchmark": "kernels numpy vs cupy",
            "scale": args.scale,
            "repeats": args.repeats,
            "kernels": rows,
            "versions": versions,
            **provenance(),
        },
    )
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
