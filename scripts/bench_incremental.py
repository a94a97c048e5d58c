"""Incremental updates against a full rebuild: cost of inserting 1% new documents and of deleting a
few, and whether retrieval afterwards equals a from-scratch build of the same final corpus.

Corpus: MuSiQue dev, KAG's 100-question sample (``kag_dev100``: 1,839 paragraphs, 100 questions),
small enough to build several times on 2 cores. For each ``chunking.pack_documents`` setting:

1. build the index of the corpus without 1% held-out paragraphs, vector cache cold (file A);
2. ``update``: insert the held-out paragraphs (appended), timed; then delete 5 random paragraphs;
3. rebuild the final corpus from scratch into a fresh directory with another cold cache (file B);
4. retrieve every question with every LLM-free method from both and count identical results
   (same pieces, same order), and compare vectors and graphs.

    python3 scripts/bench_incremental.py
    python3 scripts/bench_incremental.py --pack true --questions 20 --out /tmp/incremental.json
"""
from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hopgraph.config import load_config
from hopgraph.evaluate.datasets import load_benchmark
from hopgraph.evaluate.report import machine_line, markdown_table, provenance, write_json
from hopgraph.index import versions
from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore, atomic_write

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json"
RESULT = REPO / "scripts" / "results" / "incremental_musique.json"
ARRAYS = ("unit_vectors", "sentence_vectors", "chunk_vectors", "keyword_vectors")
GRAPHS = ("postings_units", "knn", "concepts")


def retrieve_all(index_dir: Path, questions: list[str], vectors: np.ndarray) -> dict[str, list[list[tuple]]]:
    """Per LLM-free method, per question: the packed evidence as (kind, index, doc ids, score)."""
    retriever = Retriever(index_dir)
    return {method: [[(e.kind, e.index, tuple(e.doc_ids), e.score) for e in retriever.retrieve(q, method=method, vector=v).evidence]
                     for q, v in zip(questions, vectors)] for method in LLM_FREE}


def compare_results(got: dict[str, list[list[tuple]]], want: dict[str, list[list[tuple]]]) -> dict[str, Any]:
    """Identical results per method (pieces and order; scores are not compared), results with the
    same pieces in another order, and where the others first differ (rank, pieces, scores)."""
    per_method, differences = {}, []
    for method, rows in want.items():
        same = same_set = 0
        for q, (a, b) in enumerate(zip(got[method], rows)):
            same_set += sorted(e[:3] for e in a) == sorted(e[:3] for e in b)
            if [e[:3] for e in a] == [e[:3] for e in b]:
                same += 1
                continue
            rank = next((r for r, (x, y) in enumerate(zip(a, b)) if x[:3] != y[:3]), min(len(a), len(b)))
            differences.append({"method": method, "question": q, "rank": rank, "pieces": [len(a), len(b)],
                                "got": list(a[rank][:2]) + [a[rank][3]] if rank < len(a) else None,
                                "want": list(b[rank][:2]) + [b[rank][3]] if rank < len(b) else None})
        per_method[method] = {"identical": same, "same_pieces_any_order": same_set, "total": len(rows)}
    return {"identical": sum(m["identical"] for m in per_method.values()), "total": sum(m["total"] for m in per_method.values()),
            "same_pieces_any_order": sum(m["same_pieces_any_order"] for m in per_method.values()),
            "first_difference_rank_min": min((d["rank"] for d in differences), default=None),
            "per_method": per_method, "differences": differences[:50]}


def compare_indexes(a: LoadedIndex, b: LoadedIndex) -> dict[str, Any]:
    """How far two builds of one corpus are apart: texts, vectors (bitwise and max difference), graphs."""
    out: dict[str, Any] = {"same_units": a.units["text"] == b.units["text"], "same_keywords": a.keywords == b.keywords}
    for name in ARRAYS:
        x, y = a.array(name), b.array(name)
        if x.shape != y.shape:
            out[name] = {"shape": [list(x.shape), list(y.shape)]}
            continue
        out[name] = {"rows": int(x.shape[0]), "rows_not_bitwise_equal": int((x != y).any(axis=1).sum()), "max_abs_diff": float(np.abs(x - y).max())}
    for name in GRAPHS:
        x, y = a.graph(name), b.graph(name)
        out[name] = {"entries_differing": int((x != y).nnz) if x.shape == y.shape else None, "max_abs_diff": float(abs(x - y).max()) if x.shape == y.shape else None}
    return out


def cache_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])


def timed_update(root: Path, add: list, delete: list[str], cache: Path) -> dict[str, Any]:
    """Submit and run one update; its wall time and how many new texts reached the model."""
    rows = cache_rows(cache)
    started = time.perf_counter()
    job = versions.submit_update(root, add, delete)
    [done] = versions.run_pending(root, progress=False)
    seconds = time.perf_counter() - started
    return {"job": job["id"], "seconds": round(seconds, 2), "documents": done["documents"], "texts_embedded": cache_rows(cache) - rows,
            "stage_seconds": done["stage_seconds"]}


