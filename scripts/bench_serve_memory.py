"""Server memory over many update jobs: a real `hopgraph serve` child process on the small sample
index runs insert and delete jobs (one small document each, alternately, each submitted after the
previous one is done) through HTTP; the server's resident memory (VmRSS) is read after every job.

A server meant to run for months must not grow with the number of versions it has served:
``rss_ratio`` (RSS after the last job / after the first) should stay near 1, and the versions left
on disk at ``serve.keep_versions`` + 1 at most.

    python3 scripts/bench_serve_memory.py               # 50 jobs
    python3 scripts/bench_serve_memory.py --jobs 6 --out /tmp/serve_memory.json
"""

from __future__ import annotations

import argparse
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

from hopgraph import Index, load_config
from hopgraph.evaluate import report
from hopgraph.index import versions
from hopgraph.index.ingest import read_corpus
from hopgraph.llm.standin import free_port

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the server starter lives in scripts/bench_serve.py
from scripts.bench_serve import start_server  # noqa: E402

SAMPLE = REPO / "examples" / "sample"
SETTINGS = {
    "chunking.size": 96,
    "chunking.overlap": 8,
    "chunking.splits": 1,
    "graph.theta_co": 2,
    "graph.theta_sem": 0.3,
    "keywords.max_df": 0.5,
}
ADMIN = "admin-token-memory-bench-0"


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS line")


def start(index: Path, port: int) -> subprocess.Popen:
    """The server under test, with one admin token."""
    env = {
        **os.environ,
        "HOPGRAPH_TOKENS": json.dumps([{"token": ADMIN, "user": "admin", "groups": [], "admin": True}]),
    }
    return start_server(index, port, env)


def run_job(client: httpx.Client, n: int) -> dict[str, Any]:
    """Job n: even n inserts document mem-n, odd n deletes the one inserted just before."""
    if n % 2 == 0:
        text = f"Memo {n} of the Sorvik ferry office: the timetable for route {n} changes in week {n % 52 + 1}."
        response = client.post(
            "/v1/documents", json={"documents": [{"id": f"mem-{n}", "title": f"Memo {n}", "text": text}]}
        )
    else:
        response = client.delete(f"/v1/documents/mem-{n - 1}")
    response.raise_for_status()
    job_id, submitted = response.json()["id"], time.perf_counter()
    while (record := client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("done", "failed"):
        time.sleep(0.1)
    return {
        "job": n,
        "kind": "insert" if n % 2 == 0 else "delete",
        "status": record["status"],
        "seconds": round(time.perf_counter() - submitted, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_memory.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopgraph-memory-"))
    series: list[dict[str, Any]] = []
    try:
        config = load_config(None, SETTINGS)
        documents = read_corpus([SAMPLE]).documents
        Index.build(documents, work / "index", config, progress=False)
        port = free_port()
        server = start(work / "index", port)
        try:
            rss_start = rss_mb(server.pid)
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=60, headers={"Authorization": f"Bearer {ADMIN}"}
            ) as client:
                for n in range(args.jobs):
                    step = run_job(client, n)
                    step["rss_mb"] = round(rss_mb(server.pid), 1)
                    step["versions_on_disk"] = len(list((work / "index" / versions.VERSIONS).iterdir()))
                    series.append(step)
                    print(json.dumps(step), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
        left = sorted(p.name for p in (work / "index" / versions.VERSIONS).iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {
        "benchmark": "server memory over update jobs",
        "index": f"{SAMPLE} ({len(documents)} documents)",
        "jobs": args.jobs,
        "keep_versions": config.serve.keep_versions,
        "rss_mb_at_start": round(rss_start, 1),
        "rss_mb_after_first": series[0]["rss_mb"],
        "rss_mb_after_last": series[-1]["rss_mb"],
        "rss_ratio": round(series[-1]["rss_mb"] / series[0]["rss_mb"], 3),
        "failed_jobs": sum(s["status"] != "done" for s in series),
        "versions_left_on_disk": len(left),
        "versions_left": left,
        "series": series,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    print(json.dumps({k: v for k, v in payload.items() if k not in ("series", "machine")}, indent=2))


if __name__ == "__main__":
    main()
