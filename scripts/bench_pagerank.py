"""PageRank speed: hopgraph.kernels.pagerank against networkx.pagerank on the same seeded graph.

The graph imitates a chunk KNN graph: every node has ``--degree`` weighted out-edges to random
other nodes, and ``--dangling`` of the nodes have none. Both sides iterate to the same tolerance;
hopgraph's time includes building its transition matrix, networkx's its own graph conversion.

    python3 scripts/bench_pagerank.py                     # 50k nodes, ~500k edges
    python3 scripts/bench_pagerank.py --nodes 200000 --out /tmp/pagerank.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import networkx as nx
import numpy as np
import scipy
import scipy.sparse as sp

from hopgraph.evaluate.report import provenance, write_json
from hopgraph.kernels import pagerank

RESULT = Path(__file__).resolve().parent / "results" / "pagerank_vs_networkx.json"


def knn_like_graph(nodes: int, degree: int, dangling: float, seed: int) -> sp.csr_matrix:
    """Weighted digraph without self-loops; repeated edges are merged by summing their weights."""
    rng = np.random.default_rng(seed)
    sources = np.repeat(np.arange(nodes), degree)
    targets = rng.integers(0, nodes - 1, size=sources.size)
    targets += targets >= sources  # skip the source itself
    weights = rng.uniform(0.1, 1.0, size=sources.size)
    silent = rng.random(nodes) < dangling
    keep = ~silent[sources]
    graph = sp.csr_matrix((weights[keep], (sources[keep], targets[keep])), shape=(nodes, nodes))
    graph.sum_duplicates()
    return graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--degree", type=int, default=10, help="out-edges per node")
    parser.add_argument("--dangling", type=float, default=0.01, help="fraction of nodes without out-edges")
    parser.add_argument("--damping", type=float, default=0.85)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5, help="hopgraph runs (the median is reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()

    graph = knn_like_graph(args.nodes, args.degree, args.dangling, args.seed)
    settings = {"alpha": args.damping, "tol": args.tol, "max_iter": args.max_iter}

    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        ours = pagerank(graph, damping=args.damping, tol=args.tol, max_iter=args.max_iter)
        times.append(time.perf_counter() - started)
    hopgraph_seconds = statistics.median(times)

    digraph = nx.from_scipy_sparse_array(graph, create_using=nx.DiGraph)
    started = time.perf_counter()
    theirs = nx.pagerank(digraph, weight="weight", **settings)
    networkx_seconds = time.perf_counter() - started
    reference = np.array([theirs[i] for i in range(args.nodes)])

    result = {
        "nodes": args.nodes,
        "edges": int(graph.nnz),
        "dangling_nodes": int((np.diff(graph.indptr) == 0).sum()),
        "settings": {**settings, "degree": args.degree, "seed": args.seed},
        "hopgraph_seconds": round(hopgraph_seconds, 4),
        "hopgraph_runs_seconds": [round(t, 4) for t in times],
        "networkx_seconds": round(networkx_seconds, 4),
        "speedup": round(networkx_seconds / hopgraph_seconds, 1),
        "max_abs_diff": float(np.abs(ours - reference).max()),
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__, "networkx": nx.__version__},
        **provenance(),
    }
    write_json(args.out, result)
    print(
        f"{args.nodes} nodes, {graph.nnz} edges: hopgraph {hopgraph_seconds:.3f} s, networkx {networkx_seconds:.2f} s, "
        f"speedup {result['speedup']}x, max |diff| {result['max_abs_diff']:.2e} -> {args.out}"
    )


if __name__ == "__main__":
    main()
