"""scripts/gpu_check.py: one result file, every GPU path recorded, on any machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hopgraph.kernels.backend import cupy_available

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
PATHS = [
    "cosine_topk",
    "cooccurrence",
    "pagerank",
    "ppr",
    "faiss_knn",
    "embeddings_fp16",
    "pipeline_stages",
    "ray_index",
    "gpu_tests",
]


def gpu_check(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--scale", "0.001", "--repeats", "1", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.skipif(cupy_available(), reason="a CUDA device is usable here")
def test_without_cuda_every_path_is_recorded_as_skipped(tmp_path):
    result = gpu_check(tmp_path)
    assert result["cuda"] is False and list(result["paths"]) == PATHS
    assert all(row == {"status": "skipped", "reason": "no CUDA device"} for row in result["paths"].values())
    assert result["summary"] == {"ran": [], "skipped": sorted(PATHS), "failed": [], "disagree": []}


def test_emulated_kernel_paths_run_and_agree(tmp_path):
    """numpy in place of CuPy: the comparisons themselves run (and the CPU agrees with itself)."""
    paths = ["cosine_topk", "cooccurrence", "pagerank", "ppr", "faiss_knn"]
    result = gpu_check(tmp_path, "--emulate", "--only", *paths)
    assert result["emulated"] and list(result["paths"]) == paths
    for name, row in result["paths"].items():
        assert row["status"] == "ran" and row["agree"] is True, (name, row)
        assert row["cpu_seconds"] >= 0 and row["gpu_seconds"] >= 0
