"""LLM-tier methods side by side on a MuSiQue subset with the CPU stand-in: index token accounting,
Coverage, and EM / F1 / Accuracy of the stand-in's answers.

The CPU stand-in (SmolLM2-135M through llama.cpp) is far too slow for the 500-question corpus, so
this uses a documented subset: the first N questions of MuSiQue dev (kag_dev100) with only their own
paragraphs as the corpus, the same subset for every method. λ is reduced to fit the stand-in's
context window. Answer quality with a 135M model measures the plumbing, not the methods; Coverage
and the token counts are the comparable figures.

    python3 scripts/bench_llm_tier.py                     # starts the stand-in itself
    python3 scripts/bench_llm_tier.py --questions 5 --out /tmp/llm.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from hopgraph import Index, load_config
from hopgraph.evaluate import report
from hopgraph.evaluate.runner import evaluate
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm.standin import StandinServer

REPO = Path(__file__).resolve().parents[1]
LLM_FREE = ["text", "knng", "keyword", "concept", "ppr"]
# (variant label, extraction settings, [(method, label in the results)])
VARIANTS = [
    ("llm-free", {}, [(m, m) for m in LLM_FREE]),
    ("kg (all chunks)", {"extraction.kg": "all"}, [("kg", "kg"), ("hybrid", "hybrid")]),
    (
        "skeleton β=0.8 (PageRank core)",
        {"extraction.kg": "pagerank", "extraction.core_fraction": 0.8},
        [("kg", "skeleton"), ("ket", "ket-p")],
    ),
    ("random core β=0.8", {"extraction.kg": "random", "extraction.core_fraction": 0.8}, [("ket", "ket-u")]),
    (
        "core-kg κ=0.8 (concept PageRank core)",
        {"extraction.kg": "concept", "extraction.core_fraction": 0.8},
        [("kg", "core-kg"), ("g2cons", "g2cons")],
    ),
    ("cue α=0", {"extraction.cue_alpha": 0.0}, [("cue", "cue-0")]),
    ("cue α=0.5", {"extraction.cue_alpha": 0.5}, [("cue", "cue-0.5")]),
    ("cue α=1", {"extraction.cue_alpha": 1.0}, [("cue", "cue-1")]),
]
# Token ratios reported: name -> (variant, the variant it is compared with).
RATIOS = {
    "skeleton_over_kg": ("skeleton β=0.8 (PageRank core)", "kg (all chunks)"),
    "random_core_over_kg": ("random core β=0.8", "kg (all chunks)"),
    "core_kg_over_kg": ("core-kg κ=0.8 (concept PageRank core)", "kg (all chunks)"),
    "cue_0.5_over_cue_1": ("cue α=0.5", "cue α=1"),
}


def write_subset(source: Path, n: int, target: Path) -> Path:
    records = json.loads(source.read_text(encoding="utf-8"))[:n]
    target.write_text(json.dumps(records), encoding="utf-8")
    return target


def index_tokens(payload: dict) -> dict:
    usage = [u for u in payload["index"]["llm"].values()]
    keys = (
        "calls",
        "new_calls",
        "cached_calls",
        "prompt_tokens",
        "completion_tokens",
        "parse_failures",
        "fallbacks",
        "retry_calls",
        "retry_tokens",
    )
    return {k: sum(u[k] for u in usage) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        default=REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json",
    )
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--budget", type=int, default=1500, help="λ (the stand-in reads at most a few thousand tokens)")
    parser.add_argument(
        "--chunk-size", type=int, default=150, help="ℓ: small chunks, so λ holds several and β/κ/α act on many chunks"
    )
    parser.add_argument("--max-tokens", type=int, default=256, help="longest extraction completion")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--no-answers", action="store_true", help="Coverage and index accounting only (no answer generation)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=REPO / ".hopgraph" / "llm-bench.sqlite",
        help="completion cache (a re-run pays nothing)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "llm_tier_musique_subset.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopgraph-llm-"))
    subset = write_subset(args.dataset, args.questions, work / f"musique_dev_first{args.questions}.json")
    rows, variants = [], []
    try:
        with StandinServer(args.model, context=4096, parallel=2) as server:
            base = {
                "retrieval.budget": args.budget,
                "chunking.size": args.chunk_size,
                "chunking.overlap": 0,
                "llm.base_url": server.base_url,
                "llm.model": args.model,
                "llm.cache": str(args.cache),
                "llm.max_tokens": args.max_tokens,
                "llm.context_tokens": 4096,
                "llm.concurrency": 2,
                "llm.timeout": 1800,
                "answer.max_tokens": 48,
            }
            for label, settings, methods in VARIANTS:
                config = load_config(None, {**base, **settings})
                print(f"== {label}", flush=True)
                payload = evaluate(
                    subset, work / "index", config, [m for m, _ in methods], answers=not args.no_answers, progress=True
                )
                tokens = index_tokens(payload)
                variants.append(
                    {
                        "variant": label,
                        "extraction": payload["index"]["extraction"],
                        "index_llm": tokens,
                        "counts": {
                            k: v for k, v in payload["index"]["counts"].items() if k.startswith(("kg_", "cue_"))
                        },
                    }
                )
                for record, (_, name) in zip(payload["results"], methods):
                    rows.append(
                        {
                            "method": name,
                            "variant": label,
                            **{
                                k: record.get(k)
                                for k in (
                                    "coverage",
                                    "coverage_whole_word",
                                    "supporting_recall",
                                    "em",
                                    "f1",
                                    "accuracy",
                                    "not_found",
                                    "reranker",
                                    "latency_ms_p50",
                                )
                            },
                            "index_prompt_tokens": tokens["prompt_tokens"],
                            "index_completion_tokens": tokens["completion_tokens"],
                            "answer_prompt_tokens": record.get("answer_llm", {}).get("prompt_tokens"),
                        }
                    )
            # The cache at work: the full-KG index built again from scratch pays for no call.
            again = Index.build(
                load_benchmark(subset).documents,
                work / "again",
                load_config(None, {**base, "extraction.kg": "all"}),
                progress=False,
            ).manifest
            rebuild = again["stages"]["kg_extract"]["llm"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = {v["variant"]: v["index_llm"]["prompt_tokens"] + v["index_llm"]["completion_tokens"] for v in variants}
    # Without the re-asks for unparseable outputs: what the chunk selection alone costs.
    first = {v["variant"]: total[v["variant"]] - v["index_llm"]["retry_tokens"] for v in variants}
    payload = {
        "benchmark": "LLM tier on a MuSiQue subset with the CPU stand-in",
        "dataset": f"{args.dataset} (first {args.questions} questions, their paragraphs only)",
        "llm": f"{args.model} via llama.cpp (xllamacpp), CPU stand-in — answer scores are not representative of a "
        "production model",
        "budget": args.budget,
        "chunk_size": args.chunk_size,
        "results": rows,
        "variants": variants,
        "token_ratios": {name: round(total[a] / total[b], 3) for name, (a, b) in RATIOS.items()},
        "token_ratios_first_attempts": {name: round(first[a] / first[b], 3) for name, (a, b) in RATIOS.items()},
        "cache_rebuild_of_kg_index": rebuild,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    columns = [
        "method",
        "variant",
        "coverage",
        "coverage_whole_word",
        "supporting_recall",
        "em",
        "f1",
        "accuracy",
        "not_found",
        "index_prompt_tokens",
        "index_completion_tokens",
        "reranker",
    ]
    header = (
        f"# {payload['benchmark']}\n\nData: {payload['dataset']}; ℓ={args.chunk_size} (no overlap), "
        f"λ={args.budget}; LLM: {payload['llm']}.  \n"
        f"Command: `{payload['command']}`  \nMachine: {report.machine_line(payload['machine'])}, commit "
        f"{payload['git_commit']}.\n\n"
    )
    ratios = "\n".join(
        f"- {k}: {v} ({payload['token_ratios_first_attempts'][k]} without parse retries)"
        for k, v in payload["token_ratios"].items()
    )
    text = (
        header
        + report.markdown_table(rows, columns)
        + f"\n\nIndex LLM tokens (prompt + completion) relative:\n{ratios}\n\nRebuild of the kg index with a warm "
        f"cache: {rebuild['new_calls']} new calls of {rebuild['calls']}.\n"
    )
    report.atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text(text, encoding="utf-8"))
    report.bar_chart(
        args.out.with_suffix(".png"),
        [r["method"] for r in rows],
        [r["coverage"] for r in rows],
        f"MuSiQue subset ({args.questions} q) ℓ={args.chunk_size} λ={args.budget}",
        "Coverage (%)",
    )
    print(text)


if __name__ == "__main__":
    main()
