"""The CPU floor under one query-server request, and the ceiling on requests/s it sets.

`scripts/bench_serve.py` measures the server end to end; this measures, in one process on one
thread, the two parts every `/v1/retrieve` request must pay whatever the server does around them:

* **query embedding**: the index's embedder on the benchmark's questions in groups of
  ``serve.batch_group`` (the server's batcher embeds in such groups; larger groups pad more);
* **retrieval**: the method at the budget, from a precomputed question vector.

With ``cores`` cores and nothing else running (no HTTP, no JSON, no load generator, no locks),
no server can answer more than ``cores × 1000 / (embed_ms + retrieve_ms)`` requests a second:
``ceiling_rps`` (``embedding_only_ceiling_rps``: the same with retrieval free). The result sets it against the goal of 5× the baseline's requests/s in
`serve_throughput.json` (read from there, same machine) and against the measured server.

A second row times the embedding with the model's Linear layers quantised to int8 (torch's
dynamic quantisation), the usual way to buy CPU speed: it is reported with how far its vectors
move (cosine to the fp32 vector), not used, since it changes what retrieval returns.

    python3 scripts/bench_serve_floor.py          # same index as bench_serve.py, ~3 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import REPO, build, load_arguments  # noqa: E402

from hopgraph.evaluate import report  # noqa: E402
from hopgraph.index.datasets import load_benchmark  # noqa: E402
from hopgraph.models import limit_compute_threads  # noqa: E402
from hopgraph.retrieve.partitioned import open_index  # noqa: E402
from hopgraph.retrieve.retriever import Retriever  # noqa: E402

HELD_OUT = 200  # as bench_serve.py: the last documents are kept back for its insert jobs


def per_item_ms(run: Any, items: int, repeats: int) -> float:
    """Median over ``repeats`` passes of one pass's milliseconds per item."""
    passes = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        passes.append((time.perf_counter() - started) * 1000 / items)
    return round(statistics.median(passes), 2)


def in_groups(encode: Any, questions: list[str], group: int) -> np.ndarray:
    return np.vstack([encode(questions[i : i + group]) for i in range(0, len(questions), group)])


def main() -> None:
    parser = load_arguments(__doc__)
    parser.add_argument("--group", type=int, default=8, help="questions per model call (serve.batch_group)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--throughput", type=Path, default=REPO / "scripts" / "results" / "serve_throughput.json")
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_floor.json")
    args = parser.parse_args()
    bench = load_benchmark(args.dataset)
    documents = bench.documents[:-HELD_OUT]
    questions = [q.text for q in bench.questions]
    work = Path(tempfile.mkdtemp(prefix="hopgraph-floor-"))
    try:
        corpus = work / "corpus.jsonl"
        with corpus.open("w", encoding="utf-8") as out:
            for d in documents:
                out.write(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n")
        build(corpus, work / "index", dict(os.environ), REPO)
        limit_compute_threads(1)  # one thread: the server's processes each run theirs on one
        loaded = open_index(work / "index")
        retriever = Retriever(loaded, loaded.config.retrieval, device="cpu")
        encode = retriever.embedder.encode_queries
        vectors = in_groups(encode, questions, args.group)  # also the warm-up
        embed_ms = per_item_ms(lambda: in_groups(encode, questions, args.group), len(questions), args.repeats)

        def retrieve_all() -> None:
            for question, vector in zip(questions, vectors):
                retriever.retrieve(question, method=args.method, budget=args.budget, vector=vector)

        retrieve_all()
        retrieve_ms = per_item_ms(retrieve_all, len(questions), args.repeats)
        int8 = int8_embedding(retriever.embedder, questions, args, vectors)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor_ms = embed_ms + retrieve_ms
    ceiling = round(args.cores * 1000 / floor_ms, 1)
    measured = json.loads(args.throughput.read_text()) if args.throughput.exists() else {}
    baseline = measured.get("baseline_rps")
    payload = {
        "benchmark": "CPU floor of one query-server request (one thread, in process)",
        "dataset": f"{args.dataset} ({len(documents)} documents, {len(questions)} questions)",
        "method": args.method,
        "budget": args.budget,
        "group": args.group,
        "cores": args.cores,
        "embed_ms_per_question": embed_ms,
        "retrieve_ms_per_request": retrieve_ms,
        "floor_ms_per_request": round(floor_ms, 2),
        "ceiling_rps": ceiling,
        "embedding_only_ceiling_rps": round(args.cores * 1000 / embed_ms, 1),
        "throughput_file": str(args.throughput.relative_to(REPO)) if args.throughput.is_relative_to(REPO) else "",
        "baseline_rps": baseline,
        "goal_rps": round(5 * baseline, 1) if baseline else None,
        "server_rps": measured.get("rps"),
        "ceiling_over_baseline": round(ceiling / baseline, 2) if baseline else None,
        "int8_embedding": int8,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    print(json.dumps({k: v for k, v in payload.items() if not isinstance(v, dict)}, indent=1))


def int8_embedding(embedder: Any, questions: list[str], args: argparse.Namespace, fp32: np.ndarray) -> dict[str, Any]:
    """The same timing with the model's Linear layers dynamically quantised to int8, and how far
    its vectors are from the fp32 ones; {} when the embedder is not a torch model."""
    import torch  # noqa: PLC0415

    inner = getattr(getattr(embedder, "inner", None), "model", None)
    if not isinstance(inner, torch.nn.Module):
        return {}
    with warnings.catch_warnings():  # torch announces the API's move to torchao; it still works
        warnings.simplefilter("ignore")
        quantised = torch.ao.quantization.quantize_dynamic(inner, {torch.nn.Linear}, dtype=torch.qint8)

    def encode(texts: list[str]) -> np.ndarray:
        rows = np.asarray(quantised.encode(texts, convert_to_numpy=True), dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    vectors = in_groups(encode, questions, args.group)
    cosine = (vectors * fp32).sum(axis=1)
    return {
        "embed_ms_per_question": per_item_ms(lambda: in_groups(encode, questions, args.group), len(questions), 3),
        "cosine_to_fp32_min": round(float(cosine.min()), 4),
        "cosine_to_fp32_median": round(float(np.median(cosine)), 4),
    }


if __name__ == "__main__":
    main()
