"""Crash safety of ``hopgraph update``: SIGKILL at random moments, check that the index stays
servable, resume, and check that the result equals an uninterrupted run.

Setup: an index of the first 200 MuSiQue paragraphs of ``kag_dev100`` (default settings), built
with an empty ``embedding.cache`` so every copy of it uses its own ``INDEX/cache`` (warmed with the
base texts, as after a real build), and the next 100 paragraphs to add. A reference copy runs
``hopgraph update INDEX --add new.jsonl`` uninterrupted; its wall time T sets the kill range.
Each trial takes a fresh copy, starts the same command, sends SIGKILL after a delay drawn
uniformly from [0, T] (seeded; a run that happens to finish first is recorded as not killed, and
trials go on until 24 runs were really killed). Random delays mostly land in the embedding stages,
which fill most of the run, so further trials kill the process the moment it reaches each step
(job recorded, each pipeline stage recorded, CURRENT switched). Every trial then records

* where the job was: no job yet, queued, inside which pipeline stage, built but not switched, ...
* servable: ``LoadedIndex(INDEX)`` opens and a ``ppr`` retrieval returns evidence (and which
  version was live);
* resume: ``hopgraph update INDEX --resume`` (or, when the kill came before the job was recorded,
  the same command again, as a user would);
* equal: every LLM-free method retrieves exactly the reference's evidence for the first 20
  questions; whether all vectors are bitwise equal too.

    python3 scripts/bench_crash.py
    python3 scripts/bench_crash.py --kills 5 --no-events --out /tmp/crash.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_incremental import DATASET, compare_indexes, compare_results, retrieve_all

from hopgraph import Index, load_config
from hopgraph.evaluate.report import machine_line, markdown_table, provenance, write_json
from hopgraph.files import atomic_write
from hopgraph.index import versions
from hopgraph.index.datasets import load_benchmark
from hopgraph.index.pipeline import planned_stages
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "scripts" / "results" / "crash_safety.json"


def hopgraph(*args: str, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hopgraph.cli", *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )


def prepare(work: Path, documents: list, n_base: int, n_add: int) -> tuple[Path, Path]:
    """The pristine base index (own warm cache inside it) and the JSONL file of documents to add."""
    base = work / "base"
    config = load_config(None, {"embedding.cache": ""})
    manifest = Index.build(documents[:n_base], base, config, progress=False).manifest
    # Warm base/cache/embeddings.sqlite with the base texts, the cache an update of this index uses.
    Index.build(documents[:n_base], work / "warm", versions.rebuild_config(base, manifest["config"]), progress=False)
    shutil.rmtree(work / "warm")
    with sqlite3.connect(base / "cache" / "embeddings.sqlite") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the copies must carry every cached vector
    added = work / "new.jsonl"
    added.write_text(
        "".join(
            json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n"
            for d in documents[n_base : n_base + n_add]
        ),
        encoding="utf-8",
    )
    return base, added


def where(root: Path, stages: list[str]) -> str:
    """Where the update job was when the process died."""
    jobs = versions.list_jobs(root)
    if not jobs:
        return "before submit"
    job = jobs[-1]
    if job["status"] != "running":
        return job["status"]
    if versions.live_version(root) == job["id"]:
        return "switched, not recorded"
    target = IndexStore(versions.version_dir(root, job["id"]))
    if not target.exists():
        return "running, before build"
    manifest = target.read_manifest()
    if manifest.get("complete"):
        return "built, not switched"
    return f"stage {next(s for s in stages if s not in manifest['stages'])}"


def servable(root: Path, question: str) -> tuple[bool, str, str]:
    """(retrieval works, live version, error) right after the kill, as a new reader sees it."""
    try:
        index = LoadedIndex(root)
        ok = bool(Retriever(index).retrieve(question, method="ppr").evidence)
        return ok, index.version or "root", ""
    except Exception as exc:  # noqa: BLE001 - any failure here is the finding
        return False, "", f"{type(exc).__name__}: {exc}"


def reached(root: Path, event: str) -> bool:
    """Whether the update in ``root`` got to ``event``: submitted, a recorded pipeline stage, switched."""
    if event == "submitted":
        return any((root / "jobs").glob("j*.json"))
    if event == "switched":
        return (root / "CURRENT").exists()
    manifests = list((root / "versions").glob("*/manifest.json"))
    return bool(manifests) and event in json.loads(manifests[0].read_text(encoding="utf-8")).get("stages", {})


def trial(
    number: int,
    trigger: str | float,
    base: Path,
    work: Path,
    command: list[str],
    stages: list[str],
    questions: list[str],
    vectors: Any,
    want: dict,
    reference: Path,
) -> dict[str, Any]:
    """One run of ``command`` on a fresh copy of ``base``, SIGKILLed after ``trigger`` seconds or as
    soon as it reaches the event ``trigger``; then the checks, the resume and the comparison."""
    root = work / f"trial{number}"
    shutil.copytree(base, root)
    run = [str(root) if a == "INDEX" else a for a in command]
    log = work / f"trial{number}.log"
    started = time.perf_counter()
    proc = hopgraph(*run, log=log)
    if isinstance(trigger, float):
        time.sleep(trigger)
    else:
        while proc.poll() is None and not reached(root, trigger):
            time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    exit_code = proc.wait()
    elapsed = time.perf_counter() - started
    stage = where(root, stages)
    ok, live, error = servable(root, questions[0])
    submitted = bool(versions.list_jobs(root))
    resume_rc = hopgraph(*(["update", str(root), "--resume", "-q"] if submitted else run), log=log).wait()
    final = LoadedIndex(root)
    result = compare_results(retrieve_all(root, questions, vectors), want)
    diff = compare_indexes(final, LoadedIndex(reference))
    shutil.rmtree(root)
    return {
        "trial": number,
        "trigger": "random delay" if isinstance(trigger, float) else f"on {trigger}",
        "kill_after_s": round(elapsed, 2),
        "killed": exit_code == -signal.SIGKILL,
        "stage_at_kill": stage,
        "servable": ok,
        "live_after_kill": live,
        "error": error,
        "resumed_by": "--resume" if submitted else "same command again",
        "resume_exit_code": resume_rc,
        "final_version_new": final.version != "",
        "resumed_equal": result["identical"] == result["total"],
        "identical_results": f"{result['identical']}/{result['total']}",
        "vectors_bitwise_equal": all(
            diff[n].get("rows_not_bitwise_equal") == 0 for n in ("unit_vectors", "sentence_vectors", "keyword_vectors")
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--kills", type=int, default=24, help="Random-delay trials until this many runs were really killed..."
    )
    parser.add_argument("--max-trials", type=int, default=40, help="...or this many random-delay trials were run.")
    parser.add_argument("--no-events", action="store_true", help="Skip the trials that kill on reaching each stage.")
    parser.add_argument("--base", type=int, default=200, help="Paragraphs in the base index.")
    parser.add_argument(
        "--add",
        type=int,
        default=100,
        help="Paragraphs the update adds (enough that the build, not process start, fills most of the run).",
    )
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    bench = load_benchmark(DATASET, limit=args.questions)
    questions = [q.text for q in bench.questions]
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="hopgraph-crash-"))
    try:
        base, added = prepare(work, bench.documents, args.base, args.add)
        stages = [name for name, _ in planned_stages(LoadedIndex(base).config)]
        command = ["update", "INDEX", "--add", str(added), "-q"]
        reference = work / "reference"
        shutil.copytree(base, reference)
        started = time.perf_counter()
        proc = hopgraph(*[str(reference) if a == "INDEX" else a for a in command], log=work / "reference.log")
        if proc.wait() != 0:
            raise SystemExit(f"reference update failed: {(work / 'reference.log').read_text()[-2000:]}")
        reference_seconds = time.perf_counter() - started
        vectors = Retriever(reference).embed(questions)
        want = retrieve_all(reference, questions, vectors)
        shared = (base, work, command, stages, questions, vectors, want, reference)
        trials: list[dict[str, Any]] = []
        while sum(t["killed"] for t in trials) < args.kills and len(trials) < args.max_trials:
            trials.append(trial(len(trials), rng.uniform(0, reference_seconds), *shared))
            print(json.dumps(trials[-1]), flush=True)
        for event in [] if args.no_events else ["submitted", *stages, "switched"]:
            trials.append(trial(len(trials), event, *shared))
            print(json.dumps(trials[-1]), flush=True)
        payload = {
            "benchmark": "crash safety of hopgraph update",
            "dataset": bench.name,
            "base_documents": args.base,
            "added_documents": args.add,
            "questions": len(questions),
            "seed": args.seed,
            "reference_seconds": round(reference_seconds, 2),
            "update_command": "hopgraph update INDEX --add new.jsonl -q",
            "trials": trials,
            "summary": {
                "trials": len(trials),
                "random_delay_trials": sum(t["trigger"] == "random delay" for t in trials),
                "killed": sum(t["killed"] for t in trials),
                "servable": sum(t["servable"] for t in trials),
                "resumed_equal": sum(t["resumed_equal"] for t in trials),
                "vectors_bitwise_equal": sum(t["vectors_bitwise_equal"] for t in trials),
                "stages": dict(Counter(t["stage_at_kill"] for t in trials)),
            },
            **provenance(),
        }
        write_json(args.out, payload)
        text = markdown(payload)
        atomic_write(args.out.with_suffix(".md"), lambda tmp: tmp.write_text(text, encoding="utf-8"))
        s = payload["summary"]
        print(
            f"{s['trials']} trials, {s['killed']} killed: servable {s['servable']}, resumed equal "
            f"{s['resumed_equal']}, stages {s['stages']}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(payload: dict[str, Any]) -> str:
    s = payload["summary"]
    columns = [
        "trial",
        "trigger",
        "kill_after_s",
        "killed",
        "stage_at_kill",
        "servable",
        "live_after_kill",
        "resumed_by",
        "resumed_equal",
        "vectors_bitwise_equal",
    ]
    return (
        f"# Crash safety of `hopgraph update` ({payload['dataset']})\n\n"
        f"Base index of {payload['base_documents']} paragraphs; `{payload['update_command']}` adds "
        f"{payload['added_documents']} "
        f"(uninterrupted: {payload['reference_seconds']} s including process start). SIGKILL after a random delay "
        f"(seed {payload['seed']}) in {s['random_delay_trials']} trials, and on reaching each step of the job in "
        "the others.\n\n"
        f"**{s['killed']} of {s['trials']} runs killed (the others finished first); {s['servable']}/{s['trials']} "
        f"servable after the kill, {s['resumed_equal']}/{s['trials']} resumed to results identical to the "
        f"uninterrupted run ({payload['questions']} questions × every LLM-free method), "
        f"{s['vectors_bitwise_equal']}/{s['trials']} with bitwise-equal vectors.**\n\n"
        + markdown_table(payload["trials"], columns)
        + f"\nCommand: `{payload['command']}`; commit {payload['git_commit']}; machine: "
        f"{machine_line(payload['machine'])}.\n"
    )


if __name__ == "__main__":
    main()
