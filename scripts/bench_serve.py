"""The query server under load: ≥ 50 concurrent clients on loopback for 60 s against /v1/retrieve
with an LLM-free method, then the same load while documents are being inserted (update jobs run in
the server's worker process beside the readers).

The server is a real `hopgraph serve` child process; the clients are asyncio tasks with one
keep-alive HTTP connection each, every client with its own token (the per-token rate limit is set
above what one client can send, so it never throttles this test). Questions are the benchmark's,
round robin. The mixed phase passes when readers see no errors and their p50 and p95 latency stay
within ``--bound`` times the read-only phase (update jobs run at ``serve.job_niceness``).

    python3 scripts/bench_serve.py                         # MuSiQue kag_dev100 corpus, ppr, 50 clients, 60 s per phase
    python3 scripts/bench_serve.py --clients 100 --seconds 30 --method text
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from hopgraph import Index, load_config
from hopgraph.evaluate import report
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm.standin import free_port

REPO = Path(__file__).resolve().parents[1]


async def client_loop(
    url: str, token: str, questions: list[str], offset: int, method: str, budget: int, until: float, out: list
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as client:
        n = offset
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                response = await client.post(
                    "/v1/retrieve", json={"query": questions[n % len(questions)], "method": method, "budget": budget}
                )
                status = response.status_code
            except httpx.HTTPError as exc:
                status = f"{exc.__class__.__name__}"
            out.append((time.perf_counter() - started, status))
            n += 1


async def writer_loop(url: str, token: str, batches: list[list[dict]], until: float, jobs: list) -> None:
    """One insert job at a time, the next submitted when the previous is done."""
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as client:
        for batch in batches:
            if time.monotonic() >= until:
                break
            submitted = time.perf_counter()
            job = (await client.post("/v1/documents", json={"documents": batch})).json()
            while True:
                record = (await client.get(f"/v1/jobs/{job['id']}")).json()
                if record["status"] in ("done", "failed"):
                    break
                await asyncio.sleep(0.5)
            jobs.append(
                {
                    "id": job["id"],
                    "documents": len(batch),
                    "status": record["status"],
                    "seconds": round(time.perf_counter() - submitted, 2),
                }
            )


def summarise(samples: list[tuple[float, Any]], seconds: float) -> dict[str, Any]:
    latencies = np.asarray([s for s, status in samples if status == 200]) * 1000
    errors = [status for _, status in samples if status != 200]
    return {
        "requests": len(samples),
        "errors": len(errors),
        "error_kinds": sorted({str(e) for e in errors}),
        "throughput_rps": round(len(samples) / seconds, 1),
        **{
            f"latency_ms_p{q}": round(float(np.percentile(latencies, q)), 1) if len(latencies) else None
            for q in (50, 95, 99)
        },
    }


async def phase(
    url: str, tokens: list[str], questions: list[str], args: argparse.Namespace, batches: list[list[dict]] | None
) -> dict[str, Any]:
    samples: list = []
    jobs: list = []
    until = time.monotonic() + args.seconds
    tasks = [
        client_loop(url, tokens[i % len(tokens)], questions, i * 7, args.method, args.budget, until, samples)
        for i in range(args.clients)
    ]
    if batches:
        tasks.append(writer_loop(url, "admin-token-bench-000000", batches, until, jobs))
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    result = summarise(samples, time.perf_counter() - started)
    if batches is not None:
        result["insert_jobs"] = jobs
    return result


def start_server(index: Path, port: int, env: dict[str, str], *options: str) -> subprocess.Popen:
    """A real `hopgraph serve` child process on 127.0.0.1:``port`` (rate limits lifted for load
    tests, ``options`` as more `--key value` settings); returns once /healthz answers."""
    command = [sys.executable, "-m", "hopgraph.cli", "serve", str(index), "--serve.port", str(port)]
    server = subprocess.Popen([*command, "--serve.rate_limit", "1000", "--serve.rate_burst", "1000", *options], env=env)
    give_up = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > give_up:
            server.kill()
            raise SystemExit("server did not start")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        default=REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json",
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--method", default="ppr")
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--insert-batch", type=int, default=20, help="documents per insert job in the mixed phase")
    parser.add_argument(
        "--bound", type=float, default=1.5, help="allowed mixed / read-only ratio of reader p50 and p95 latency"
    )
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_load.json")
    args = parser.parse_args()
    bench = load_benchmark(args.dataset)
    held_out = 200  # documents kept back for the insert jobs of the mixed phase
    documents, extra = bench.documents[:-held_out], bench.documents[-held_out:]
    questions = [q.text for q in bench.questions]
    work = Path(tempfile.mkdtemp(prefix="hopgraph-serve-"))
    users = [{"token": f"reader-token-bench-{i:06d}", "user": f"reader{i}", "groups": []} for i in range(args.clients)]
    users.append({"token": "admin-token-bench-000000", "user": "admin", "groups": [], "admin": True})
    port = free_port()
    env = {**os.environ, "HOPGRAPH_TOKENS": json.dumps(users)}
    try:
        Index.build(documents, work / "index", load_config(None, {}), progress=True)
        server = start_server(work / "index", port, env)
        url = f"http://127.0.0.1:{port}"
        tokens = [u["token"] for u in users[:-1]]
        print(f"read-only phase: {args.clients} clients, {args.seconds:g} s", flush=True)
        readers = asyncio.run(phase(url, tokens, questions, args, None))
        print(json.dumps(readers), flush=True)
        batches = [
            [{"id": d.id, "title": d.title, "text": d.text} for d in extra[i : i + args.insert_batch]]
            for i in range(0, len(extra), args.insert_batch)
        ]
        print(
            f"mixed phase: the same load while insert jobs of {args.insert_batch} documents run back to back",
            flush=True,
        )
        mixed = asyncio.run(phase(url, tokens, questions, args, batches))
        print(json.dumps(mixed), flush=True)
        server.terminate()
        server.wait(timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = {f"p{q}": round(mixed[f"latency_ms_p{q}"] / readers[f"latency_ms_p{q}"], 2) for q in (50, 95, 99)}
    payload = {
        "benchmark": "server load",
        "dataset": f"{args.dataset} ({len(documents)} documents indexed, {held_out} held out for inserts)",
        "clients": args.clients,
        "seconds_per_phase": args.seconds,
        "method": args.method,
        "budget": args.budget,
        "read_only": readers,
        "mixed_with_inserts": mixed,
        "mixed_over_read_only": ratios,
        "bound": args.bound,
        "job_niceness": load_config(None, {}).serve.job_niceness,
        "readers_within_bound": mixed["errors"] == 0 and ratios["p50"] <= args.bound and ratios["p95"] <= args.bound,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    lines = [
        f"# Server load ({args.clients} clients, {args.seconds:g} s per phase, method {args.method}, λ={args.budget})",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {report.machine_line(payload['machine'])}, commit {payload['git_commit']}.",
        "",
        report.markdown_table(
            [
                {"phase": "read-only", **readers},
                {"phase": "with inserts", **{k: v for k, v in mixed.items() if k != "insert_jobs"}},
            ],
            ["phase", "requests", "errors", "throughput_rps", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99"],
        ),
        "",
        f"Mixed / read-only latency: {ratios}; bound {args.bound}× on p50 and p95 with 0 errors: "
        f"{'met' if payload['readers_within_bound'] else 'NOT met'}.",
        "",
        f"Insert jobs during the mixed phase: {mixed['insert_jobs']}",
        "",
    ]
    report.atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text("\n".join(lines), encoding="utf-8"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
