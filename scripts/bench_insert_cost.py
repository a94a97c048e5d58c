"""Cost of inserting one document into an existing LLM-free index, against the index's build.

An insert should cost what its own text costs, not what the corpus costs. For each size this builds
an index (vector cache cold, CUE graph with α=0, i.e. punkt sentences and spaCy entities and no
LLM) of every corpus document but one, then inserts that one through the update job queue
(``submit_update`` + ``run_pending``) and reads the per-stage seconds from the job record.

Sizes (corpora from ``../shared/data``, see SOURCES.md there; duplicate paragraph texts kept once):

* ``10k``: MuSiQue-500 (the KET-RAG sample, 6,761 paragraphs, ~752k tokens), ℓ=80 tokens with 8
  tokens overlap, packed as one token stream as the papers chunk it: 752k / 72 ≈ 10.4k chunks (one
  sub-chunk each, τ=0) and ~25k sentences.
* ``100k``: MuSiQue-500 + HotpotQA dev sample (4,858) + MuSiQue KAG dev-100 (1,839), ~1.57M tokens,
  ℓ=24 with 8 overlap: 1.57M / 16 ≈ 98k chunks and ~55k sentences. Opt-in (``--sizes 10k,100k``):
  its build embeds ~150k texts, far more than the ~25 minutes a default run may take on 2 CPU cores.

Builds and inserts each run in a child process (models loaded and warmed up before the clock
starts); the built index and its caches are kept under ``--work/<label>/<size>`` and reused, and
every insert starts from a copy of them, so a repeated insert finds the caches as the build left
them. ``--label before`` / ``after`` names the code under test (run the script with PYTHONPATH on
another checkout for "before"); results of other labels already in ``--out`` are kept.
``--vectors-from LABEL`` starts a build with the vector and entity caches that LABEL's build left
(embedding and spaCy are the same in both, and they are most of a build's time): that build's
seconds are then not those of a cold build, and the result says so (``build_vectors_warm``).

``--stand-in-embedder`` replaces the embedding model by unit vectors drawn from a hash of each text,
for machines where building with the model takes too long: everything else an insert does is
unchanged (it embeds only the inserted document's few texts), but build seconds then leave out
embedding, and the result says so (``embedder``).

    python3 scripts/bench_insert_cost.py --label after                     # 10k only, median of 3 inserts
    python3 scripts/bench_insert_cost.py --label after --sizes 10k,100k
    python3 scripts/bench_insert_cost.py --label after --profile /tmp/insert.prof
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing
import shutil
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
RESULT = REPO / "scripts" / "results" / "insert_cost.json"
SOURCES = {
    "musique": DATA / "musique" / "ketrag_500",
    "hotpotqa": DATA / "hotpotqa" / "dev_subsampled.jsonl",
    "kag": DATA / "musique" / "kag_dev100" / "musique_qa_100.json",
}
SIZES: dict[str, dict[str, Any]] = {
    "10k": {"sources": ("musique",), "chunking.size": 80, "chunking.overlap": 8},
    "100k": {"sources": ("musique", "hotpotqa", "kag"), "chunking.size": 24, "chunking.overlap": 8},
}


def corpus(size: str) -> list:
    """Documents of a size in source order, each paragraph text once."""
    from hopgraph.index.datasets import load_benchmark  # noqa: PLC0415  (imported in the child)

    seen: set[str] = set()
    documents = []
    for source in SIZES[size]["sources"]:
        for doc in load_benchmark(SOURCES[source]).documents:
            if doc.text not in seen:
                seen.add(doc.text)
                documents.append(doc)
    return documents


def settings(size: str, cache: Path) -> dict[str, Any]:
    spec = SIZES[size]
    return {
        "chunking.size": spec["chunking.size"],
        "chunking.overlap": spec["chunking.overlap"],
        "embedding.cache": str(cache / "vectors.sqlite"),
        "llm.cache": str(cache / "llm.sqlite"),
        "extraction.cue_alpha": 0.0,
    }


class HashEmbedder:
    """Stand-in model: a unit vector per text drawn from its hash (see ``--stand-in-embedder``)."""

    name, dim, max_length = "hash-stand-in", 384, 256

    def encode(self, texts: Any, *, progress: bool = False) -> Any:
        import hashlib  # noqa: PLC0415

        import numpy as np  # noqa: PLC0415

        rows = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")).standard_normal(
                self.dim
            )
            for t in texts
        ]
        out = np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dim)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    encode_queries = encode


def use_embedder(stand_in: bool) -> None:
    if stand_in:
        import hopgraph.models  # noqa: PLC0415

        hopgraph.models._load_embedder = lambda *args: HashEmbedder()


def warm_up(config: Any) -> None:
    """Load every model an insert uses, so the timed run measures work, not loading."""
    from hopgraph.models import count_tokens, load_embedder, sentence_spans  # noqa: PLC0415
    from hopgraph.ner import entity_names  # noqa: PLC0415

    load_embedder(config.embedding).encode(["warm up"])
    sentence_spans("Warm up. Twice.")
    count_tokens("warm up", config.chunking.encoding)
    entity_names(["Paris is in France."])


def child_build(size: str, folder: str, stand_in: bool, queue: Any) -> None:
    from hopgraph.config import load_config  # noqa: PLC0415
    from hopgraph.index.pipeline import build_index  # noqa: PLC0415

    use_embedder(stand_in)
    work = Path(folder)
    config = load_config(None, settings(size, work / "cache"))
    documents = corpus(size)[:-1]
    warm_up(config)
    started = time.perf_counter()
    manifest = build_index(documents, work / "index", config, progress=True, overwrite=True)
    seconds = time.perf_counter() - started
    queue.put({"seconds": round(seconds, 3), "manifest": manifest})


def child_insert(size: str, folder: str, profile: str | None, stand_in: bool, queue: Any) -> None:
    from hopgraph.config import load_config  # noqa: PLC0415
    from hopgraph.index import versions  # noqa: PLC0415

    use_embedder(stand_in)
    work = Path(folder)
    config = load_config(None, settings(size, work / "cache"))
    warm_up(config)
    added = corpus(size)[-1]
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    versions.submit_update(work / "trial", [added], [])
    [job] = versions.run_pending(work / "trial")
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    seconds = time.perf_counter() - started
    queue.put({"seconds": round(seconds, 3), "job": job, "document": {"id": added.id, "chars": len(added.text)}})


def in_child(target: Any, *args: Any) -> dict[str, Any]:
    """Run ``target(*args, queue)`` in a fresh process and return what it put on the queue."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    if process.exitcode:
        raise SystemExit(f"{target.__name__} failed with exit code {process.exitcode}")
    return result


