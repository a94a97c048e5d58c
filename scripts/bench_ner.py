"""spaCy's NER over MuSiQue-500's sentences, side by side: in one process, in ``cluster.ner_processes``
processes (the local engine's default: one per core, at most 8), and as Ray tasks on a local Ray
instance (the Ray engine). NER is the entity layer's per-text work; with the embedder on a GPU it is
the longest stage of an LLM-free build (`cluster_musique_gpu.json`).

Each way runs on the same sentences with no cache; the result gives seconds, texts per second, the
speed-up over one process and whether every way found the same names in the same order.

    python3 scripts/bench_ner.py                       # all MuSiQue-500 sentences
    python3 scripts/bench_ner.py --texts 3000 --out /tmp/ner.json
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hopgraph.config import load_config
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.chunking import analyse_texts
from hopgraph.index.cluster import RayEngine
from hopgraph.index.datasets import load_benchmark
from hopgraph.ner import entity_names, ner_pipeline, ner_processes

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO.parent / "shared" / "data" / "musique" / "ketrag_500"
RESULT = REPO / "scripts" / "results" / "ner_parallel.json"


def sentences(source: Path, limit: int | None) -> list[str]:
    """The corpus's sentences as the index cuts them (punkt spans of each document)."""
    texts = [d.text for d in load_benchmark(source).documents]
    found = [text[a:b] for text, a in zip(texts, analyse_texts(texts, "cl100k_base")) for a, b in a.spans]
    return found[:limit] if limit else found


def timed(find: Callable[[Sequence[str]], Any], texts: list[str]) -> tuple[float, Any]:
    started = time.perf_counter()
    found = find(texts)
    return time.perf_counter() - started, [[tuple(pair) for pair in names] for names in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=SOURCE, help="a benchmark folder in KET-RAG's layout")
    parser.add_argument("--texts", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    texts = sentences(args.source, args.texts)
    cores = len(os.sched_getaffinity(0))
    processes = ner_processes(0, len(texts))
    ner_pipeline()  # the model loads outside every timing (each process or Ray worker loads its own)
    runs: dict[str, Any] = {}
    seconds, alone = timed(entity_names, texts)
    runs["one_process"] = {"seconds": round(seconds, 2)}
    print(f"one process: {seconds:.1f} s", flush=True)
    seconds, parallel = timed(lambda t: entity_names(t, processes=processes), texts)
    runs["processes"] = {"processes": processes, "seconds": round(seconds, 2), "same_names": parallel == alone}
    print(f"{processes} processes: {seconds:.1f} s", flush=True)
    config = load_config(None, {"cluster.engine": "ray", "cluster.num_cpus": cores})
    engine = RayEngine(config)  # started before the timing: a build pays this once per run
    try:
        seconds, on_ray = timed(engine.entity_names, texts)
        # Again on the same instance: its workers are started and hold spaCy. A build's entities stage
        # runs once, so it pays the first figure; the gap is what starting the workers costs.
        warm_seconds, again = timed(engine.entity_names, texts)
    finally:
        engine.close()
    batch = config.cluster.ner_batch_size
    runs["ray_tasks"] = {"cpus": cores, "batch": batch, "seconds": round(seconds, 2), "same_names": on_ray == alone}
    runs["ray_tasks_warm"] = {
        "cpus": cores,
        "batch": batch,
        "seconds": round(warm_seconds, 2),
        "same_names": again == alone,
    }
    print(f"ray tasks: {seconds:.1f} s, again with the workers started: {warm_seconds:.1f} s", flush=True)
    for run in runs.values():
        run["texts_per_second"] = round(len(texts) / run["seconds"], 1)
        run["speedup"] = round(runs["one_process"]["seconds"] / run["seconds"], 2)
    payload = {
        "benchmark": "spaCy NER over a corpus's sentences: one process, several, Ray tasks",
        "dataset": str(args.source),
        "texts": len(texts),
        "characters": sum(map(len, texts)),
        "cores": cores,
        "runs": runs,
        "method": "the same sentences, no cache, the spaCy model loaded before the first timing; Ray: a local "
        f"instance on {cores} CPUs started before its timing, tasks of {batch} texts, each worker loading spaCy once; "
        "ray_tasks_warm: the same call again on that instance, its workers started and holding spaCy",
        **provenance(),
    }
    write_json(args.out, payload)
    print({name: run["speedup"] for name, run in runs.items()})


if __name__ == "__main__":
    main()
