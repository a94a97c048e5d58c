"""One hostile reader against the query server: 50 ordinary readers send `ppr` retrievals (λ=2000)
for 60 s, once alone and once while one more client sends, back to back, the most expensive
request the server accepts (method `cue` with every `serve.request_limits` setting at its bound and
λ at `serve.max_budget`). The ordinary readers' p99 latency with / without the hostile reader and
their errors say whether one reader can slow the others beyond a bound or stop them; the hostile
reader's statuses show the deadline cutting its requests (504).

The server is a real `hopgraph serve` child process over a MuSiQue index built with
`--extraction.cue_alpha 0` (sentence units, no LLM); the reader loop and the latency summary are
those of scripts/bench_serve.py.

    python3 scripts/bench_hostile.py                                   # 50 clients, 60 s per phase
    python3 scripts/bench_hostile.py --seconds 5 --clients 5 --documents 60 --out /tmp/hostile.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the reader loop and its summary live in scripts/bench_serve.py

from hopgraph import Index  # noqa: E402
from hopgraph.config import ServeConfig, load_config  # noqa: E402
from hopgraph.errors import IndexFormatError  # noqa: E402
from hopgraph.evaluate import report  # noqa: E402
from hopgraph.index.datasets import load_benchmark  # noqa: E402
from hopgraph.llm.standin import free_port  # noqa: E402
from hopgraph.store import IndexStore  # noqa: E402
from scripts.bench_serve import client_loop, start_server, summarise  # noqa: E402

HOSTILE_TOKEN = "hostile-token-bench-000000"


def most_expensive(serve: ServeConfig, question: str) -> dict[str, Any]:
    """The costliest retrieval the server accepts: cue with every bounded setting at its limit."""
    limits = serve.request_limits
    return {
        "query": question,
        "method": "cue",
        "budget": serve.max_budget,
        "params": {
            "cue": {
                "top_k": limits.cue_top_k,
                "depth": limits.cue_depth,
                "beam": limits.cue_beam,
                "chunks": limits.cue_chunks,
            }
        },
    }


async def hostile_loop(url: str, body: dict[str, Any], until: float, out: list) -> None:
    """Back-to-back expensive requests on one connection; records (seconds, status or error)."""
    async with httpx.AsyncClient(
        base_url=url, timeout=120, headers={"Authorization": f"Bearer {HOSTILE_TOKEN}"}
    ) as client:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                status: Any = (await client.post("/v1/retrieve", json=body)).status_code
            except httpx.HTTPError as exc:
                status = exc.__class__.__name__
            out.append((time.perf_counter() - started, status))


async def phase(
    url: str, tokens: list[str], questions: list[str], args: argparse.Namespace, hostile: dict[str, Any] | None
) -> dict[str, Any]:
    samples: list = []
    attacks: list = []
    until = time.monotonic() + args.seconds
    tasks = [
        client_loop(url, tokens[i], questions, i * 7, "ppr", args.budget, until, samples) for i in range(args.clients)
    ]
    if hostile is not None:
        tasks.append(hostile_loop(url, hostile, until, attacks))
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    result = summarise(samples, time.perf_counter() - started)
    if hostile is not None:
        result["hostile"] = {
            "requests": len(attacks),
            "statuses": dict(Counter(str(s) for _, s in attacks)),
            "seconds_max": round(max((s for s, _ in attacks), default=0.0), 2),
        }
    return result


def ensure_index(path: Path, documents: list) -> None:
    """Build the CUE-capable index at ``path`` unless a complete one is already there (reused)."""
    try:
        IndexStore(path).require_complete()
        print(f"reusing {path}", flush=True)
    except IndexFormatError:  # absent or partial: (re)build, resuming finished stages
        Index.build(documents, path, load_config(None, {"extraction.cue_alpha": 0}), progress=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        default=REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json",
    )
    parser.add_argument(
        "--documents", type=int, default=None, help="index only the first N documents (smoke tests); default all"
    )
    parser.add_argument(
        "--index", type=Path, default=None, help="index folder to reuse or build (default: a temporary one)"
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument(
        "--deadline", type=float, default=ServeConfig().request_deadline, help="serve.request_deadline of the server"
    )
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_hostile.json")
    args = parser.parse_args()
    bench = load_benchmark(args.dataset)
    documents = bench.documents[: args.documents] if args.documents else bench.documents
    questions = [q.text for q in bench.questions]
    index = args.index or Path(tempfile.mkdtemp(prefix="hopgraph-hostile-")) / "index"
    ensure_index(index, documents)
    users = [{"token": f"reader-token-bench-{i:06d}", "user": f"reader{i}", "groups": []} for i in range(args.clients)]
    users.append({"token": HOSTILE_TOKEN, "user": "hostile", "groups": []})
    port = free_port()
    server = start_server(
        index,
        port,
        {**os.environ, "HOPGRAPH_TOKENS": json.dumps(users)},
        "--serve.request_deadline",
        str(args.deadline),
    )
    url, tokens = f"http://127.0.0.1:{port}", [u["token"] for u in users[:-1]]
    serve = load_config(None, {}).serve
    hostile_body = most_expensive(serve, questions[0])
    try:
        print(f"ordinary readers alone: {args.clients} clients, {args.seconds:g} s", flush=True)
        alone = asyncio.run(phase(url, tokens, questions, args, None))
        print(json.dumps(alone), flush=True)
        print("the same readers beside one hostile reader", flush=True)
        attacked = asyncio.run(phase(url, tokens, questions, args, hostile_body))
        print(json.dumps(attacked), flush=True)
    finally:
        stopping = time.monotonic()
        server.terminate()
        server.wait(timeout=60)
        shutdown_seconds = round(time.monotonic() - stopping, 2)
    payload = {
        "benchmark": "hostile reader",
        "dataset": f"{args.dataset} ({len(documents)} documents indexed, extraction.cue_alpha 0)",
        "clients": args.clients,
        "seconds_per_phase": args.seconds,
        "method": "ppr",
        "budget": args.budget,
        "request_deadline": args.deadline,
        "hostile_request": hostile_body,
        "ordinary_p99_ratio": round(attacked["latency_ms_p99"] / alone["latency_ms_p99"], 2)
        if alone["latency_ms_p99"] and attacked["latency_ms_p99"]
        else None,
        "ordinary_errors": attacked["errors"],
        "hostile_statuses": attacked["hostile"]["statuses"],
        "alone": alone,
        "with_hostile": attacked,
        "shutdown_seconds": shutdown_seconds,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    print(
        f"ordinary p99 with / without the hostile reader: {payload['ordinary_p99_ratio']}; ordinary errors: "
        f"{payload['ordinary_errors']}; "
        f"hostile statuses: {payload['hostile_statuses']}; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
