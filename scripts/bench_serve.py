"""Query-server throughput: 50 concurrent clients on loopback for 60 s per phase against
/v1/retrieve with an LLM-free method, on this checkout and on a baseline commit, side by side in
one run on one machine.

Phases (each a real `hopgraph serve` child process, clients as asyncio tasks with one keep-alive
connection and their own token each; the per-token rate limit is lifted):

1. **baseline**: the baseline commit's server (default 4cd2298, one process), read-only;
2. **open**: this checkout's server (``--serve`` options, e.g. ``--serve.workers 2``), same load
   over an index of the same documents;
3. **with_inserts**: phase 2's load while insert jobs of ``--insert-batch`` held-out documents run
   back to back in the update worker;
4. **acl_all_readable** and **restricted**: this checkout's server over a second index of the same
   documents where every other one carries ``acl = ["team-b"]``: readers in team-b (they may read
   everything), then readers with no group (they may read half).

Top-level results: ``baseline_rps``, ``rps``, ``p99_ms``, ``errors`` (phase 2),
``with_insert_over_read_only`` (p50 latency, phase 3 / phase 2) and ``restricted_over_open`` (p50
latency, restricted / acl_all_readable); under a closed-loop load these are also the throughput
ratios, both are recorded.

    python3 scripts/bench_serve.py --serve "--serve.workers 2"     # 50 clients, 60 s per phase
    python3 scripts/bench_serve.py --seconds 10 --baseline ""      # a quick look, no baseline
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

import aiohttp
import httpx
import numpy as np

from hopgraph.evaluate import report
from hopgraph.index.datasets import load_benchmark
from hopgraph.llm.standin import free_port

REPO = Path(__file__).resolve().parents[1]


async def client_loop(
    url: str, token: str, questions: list[str], offset: int, method: str, budget: int, until: float, out: list
) -> None:
    """One reader: a keep-alive connection sending the next question as soon as the last is answered.

    aiohttp rather than httpx: on 2 cores the load generator shares the server's CPU, and aiohttp
    spends a fraction of httpx's time per request, so more of the machine measures the server."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base_url=url, headers=headers, timeout=timeout) as client:
        n = offset
        while time.monotonic() < until:
            started = time.perf_counter()
            body = {"query": questions[n % len(questions)], "method": method, "budget": budget}
            try:
                async with client.post("/v1/retrieve", json=body) as response:
                    await response.read()
                    status: Any = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:
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
    writer = (
        asyncio.ensure_future(writer_loop(url, "admin-token-bench-000000", batches, until, jobs)) if batches else None
    )
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    result = summarise(samples, time.perf_counter() - started)  # the readers' time only
    if writer is not None:
        await writer  # the job under way when the readers stop is waited for, not timed with them
    if batches is not None:
        result["insert_jobs"] = jobs
    return result


def start_server(
    index: Path, port: int, env: dict[str, str], *options: str, cwd: Path | None = None, stderr: Any = None
) -> subprocess.Popen:
    """A real `hopgraph serve` child process on 127.0.0.1:``port`` (rate limits lifted for load
    tests, ``options`` as more `--key value` settings, its stderr to ``stderr`` when given);
    returns once /healthz answers."""
    command = [sys.executable, "-m", "hopgraph.cli", "serve", str(index), "--serve.port", str(port)]
    server = subprocess.Popen(
        [*command, "--serve.rate_limit", "1000", "--serve.rate_burst", "1000", *options],
        env=env,
        cwd=cwd,
        stderr=stderr,
    )
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


def build(corpus: Path, out: Path, env: dict[str, str], cwd: Path) -> None:
    """Index ``corpus`` with the code under ``cwd`` (its own CLI, so each side reads what it wrote)."""
    subprocess.run(
        [sys.executable, "-m", "hopgraph.cli", "index", str(corpus), "--out", str(out), "--quiet"],
        env={**env, "PYTHONPATH": str(cwd)},
        cwd=cwd,
        check=True,
    )


