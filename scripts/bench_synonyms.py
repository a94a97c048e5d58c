"""Exact against FAISS inverted-list synonym search over one index's entity names: edges kept, time.

Above ``graph.exact_synonym_limit`` embedded names the entity layer finds each name's nearest names
with FAISS IVF instead of all pairs (``hopgraph.index.entities.synonym_edges``). This embeds the
names an index embedded (titles and names of two sub-chunks or more) with the configured model and
builds the synonym graph both ways, so the edges the approximate search misses are counted.

    python3 scripts/bench_synonyms.py --index /tmp/hopgraph-insert-cost/after-stand-in/100k/index
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "scripts" / "results" / "synonym_search.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="an index directory with an entity layer")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    from hopgraph.config import load_config  # noqa: PLC0415
    from hopgraph.evaluate.report import provenance, write_json  # noqa: PLC0415
    from hopgraph.index.entities import synonym_edges  # noqa: PLC0415
    from hopgraph.kernels import normalize_rows  # noqa: PLC0415
    from hopgraph.models import load_embedder  # noqa: PLC0415
    from hopgraph.store import IndexStore  # noqa: PLC0415

    store = IndexStore(args.index)
    config = load_config(None, {})
    table = store.read_table("entities", ["display"])
    embedded = np.flatnonzero(store.read_array("entity_vectors").any(axis=1))
    names = [table["display"][e] for e in embedded]
    vectors = normalize_rows(load_embedder(config.embedding, cached=False).encode(names, progress=True))
    graph = config.graph
    started = time.perf_counter()
    exact = synonym_edges(vectors, graph.synonym_threshold, graph.synonym_k, exact_limit=len(names))
    exact_seconds = time.perf_counter() - started
    started = time.perf_counter()
    approximate = synonym_edges(vectors, graph.synonym_threshold, graph.synonym_k, exact_limit=1)
    approximate_seconds = time.perf_counter() - started
    found = exact.multiply(approximate > 0)
    payload = {
        "index": str(args.index),
        "names": len(names),
        "model": config.embedding.model,
        "synonym_threshold": graph.synonym_threshold,
        "synonym_k": graph.synonym_k,
        "exact": {"edges": int(exact.nnz // 2), "seconds": round(exact_seconds, 3)},
        "ivf": {"edges": int(approximate.nnz // 2), "seconds": round(approximate_seconds, 3)},
        "exact_edges_found": int(found.nnz // 2),
        "recall": round(found.nnz / exact.nnz, 4) if exact.nnz else None,
        "speedup": round(exact_seconds / approximate_seconds, 2),
        "provenance": provenance(),
    }
    write_json(args.out, payload)
    print({k: v for k, v in payload.items() if k != "provenance"})


if __name__ == "__main__":
    main()
