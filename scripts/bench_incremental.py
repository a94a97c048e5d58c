"""Incremental updates against a full rebuild: cost of inserting 1% new documents and of deleting a
few, and whether retrieval afterwards equals a from-scratch build of the same final corpus.

Corpus: MuSiQue dev, KAG's 100-question sample (``kag_dev100``: 1,839 paragraphs, 100 questions),
small enough to build several times on 2 cores. For each ``chunking.pack_documents`` setting:

1. build the index of the corpus without 1% held-out paragraphs, vector cache cold (file A);
2. ``update``: insert the held-out paragraphs (appended), timed; then delete 5 random paragraphs;
3. rebuild the final corpus from scratch into a fresh directory with another cold cache (file B),
   and once more from file A (the vectors the updates used);
4. retrieve every question with every LLM-free method from all three and count identical results
   (same pieces, same order), and compare vectors and graphs. The embedder's output for a text
   varies with the batch it was padded in by ~1e-7, so the cold rebuild may swap near-tied
   pieces; the rebuild from file A has the same vectors and isolates the index logic.

``--llm`` runs the same protocol for the LLM methods (kg, hybrid, ket, g2cons, cue) on the
paragraphs of the first question only (every question is still asked), with a KG of every chunk and CUE units for half the
tokens extracted by the CPU stand-in (SmolLM2-135M over llama.cpp). Build, updates and rebuild
share one completion cache (the "cached stand-in"), so the rebuild's LLM output is the updates'
by construction and the comparison tests everything around it: which chunks are re-extracted,
entity resolution, the merged graphs. It counts the LLM calls each step paid for.

    python3 scripts/bench_incremental.py
    python3 scripts/bench_incremental.py --pack true --questions 20 --out /tmp/incremental.json
    python3 scripts/bench_incremental.py --llm          # -> incremental_llm_musique.json, ~20 min on 2 cores (both packings)
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from hopgraph import Index, LLMConfig, load_config
from hopgraph.evaluate.report import machine_line, markdown_table, provenance, write_json
from hopgraph.files import atomic_write
from hopgraph.index import versions
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm.standin import StandinServer
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json"
RESULT = REPO / "scripts" / "results" / "incremental_musique.json"
LLM_RESULT = REPO / "scripts" / "results" / "incremental_llm_musique.json"
LLM_METHODS = ("kg", "hybrid", "ket", "g2cons", "cue")
ARRAYS = ("unit_vectors", "sentence_vectors", "chunk_vectors", "keyword_vectors")
GRAPHS = ("postings_units", "knn", "concepts")


def retrieve_all(
    index_dir: Path, questions: list[str], vectors: np.ndarray, methods: Sequence[str] = LLM_FREE
) -> dict[str, list[list[tuple]]]:
    """Per method, per question: the packed evidence as (kind, index, doc ids, score)."""
    retriever = Retriever(index_dir)
    return {
        method: [
            [
                (e.kind, e.index, tuple(e.doc_ids), e.score)
                for e in retriever.retrieve(q, method=method, vector=v).evidence
            ]
            for q, v in zip(questions, vectors)
        ]
        for method in methods
    }


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
            differences.append(
                {
                    "method": method,
                    "question": q,
                    "rank": rank,
                    "pieces": [len(a), len(b)],
                    "got": list(a[rank][:2]) + [a[rank][3]] if rank < len(a) else None,
                    "want": list(b[rank][:2]) + [b[rank][3]] if rank < len(b) else None,
                }
            )
        per_method[method] = {"identical": same, "same_pieces_any_order": same_set, "total": len(rows)}
    return {
        "identical": sum(m["identical"] for m in per_method.values()),
        "total": sum(m["total"] for m in per_method.values()),
        "same_pieces_any_order": sum(m["same_pieces_any_order"] for m in per_method.values()),
        "first_difference_rank_min": min((d["rank"] for d in differences), default=None),
        "per_method": per_method,
        "differences": differences[:50],
    }


def compare_indexes(a: LoadedIndex, b: LoadedIndex) -> dict[str, Any]:
    """How far two builds of one corpus are apart: texts, vectors (bitwise and max difference), graphs."""
    out: dict[str, Any] = {"same_units": a.units["text"] == b.units["text"], "same_keywords": a.keywords == b.keywords}
    for name in ARRAYS:
        x, y = a.array(name), b.array(name)
        if x.shape != y.shape:
            out[name] = {"shape": [list(x.shape), list(y.shape)]}
            continue
        out[name] = {
            "rows": int(x.shape[0]),
            "rows_not_bitwise_equal": int((x != y).any(axis=1).sum()),
            "max_abs_diff": float(np.abs(x - y).max()),
        }
    for name in GRAPHS:
        x, y = a.graph(name), b.graph(name)
        out[name] = {
            "entries_differing": int((x != y).nnz) if x.shape == y.shape else None,
            "max_abs_diff": float(abs(x - y).max()) if x.shape == y.shape else None,
        }
    return out


def cache_rows(path: Path | str, table: str = "vectors") -> int:
    """Rows in a vector cache (texts embedded) or completion cache (LLM calls paid); 0 if none yet."""
    if not Path(path).exists():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


class Paid:
    """Model work a step paid for: texts newly embedded and, with an LLM, completions newly cached."""

    def __init__(self, vectors: Path, completions: str | None):
        self.vectors, self.completions = vectors, completions
        self._start = self._counts()

    def _counts(self) -> dict[str, int]:
        counts = {"texts_embedded": cache_rows(self.vectors)}
        if self.completions:
            counts["llm_calls"] = cache_rows(self.completions, "completions")
        return counts

    def since(self) -> dict[str, int]:
        return {k: v - self._start[k] for k, v in self._counts().items()}


def timed_update(root: Path, add: list, delete: list[str], cache: Path, llm: LLMConfig | None = None) -> dict[str, Any]:
    """Submit and run one update; its wall time and the model work it paid for."""
    paid = Paid(cache, llm.cache if llm else None)
    started = time.perf_counter()
    job = versions.submit_update(root, add, delete)
    [done] = versions.run_pending(root, llm=llm, progress=False)
    seconds = time.perf_counter() - started
    return {
        "job": job["id"],
        "seconds": round(seconds, 2),
        "documents": done["documents"],
        **paid.since(),
        "stage_seconds": done["stage_seconds"],
    }


def run(
    pack: bool,
    documents: list,
    questions: list[str],
    seed: int,
    work: Path,
    settings: dict[str, Any] | None = None,
    methods: Sequence[str] = LLM_FREE,
) -> dict[str, Any]:
    """Build without the held-out 1%, insert them, delete 5, rebuild the final corpus; compare."""
    rng = random.Random(seed)
    held = set(rng.sample(range(len(documents)), max(1, round(0.01 * len(documents)))))
    initial = [d for i, d in enumerate(documents) if i not in held]
    inserted = [d for i, d in enumerate(documents) if i in held]
    deleted = [d.id for d in rng.sample(initial, min(5, max(1, len(initial) // 8)))]
    final = [d for d in initial if d.id not in set(deleted)] + inserted
    root, cache = work / f"pack_{pack}", work / f"cache_a_{pack}.sqlite"
    config = load_config(None, {**(settings or {}), "chunking.pack_documents": pack, "embedding.cache": str(cache)})
    llm = config.llm if config.extraction.kg != "none" or (config.extraction.cue_alpha or 0) > 0 else None

    paid = Paid(cache, llm.cache if llm else None)
    started = time.perf_counter()
    Index.build(initial, root, config, progress=True)
    build_seconds = time.perf_counter() - started
    built = paid.since()
    insert = timed_update(root, inserted, [], cache, llm)
    delete = timed_update(root, [], deleted, cache, llm)
    paid = Paid(cache, llm.cache if llm else None)

    fresh = work / f"rebuild_{pack}"
    started = time.perf_counter()
    Index.build(
        final,
        fresh,
        config.model_copy(
            update={"embedding": config.embedding.model_copy(update={"cache": str(work / f"cache_b_{pack}.sqlite")})}
        ),
        progress=True,
    )
    rebuild_seconds = time.perf_counter() - started
    rebuild_llm_calls = paid.since().get("llm_calls")

    # The same rebuild from the updates' own vector cache: equal vectors, so any difference left
    # would come from the index logic, not from the embedder's batch-dependent rounding.
    warm = work / f"rebuild_warm_{pack}"
    Index.build(final, warm, config, progress=False)

    vectors = Retriever(fresh).embed(questions)  # one set of query vectors for every index
    updated = retrieve_all(root, questions, vectors, methods)
    rebuilt = retrieve_all(fresh, questions, vectors, methods)
    rebuilt_warm = retrieve_all(warm, questions, vectors, methods)
    return {
        "pack_documents": pack,
        "documents_initial": len(initial),
        "documents_inserted": len(inserted),
        "documents_deleted": len(deleted),
        "documents_final": len(final),
        "deleted_ids": deleted,
        "build": {"seconds": round(build_seconds, 2), **built, "counts": IndexStore(root).read_manifest()["counts"]},
        "insert": insert,
        "delete": delete,
        "rebuild": {"seconds": round(rebuild_seconds, 2), "llm_calls": rebuild_llm_calls},
        "insert_over_build": round(insert["seconds"] / build_seconds, 4),
        "delete_over_build": round(delete["seconds"] / build_seconds, 4),
        "retrieval_vs_rebuild": compare_results(updated, rebuilt),
        "retrieval_vs_warm_cache_rebuild": compare_results(updated, rebuilt_warm),
        "index_vs_rebuild": compare_indexes(LoadedIndex(root), LoadedIndex(fresh)),
    }


def markdown(payload: dict[str, Any]) -> str:
    rows = [
        {
            "pack_documents": r["pack_documents"],
            "documents built / inserted / deleted": f"{r['documents_initial']} / {r['documents_inserted']} / "
            f"{r['documents_deleted']}",
            "build s": r["build"]["seconds"],
            "insert s": r["insert"]["seconds"],
            "insert / build": f"{100 * r['insert_over_build']:.1f}%",
            "texts embedded (insert)": r["insert"]["texts_embedded"],
            "delete s": r["delete"]["seconds"],
            "delete / build": f"{100 * r['delete_over_build']:.1f}%",
            "texts embedded (delete)": r["delete"]["texts_embedded"],
            "rebuild s": r["rebuild"]["seconds"],
            "identical results": f"{r['retrieval_vs_rebuild']['identical']}/{r['retrieval_vs_rebuild']['total']}",
            "same pieces, any order": f"{r['retrieval_vs_rebuild']['same_pieces_any_order']}/{r['retrieval_vs_rebuild']['total']}",
            "earliest differing rank": r["retrieval_vs_rebuild"]["first_difference_rank_min"],
            **(
                {
                    "identical, rebuild from the same vector cache": f"{r['retrieval_vs_warm_cache_rebuild']['identical']}/{r['retrieval_vs_warm_cache_rebuild']['total']}"
                }
                if "retrieval_vs_warm_cache_rebuild" in r
                else {}
            ),
        }
        for r in payload["runs"]
    ]
    columns = list(rows[0]) if rows else []
    if payload.get("llm"):
        for row, r in zip(rows, payload["runs"]):
            row.update(
                {f"LLM calls ({step})": r[step].get("llm_calls") for step in ("build", "insert", "delete", "rebuild")}
            )
        columns = list(rows[0])
    methods = payload.get("methods", LLM_FREE)
    caches = (
        f"a cold vector cache and one completion cache ({payload['llm']})"
        if payload.get("llm")
        else "a cold vector cache"
    )
    return (
        f"# Incremental updates vs full rebuild ({payload['dataset']})\n\n"
        f"{payload['n_documents']} paragraphs, {payload['n_questions']} questions, methods {', '.join(methods)}; "
        f"build and rebuild with {caches}.\n\n"
        + markdown_table(rows, columns)
        + f"\nCommand: `{payload['command']}`; commit {payload['git_commit']}; machine: "
        f"{machine_line(payload['machine'])}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument(
        "--pack", choices=("true", "false", "both"), default="both", help="chunking.pack_documents setting(s) to run."
    )
    parser.add_argument("--questions", type=int, help="Only the first N questions.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--llm",
        action="store_true",
        help="LLM methods with the stand-in; the corpus is the first question's paragraphs.",
    )
    parser.add_argument(
        "--llm-cache",
        type=Path,
        help="completion cache to share across runs; default: a fresh one per run, "
        "so the LLM calls each step paid are counted from an empty cache",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopgraph-incremental-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        settings: dict[str, Any] = {}
        methods: Sequence[str] = LLM_FREE
        bench = load_benchmark(args.dataset, limit=args.questions)
        documents, questions, name, out = (
            bench.documents,
            [q.text for q in bench.questions],
            bench.name,
            args.out or RESULT,
        )
        if args.llm:
            from bench_llm_tier import write_subset

            # The corpus is the first question's paragraphs; every benchmark question still serves as a query.
            subset = load_benchmark(write_subset(args.dataset, 1, work / f"{args.dataset.stem}_first1.json"))
            documents, name, out = subset.documents, f"{bench.name}, paragraphs of question 1", args.out or LLM_RESULT
            server = stack.enter_context(StandinServer("smollm2-135m", context=4096, parallel=2))
            cache = args.llm_cache or work / "completions.sqlite"
            cache.parent.mkdir(parents=True, exist_ok=True)
            # Small chunks so a 1-paragraph insert or delete touches few of them; short completions keep the stand-in quick.
            settings = {
                "chunking.size": 150,
                "chunking.overlap": 0,
                "extraction.kg": "all",
                "extraction.cue_alpha": 0.5,
                "llm.base_url": server.base_url,
                "llm.model": "smollm2-135m",
                "llm.cache": str(cache),
                "llm.max_tokens": 160,
                "llm.context_tokens": 4096,
                "llm.concurrency": 2,
                "llm.timeout": 1800,
            }
            methods = (*LLM_FREE, *LLM_METHODS)
        payload: dict[str, Any] = {
            "benchmark": "incremental updates",
            "dataset": name,
            "n_documents": len(documents),
            "n_questions": len(questions),
            "seed": args.seed,
            "methods": list(methods),
            "runs": [],
            **provenance(),
        }
        if args.llm:
            payload["llm"] = "smollm2-135m via llama.cpp (CPU stand-in), KG of every chunk + CUE α=0.5, max_tokens 160"
            payload["settings"] = {k: v for k, v in settings.items() if k not in ("llm.base_url", "llm.cache")}
            payload["completion_cache_rows_at_start"] = cache_rows(cache, "completions")
        for pack in {"true": [True], "false": [False], "both": [True, False]}[args.pack]:
            payload["runs"].append(run(pack, documents, questions, args.seed, work, settings, methods))
            write_json(out, payload)  # after every setting, so a long run keeps what it measured
            text = markdown(payload)
            atomic_write(out.with_suffix(".md"), lambda tmp: tmp.write_text(text, encoding="utf-8"))
            r = payload["runs"][-1]
            print(
                f"pack={pack}: build {r['build']['seconds']} s, insert {r['insert']['seconds']} s "
                f"({100 * r['insert_over_build']:.1f}%), "
                f"delete {r['delete']['seconds']} s, identical "
                f"{r['retrieval_vs_rebuild']['identical']}/{r['retrieval_vs_rebuild']['total']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
