"""MuSiQue-500 LLM-free through ``--engine ray`` against the embedded engine, side by side on one machine.

Each build is the ``hopgraph index`` command in a fresh process with empty caches of its own,
so both pay for every embedding; the Ray build starts a local Ray instance on this node's cores
(one embedding actor using all of them, as the embedded engine's model does). Written: whether
the two indexes are identical (tables and graphs equal, vectors within 1e-6), the wall-time ratio
(Ray over embedded, start-up included), and each build's stage times and Ray worker seconds.

    python3 scripts/bench_cluster.py                                    # MuSiQue-500 at ℓ=1200
    python3 scripts/bench_cluster.py --documents 400 --out /tmp/c.json  # a quick check on a slice
    python3 scripts/bench_cluster.py --device cuda --out scripts/results/cluster_musique_gpu.json  # a GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.datasets import load_benchmark
from hopgraph.store import IndexStore

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "scripts" / "results" / "cluster_musique.json"
SOURCE = REPO.parent / "shared" / "data" / "musique" / "ketrag_500"


def corpus_argument(source: Path, documents: int | None, work: Path) -> str:
    """The dataset folder itself, or a JSONL of its first ``documents`` documents."""
    if documents is None:
        return str(source)
    path = work / "slice.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for doc in load_benchmark(source).documents[:documents]:
            out.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}) + "\n")
    return str(path)


def build(corpus: str, out: Path, cache: Path, extra: list[str]) -> dict:
    command = [sys.executable, "-m", "hopgraph.cli", "index", corpus, "--out", str(out), "-q"]
    command += ["--embedding.cache", str(cache), *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    manifest = IndexStore(out).read_manifest()
    return {
        "command": " ".join(["hopgraph", *command[3:]]),
        "wall_seconds": round(wall, 2),
        "stage_seconds": {name: record["seconds"] for name, record in manifest["stages"].items()},
        "worker_seconds": {
            name: record["worker_seconds"] for name, record in manifest["stages"].items() if "worker_seconds" in record
        },
        "peak_memory_mb": round(manifest["peak_memory_mb"], 1),
        "counts": manifest["counts"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--documents", type=int, default=None, help="Only the first N documents (a quick check).")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="Cores the Ray instance and actor use.")
    parser.add_argument("--device", default="cpu", help="embedding.device of both builds (cuda on a GPU machine).")
    parser.add_argument("--keep", action="store_true", help="Keep both indexes (printed path) to inspect differences.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopgraph-cluster-"))
    try:
        corpus = corpus_argument(args.source, args.documents, work)
        # Each build's caches in a folder of its own: the text analysis and spaCy caches sit beside the
        # vector cache, and a shared folder would hand the second build the first one's work.
        device = ["--embedding.device", args.device]
        local = build(corpus, work / "local", work / "local-cache" / "vectors.sqlite", device)
        print(f"embedded engine: {local['wall_seconds']:.1f} s", flush=True)
        ray_options = [*device, "--engine", "ray", "--cluster.num_cpus", str(args.cpus)]
        ray_options += ["--cluster.cpus_per_actor", str(args.cpus)]
        ray = build(corpus, work / "ray", work / "ray-cache" / "vectors.sqlite", ray_options)
        print(f"ray engine: {ray['wall_seconds']:.1f} s", flush=True)
        compared, differ = IndexStore(work / "local").differences(IndexStore(work / "ray"), tolerance=1e-6)
        _, bitwise = IndexStore(work / "local").differences(IndexStore(work / "ray"), tolerance=0.0)
        payload = {
            "benchmark": "index build: Ray engine against the embedded engine",
            "dataset": str(args.source) + (f" (first {args.documents} documents)" if args.documents else ""),
            "identical": not differ,
            "artifacts_compared": compared,
            "differences": differ,
            "vectors_bitwise_equal": not bitwise,
            "wall_ratio": round(ray["wall_seconds"] / local["wall_seconds"], 3),
            "goal": "wall_ratio <= 1.2 with an identical index",
            "local": local,
            "ray": ray,
            "device": args.device,
            "method": "each build in a fresh process with empty caches of its own (vectors, text analysis, spaCy); Ray: a local instance "
            f"on {args.cpus} cores, one embedding actor with {args.cpus} threads; wall time includes start-up",
            **provenance(),
        }
        write_json(args.out, payload)
        print(json.dumps({k: payload[k] for k in ("identical", "wall_ratio", "differences")}))
    finally:
        if args.keep:
            print(f"indexes kept under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
