"""`hopgraph eval`: index a benchmark corpus (resumable), retrieve for every question with each
method, and score Coverage / supporting-passage recall; results as JSON, table and chart."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from hopgraph.config import HopgraphConfig, validate_config
from hopgraph.errors import IndexFormatError, InputError, OtherIndexError, cut
from hopgraph.evaluate import report
from hopgraph.evaluate.metrics import (
    RECALL_AT,
    answer_scores,
    coverage_hit,
    supporting_recall,
    supporting_recall_at,
)
from hopgraph.index.datasets import Benchmark, check_questions, load_benchmark, load_questions
from hopgraph.index.ingest import read_corpus
from hopgraph.index.pipeline import build_index, peak_memory_mb
from hopgraph.index.versions import live_version
from hopgraph.llm import open_llm
from hopgraph.retrieve.answer import answer_many
from hopgraph.retrieve.methods import check_method
from hopgraph.retrieve.rerank import reranker_for
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

# Settings read at query time, not build time: an evaluation's values for these are its own.
QUERY_TIME = ("retrieval", "rerank", "answer", "serve")
PEAK_MEMORY_COVERS = "this process: reading the dataset, the index stages run now (if any), retrieval and answers"


def build_config(index_dir: str | Path, config: HopgraphConfig) -> HopgraphConfig:
    """The config the index is built or resumed with: this run's build settings, and the query-time
    settings the index already stores (the defaults for a new one), so an evaluation's retrieval
    overrides apply to its own run and are never written into the index it measures. A complete
    index keeps its embedding device, and its LLM connection unless this run adds or changes an
    LLM-built part: `serve` or `query --answer` on the index would otherwise use an evaluation's
    answer model, and a KG would be extracted again by it (its model is part of the stage's key)."""
    store = IndexStore(index_dir)
    manifest = store.read_manifest() if store.exists() else {}
    stored = validate_config(manifest["config"], source=f"{store.manifest_path}") if manifest else HopgraphConfig()
    kept = {name: getattr(stored, name) for name in QUERY_TIME}
    if manifest.get("complete"):
        kept["embedding"] = config.embedding.model_copy(update={"device": stored.embedding.device})
        if config.extraction == stored.extraction:
            kept["llm"] = stored.llm
    return config.model_copy(update=kept)


def own_benchmark(questions: str | Path, corpus: Sequence[str | Path], limit: int | None) -> Benchmark:
    """Questions of one's own about documents of one's own: the documents as `hopgraph index` reads
    them (same ids, so supporting ids name them as listed), every file left out said as skipped."""
    read = read_corpus(corpus)
    asked = load_questions(questions, limit=limit)
    ids = {document.id for document in read.documents}
    for number, question in enumerate(asked, 1):
        unknown = [doc_id for doc_id in question.supporting_ids or () if doc_id not in ids]
        if unknown:  # a typo would score 0 recall unseen
            raise InputError(
                f"{questions}: question {number} names support {cut(unknown[0])!r}, no document of the corpus "
                "(a document's id is its path relative to the folder given: `hopgraph documents` lists them)"
            )
    return Benchmark(Path(questions).stem, read.documents, asked, [str(p) for p in read.problems])


def percentile_ms(seconds: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(seconds) * 1000.0, q)), 2) if seconds else 0.0


