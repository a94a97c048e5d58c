"""Indexing cost against embedding cost: the LLM-free index of a benchmark corpus, built from scratch.

The vector cache is switched off, so every sub-chunk and sentence is embedded in this run; the
result splits the stage times into model time (embed_units, embed_sentences) and everything else.
The target is a whole index within 1.5x of the embedding time.

    python3 scripts/bench_index_speed.py                              # MuSiQue-500 at ℓ=1200
    python3 scripts/bench_index_speed.py --set chunking.size=150 --set chunking.overlap=0 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from hopgraph import Index, load_config
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.datasets import load_benchmark

REPO = Path(__file__).resolve().parents[1]
MODEL_STAGES = ("embed_units", "embed_sentences")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "musique" / "ketrag_500")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="Build setting override (repeatable)."
    )
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "index_speed_musique_l1200.json")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    config = load_config(None, {**overrides, "embedding.cache": ""})
    documents = load_benchmark(args.dataset).documents
    work = Path(tempfile.mkdtemp(prefix="hopgraph-speed-"))
    try:
        started = time.perf_counter()
        manifest = Index.build(documents, work / "index", config, progress=True).manifest
        total = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stages = {name: record["seconds"] for name, record in manifest["stages"].items()}
    embedding = sum(stages[name] for name in MODEL_STAGES)
    payload = {
        "benchmark": "index speed",
        "dataset": str(args.dataset),
        "settings": config.build_settings(),
        "counts": manifest["counts"],
        "stage_seconds": stages,
        "seconds_total": round(total, 2),
        "seconds_embedding": round(embedding, 2),
        "seconds_other_stages": round(sum(stages.values()) - embedding, 2),
        "total_over_embedding": round(total / embedding, 3),
        "peak_memory_mb": round(manifest["peak_memory_mb"], 1),
        **provenance(),
    }
    write_json(args.out, payload)
    print(
        f"total {total:.1f} s, embedding {embedding:.1f} s, ratio {total / embedding:.2f}, peak "
        f"{payload['peak_memory_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
