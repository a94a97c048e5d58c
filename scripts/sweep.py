"""Documented parameter sweep: Coverage of one method over a grid of retrieval settings.

Retrieval settings are tuned only through sweeps like this one, on whole benchmark sets (never per
question); the JSON it writes is the record of what was tried.

    python scripts/sweep.py ../shared/data/musique/ketrag_500 --index .hopgraph/musique-1200 \
        --method ppr --grid '{"ppr.text_weight": [0.4, 0.6], "ppr.damping": [0.3, 0.5]}' \
        --out scripts/results/sweep_ppr_musique_l1200.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from hopgraph.evaluate.metrics import RECALL_AT, coverage_hit, supporting_recall_at
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.datasets import load_benchmark
from hopgraph.retrieve.retriever import Retriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--index", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument(
        "--grid", required=True, help="JSON object: retrieval setting (dotted, under [retrieval]) → list of values"
    )
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    bench = load_benchmark(args.dataset, limit=args.limit)
    retriever = Retriever(args.index)
    vectors = retriever.embed([q.text for q in bench.questions])
    grid = json.loads(args.grid)
    rows = []
    for values in itertools.product(*grid.values()):
        settings = dict(zip(grid, values))
        started = time.perf_counter()
        results = [
            retriever.retrieve(q.text, method=args.method, vector=v, overrides=settings)
            for v, q in zip(vectors, bench.questions)
        ]
        contexts = [r.context for r in results]
        seconds = [r.seconds for r in results]
        recall_at = {
            k: [supporting_recall_at(r.doc_ids, q.supporting_ids, k) for r, q in zip(results, bench.questions)]
            for k in RECALL_AT
        }
        hits = [coverage_hit(c, q.answers) for c, q in zip(contexts, bench.questions)]
        word_hits = [coverage_hit(c, q.answers, whole_words=True) for c, q in zip(contexts, bench.questions)]
        rows.append(
            {
                **settings,
                "coverage": round(100 * float(np.mean(hits)), 2),
                "coverage_whole_word": round(100 * float(np.mean(word_hits)), 2),
                "seconds": round(time.perf_counter() - started, 1),
                "query_ms_p50": round(1000 * float(np.median(seconds)), 2),
                **{
                    f"supporting_recall_at_{k}": round(100 * float(np.mean([x for x in r if x is not None])), 2)
                    for k, r in recall_at.items()
                    if any(x is not None for x in r)
                },
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    best = max(rows, key=lambda r: r["coverage"])
    write_json(
        Path(args.out),
        {
            "dataset": bench.name,
            "index": args.index,
            "method": args.method,
            "n_questions": len(bench.questions),
            "grid": grid,
            "results": rows,
            "best": best,
            **provenance(),
        },
    )


if __name__ == "__main__":
    main()
