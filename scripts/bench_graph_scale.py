"""Time and peak memory of each LLM-free graph stage at about 100k, 300k and 1M chunks.

No model can embed a million texts on a small CPU machine, so the corpus is synthetic and seeded:

* Texts: ~150 tokens per chunk (120–180), drawn from a Zipf (s = 1) vocabulary whose size grows
  with the corpus by Heaps' law (V = 30·√tokens). Its most frequent ranks are the real stop words,
  which then make up about half of the tokens, as in English. Each chunk has a topic; 30 % of its
  tokens come from that topic's own 1000-word Zipf list, so chunks of a topic share content words.
* Vectors: dim 384, float32, unit rows; a chunk's vector is its topic's centroid plus Gaussian
  noise (cosine ≈ 0.55 within a topic, ≈ 0 across), so nearest neighbours are clustered as with
  a real embedder and keyword vectors of a topic's words agree.
* Sentences: one per chunk. Keyword vectors are the mean of the vectors of the chunks holding the
  keyword (chunk postings × chunk vectors), the same ``mean_vectors`` rule the index applies to
  sentence postings; real sentences would be ~6× more rows of the same sparse product.

Each stage runs the pipeline's own function (``keywords.build_vocabulary``, ``keywords.incidence``,
``kernels.mean_vectors``, ``graphs.knn_graph``, ``graphs.concept_graph``, ``graphs.node_rank``) with
the default settings, in a fresh process that reads its inputs from files written once per size,
so each stage's seconds (wall and CPU, the call alone; CPU time is the steadier figure on a
shared machine) and peak resident memory (``ru_maxrss``, inputs included) are its own. A stage that fails, runs out of memory or passes ``--stage-timeout`` is recorded as
the measured ceiling, and the stages needing its output are skipped.

    python3 scripts/bench_graph_scale.py                                  # 100k, 300k, 1M chunks
    python3 scripts/bench_graph_scale.py --sizes 5000 20000 --out /tmp/graph_scale.json
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from hopgraph.config import HopgraphConfig
from hopgraph.evaluate.report import machine_line, markdown_table, provenance, write_json
from hopgraph.index import graphs, keywords
from hopgraph.kernels import mean_vectors
from hopgraph.text import stop_words

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "scripts" / "results" / "graph_scale.json"
DIM = 384
HEAPS_K, HEAPS_BETA = 30.0, 0.5
ZIPF_S = 1.0
TOPIC_SHARE, TOPIC_WORDS, CHUNKS_PER_TOPIC = 0.3, 1000, 250
NOISE = 0.9
# Stage name -> files it needs from earlier stages (the corpus files are always there).
STAGES: dict[str, tuple[str, ...]] = {
    "vocabulary": (),
    "postings": ("vocabulary.txt",),
    "keyword_vectors": ("postings.npz",),
    "knn": ("postings.npz",),
    "concept_graph": ("postings.npz", "keyword_vectors.npy"),
    "pagerank": ("knn.npz", "concepts.npz"),
}


# ------------------------------------------------------------------------------------ corpus
def word_list(size: int) -> list[str]:
    """``size`` distinct keyword-like words, the stop words first (they are the most frequent ranks)."""
    stops = sorted(stop_words())
    consonants, vowels = "bcdfghjklmnprstvwxz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    taken = set(stops)
    out = list(stops)
    number = 0
    while len(out) < size:
        number += 1
        rest, parts = number, []
        while rest > 0:  # bijective base-len(syllables): every number gives a different word
            rest -= 1
            parts.append(syllables[rest % len(syllables)])
            rest //= len(syllables)
        word = "".join(reversed(parts))
        if len(word) >= 2 and word not in taken:
            taken.add(word)
            out.append(word)
    return out[:size]


def zipf_cdf(size: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** ZIPF_S
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def generate(chunks: int, work: Path, seed: int, batch: int = 20_000) -> dict[str, Any]:
    """Write ``chunks.txt`` (one chunk a line) and ``vectors.npy`` for ``chunks`` synthetic chunks."""
    rng = np.random.default_rng([seed, chunks])
    lengths = rng.integers(120, 181, size=chunks)
    vocabulary_size = int(HEAPS_K * float(lengths.sum()) ** HEAPS_BETA)
    words = np.asarray(word_list(vocabulary_size), dtype=object)
    first_content = len(stop_words()) + 1000  # topic words are content words, not the most common ones
    topics = max(4, chunks // CHUNKS_PER_TOPIC)
    topic_vocab = rng.integers(first_content, vocabulary_size, size=(topics, TOPIC_WORDS))
    global_cdf, topic_cdf = zipf_cdf(vocabulary_size), zipf_cdf(TOPIC_WORDS)
    centroids = rng.standard_normal((topics, DIM)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    chunk_topic = rng.integers(0, topics, size=chunks)
    vectors = np.lib.format.open_memmap(work / "vectors.npy", mode="w+", dtype=np.float32, shape=(chunks, DIM))
    with open(work / "chunks.txt", "w", encoding="utf-8") as out:
        for start in range(0, chunks, batch):
            stop = min(start + batch, chunks)
            length = lengths[start:stop]
            owner = np.repeat(np.arange(start, stop), length)
            ids = np.searchsorted(global_cdf, rng.random(len(owner)))
            local = rng.random(len(owner)) < TOPIC_SHARE
            ids[local] = topic_vocab[chunk_topic[owner[local]], np.searchsorted(topic_cdf, rng.random(local.sum()))]
            ids = np.minimum(ids, vocabulary_size - 1)
            tokens = words[ids]
            bounds = np.concatenate([[0], np.cumsum(length)])
            out.writelines(" ".join(tokens[a:b]) + "\n" for a, b in zip(bounds[:-1], bounds[1:]))
            noise = rng.standard_normal((stop - start, DIM)).astype(np.float32) * (NOISE / np.sqrt(DIM))
            block = centroids[chunk_topic[start:stop]] + noise
            vectors[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    vectors.flush()
    return {"chunks": chunks, "tokens": int(lengths.sum()), "vocabulary_drawn_from": vocabulary_size, "topics": topics}


# ------------------------------------------------------------------------------------ stages
def read_texts(work: Path) -> list[str]:
    return (work / "chunks.txt").read_text(encoding="utf-8").splitlines()


def read_vocabulary(work: Path) -> list[str]:
    return (work / "vocabulary.txt").read_text(encoding="utf-8").splitlines()


def _timed(figures: dict[str, float], name: str, function: Any) -> Any:
    """``function`` with its total call time added to ``figures[name]`` (the real call, only timed)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            figures[name] = figures.get(name, 0.0) + time.perf_counter() - started

    return wrapper


