"""Two `hopgraph serve` replicas on one machine over one index directory (loopback): throughput with
the clients split across both (and through one alone, for comparison), the time from an insert
job's publish until both replicas serve the new version, and the memory of the processes (arrays
are memory-mapped, so processes serving one version share those pages; also `serve.workers` 1 vs 2).

The corpus is MuSiQue kag_dev100 (as scripts/bench_serve.py; one document held out for the insert).
The insert is submitted to the replica that does not lead, so it is queued on disk and picked up by
the leader's job loop; the switch time is measured from the moment INDEX/CURRENT changes.

    python3 scripts/bench_replicas.py                      # 50 clients, 60 s per phase
    python3 scripts/bench_replicas.py --seconds 5          # a quick check
    python3 scripts/bench_replicas.py --index /tmp/musique-index   # reuse (or keep) the built index
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from bench_serve import client_loop, load_arguments, start_server, summarise

from hopgraph import Index, load_config
from hopgraph.evaluate import report
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm.standin import free_port
from hopgraph.serve.replicas import read_leader
from hopgraph.store import CURRENT, read_heartbeats

REPO = Path(__file__).resolve().parents[1]
ADMIN = "admin-token-bench-000000"


async def load_phase(urls: list[str], tokens: list[str], questions: list[str], args: argparse.Namespace) -> dict:
    """``args.clients`` clients for ``args.seconds``, client i on replica i mod len(urls)."""
    samples: list = []
    until = time.monotonic() + args.seconds
    tasks = [
        client_loop(
            urls[i % len(urls)], tokens[i % len(tokens)], questions, i * 7, args.method, args.budget, until, samples
        )
        for i in range(args.clients)
    ]
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    return summarise(samples, time.perf_counter() - started)


def memory(pid: int) -> dict[str, float]:
    """RSS and PSS (MiB) of a process and its descendants (update workers excluded: none run here)."""
    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    infos = [p.memory_full_info() for p in processes if p.is_running()]
    return {
        "processes": len(infos),
        "rss_mib": round(sum(i.rss for i in infos) / 2**20, 1),
        "pss_mib": round(sum(i.pss for i in infos) / 2**20, 1),
    }


def switch_time(index: Path, urls: list[str], job_id: str, timeout: float) -> dict[str, Any]:
    """Seconds from CURRENT naming ``job_id`` until each replica's /healthz does."""
    current, deadline = index / CURRENT, time.monotonic() + timeout
    while not (current.exists() and job_id in current.read_text()):
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job_id} was not published in {timeout} s")
        time.sleep(0.01)
    published, serving = time.monotonic(), {}
    while len(serving) < len(urls):
        for url in urls:
            if url not in serving and httpx.get(f"{url}/healthz", timeout=10).json()["version"] == job_id:
                serving[url] = round(time.monotonic() - published, 3)
        if time.monotonic() > deadline:
            raise SystemExit(f"replicas {sorted(set(urls) - set(serving))} never served {job_id}")
        time.sleep(0.01)
    return {"per_replica_s": list(serving.values()), "both_s": max(serving.values())}


def workers_memory(index: Path, env: dict[str, str], workers: int) -> dict[str, Any]:
    port = free_port()
    server = start_server(index, port, env, "--serve.workers", str(workers), "--serve.jobs", "never")
    try:
        deadline = time.monotonic() + 300  # /healthz answers once the first process is up: wait for all
        while len(read_heartbeats(index)) < workers and time.monotonic() < deadline:
            time.sleep(0.5)
        url = f"http://127.0.0.1:{port}"
        for _ in range(20):  # every process answers a few queries (fresh connections spread over them)
            httpx.post(
                f"{url}/v1/retrieve",
                json={"query": "Who founded the company?", "method": "ppr"},
                headers={"Authorization": f"Bearer {ADMIN}"},
                timeout=60,
            )
        return {"workers": workers, **memory(server.pid)}
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = load_arguments(__doc__)
    parser.add_argument("--refresh", type=float, default=2.0, help="serve.refresh_seconds of both replicas")
    parser.add_argument(
        "--index", type=Path, help="index directory to use; built there if missing (else a temporary one)"
    )
    parser.add_argument("--no-workers-memory", action="store_true", help="skip the serve.workers 1 vs 2 memory check")
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_replicas.json")
    args = parser.parse_args()
    bench = load_benchmark(args.dataset)
    documents, extra = bench.documents[:-1], bench.documents[-1]
    questions = [q.text for q in bench.questions]
    work = Path(tempfile.mkdtemp(prefix="hopgraph-replicas-"))
    index = args.index or work / "index"
    users = [{"token": f"reader-token-bench-{i:06d}", "user": f"reader{i}", "groups": []} for i in range(args.clients)]
    users.append({"token": ADMIN, "user": "admin", "groups": [], "admin": True})
    env = {**os.environ, "HOPGRAPH_TOKENS": json.dumps(users)}
    tokens = [u["token"] for u in users[:-1]]
    servers = []
    try:
        if not (index / "manifest.json").exists():
            Index.build(documents, index, load_config(None, {}), progress=True)
        for name in (CURRENT, "versions", "jobs", "replicas"):  # a reused index starts at its root version
            path = index / name
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        ports = [free_port(), free_port()]
        refresh = ("--serve.refresh_seconds", str(args.refresh))
        for port in ports:  # one after the other: the first takes the lead
            servers.append(start_server(index, port, env, *refresh))
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        leader = read_leader(index)
        assert leader and leader["pid"] == servers[0].pid, leader
        loaded = [memory(s.pid) for s in servers]
        print(f"one replica: {args.clients} clients, {args.seconds:g} s", flush=True)
        one = asyncio.run(load_phase(urls[:1], tokens, questions, args))
        print(json.dumps(one), f"\ntwo replicas: {args.clients} clients split across both", flush=True)
        two = asyncio.run(load_phase(urls, tokens, questions, args))
        print(json.dumps(two), flush=True)
        submitted = time.monotonic()
        job = httpx.post(
            f"{urls[1]}/v1/documents",
            json={"documents": [{"id": extra.id, "title": extra.title, "text": extra.text}]},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=60,
        ).json()
        switch = switch_time(index, urls, job["id"], timeout=600)
        switch["submit_to_both_s"] = round(time.monotonic() - submitted, 3)
        print("version switch:", json.dumps(switch), flush=True)
        after = [memory(s.pid) for s in servers]
        for server in servers:
            server.terminate()
            server.wait(timeout=60)
        servers = []
        workers = [] if args.no_workers_memory else [workers_memory(index, env, n) for n in (1, 2)]
    finally:
        for server in servers:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
    payload = {
        "benchmark": "two replicas over one index directory",
        "dataset": f"{args.dataset} ({len(documents)} documents indexed, 1 held out for the insert)",
        "clients": args.clients,
        "seconds_per_phase": args.seconds,
        "method": args.method,
        "budget": args.budget,
        "refresh_seconds": args.refresh,
        "one_replica": one,
        "two_replicas": two,
        "two_over_one_rps": round(two["throughput_rps"] / one["throughput_rps"], 2) if one["throughput_rps"] else None,
        "insert_to_follower": {"job": job["id"], **switch},
        "memory_replicas_loaded": loaded,
        "memory_replicas_after": after,
        "memory_workers": workers,
        "cpu_cores": os.cpu_count(),
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
