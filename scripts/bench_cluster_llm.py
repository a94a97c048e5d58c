"""LLM extraction through Ray (``ray.data.llm``'s HTTP processor) with one and with two stand-in
replicas, each pinned to its own core: calls per second and whether the outputs are identical.

The same extraction requests (CUE knowledge units of MuSiQue passages, greedy, structured output)
go first to one llama.cpp stand-in pinned to core 0, then spread over two pinned to cores 0 and 1,
each serving one request at a time. No completion cache: every call is paid. The Ray instance
is local; its request workers take a few percent of a core.

    python3 scripts/bench_cluster_llm.py                          # 48 passages
    python3 scripts/bench_cluster_llm.py --passages 8 --out /tmp/llm.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from hopgraph.config import HopgraphConfig, LLMConfig
from hopgraph.evaluate.report import provenance, write_json
from hopgraph.index.cluster import RayEngine
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm.extract import extract
from hopgraph.llm.standin import StandinServer

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "scripts" / "results" / "cluster_llm_replicas.json"
SOURCE = REPO.parent / "shared" / "data" / "musique" / "ketrag_500"


def run(passages: list[str], cores: list[int], max_tokens: int) -> dict:
    servers = [StandinServer("smollm2-135m", context=2048, parallel=1, cpus=(core,)) for core in cores]
    for server in servers:
        server.start()
    try:
        llm = LLMConfig(
            base_url=servers[0].base_url,
            model="smollm2-135m",
            max_tokens=max_tokens,
            context_tokens=2048,
            parse_retries=0,
            cache="",
            timeout=300,
        )
        config = HopgraphConfig.model_validate(
            {
                "cluster": {
                    "engine": "ray",
                    "llm_endpoints": [s.base_url for s in servers],
                    "llm_workers_per_endpoint": 2,
                    "llm_batch_size": 1,
                }
            }
        )
        engine = RayEngine(config)
        try:
            backend = engine.llm(llm)
            started = time.perf_counter()
            results, usage = extract(backend, "units", passages, llm)
            seconds = time.perf_counter() - started
        finally:
            engine.close()
    finally:
        for server in servers:
            server.stop()
    return {
        "replicas": len(cores),
        "cores": cores,
        "calls": usage.calls,
        "seconds": round(seconds, 2),
        "calls_per_second": round(usage.calls / seconds, 4),
        "completion_tokens": usage.completion_tokens,
        "fallbacks": usage.fallbacks,
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--passages", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores (one per replica)")
    passages = [d.text for d in load_benchmark(args.source).documents[: args.passages]]
    one = run(passages, [0], args.max_tokens)
    print(f"1 replica: {one['calls_per_second']:.3f} calls/s", flush=True)
    two = run(passages, [0, 1], args.max_tokens)
    print(f"2 replicas: {two['calls_per_second']:.3f} calls/s", flush=True)
    identical = one.pop("results") == two.pop("results")
    payload = {
        "benchmark": "LLM extraction through Ray: one against two stand-in replicas",
        "dataset": f"{args.source} (first {args.passages} passages), CUE knowledge units, greedy",
        "throughput_ratio": round(two["calls_per_second"] / one["calls_per_second"], 3),
        "identical": identical,
        "goal": "throughput_ratio >= 1.6 with identical outputs",
        "runs": [one, two],
        "method": "llama.cpp stand-in (SmolLM2-135M) replicas pinned to one core each with one thread and one "
        "slot; ray.data.llm HTTP processor, 2 request workers per endpoint, rows round-robin over the endpoints; "
        "no completion cache",
        **provenance(),
    }
    write_json(args.out, payload)
    print(json.dumps({k: payload[k] for k in ("throughput_ratio", "identical")}))


if __name__ == "__main__":
    main()