def run_stage(stage: str, work: Path) -> dict[str, Any]:
    """Load this stage's inputs, time the pipeline call, save its output (called in a fresh process)."""
    config = HopgraphConfig()
    kw, graph = config.keywords, config.graph
    figures: dict[str, Any] = {}
    if stage == "vocabulary":
        texts = read_texts(work)
        started, started_cpu = time.perf_counter(), time.process_time()
        vocabulary = keywords.build_vocabulary(texts, kw)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        (work / "vocabulary.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
        figures["keywords"] = len(vocabulary)
    elif stage == "postings":
        texts, vocabulary = read_texts(work), read_vocabulary(work)
        started, started_cpu = time.perf_counter(), time.process_time()
        postings = keywords.incidence(texts, {w: i for i, w in enumerate(vocabulary)}, kw.min_length)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        sp.save_npz(work / "postings.npz", postings, compressed=False)
        figures["postings_nnz"] = int(postings.nnz)
    elif stage == "keyword_vectors":
        postings, vectors = sp.load_npz(work / "postings.npz").tocsr(), np.load(work / "vectors.npy")
        started, started_cpu = time.perf_counter(), time.process_time()
        keyword_vectors = mean_vectors(postings, vectors)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        np.save(work / "keyword_vectors.npy", keyword_vectors)
    elif stage == "knn":
        postings, vectors = sp.load_npz(work / "postings.npz").tocsr(), np.load(work / "vectors.npy")
        split: dict[str, float] = {}
        graphs.cooccurrence_topk = _timed(split, "lexical_seconds", graphs.cooccurrence_topk)
        graphs.cosine_topk = _timed(split, "cosine_seconds", graphs.cosine_topk)
        graphs.ivf_cosine_topk = _timed(split, "cosine_seconds", graphs.ivf_cosine_topk)
        started, started_cpu = time.perf_counter(), time.process_time()
        knn = graphs.knn_graph(
            vectors,
            postings,
            graph.knn_k,
            max_df=kw.max_df,
            max_postings=kw.max_postings,
            exact_limit=graph.exact_knn_limit,
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        sp.save_npz(work / "knn.npz", knn, compressed=False)
        figures.update({k: round(v, 2) for k, v in split.items()})
        figures["cosine_method"] = "exact" if vectors.shape[0] <= graph.exact_knn_limit else "faiss-ivf"
        figures["edges"] = int(knn.nnz // 2)
    elif stage == "concept_graph":
        postings, keyword_vectors = sp.load_npz(work / "postings.npz").tocsr(), np.load(work / "keyword_vectors.npy")
        started, started_cpu = time.perf_counter(), time.process_time()
        concepts = graphs.concept_graph(
            keyword_vectors, postings.T.tocsr(), theta_sem=graph.theta_sem, theta_co=graph.theta_co
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        sp.save_npz(work / "concepts.npz", concepts, compressed=False)
        figures["edges"] = int(concepts.nnz // 2)
    elif stage == "pagerank":
        knn, concepts = sp.load_npz(work / "knn.npz").tocsr(), sp.load_npz(work / "concepts.npz").tocsr()
        postings = sp.load_npz(work / "postings.npz").tocsr()
        started, started_cpu = time.perf_counter(), time.process_time()
        graphs.node_rank(knn, graph.damping)
        figures["knn_seconds"] = round(time.perf_counter() - started, 2)
        concept_rank = graphs.node_rank(concepts, graph.damping)
        graphs.chunk_rank_from_concepts(postings, concept_rank)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        figures["concept_seconds"] = round(seconds - figures["knn_seconds"], 2)
    else:
        raise SystemExit(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "status": "ok",
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "peak_mb": round(peak_mb, 1),
        **figures,
    }


# ------------------------------------------------------------------------------------ driver
def in_subprocess(args: list[str], timeout: float, memory_gb: float) -> dict[str, Any]:
    """Run this script with ``args`` in a fresh process; a failure or timeout comes back as a status."""

    def limit() -> None:
        if memory_gb > 0:
            cap = int(memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    started = time.perf_counter()
    try:
        out = subprocess.run(
            [sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=limit
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": round(time.perf_counter() - started, 1), "limit_s": timeout}
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or [f"killed by signal {-out.returncode}"]
        return {
            "status": "failed",
            "seconds": round(time.perf_counter() - started, 1),
            "returncode": out.returncode,
            "error": tail[0][-300:],
        }
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_size(chunks: int, root: Path, seed: int, timeout: float, memory_gb: float) -> dict[str, Any]:
    work = root / str(chunks)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    corpus = in_subprocess(["--generate", str(chunks), "--work", str(work), "--seed", str(seed)], timeout, memory_gb)
    row: dict[str, Any] = {
        "chunks": chunks,
        "corpus": corpus,
        "corpus_seconds": round(time.perf_counter() - started, 1),
    }
    stages: dict[str, dict[str, Any]] = {}
    stopped = None if corpus.get("status", "ok") == "ok" else f"corpus generation {corpus['status']}"
    for stage, needs in STAGES.items():
        missing = [name for name in needs if not (work / name).exists()]
        if stopped and (missing or stage == "vocabulary"):
            stages[stage] = {"status": "skipped", "reason": f"needs {', '.join(missing) or 'the corpus'}"}
            continue
        result = in_subprocess(["--stage", stage, "--work", str(work)], timeout, memory_gb)
        stages[stage] = result
        print(f"{chunks:>8} {stage:<16} {json.dumps(result)}", flush=True)
        if result["status"] != "ok" and stopped is None:
            stopped = f"{stage}: {result['status']}" + (f" ({result['error']})" if "error" in result else "")
    shutil.rmtree(work, ignore_errors=True)
    row["stages"] = stages
    row["keywords"] = stages["vocabulary"].get("keywords")
    row["postings_nnz"] = stages["postings"].get("postings_nnz")
    row["edges"] = {"knn": stages["knn"].get("edges"), "concept": stages["concept_graph"].get("edges")}
    done = all(s["status"] == "ok" for s in stages.values())
    row["graph_seconds_total"] = round(sum(s["seconds"] for s in stages.values() if s["status"] == "ok"), 2)
    row["peak_mb_max"] = max((s.get("peak_mb", 0.0) for s in stages.values()), default=0.0)
    row["complete"] = done
    row["stopped"] = stopped
    return row


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y against log x (1 = linear growth); None with fewer than 2 points."""
    if len(xs) < 2:
        return None
    return round(float(np.polyfit(np.log(xs), np.log(np.maximum(ys, 1e-3)), 1)[0]), 3)


def slopes(runs: list[dict[str, Any]], key: str = "seconds") -> dict[str, float | None]:
    """Log-log slope of the graph stages' total and of each stage's ``key`` against chunks."""
    complete = [r for r in runs if r["complete"]]
    totals = [sum(s[key] for s in r["stages"].values()) for r in complete]
    out = {"total": slope([r["chunks"] for r in complete], totals)}
    for stage in STAGES:
        done = [r for r in runs if r["stages"][stage]["status"] == "ok"]
        out[stage] = slope([r["chunks"] for r in done], [r["stages"][stage][key] for r in done])
    return out


def summary(payload: dict[str, Any]) -> str:
    """Markdown tables of the figures."""
    rows = []
    for run in payload["runs"]:
        for stage, figures in run["stages"].items():
            rows.append({"chunks": run["chunks"], "stage": stage, **figures})
    columns = [
        "chunks",
        "stage",
        "status",
        "seconds",
        "cpu_seconds",
        "peak_mb",
        "edges",
        "lexical_seconds",
        "cosine_seconds",
    ]
    sizes = [
        {
            "chunks": r["chunks"],
            "keywords": r["keywords"],
            "postings_nnz": r["postings_nnz"],
            "knn_edges": r["edges"]["knn"],
            "concept_edges": r["edges"]["concept"],
            "graph_seconds_total": r["graph_seconds_total"],
            "peak_mb_max": r["peak_mb_max"],
            "stopped": r["stopped"] or "",
        }
        for r in payload["runs"]
    ]
    largest: dict[str, Any] = payload["runs"][-1] if payload["runs"] else {"stages": {}}
    finished = {k: v for k, v in largest["stages"].items() if v["status"] == "ok"}
    dominant = ""
    if finished:
        slow = max(finished, key=lambda k: finished[k]["seconds"])
        heavy = max(finished, key=lambda k: finished[k]["peak_mb"])
        dominant = (
            f"At {largest['chunks']} chunks the slowest stage is **{slow}** "
            f"({finished[slow]['seconds']:.0f} s, {finished[slow]['seconds'] / largest['graph_seconds_total']:.0%} "
            f"of the graph stages' time; slope {payload['slope_time'][slow]}), the largest peak memory "
            f"**{heavy}** ({finished[heavy]['peak_mb']:.0f} MB)"
            + (f"; the run stopped at {largest['stopped']}" if largest["stopped"] else "")
            + ".\n\n"
        )
    return (
        "# Graph stages at scale (synthetic corpus)\n\n"
        f"`{payload['command']}` on {machine_line(payload['machine'])}, commit {payload['git_commit']}.\n\n"
        f"{payload['corpus']}\n\n{dominant}## Per size\n\n"
        + markdown_table(sizes, list(sizes[0]) if sizes else [])
        + "\n## Per stage (wall and CPU seconds of the call; peak MB of the stage's process, inputs included)\n\n"
        + markdown_table(rows, columns)
        + "\n## Log-log slope of seconds (wall; CPU) against chunks\n\n"
        + markdown_table(
            [{"time": "wall", **payload["slope_time"]}, {"time": "cpu", **payload["slope_cpu_time"]}],
            ["time", *payload["slope_time"]],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000], help="Chunk counts.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/hopgraph-graph-scale"), help="Scratch directory.")
    parser.add_argument("--out", type=Path, default=RESULT, help="JSON result; the .md summary goes next to it.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stage-timeout", type=float, default=1500.0, help="Seconds before a stage is stopped.")
    parser.add_argument("--memory-gb", type=float, default=18.0, help="Address-space cap per stage (0 = none).")
    parser.add_argument("--generate", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate is not None:
        print(json.dumps({"status": "ok", **generate(args.generate, args.work, args.seed)}))
        return
    if args.stage is not None:
        print(json.dumps(run_stage(args.stage, args.work)))
        return
    runs: list[dict[str, Any]] = []
    for size in args.sizes:  # results are written after every size, so a long run leaves its rows
        runs.append(run_size(size, args.work, args.seed, args.stage_timeout, args.memory_gb))
        write_results(args, runs)


def write_results(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    payload = {
        "benchmark": "graph stages at scale",
        "corpus": (
            f"Synthetic, seeded: 120–180 tokens per chunk from a Zipf (s={ZIPF_S}) vocabulary of "
            f"{HEAPS_K:g}·tokens^{HEAPS_BETA} words (Heaps' law) led by the stop words; {TOPIC_SHARE:.0%} of "
            f"a chunk's tokens from its topic's {TOPIC_WORDS}-word Zipf list (one topic per "
            f"{CHUNKS_PER_TOPIC} chunks); vectors dim {DIM} = topic centroid + Gaussian noise "
            f"(norm {NOISE}), unit rows; one sentence per chunk (keyword vectors from chunk postings)."
        ),
        "settings": {
            "keywords": HopgraphConfig().keywords.model_dump(),
            "graph": HopgraphConfig().graph.model_dump(),
            "stage_timeout_s": args.stage_timeout,
            "memory_cap_gb": args.memory_gb,
        },
        "runs": runs,
        "slope_time": slopes(runs),
        "slope_cpu_time": slopes(runs, "cpu_seconds"),
        **provenance(),
    }
    write_json(args.out, payload)
    args.out.with_suffix(".md").write_text(summary(payload), encoding="utf-8")
    print(json.dumps(payload["slope_time"]), flush=True)


if __name__ == "__main__":
    main()
