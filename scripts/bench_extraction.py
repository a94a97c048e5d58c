"""How often does a small model's extraction output fail to parse, with and without structured output?

Starts the llama.cpp stand-in, cuts the MuSiQue (KET-RAG 500) corpus into chunks and sends the
first N to both extraction tasks (kg: entities + relations; units: CUE-RAG knowledge units),
once with structured output (response_format json_schema, a grammar in llama.cpp) and once
prompt-only. Each of the four runs has its own empty completion cache, so every call is real:

- parse_retries=0: calls, parse failures and their rate, tokens, items per parsed result, wall time;
- then parse_retries=1 on the same cache: the first attempts come from the cache and only the
  retries of failed passages are paid; what still fails is the fallback rate an index would see.

    python3 scripts/bench_extraction.py                    # defaults: SmolLM2-135M, 24 chunks of 300 tokens
    python3 scripts/bench_extraction.py --n 4 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from hopgraph.config import ChunkingConfig, LLMConfig
from hopgraph.evaluate import report
from hopgraph.index.chunking import build_layers
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm import open_llm
from hopgraph.llm.extract import extract
from hopgraph.llm.standin import MODELS, StandinServer

REPO = Path(__file__).resolve().parents[1]
TASKS = ("kg", "units")


def items(task: str, value) -> int:
    return len(value["entities"]) + len(value["relations"]) if task == "kg" else len(value)


def run(task: str, structured: bool, chunks: list[str], base: LLMConfig, work: Path) -> dict:
    """One task × mode: a first pass with no parse retries (all calls paid), then one retry round."""
    cache = work / f"{task}-{'structured' if structured else 'prompt'}.sqlite"
    config = base.model_copy(update={"structured": structured, "parse_retries": 0, "cache": str(cache)})
    started = time.perf_counter()
    results, usage = extract(open_llm(config), task, chunks, config, progress=True)
    seconds = time.perf_counter() - started
    parsed = [r for r in results if r is not None]
    retry_config = config.model_copy(update={"parse_retries": 1})
    started = time.perf_counter()
    _, retry_usage = extract(open_llm(retry_config), task, chunks, retry_config, progress=True)
    retry_seconds = time.perf_counter() - started
    row = {
        "task": task,
        "structured": structured,
        "passages": len(chunks),
        "calls": usage.calls,
        "parse_failures": usage.parse_failures,
        "failure_rate_pct": round(100 * usage.parse_failures / max(len(chunks), 1), 1),
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "completion_tokens_per_call": round(usage.completion_tokens / max(usage.calls, 1), 1),
        "items_per_parsed_result": round(sum(items(task, r) for r in parsed) / len(parsed), 2) if parsed else 0.0,
        "empty_parsed_results": sum(items(task, r) == 0 for r in parsed),
        "seconds": round(seconds, 1),
        "retry_cached_calls": retry_usage.cached_calls,
        "retry_new_calls": retry_usage.new_calls,
        "retry_completion_tokens": retry_usage.paid_completion_tokens,
        "fallbacks_after_1_retry": retry_usage.fallbacks,
        "fallback_rate_pct": round(100 * retry_usage.fallbacks / max(len(chunks), 1), 1),
        "retry_seconds": round(retry_seconds, 1),
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "musique" / "ketrag_500")
    parser.add_argument(
        "--model", default="smollm2-135m", help=f"stand-in model: {' | '.join(MODELS)} | path to a .gguf file"
    )
    parser.add_argument(
        "--n", type=int, default=24, help="chunks sent to each of the four runs (first N of the corpus)"
    )
    parser.add_argument("--chunk-size", type=int, default=300, help="ℓ: tokens per chunk")
    parser.add_argument("--max-tokens", type=int, default=384, help="longest completion per call")
    parser.add_argument("--context", type=int, default=4096, help="context tokens per parallel slot of the stand-in")
    parser.add_argument("--parallel", type=int, default=2, help="requests the stand-in serves at once")
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "extraction_parse_failures.json")
    args = parser.parse_args()

    bench = load_benchmark(args.dataset)
    chunking = ChunkingConfig(size=args.chunk_size, overlap=min(100, (args.chunk_size - 1) // 2))
    layers = build_layers(bench.documents, chunking)
    chunks = layers.chunks.text[: args.n]
    tokens = layers.chunks.tokens[: args.n]
    print(
        f"{len(chunks)} chunks of {bench.name} (ℓ={args.chunk_size}, {sum(tokens)} tokens); model {args.model}, "
        f"max_tokens {args.max_tokens}",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="hopgraph-extraction-"))
    rows = []
    started = time.perf_counter()
    try:
        with StandinServer(args.model, context=args.context, parallel=args.parallel) as server:
            base = LLMConfig(
                base_url=server.base_url,
                model=args.model,
                max_tokens=args.max_tokens,
                context_tokens=args.context,
                concurrency=args.parallel,
                timeout=600,
                retries=1,
            )
            for task in TASKS:
                for structured in (True, False):
                    print(
                        f"[{len(rows) + 1}/4] {task}, {'structured output' if structured else 'prompt-only JSON'} ...",
                        flush=True,
                    )
                    row = run(task, structured, chunks, base, work)
                    rows.append(row)
                    print(
                        f"      parse failures {row['parse_failures']}/{row['passages']} ({row['failure_rate_pct']}%), "
                        f"fallbacks after a retry {row['fallbacks_after_1_retry']} ({row['fallback_rate_pct']}%), "
                        f"{row['completion_tokens']} completion tokens, {row['seconds'] + row['retry_seconds']:.0f} s",
                        flush=True,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - started

    payload = {
        "benchmark": "extraction parse failures",
        "dataset": str(args.dataset),
        "model": args.model,
        "settings": {
            "chunks": len(chunks),
            "chunk_size": args.chunk_size,
            "chunk_tokens": int(sum(tokens)),
            "max_tokens": args.max_tokens,
            "temperature_first_attempt": base.temperature,
            "temperature_retry": max(base.temperature, 0.7),
            "context": args.context,
            "parallel": args.parallel,
        },
        "results": rows,
        "seconds_total": round(total, 1),
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    columns = [
        "task",
        "structured",
        "passages",
        "calls",
        "parse_failures",
        "failure_rate_pct",
        "prompt_tokens",
        "completion_tokens",
        "items_per_parsed_result",
        "seconds",
        "retry_new_calls",
        "fallbacks_after_1_retry",
        "fallback_rate_pct",
    ]
    header = (
        f"# {payload['benchmark']}\n\nData: first {len(chunks)} chunks (ℓ={args.chunk_size}) of {args.dataset.name}; "
        f"LLM: {args.model} (llama.cpp stand-in), max_tokens={args.max_tokens}, greedy first attempt, one sampled "
        "retry (T=0.7).  \n"
        f"failure_rate_pct: completions that did not parse and validate with parse_retries=0; "
        f"fallback_rate_pct: passages still without a result after one retry.  \n"
        f"Command: `{payload['command']}`  \nMachine: {report.machine_line(payload['machine'])}, commit "
        f"{payload['git_commit']}; "
        f"{total:.0f} s in all.\n\n"
    )
    text = header + report.markdown_table(rows, columns)
    report.atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text(text, encoding="utf-8"))
    print(text)


if __name__ == "__main__":
    main()
