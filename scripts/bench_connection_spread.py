"""How `hopgraph serve --serve.workers N` shares a burst of new connections among its processes,
with one socket that every process accepts from (uvicorn's supervisor, the default) and with a
socket per process (``--serve.socket_per_worker true``), side by side in one run on one machine.

For each process count in ``--workers`` and each way: one server over an index of
``examples/wiki``; ``--trials`` times, ``--connections`` connections are opened together, held a
second, and counted per worker process (from the kernel's socket table), then closed. Then
``--clients`` keep-alive readers send ``ppr`` retrievals for ``--seconds``, as ``bench_serve.py``'s
clients do, and their requests/s and latencies are recorded. On a small machine the load generator
shares the server's cores.

    python3 scripts/bench_connection_spread.py           # 2 and 4 processes → scripts/results/connection_spread.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import REPO, build, client_loop, start_server, summarise  # noqa: E402

from hopgraph.evaluate.report import provenance, write_json  # noqa: E402
from hopgraph.llm.standin import free_port  # noqa: E402

RESULT = REPO / "scripts" / "results" / "connection_spread.json"
QUESTIONS = [
    "Who leads the Osaka office?",
    "Which office did Lena Fischer move to?",
    "What does the remote work policy allow?",
    "Who founded the Toronto office?",
]


def held_per_process(server: psutil.Process, port: int) -> list[int]:
    """Established connections on ``port`` per worker process (a process holding none counts 0)."""
    counts = []
    for child in server.children():
        try:
            connections = child.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        listening = any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections)
        if listening:
            counts.append(sum(c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port for c in connections))
    return sorted(counts, reverse=True)


async def burst(port: int, count: int, server: psutil.Process) -> list[int]:
    opened = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in range(count)))
    await asyncio.sleep(1.0)
    held = held_per_process(server, port)
    for _, writer in opened:
        writer.close()
    await asyncio.sleep(0.5)
    return held


async def load(url: str, token: str, args: argparse.Namespace) -> dict[str, Any]:
    samples: list = []
    until = time.monotonic() + args.seconds
    started = time.perf_counter()
    await asyncio.gather(
        *(client_loop(url, token, QUESTIONS, i, "ppr", 2000, until, samples) for i in range(args.clients))
    )
    return summarise(samples, time.perf_counter() - started)


def measure(index: Path, env: dict[str, str], workers: int, per_worker: bool, args: argparse.Namespace) -> dict:
    port = free_port()
    options = ("--serve.workers", str(workers), "--serve.socket_per_worker", str(per_worker).lower())
    server = start_server(index, port, env, *options)
    try:
        process = psutil.Process(server.pid)
        deadline = time.monotonic() + 300
        while len(held_per_process(process, port)) < workers and time.monotonic() < deadline:
            time.sleep(0.5)  # each process loads the index, then listens
        trials = [asyncio.run(burst(port, args.connections, process)) for _ in range(args.trials)]
        busiest = [max(t) / max(1, sum(t)) for t in trials]
        return {
            "held_per_process": trials,
            "busiest_share_mean": round(statistics.mean(busiest), 3),
            "busiest_share_max": round(max(busiest), 3),
            "processes_with_none_mean": round(statistics.mean(t.count(0) for t in trials), 2),
            "keep_alive_load": asyncio.run(load(f"http://127.0.0.1:{port}", "spread-reader-token-000000", args)),
        }
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4], help="process counts to measure")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--clients", type=int, default=50, help="keep-alive readers of the load phase")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the load phase")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopgraph-spread-"))
    tokens = [{"token": "spread-reader-token-000000", "user": "reader"}]
    env = {**os.environ, "HOPGRAPH_TOKENS": json.dumps(tokens)}
    runs: dict[str, dict[str, Any]] = {}
    try:
        build(REPO / "examples" / "wiki", work / "index", env, REPO)
        for workers in args.workers:
            sides = {
                name: measure(work / "index", env, workers, name == "socket_per_process", args)
                for name in ("shared_socket", "socket_per_process")
            }
            before, after = sides["shared_socket"], sides["socket_per_process"]
            runs[str(workers)] = {
                "busiest_share_mean": {name: side["busiest_share_mean"] for name, side in sides.items()},
                "rps_ratio": round(
                    after["keep_alive_load"]["throughput_rps"] / before["keep_alive_load"]["throughput_rps"], 2
                ),
                "sides": sides,
            }
            print(workers, json.dumps({k: v for k, v in runs[str(workers)].items() if k != "sides"}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_json(
        args.out,
        {
            "benchmark": "new connections shared among `hopgraph serve` worker processes",
            "connections": args.connections,
            "trials": args.trials,
            "clients": args.clients,
            "seconds": args.seconds,
            "workers": runs,
            **provenance(),
        },
    )
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