def run(pack: bool, documents: list, questions: list[str], seed: int, work: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    held = set(rng.sample(range(len(documents)), max(1, round(0.01 * len(documents)))))
    initial = [d for i, d in enumerate(documents) if i not in held]
    inserted = [d for i, d in enumerate(documents) if i in held]
    deleted = [d.id for d in rng.sample(initial, 5)]
    final = [d for d in initial if d.id not in set(deleted)] + inserted
    root, cache = work / f"pack_{pack}", work / f"cache_a_{pack}.sqlite"
    config = load_config(None, {"chunking.pack_documents": pack, "embedding.cache": str(cache)})

    started = time.perf_counter()
    build_index(initial, root, config, progress=True)
    build_seconds = time.perf_counter() - started
    built_texts = cache_rows(cache)
    insert = timed_update(root, inserted, [], cache)
    delete = timed_update(root, [], deleted, cache)

    fresh = work / f"rebuild_{pack}"
    started = time.perf_counter()
    build_index(final, fresh, config.model_copy(update={"embedding": config.embedding.model_copy(update={"cache": str(work / f"cache_b_{pack}.sqlite")})}), progress=True)
    rebuild_seconds = time.perf_counter() - started

    vectors = Retriever(fresh).embed(questions)  # one set of query vectors for both indexes
    updated = retrieve_all(root, questions, vectors)
    rebuilt = retrieve_all(fresh, questions, vectors)
    return {
        "pack_documents": pack, "documents_initial": len(initial), "documents_inserted": len(inserted), "documents_deleted": len(deleted),
        "documents_final": len(final), "deleted_ids": deleted,
        "build": {"seconds": round(build_seconds, 2), "texts_embedded": built_texts, "counts": IndexStore(root).read_manifest()["counts"]},
        "insert": insert, "delete": delete, "rebuild": {"seconds": round(rebuild_seconds, 2)},
        "insert_over_build": round(insert["seconds"] / build_seconds, 4), "delete_over_build": round(delete["seconds"] / build_seconds, 4),
        "retrieval_vs_rebuild": compare_results(updated, rebuilt),
        "index_vs_rebuild": compare_indexes(LoadedIndex(root), LoadedIndex(fresh)),
    }


def markdown(payload: dict[str, Any]) -> str:
    rows = [{"pack_documents": r["pack_documents"], "build s": r["build"]["seconds"], "insert 1% s": r["insert"]["seconds"],
             "insert / build": f"{100 * r['insert_over_build']:.1f}%", "texts embedded (insert)": r["insert"]["texts_embedded"],
             "delete 5 s": r["delete"]["seconds"], "delete / build": f"{100 * r['delete_over_build']:.1f}%",
             "texts embedded (delete)": r["delete"]["texts_embedded"], "rebuild s": r["rebuild"]["seconds"],
             "identical results": f"{r['retrieval_vs_rebuild']['identical']}/{r['retrieval_vs_rebuild']['total']}",
             "same pieces, any order": f"{r['retrieval_vs_rebuild']['same_pieces_any_order']}/{r['retrieval_vs_rebuild']['total']}",
             "earliest differing rank": r["retrieval_vs_rebuild"]["first_difference_rank_min"]} for r in payload["runs"]]
    columns = list(rows[0]) if rows else []
    return (f"# Incremental updates vs full rebuild ({payload['dataset']})\n\n"
            f"{payload['n_documents']} paragraphs, {payload['n_questions']} questions, LLM-free methods {', '.join(LLM_FREE)}; "
            f"build and rebuild with a cold vector cache.\n\n" + markdown_table(rows, columns) +
            f"\nCommand: `{payload['command']}`; commit {payload['git_commit']}; machine: {machine_line(payload['machine'])}.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--pack", choices=("true", "false", "both"), default="both", help="chunking.pack_documents setting(s) to run.")
    parser.add_argument("--questions", type=int, help="Only the first N questions.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    bench = load_benchmark(args.dataset, limit=args.questions)
    questions = [q.text for q in bench.questions]
    payload: dict[str, Any] = {"benchmark": "incremental updates", "dataset": bench.name, "n_documents": len(bench.documents),
                               "n_questions": len(questions), "seed": args.seed, "runs": [], **provenance()}
    work = Path(tempfile.mkdtemp(prefix="hopgraph-incremental-"))
    try:
        for pack in {"true": [True], "false": [False], "both": [True, False]}[args.pack]:
            payload["runs"].append(run(pack, bench.documents, questions, args.seed, work))
            write_json(args.out, payload)  # after every setting, so a long run keeps what it measured
            text = markdown(payload)
            atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text(text, encoding="utf-8"))
            r = payload["runs"][-1]
            print(f"pack={pack}: build {r['build']['seconds']} s, insert {r['insert']['seconds']} s ({100 * r['insert_over_build']:.1f}%), "
                  f"delete {r['delete']['seconds']} s, identical {r['retrieval_vs_rebuild']['identical']}/{r['retrieval_vs_rebuild']['total']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