def measure(
    size: str, work: Path, profile: str | None, vectors_from: Path | None, stand_in: bool, repeat: int
) -> dict[str, Any]:
    """Build (or reuse) the index of ``size`` under ``work`` and time ``repeat`` inserts, each into a
    fresh copy of it; the median one is reported, every run's seconds beside it."""
    built = work / "built.json"
    if not built.is_file():
        if vectors_from is not None:
            (work / "cache").mkdir(parents=True, exist_ok=True)
            for path in [
                *(vectors_from / "cache.built").glob("vectors.sqlite*"),
                *(vectors_from / "cache.built").glob("entities.sqlite*"),
            ]:
                shutil.copy(path, work / "cache" / path.name)
        build = in_child(child_build, size, str(work), stand_in)
        build["vectors_warm"] = vectors_from is not None
        if vectors_from is not None:  # the seconds of the cold build whose vectors it started from
            build["cold_seconds"] = json.loads((vectors_from / "built.json").read_text(encoding="utf-8"))["seconds"]
        shutil.copytree(work / "cache", work / "cache.built", dirs_exist_ok=True)
        built.write_text(json.dumps(build, default=str), encoding="utf-8")
    build = json.loads(built.read_text(encoding="utf-8"))
    manifest = build["manifest"]
    runs = []
    for _ in range(repeat):
        for name in ("trial", "cache"):
            shutil.rmtree(work / name, ignore_errors=True)
        shutil.copytree(work / "cache.built", work / "cache")  # the caches exactly as the build left them
        shutil.copytree(work / "index", work / "trial")
        runs.append(in_child(child_insert, size, str(work), profile, stand_in))
    insert = sorted(runs, key=lambda run: run["seconds"])[(len(runs) - 1) // 2]  # the median run
    job = insert["job"]
    return {
        "embedder": "hash stand-in (build seconds leave out embedding)"
        if stand_in
        else manifest["models"]["embedding"],
        "documents": job["documents"],
        "inserted": insert["document"],
        "chunks": manifest["counts"]["chunks"],
        "units": manifest["counts"]["units"],
        "sentences": manifest["counts"]["sentences"],
        "cue_units": manifest["counts"].get("cue_units"),
        "build_seconds": build["seconds"],
        "build_vectors_warm": build.get("vectors_warm", False),
        "build_stage_seconds": {name: rec["seconds"] for name, rec in manifest["stages"].items()},
        "insert_seconds": insert["seconds"],
        "insert_runs_seconds": [run["seconds"] for run in runs],
        "insert_job_seconds": job["seconds"],
        "insert_share_of_build": round(insert["seconds"] / build["seconds"], 4),
        "insert_share_of_cold_build": round(insert["seconds"] / build.get("cold_seconds", build["seconds"]), 4),
        "insert_stage_seconds": job["stage_seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/hopgraph-insert-cost"), help="index cache folder")
    parser.add_argument("--sizes", default="10k", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--label", default="after", help="name of the code under test (before/after)")
    parser.add_argument("--profile", help="write cProfile stats of the (last) insert here")
    parser.add_argument("--vectors-from", help="label whose build's vector and entity caches a new build starts from")
    parser.add_argument("--repeat", type=int, default=3, help="inserts timed per size (the median is reported)")
    parser.add_argument("--stand-in-embedder", action="store_true", help="hash vectors instead of the model")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    from hopgraph.evaluate.report import provenance, write_json  # noqa: PLC0415

    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise SystemExit(f"unknown size(s) {', '.join(unknown)}; known: {', '.join(SIZES)}")
    payload = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {"sizes": {}}
    for size in sizes:
        work = args.work / f"{args.label}{'-stand-in' if args.stand_in_embedder else ''}" / size
        work.mkdir(parents=True, exist_ok=True)
        source = (
            args.work / f"{args.vectors_from}{'-stand-in' if args.stand_in_embedder else ''}" / size
            if args.vectors_from
            else None
        )
        figures = measure(size, work, args.profile, source, args.stand_in_embedder, max(args.repeat, 1))
        payload["sizes"].setdefault(size, {})[args.label] = {**figures, "provenance": provenance()}
        print(
            f"{size} [{args.label}]: {figures['chunks']} chunks, build {figures['build_seconds']:.1f}s, "
            f"insert {figures['insert_seconds']:.2f}s ({100 * figures['insert_share_of_cold_build']:.2f}% of a cold build)\n"
            f"  stages: {figures['insert_stage_seconds']}"
        )
    payload["settings"] = {size: {k: v for k, v in SIZES[size].items()} for size in SIZES}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
