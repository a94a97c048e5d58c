"""Every GPU path against its CPU counterpart, written to one result file.

Each path runs the same inputs on the CPU and on the GPU and records ``ran`` with its agreement
(``agree``: true/false, plus the largest difference or the share of identical rows) and timings,
``skipped`` with the reason (on a machine without CUDA: ``no CUDA device``), or ``failed`` with the
error. A failure of one path never stops the others.

- cosine_topk, cooccurrence, pagerank, ppr: the kernels on numpy vs CuPy (inputs moved with
  :func:`hopgraph.kernels.sparse_on`, the helper the pipeline uses);
- faiss_knn: the IVF index on the GPU vs on the CPU, both against exact top-k;
- embeddings_fp16: MiniLM fp16 on the GPU vs fp32 on the CPU, cosine ≥ 0.999 for every row;
- pipeline_stages: a small corpus indexed with embedding.device=cpu and =cuda (vectors from one
  shared cache, so the graph kernels see identical input): graphs must be identical, rankings equal
  to 1e-9, and PPR retrieval on cuda must return the CPU's evidence;
- ray_index: MuSiQue-500 indexed with ``--engine ray`` on the GPU machine (exit status, time, counts);
- gpu_tests: the test suite's GPU comparisons (``pytest -m gpu tests/kernels/test_gpu.py``).

    python3 scripts/gpu_check.py                        # a CUDA machine, from the repository root
    python3 scripts/gpu_check.py --scale 0.01 --out /tmp/gpu_check.json   # quick
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import exact_agreement, timed, topk_agreement, vector_agreement  # noqa: E402
from bench_pagerank import knn_like_graph  # noqa: E402

from hopgraph.evaluate.report import provenance, write_json  # noqa: E402
from hopgraph.kernels import (  # noqa: E402
    cooccurrence_topk,
    cosine_topk,
    normalize_rows,
    pagerank,
    personalized_pagerank,
    sparse_on,
    to_numpy,
)
from hopgraph.kernels.backend import cupy_available, torch_cuda_available  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "scripts" / "results" / "gpu_check.json"
MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "ketrag_500"
NO_CUDA = "no CUDA device"
PATHS = (
    "cosine_topk",
    "cooccurrence",
    "pagerank",
    "ppr",
    "faiss_knn",
    "embeddings_fp16",
    "pipeline_stages",
    "ray_index",
    "gpu_tests",
)


@dataclass
class Run:
    """What every check reads: problem scale, data paths and the device handles."""

    scale: float
    repeats: int
    musique: Path
    work: Path
    ray_timeout: int
    xp: Any = None  # cupy (numpy with --emulate); None = no CUDA device: every path is skipped
    device: str = "cuda"  # "cpu" only with --emulate

    def size(self, n: int, least: int = 100) -> int:
        return max(least, int(n * self.scale))

    def sync(self) -> None:
        if self.xp is not np:
            self.xp.cuda.Device().synchronize()

    def sides(self) -> list[tuple[str, str]]:
        """(side, device) of the two runs compared: the CPU and the GPU (the CPU twice with --emulate)."""
        return [("cpu", "cpu"), ("cuda", self.device)]

    def both(self, cpu: Callable[[], Any], gpu: Callable[[], Any]) -> tuple[dict[str, float], Any, Any]:
        """Timings of ``cpu`` and ``gpu`` (after a GPU warm-up) and both outputs on the host."""
        cpu_seconds, cpu_out = timed(cpu, max(1, self.repeats // 3), lambda: None, warm_up=False)
        gpu_seconds, gpu_out = timed(gpu, self.repeats, self.sync, warm_up=True)
        times = {"cpu_seconds": round(cpu_seconds, 5), "gpu_seconds": round(gpu_seconds, 5)}
        times["speedup"] = round(cpu_seconds / max(gpu_seconds, 1e-9), 1)
        return times, cpu_out, gpu_out


def check_cosine_topk(run: Run) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    n, nq, dim, k = run.size(20_000), run.size(5_000), 384, 10
    corpus = normalize_rows(rng.standard_normal((n, dim)).astype(np.float32))
    queries = normalize_rows(rng.standard_normal((nq, dim)).astype(np.float32))
    gpu_corpus, gpu_queries = run.xp.asarray(corpus), run.xp.asarray(queries)
    times, cpu, gpu = run.both(lambda: cosine_topk(queries, corpus, k), lambda: cosine_topk(gpu_queries, gpu_corpus, k))
    agreement = topk_agreement(cpu, gpu)
    # float32 sums in another order may swap near-ties: nearly all lists identical, scores to 1e-4.
    agree = agreement["identical_rows"] >= 0.999 and agreement["max_score_diff"] < 1e-4
    return {"shape": {"corpus": n, "queries": nq, "dim": dim, "k": k}, **times, **agreement, "agree": agree}


def check_cooccurrence(run: Run) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    items, features, k = run.size(50_000), run.size(20_000), 10
    incidence = sp.random(items, features, density=20 / features, format="csr", random_state=rng, dtype=np.float32)
    on_cpu, on_gpu = sparse_on(np, incidence), sparse_on(run.xp, incidence)
    times, cpu, gpu = run.both(
        lambda: cooccurrence_topk(on_cpu, k, min_count=2), lambda: cooccurrence_topk(on_gpu, k, min_count=2)
    )
    agreement = exact_agreement(cpu, gpu)  # integer counts: the lists must be identical
    shape = {"items": items, "features": features, "nnz": int(incidence.nnz), "k": k}
    return {"shape": shape, **times, **agreement, "agree": agreement["identical_rows"] == 1.0}


def _graph(run: Run) -> sp.csr_matrix:
    return knn_like_graph(run.size(200_000), 10, 0.01, seed=0)


def check_pagerank(run: Run) -> dict[str, Any]:
    graph = _graph(run)
    on_cpu, on_gpu = sparse_on(np, graph), sparse_on(run.xp, graph)
    times, cpu, gpu = run.both(lambda: pagerank(on_cpu), lambda: pagerank(on_gpu))
    agreement = vector_agreement(cpu, gpu)
    shape = {"nodes": graph.shape[0], "edges": int(graph.nnz)}
    return {"shape": shape, **times, **agreement, "agree": agreement["max_abs_diff"] < 1e-9}


def check_ppr(run: Run) -> dict[str, Any]:
    graph = _graph(run)
    seeds = {int(i): 1.0 for i in np.random.default_rng(2).choice(graph.shape[0], 20, replace=False)}
    on_cpu, on_gpu = sparse_on(np, graph), sparse_on(run.xp, graph)
    times, cpu, gpu = run.both(
        lambda: personalized_pagerank(on_cpu, seeds, damping=0.5),
        lambda: personalized_pagerank(on_gpu, seeds, damping=0.5),
    )
    agreement = vector_agreement(cpu, gpu)
    shape = {"nodes": graph.shape[0], "edges": int(graph.nnz), "seeds": len(seeds)}
    return {"shape": shape, **times, **agreement, "agree": agreement["max_abs_diff"] < 1e-9}


def check_faiss_knn(run: Run) -> dict[str, Any] | str:
    try:
        import faiss  # noqa: PLC0415
    except ImportError:
        return "faiss is not installed"
    from hopgraph.kernels.ann import faiss_gpu_usable, ivf_cosine_topk  # noqa: PLC0415

    if run.device == "cuda" and not faiss_gpu_usable(faiss):
        return "the installed faiss has no GPU support (faiss-cpu); install faiss-gpu-cu12"
    rng = np.random.default_rng(3)
    n, dim, k = run.size(100_000, least=5_000), 64, 5
    centers = rng.standard_normal((n // 100, dim))
    vectors = normalize_rows(centers[rng.integers(0, len(centers), n)] + 0.3 * rng.standard_normal((n, dim)))
    exact = to_numpy(cosine_topk(run.xp.asarray(vectors), run.xp.asarray(vectors), k, exclude_self=True)[1])
    started = time.perf_counter()
    cpu = ivf_cosine_topk(vectors, k, device="cpu")[1]
    cpu_seconds = time.perf_counter() - started
    started = time.perf_counter()
    gpu = ivf_cosine_topk(vectors, k, device=run.device)[1]
    gpu_seconds = time.perf_counter() - started

    def recall(found: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found.tolist(), exact.tolist())]))

    cpu_recall, gpu_recall = recall(cpu), recall(gpu)
    return {
        "shape": {"vectors": n, "dim": dim, "k": k},
        "cpu_seconds": round(cpu_seconds, 3),
        "gpu_seconds": round(gpu_seconds, 3),
        "speedup": round(cpu_seconds / max(gpu_seconds, 1e-9), 1),
        "recall_cpu": round(cpu_recall, 4),
        "recall_gpu": round(gpu_recall, 4),
        "identical_rows": float((cpu == gpu).all(axis=1).mean()),
        "agree": gpu_recall >= cpu_recall - 0.01,  # approximate: same quality, not the same lists
    }


def _musique(run: Run) -> Any:
    from hopgraph.index.datasets import load_benchmark  # noqa: PLC0415

    return load_benchmark(run.musique)


def check_embeddings_fp16(run: Run) -> dict[str, Any] | str:
    if run.device == "cuda" and not torch_cuda_available():
        return "torch sees no CUDA device"
    from hopgraph.config import EmbeddingConfig  # noqa: PLC0415
    from hopgraph.models import load_embedder  # noqa: PLC0415

    texts = [d.text for d in _musique(run).documents[: run.size(2_000, least=50)]]
    encoders = {side: load_embedder(EmbeddingConfig(device=device, cache="")) for side, device in run.sides()}
    seconds, vectors = {}, {}
    for device, encoder in encoders.items():
        encoder.encode(texts[:8])  # model load and kernel warm-up outside the timing
        started = time.perf_counter()
        vectors[device] = encoder.encode(texts)
        seconds[device] = time.perf_counter() - started
    cosine = np.einsum("ij,ij->i", vectors["cpu"].astype(np.float64), vectors["cuda"].astype(np.float64))
    return {
        "texts": len(texts),
        "cpu_seconds": round(seconds["cpu"], 3),
        "gpu_seconds": round(seconds["cuda"], 3),
        "speedup": round(seconds["cpu"] / max(seconds["cuda"], 1e-9), 1),
        "min_row_cosine": float(cosine.min()),
        "mean_row_cosine": float(cosine.mean()),
        "agree": bool(cosine.min() >= 0.999),
    }


def check_pipeline_stages(run: Run) -> dict[str, Any]:
    from hopgraph.config import load_config  # noqa: PLC0415
    from hopgraph.index.pipeline import build_index  # noqa: PLC0415
    from hopgraph.retrieve.retriever import Retriever  # noqa: PLC0415
    from hopgraph.store import IndexStore  # noqa: PLC0415

    benchmark = _musique(run)
    documents = benchmark.documents[: run.size(500, least=30)]
    cache = run.work / "vectors.sqlite"  # shared: both builds see the same vectors (fp16 is checked above)
    indexes, seconds = {}, {}
    for side, device in run.sides():
        config = load_config(None, {"embedding.device": device, "embedding.cache": str(cache)})
        indexes[side] = run.work / f"index-{side}"
        manifest = build_index(documents, indexes[side], config, progress=False, overwrite=True)
        seconds[side] = manifest["stages"]
    cpu, gpu = IndexStore(indexes["cpu"]), IndexStore(indexes["cuda"])
    graphs = {name: int((cpu.read_graph(name) != gpu.read_graph(name)).nnz) for name in ("knn", "concepts")}
    ranks = {
        name: float(np.abs(cpu.read_array(name) - gpu.read_array(name)).max(initial=0.0))
        for name in ("chunk_rank_knn", "concept_rank", "chunk_rank_concept")
    }
    # Retrieval-side PPR: same question vectors on both, so only the walk's device differs.
    questions = [q.text for q in benchmark.questions[: run.size(50, least=10)]]
    on_cpu, on_gpu = Retriever(indexes["cpu"], device="cpu"), Retriever(indexes["cuda"], device=run.device)
    vectors = on_cpu.embed(questions)
    same = [
        [e.index for e in on_cpu.retrieve(q, method="ppr", vector=v).evidence]
        == [e.index for e in on_gpu.retrieve(q, method="ppr", vector=v).evidence]
        for q, v in zip(questions, vectors)
    ]
    stage_seconds = {
        device: {name: record["seconds"] for name, record in stages.items() if name in ("knn_graph", "concept_graph")}
        for device, stages in seconds.items()
    }
    return {
        "documents": len(documents),
        "differing_edges": graphs,
        "max_rank_diff": ranks,
        "ppr_questions": len(questions),
        "ppr_identical_evidence": float(np.mean(same)) if same else 1.0,
        "stage_seconds": stage_seconds,
        "agree": not any(graphs.values()) and max(ranks.values()) < 1e-9 and all(same),
    }


def check_ray_index(run: Run) -> dict[str, Any] | str:
    """MuSiQue-500 through the Ray engine on the GPU; its failure is recorded, never fatal."""
    if run.device != "cuda":
        return "the Ray index runs on a CUDA machine only"
    out = run.work / "musique-ray"
    command = [sys.executable, "-m", "hopgraph.cli", "index", str(run.musique), "--out", str(out)]
    command += ["--engine", "ray", "--embedding.device", run.device, "--overwrite", "-q"]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=run.ray_timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"timed out after {run.ray_timeout} s", "command": " ".join(command)}
    result: dict[str, Any] = {
        "command": " ".join(command),
        "returncode": done.returncode,
        "index_seconds": round(time.perf_counter() - started, 1),
        "output_tail": (done.stdout + done.stderr)[-2000:],
    }
    if done.returncode != 0:
        return {"status": "failed", **result}
    from hopgraph.store import IndexStore  # noqa: PLC0415

    manifest = IndexStore(out).read_manifest()
    return {**result, "counts": manifest.get("counts", {}), "complete": bool(manifest.get("complete"))}


def check_gpu_tests(run: Run) -> dict[str, Any] | str:
    if run.device != "cuda":
        return "the GPU tests need a CUDA device"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests/kernels/test_gpu.py"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    lines = (done.stdout or done.stderr).strip().splitlines()
    outcome = {"command": " ".join(command), "returncode": done.returncode, "summary": lines[-1] if lines else ""}
    return {
        **outcome,
        "agree": done.returncode == 0,
        **({} if done.returncode == 0 else {"output_tail": done.stdout[-3000:]}),
    }


CHECKS: dict[str, Callable[[Run], Any]] = {
    "cosine_topk": check_cosine_topk,
    "cooccurrence": check_cooccurrence,
    "pagerank": check_pagerank,
    "ppr": check_ppr,
    "faiss_knn": check_faiss_knn,
    "embeddings_fp16": check_embeddings_fp16,
    "pipeline_stages": check_pipeline_stages,
    "ray_index": check_ray_index,
    "gpu_tests": check_gpu_tests,
}


def run_check(name: str, run: Run) -> dict[str, Any]:
    """One path: ran (with its agreement), skipped (a reason string from the check) or failed (the error)."""
    if run.xp is None:
        return {"status": "skipped", "reason": NO_CUDA}
    started = time.perf_counter()
    try:
        outcome = CHECKS[name](run)
    except Exception as exc:  # one path failing must not stop the others
        return {
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-2000:],
        }
    if isinstance(outcome, str):
        return {"status": "skipped", "reason": outcome}
    return {"status": "ran", **outcome, "check_seconds": round(time.perf_counter() - started, 2)}


def device_name() -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every problem size (0.01 for a quick run)")
    parser.add_argument("--repeats", type=int, default=5, help="timed GPU runs per kernel (CPU runs a third as many)")
    parser.add_argument("--musique", type=Path, default=MUSIQUE, help="MuSiQue-500 in KET-RAG's layout")
    parser.add_argument("--ray-timeout", type=int, default=3600, help="seconds allowed for the Ray index")
    parser.add_argument("--only", nargs="*", choices=PATHS, help="run these paths only")
    parser.add_argument(
        "--emulate",
        action="store_true",
        help="numpy and device cpu in place of CuPy and cuda: exercises this script on a CPU machine (the "
        "figures then compare the CPU with itself)",
    )
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    xp: Any = None
    versions: dict[str, Any] = {"numpy": np.__version__}
    if args.emulate:
        xp = np
    elif cupy_available():
        import cupy  # noqa: PLC0415

        xp = cupy
        versions.update(cupy=cupy.__version__, cuda_runtime=cupy.cuda.runtime.runtimeGetVersion())
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        run = Run(
            args.scale, args.repeats, args.musique, Path(work), args.ray_timeout, xp, "cpu" if args.emulate else "cuda"
        )
        paths: dict[str, Any] = {}
        for name in args.only or PATHS:
            paths[name] = run_check(name, run)
            row = paths[name]
            detail = row.get("reason") or row.get("error") or f"agree={row.get('agree')}"
            print(f"{name:16s} {row['status']:8s} {detail}", flush=True)
    summary = {status: sorted(n for n, r in paths.items() if r["status"] == status) for status in ("ran", "skipped")}
    summary["failed"] = sorted(n for n, r in paths.items() if r["status"] == "failed")
    summary["disagree"] = sorted(n for n, r in paths.items() if r["status"] == "ran" and r.get("agree") is False)
    payload = {
        "check": "GPU paths against their CPU counterparts",
        "cuda": xp is not None and xp is not np,
        "emulated": args.emulate,
        "device": device_name(),
        "scale": args.scale,
        "repeats": args.repeats,
        "summary": summary,
        "paths": paths,
        "versions": versions,
        **provenance(),
    }
    write_json(args.out, payload)
    print(f"-> {args.out}")
    return payload


if __name__ == "__main__":
    main()
