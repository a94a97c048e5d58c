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

from hopgraph.config import RetrievalConfig, apply_overrides, validate_section
from hopgraph.errors import ConfigError
from hopgraph.evaluate.metrics import RECALL_AT, coverage_hit, supporting_recall_at
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.datasets import load_benchmark
from hopgraph.retrieve.retriever import Retriever


def read_grid(text: str) -> dict[str, list]:
    """The --grid JSON: an object of non-empty lists, checked before the dataset is read (a value
    that is not a list failed with a traceback after every question was embedded)."""
    try:
        grid = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--grid is not JSON: {exc}") from None
    if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
        raise SystemExit('--grid must be a JSON object of non-empty lists, e.g. {"ppr.damping": [0.5, 0.85]}')
    return grid


def combinations(grid: dict[str, list], base: RetrievalConfig) -> list[dict]:
    """Every combination of the grid, each checked as retrieval settings before the first runs."""
    out = []
    for values in itertools.product(*grid.values()):
        settings = dict(zip(grid, values))
        try:
            validate_section(RetrievalConfig, apply_overrides(base.model_dump(), settings), "--grid")
        except ConfigError as exc:
            raise SystemExit(str(exc)) from None
        out.append(settings)
    return out


def done_rows(out: Path, header: dict) -> list[dict]:
    """The rows an earlier run of the same sweep wrote (it writes after each): a stopped sweep goes on."""
    try:
        earlier = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    same = all(earlier.get(key) == value for key, value in header.items() if key != "grid")  # a grid may grow
    return earlier.get("results", []) if same else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--index", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument(
        "--grid", required=True, help="JSON object: retrieval setting (dotted, under [retrieval]) → list of values"
    )
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", required=True, help="result JSON, written after each setting (a rerun goes on)")
    args = parser.parse_args()

    grid = read_grid(args.grid)
    retriever = Retriever(args.index)
    index_config = retriever.index.config
    settings_list = combinations(grid, index_config.retrieval)
    bench = load_benchmark(args.dataset, limit=args.limit)
    missing = {d.id for d in bench.documents} - set(retriever.index.documents["id"])
    if missing:  # another corpus's index: every question would score 0 without a word
        raise SystemExit(f"{args.index} lacks {len(missing)} of the {len(bench.documents)} passages of {args.dataset}")
    header = {
        "dataset": bench.name,
        "method": args.method,
        "n_questions": len(bench.questions),
        "grid": grid,
        "index_build_settings": index_config.build_settings(),  # chunk size, embedder, graph settings
        "base_retrieval": index_config.retrieval.model_dump(),  # every setting the grid leaves as it is
    }
    out = Path(args.out)

    def measured(row: dict, settings: dict) -> bool:
        return all(row.get(k) == v for k, v in settings.items())

    # Rows an earlier run of this sweep finished, of settings this grid still holds.
    rows = [r for r in done_rows(out, header) if any(measured(r, s) for s in settings_list)]
    vectors = retriever.embed([q.text for q in bench.questions])
    for settings in settings_list:
        if any(measured(row, settings) for row in rows):
            continue
        rows.append(sweep_row(retriever, bench, vectors, args.method, settings))
        print(json.dumps(rows[-1]), flush=True)
        write_json(out, {**header, "index": args.index, "results": rows, **provenance()})
    best = max(rows, key=lambda r: r["coverage"])
    write_json(out, {**header, "index": args.index, "results": rows, "best": best, **provenance()})


def sweep_row(retriever: Retriever, bench, vectors, method: str, settings: dict) -> dict:
    """Coverage, whole-word Coverage, recall@k and latency of ``method`` with ``settings``."""
    started = time.perf_counter()
    results = [
        retriever.retrieve(q.text, method=method, vector=v, overrides=settings)
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
    return {
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


if __name__ == "__main__":
    main()