def evaluate(
    dataset: str | Path,
    index_dir: str | Path,
    config: HopgraphConfig,
    methods: Sequence[str],
    *,
    limit: int | None = None,
    progress: bool = True,
    answers: bool = False,
    skipped: Callable[[str], None] | None = None,
    corpus: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """Run every method over the benchmark and return one result record per method.

    With ``answers`` the configured LLM also answers every question from each method's context,
    adding EM, F1 and Accuracy and the answer-generation token counts. ``skipped(why)`` hears of
    each passage left out as soon as the dataset is read, not once a long run has ended. With
    ``corpus`` (files and folders, read as `hopgraph index` reads them) ``dataset`` holds only
    questions about it (:func:`load_questions`): an evaluation on one's own documents.
    """
    bench = own_benchmark(dataset, corpus, limit) if corpus else load_benchmark(dataset, limit=limit)
    if skipped is not None:
        for why in bench.skipped:
            skipped(why)
    check_questions(bench, dataset)
    if live_version(index_dir):
        raise IndexFormatError(
            f"{index_dir} was changed by `hopgraph update` (live version {live_version(index_dir)}), "
            "so it no longer holds exactly the dataset's corpus; choose another --index"
        )
    earlier = IndexStore(index_dir).finished_stages()
    try:
        manifest = build_index(bench.documents, index_dir, build_config(index_dir, config), progress=progress)
    except OtherIndexError as exc:  # eval has no --overwrite, and its --out is the result file
        raise OtherIndexError(
            f"{index_dir} holds an index of {exc.what} (an index `hopgraph index` built of the same file "
            "differs too: its documents carry their source path); give eval a folder of its own with --index, "
            "where it builds the dataset's index",
            exc.what,
        ) from None
    for method in methods:  # every method checked before the first runs: none's results are lost to a later one
        check_method(method, manifest, str(index_dir))
    ran = {name: rec["seconds"] for name, rec in manifest["stages"].items() if earlier.get(name) != rec}
    retriever = Retriever.configured(index_dir, config)  # this run's retrieval settings, device and reranker
    started = time.perf_counter()
    vectors = retriever.embed([q.text for q in bench.questions])
    query_embedding_seconds = time.perf_counter() - started
    records = []
    llm = open_llm(config.llm) if answers else None
    for method in methods:
        hits, word_hits, recalls, latencies, results = [], [], [], [], []
        recalls_at: dict[int, list[float]] = {k: [] for k in RECALL_AT}
        for q, vector in tqdm(list(zip(bench.questions, vectors)), desc=method, unit="q", disable=not progress):
            result = retriever.retrieve(q.text, method=method, vector=vector)
            results.append(result)
            latencies.append(result.seconds)
            hits.append(coverage_hit(result.context, q.answers))
            word_hits.append(coverage_hit(result.context, q.answers, whole_words=True))
            recall = supporting_recall(result.doc_ids, q.supporting_ids)
            if recall is not None:
                recalls.append(recall)
                for k in RECALL_AT:
                    recalls_at[k].append(supporting_recall_at(result.doc_ids, q.supporting_ids, k) or 0.0)
        record: dict[str, Any] = {
            "method": method,
            "coverage": round(100.0 * float(np.mean(hits)), 2),
            "coverage_whole_word": round(100.0 * float(np.mean(word_hits)), 2),
            "supporting_recall": round(100.0 * float(np.mean(recalls)), 2) if recalls else None,
            **{
                f"supporting_recall_at_{k}": round(100.0 * float(np.mean(r)), 2) if r else None
                for k, r in recalls_at.items()
            },
            "latency_ms_p50": percentile_ms(latencies, 50),
            "latency_ms_p95": percentile_ms(latencies, 95),
        }
        if method == "cue":
            record["reranker"] = reranker_for(retriever.index, retriever.rerank, retriever.device).name
        if llm is not None:
            replies, usage = answer_many(llm, results, config.answer, progress=progress, refused_as_not_found=True)
            scores = [answer_scores(a.text, q.answers, found=a.found) for a, q in zip(replies, bench.questions)]
            for metric in scores[0]:
                record[metric] = round(100.0 * float(np.mean([score[metric] for score in scores])), 2)
            record["not_found"] = sum(not a.found for a in replies)
            record["answer_llm"] = usage.to_dict()
        records.append(record)
    return {
        "dataset": bench.name,
        "n_questions": len(bench.questions),
        "chunk_size": config.chunking.size,
        "splits": config.chunking.effective_splits,
        "budget": config.retrieval.budget,
        "embedding_model": config.embedding.model,
        "skipped_passages": bench.skipped,  # left out, as `hopgraph index` leaves them (text_problem)
        "results": records,
        "index": {
            # Stage times of this run, and those of stages an earlier build finished (not repeated here).
            "stages_seconds_this_run": ran,
            "stages_seconds_earlier_build": {k: v["seconds"] for k, v in manifest["stages"].items() if k not in ran},
            "build_peak_memory_mb": round(manifest.get("peak_memory_mb", 0.0), 1),
            "build_peak_memory_covers": "the largest peak of the processes that ran the index stages",
            "counts": manifest["counts"],
            "llm": {k: v["llm"] for k, v in manifest["stages"].items() if "llm" in v},
            "extraction": config.extraction.model_dump() if config.extraction.active() else None,
        },
        # Two models where both apply: the index's LLM-built parts keep the model that built them (a
        # complete index is not extracted again for another --llm.model), answers use this run's.
        "extraction_model": manifest["config"]["llm"]["model"] if config.extraction.active() else None,
        "answer_model": config.llm.model if answers else None,
        "query_embedding_seconds": round(query_embedding_seconds, 3),
        "peak_memory_mb": round(peak_memory_mb(), 1),
        "peak_memory_covers": PEAK_MEMORY_COVERS,
        "config": config.model_dump(),
        **report.provenance(),
    }


def result_columns(rows: list[dict[str, Any]]) -> list[str]:
    columns = ["method", "coverage", "coverage_whole_word", "supporting_recall", "latency_ms_p50", "latency_ms_p95"]
    return columns + [c for c in ("em", "f1", "accuracy", "not_found", "reranker") if any(c in r for r in rows)]


def _index_line(payload: dict[str, Any]) -> str:
    """Which stage times and peak memory are this run's and which the earlier build's."""
    index = payload["index"]
    now, earlier = index.get("stages_seconds_this_run", {}), index.get("stages_seconds_earlier_build", {})
    return (
        f"Index stages run now: {len(now)} ({sum(now.values()):.1f} s); finished by an earlier build: {len(earlier)} "
        f"({sum(earlier.values()):.1f} s). Peak memory {payload['peak_memory_mb']:.0f} MB "
        f"({payload['peak_memory_covers']}); the build's {index.get('build_peak_memory_mb', 0):.0f} MB."
    )


def write_outputs(payload: dict[str, Any], out: Path) -> list[Path]:
    """JSON + Markdown table + PNG chart side by side (out is the JSON path)."""
    report.write_json(out, payload)
    rows = payload["results"]
    table = out.with_suffix(".md")
    header = (
        f"# {payload['dataset']}: n={payload['n_questions']}, ℓ={payload['chunk_size']} (τ={payload['splits']}), "
        f"λ={payload['budget']}\n\nCommand: `{payload['command']}`  \nMachine: "
        f"{report.machine_line(payload['machine'])}, "
        f"commit {payload['git_commit']}; latency excludes query embedding. coverage: a gold answer occurs in the "
        f"context (the papers' substring match); coverage_whole_word: it occurs as whole words.  \n"
        f"{_index_line(payload)}\n\n"
    )
    text = header + report.markdown_table(rows, result_columns(rows))
    report.atomic_write(table, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    chart = out.with_suffix(".png")
    report.bar_chart(
        chart,
        [r["method"] for r in rows],
        [r["coverage"] for r in rows],
        f"{payload['dataset']} ℓ={payload['chunk_size']} λ={payload['budget']}",
        "Coverage (%)",
    )
    return [out, table, chart]
