"""A slow-client flood (slowloris) against `hopgraph serve`, with the connection bounds and without.

One attacker address (127.0.0.2) opens ``--connections`` connections and sends each the start of a
request's headers, never the end; meanwhile an ordinary client (127.0.0.1) asks `/healthz` every
0.2 s on a new connection. The server is a real `hopgraph serve` child process over the sample
index, run under ``ulimit -n --fd-limit`` as a default Linux account is. Two runs side by side:

* ``bounded``: the defaults (serve.request_read_seconds, serve.max_connections,
  serve.max_connections_per_client);
* ``unbounded``: those bounds lifted as far as they go (uvicorn's own behaviour: no time limit on
  headers, no cap on connections).

Per run: how many of the attacker's connections the server closed at once, the ordinary client's
successes and failures and its slowest answer over ``--seconds``, and how much the server wrote
to its log meanwhile (uvicorn logs a traceback per failed accept).

    python3 scripts/bench_slow_clients.py          # 1,100 connections, 20 s per run, ~1 minute
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hopgraph.config import ServeConfig  # noqa: E402
from hopgraph.evaluate import report  # noqa: E402
from hopgraph.llm.standin import free_port  # noqa: E402
from scripts.bench_serve import build, start_server  # noqa: E402

LIFTED = ("--serve.request_read_seconds", "3600", "--serve.max_connections", "100000")
LIFTED += ("--serve.max_connections_per_client", "100000")


def flood(port: int, connections: int) -> list[socket.socket]:
    """The attacker's half-sent requests; a connection the server refuses at once is counted later."""
    opened = []
    for _ in range(connections):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            opened.append(sock)
        except OSError:
            break  # the server's accept queue is full: the flood has done what it can
    return opened


def closed(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def run(index: Path, options: tuple[str, ...], args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.fd_limit, limit[1]))  # inherited by the server only
    log = tempfile.TemporaryFile()  # the server's stderr: how much it logs under the flood
    try:
        tokens = json.dumps([{"token": "slow-clients-bench-reader", "user": "reader", "groups": []}])
        server = start_server(index, port, {**os.environ, "HOPGRAPH_TOKENS": tokens}, *options, stderr=log)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)
    try:
        sockets = flood(port, args.connections)
        time.sleep(0.5)
        closed_at_once = sum(closed(s) for s in sockets)
        ok, failed, slowest = 0, 0, 0.0
        until = time.monotonic() + args.seconds
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                ok += httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                failed += 1
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.2)
        for sock in sockets:
            sock.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
        log_bytes = log.seek(0, os.SEEK_END)
        log.close()
    return {
        "options": list(options),
        "attacker_connections_opened": len(sockets),
        "closed_at_once": closed_at_once,
        "healthz_ok": ok,
        "healthz_failed": failed,
        "healthz_slowest_s": round(slowest, 3),
        "server_log_bytes": log_bytes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=1100, help="the attacker's half-open connections")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the ordinary client asks, per run")
    parser.add_argument("--fd-limit", type=int, default=1024, help="the server's open-file limit (ulimit -n)")
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_slow_clients.json")
    args = parser.parse_args()
    index = Path(tempfile.mkdtemp(prefix="hopgraph-slow-clients-")) / "index"
    build(REPO / "examples" / "sample", index, dict(os.environ), REPO)
    runs = {"bounded": run(index, (), args), "unbounded": run(index, LIFTED, args)}
    defaults = ServeConfig()
    payload = {
        "benchmark": "slow-client flood",
        "dataset": "examples/sample",
        "connections": args.connections,
        "seconds": args.seconds,
        "server_fd_limit": args.fd_limit,
        "defaults": {
            "request_read_seconds": defaults.request_read_seconds,
            "max_connections": defaults.max_connections,
            "max_connections_per_client": defaults.max_connections_per_client,
        },
        **runs,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    print(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
