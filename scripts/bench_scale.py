"""Index time and peak memory as the corpus grows: about 10k, 30k and 100k chunks.

The MuSiQue-500 paragraphs are replicated under new document ids (``<id>~r<k>``) until the target
chunk count is reached, and indexed at ℓ=150 with one chunk per paragraph (no packing), so every
replica cuts into the same texts. Embeddings therefore come from the shared vector cache after a
warm-up run that embeds one replica: the sizes measure everything the index does besides the
model itself (cache reads, chunking, keywords, graphs, writes). Model time is linear by
construction (one pass per text) and is reported by the warm-up. Each size runs in a fresh
process, so its peak resident memory is its own. Replication is the hard case for the graphs:
every keyword's posting list grows with the corpus, instead of new text bringing new words.

    python3 scripts/bench_scale.py                               # 10k, 30k, 100k chunks
    python3 scripts/bench_scale.py --sizes 5000 20000 --out /tmp/scale.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from hopgraph import Index, load_config
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.datasets import load_benchmark

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "scripts" / "results" / "scale.json"
SOURCE = REPO.parent / "shared" / "data" / "musique" / "ketrag_500"
SETTINGS = {"chunking.size": 150, "chunking.overlap": 0, "chunking.pack_documents": False}
MODEL_STAGES = ("embed_units", "embed_sentences")


def replicated(source: Path, count: int) -> list:
    """The first ``count`` documents of the source corpus repeated with fresh ids."""
    base = load_benchmark(source).documents
    copies = math.ceil(count / len(base))
    docs = [replace(d, id=f"{d.id}~r{k}") for k in range(copies) for d in base]
    return docs[:count]


def run_one(source: Path, documents: int, work: Path) -> dict:
    """Build one index in this process and report its manifest figures (called in a subprocess)."""
    docs = replicated(source, documents)
    shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    manifest = Index.build(docs, work, load_config(None, SETTINGS), progress=False).manifest
    total = time.perf_counter() - started
    stages = {name: record["seconds"] for name, record in manifest["stages"].items()}
    shutil.rmtree(work, ignore_errors=True)
    return {
        "documents": documents,
        "chunks": manifest["counts"]["chunks"],
        "sentences": manifest["counts"]["sentences"],
        "seconds_total": round(total, 2),
        "seconds_model_stages": round(sum(stages[s] for s in MODEL_STAGES), 2),
        "seconds_other_stages": round(sum(v for k, v in stages.items() if k not in MODEL_STAGES), 2),
        "stage_seconds": stages,
        "peak_memory_mb": round(manifest["peak_memory_mb"], 1),
        "knn_edges": manifest["counts"].get("knn_edges"),
        "concept_edges": manifest["counts"].get("concept_edges"),
    }


def in_subprocess(source: Path, documents: int, work: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(documents), "--source", str(source), "--work", str(work)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"size {documents} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x (1 = linear growth)."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000], help="Target chunk counts.")
    parser.add_argument("--source", type=Path, default=SOURCE, help="Benchmark corpus to replicate.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/hopgraph-scale"), help="Scratch index directory.")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.source, args.one, args.work)))
        return
    base = len(load_benchmark(args.source).documents)
    warmup = in_subprocess(args.source, base, args.work)  # one replica: fills the vector cache
    per_doc = warmup["chunks"] / base
    runs = []
    for size in args.sizes:
        run = in_subprocess(args.source, round(size / per_doc), args.work)
        runs.append(run)
        print(f"{run['chunks']:>7} chunks  {run['seconds_total']:7.1f} s  {run['peak_memory_mb']:7.0f} MB", flush=True)
    chunks = [r["chunks"] for r in runs]
    payload = {
        "benchmark": "index scale",
        "source": str(args.source),
        "settings": SETTINGS,
        "method": "replicated corpus; embeddings served from the vector cache after the warm-up",
        "warmup_one_replica": warmup,
        "runs": runs,
        "loglog_slope": {
            "seconds_total": round(slope(chunks, [r["seconds_total"] for r in runs]), 3),
            "seconds_other_stages": round(slope(chunks, [r["seconds_other_stages"] for r in runs]), 3),
            "peak_memory_mb": round(slope(chunks, [r["peak_memory_mb"] for r in runs]), 3),
        },
        **provenance(),
    }
    write_json(args.out, payload)
    print(json.dumps(payload["loglog_slope"]))


if __name__ == "__main__":
    main()
