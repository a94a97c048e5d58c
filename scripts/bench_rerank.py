"""Reranker throughput on the MuSiQue-500 corpus: (question, chunk) pairs scored per second.

CUE-RAG's Q-Iter and final chunk rerank score many (query, passage) pairs per question, so the
reranker is the query path's main model cost. This times the reranker the configuration names:
the BGE cross-encoder when ``rerank.model`` is a local folder (FlagEmbedding, fp16 on CUDA), else
the labelled bi-encoder fallback. Each of the first N questions is scored against K chunks of the
corpus (ℓ=1200 by default), its own supporting paragraphs' chunks first and seeded random ones
after; one untimed warm-up question keeps model loading and kernel compilation out of the figures.

    python3 scripts/bench_rerank.py --out /tmp/rerank_cpu.json                 # CPU: bi-encoder fallback
    python3 scripts/bench_rerank.py --set rerank.model=/models/bge-reranker-v2-m3 \\
        --set embedding.device=cuda --out scripts/results/rerank_gpu.json     # GPU machine with the weights
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from hopgraph import load_config
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.chunking import build_layers
from hopgraph.index.datasets import load_benchmark
from hopgraph.models import resolve_device
from hopgraph.retrieve.rerank import make_reranker

REPO = Path(__file__).resolve().parents[1]


def candidates(chunk_docs: list[list[int]], supporting: set[int], k: int, rng: np.random.Generator) -> list[int]:
    """The question's supporting chunks first (as a retriever would find them), then random ones."""
    own = [c for c, docs in enumerate(chunk_docs) if supporting.intersection(docs)][:k]
    taken = set(own)
    return own + [int(c) for c in rng.permutation(len(chunk_docs)) if int(c) not in taken][: k - len(own)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "musique" / "ketrag_500")
    parser.add_argument("--questions", type=int, default=50, help="questions timed (after one warm-up question)")
    parser.add_argument("--candidates", type=int, default=20, help="chunks scored per question")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="setting override, e.g. rerank.model=PATH (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "rerank_musique.json")
    args = parser.parse_args()
    config = load_config(None, dict(item.split("=", 1) for item in args.set))
    bench = load_benchmark(args.dataset, limit=args.questions + 1)
    layers = build_layers(bench.documents, config.chunking)
    texts = layers.chunks.text
    document_index = {d.id: i for i, d in enumerate(bench.documents)}

    started = time.perf_counter()
    reranker = make_reranker(config.rerank, config.embedding, config.chunking.encoding)
    load_seconds = time.perf_counter() - started
    rng = np.random.default_rng(args.seed)
    per_question, pairs = [], 0
    for i, question in enumerate(bench.questions):
        supporting = {document_index[d] for d in question.supporting_ids or [] if d in document_index}
        chosen = candidates(layers.chunks.docs, supporting, args.candidates, rng)
        started = time.perf_counter()
        scores = reranker.score(question.text, [texts[c] for c in chosen])
        seconds = time.perf_counter() - started
        if not np.all(np.isfinite(scores)) or len(scores) != len(chosen):
            raise SystemExit(
                f"reranker {reranker.name} returned {len(scores)} scores for {len(chosen)} passages, or non-finite ones"
            )
        if i:  # question 0 is the warm-up
            per_question.append(seconds)
            pairs += len(chosen)
    timed = sum(per_question)
    payload = {
        "benchmark": "reranker throughput",
        "dataset": str(args.dataset),
        "reranker": reranker.name,
        "device": resolve_device(config.embedding.device),
        "batch_size": config.rerank.batch_size,
        "chunk_size": config.chunking.size,
        "chunks_in_corpus": len(texts),
        "questions_timed": len(per_question),
        "candidates_per_question": args.candidates,
        "pairs": pairs,
        "load_seconds": round(load_seconds, 2),
        "seconds": round(timed, 2),
        "pairs_per_second": round(pairs / timed, 1),
        "ms_per_question_p50": round(1000 * statistics.median(per_question), 1),
        "ms_per_question_max": round(1000 * max(per_question), 1),
        **provenance(),
    }
    write_json(args.out, payload)
    print(
        f"{reranker.name} on {payload['device']}: {pairs} pairs in {timed:.1f} s = {payload['pairs_per_second']} "
        "pairs/s, "
        f"p50 {payload['ms_per_question_p50']} ms per question of {args.candidates}"
    )


if __name__ == "__main__":
    main()