def measured(
    index: Path,
    env: dict[str, str],
    cwd: Path,
    options: list[str],
    runs: list[tuple[str, list[str], list | None]],
    args: argparse.Namespace,
    questions: list[str],
) -> dict[str, dict[str, Any]]:
    """Start one server, run each (name, tokens, insert batches) phase after a warm-up, stop it."""
    port = free_port()
    server = start_server(index, port, {**env, "PYTHONPATH": str(cwd)}, *options, cwd=cwd)
    url = f"http://127.0.0.1:{port}"
    results = {}
    try:
        for name, tokens, batches in runs:
            warm = argparse.Namespace(**{**vars(args), "seconds": args.warmup})
            asyncio.run(phase(url, tokens, questions, warm, None))
            print(f"{name}: {args.clients} clients, {args.seconds:g} s", flush=True)
            results[name] = asyncio.run(phase(url, tokens, questions, args, batches))
            print(json.dumps(results[name]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return results


def load_arguments(description: str | None) -> argparse.ArgumentParser:
    """The options every server load benchmark shares: corpus, clients, phase length, method, budget."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        default=REPO.parent / "shared" / "data" / "musique" / "kag_dev100" / "musique_qa_100.json",
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--method", default="ppr")
    parser.add_argument("--budget", type=int, default=2000)
    return parser


def main() -> None:
    parser = load_arguments(__doc__)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before each phase, not counted")
    parser.add_argument("--insert-batch", type=int, default=20, help="documents per insert job in the insert phase")
    parser.add_argument("--baseline", default="4cd2298", help="commit whose server is the baseline ('' to skip)")
    parser.add_argument(
        "--baseline-dir",
        type=Path,
        help="the baseline commit's files already on disk (e.g. unpacked from `git archive`), for a copy of "
        "the repository without its history; --baseline then only names the commit in the results",
    )
    parser.add_argument("--serve", default="", help="extra `--serve.*` options of this checkout's server")
    parser.add_argument("--out", type=Path, default=REPO / "scripts" / "results" / "serve_throughput.json")
    args = parser.parse_args()
    bench = load_benchmark(args.dataset)
    held_out = 200  # documents kept back for the insert jobs
    documents, extra = bench.documents[:-held_out], bench.documents[-held_out:]
    questions = [q.text for q in bench.questions]
    work = Path(tempfile.mkdtemp(prefix="hopgraph-serve-"))
    everyone = [
        {"token": f"reader-token-open-{i:06d}", "user": f"open{i}", "groups": ["team-b"]} for i in range(args.clients)
    ]
    half = [{"token": f"reader-token-half-{i:06d}", "user": f"half{i}", "groups": []} for i in range(args.clients)]
    admin = {"token": "admin-token-bench-000000", "user": "admin", "groups": ["team-b"], "admin": True}
    env = {**os.environ, "HOPGRAPH_TOKENS": json.dumps([*everyone, *half, admin])}
    open_tokens, half_tokens = [u["token"] for u in everyone], [u["token"] for u in half]
    corpus, corpus_acl = work / "corpus.jsonl", work / "corpus-acl.jsonl"
    with corpus.open("w", encoding="utf-8") as plain, corpus_acl.open("w", encoding="utf-8") as restricted:
        for i, d in enumerate(documents):
            record = {"id": d.id, "title": d.title, "text": d.text}
            plain.write(json.dumps(record) + "\n")
            restricted.write(json.dumps({**record, "metadata": {"acl": ["team-b"]} if i % 2 else {}}) + "\n")
    batches = [
        [{"id": d.id, "title": d.title, "text": d.text} for d in extra[i : i + args.insert_batch]]
        for i in range(0, len(extra), args.insert_batch)
    ]
    options = args.serve.split()
    phases: dict[str, dict[str, Any]] = {}
    try:
        if args.baseline:
            base = args.baseline_dir or work / "baseline"
            if args.baseline_dir is None:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.baseline], check=True
                )
            build(corpus, work / "index-baseline", env, base)
            phases["baseline"] = measured(
                work / "index-baseline", env, base, [], [("baseline", open_tokens, None)], args, questions
            )["baseline"]
        build(corpus, work / "index", env, REPO)
        phases.update(
            measured(
                work / "index",
                env,
                REPO,
                options,
                [("open", open_tokens, None), ("with_inserts", open_tokens, batches)],
                args,
                questions,
            )
        )
        build(corpus_acl, work / "index-acl", env, REPO)
        phases.update(
            measured(
                work / "index-acl",
                env,
                REPO,
                options,
                [("acl_all_readable", open_tokens, None), ("restricted", half_tokens, None)],
                args,
                questions,
            )
        )
    finally:
        if args.baseline and args.baseline_dir is None:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / "baseline")], check=False
            )
        shutil.rmtree(work, ignore_errors=True)
    after = phases["open"]

    def ratio(name: str, reference: str = "open") -> float:
        return round(phases[name]["latency_ms_p50"] / phases[reference]["latency_ms_p50"], 2)

    payload = {
        "benchmark": "server throughput",
        "dataset": f"{args.dataset} ({len(documents)} documents indexed, {held_out} held out for inserts; the "
        "ACL phases on a second index of the same documents, every other one with acl [team-b])",
        "clients": args.clients,
        "seconds_per_phase": args.seconds,
        "method": args.method,
        "budget": args.budget,
        "baseline_commit": args.baseline,
        "serve_options": args.serve,
        "baseline_rps": phases.get("baseline", {}).get("throughput_rps"),
        "rps": after["throughput_rps"],
        "p99_ms": after["latency_ms_p99"],
        "errors": after["errors"],
        "rps_over_baseline": round(after["throughput_rps"] / phases["baseline"]["throughput_rps"], 2)
        if "baseline" in phases
        else None,
        "restricted_over_open": ratio("restricted", "acl_all_readable"),
        "with_insert_over_read_only": ratio("with_inserts"),
        "throughput_ratios": {
            "open_over_restricted": round(
                phases["acl_all_readable"]["throughput_rps"] / phases["restricted"]["throughput_rps"], 2
            ),
            "read_only_over_with_inserts": round(after["throughput_rps"] / phases["with_inserts"]["throughput_rps"], 2),
        },
        "phases": phases,
        **report.provenance(),
    }
    report.write_json(args.out, payload)
    rows = [{"phase": name, **{k: v for k, v in p.items() if k != "insert_jobs"}} for name, p in phases.items()]
    lines = [
        f"# Server throughput ({args.clients} clients, {args.seconds:g} s per phase, {args.method}, λ={args.budget})",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {report.machine_line(payload['machine'])}, commit {payload['git_commit']}; baseline "
        f"{args.baseline}; server options `{args.serve or '(defaults)'}`.",
        "",
        report.markdown_table(
            rows,
            ["phase", "requests", "errors", "throughput_rps", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99"],
        ),
        "",
        f"Requests/s over the baseline: {payload['rps_over_baseline']}; restricted / open p50: "
        f"{payload['restricted_over_open']}; with inserts / read-only p50: {payload['with_insert_over_read_only']}.",
        "",
        f"Insert jobs during the insert phase: {phases['with_inserts'].get('insert_jobs')}",
        "",
    ]
    report.atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text("\n".join(lines), encoding="utf-8"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
