"""The graph-scale benchmark at a tiny size: every stage runs in its own process and leaves edges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_graph_scale.py"
STAGES = ["vocabulary", "postings", "keyword_vectors", "knn", "concept_graph", "pagerank"]


def test_tiny_sizes_give_complete_rows(tmp_path: Path) -> None:
    out = tmp_path / "graph_scale.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "2000", "4000", "--out", str(out), "--work", str(tmp_path / "work")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    payload = json.loads(out.read_text())
    assert [run["chunks"] for run in payload["runs"]] == [2000, 4000]
    for run in payload["runs"]:
        assert run["complete"] and run["stopped"] is None
        assert list(run["stages"]) == STAGES
        for figures in run["stages"].values():
            assert figures["status"] == "ok" and figures["peak_mb"] > 0
            assert figures["seconds"] >= 0 and figures["cpu_seconds"] >= 0
        assert run["keywords"] > 1000 and run["postings_nnz"] > 50 * run["chunks"]
        # ~1 lexical + ~1 cosine neighbour per chunk, and concept edges among a topic's words.
        assert run["chunks"] <= run["edges"]["knn"] <= 2 * run["chunks"]
        assert run["edges"]["concept"] > 0
    for key in ("slope_time", "slope_cpu_time"):
        assert set(payload[key]) == {"total", *STAGES}
        assert all(isinstance(value, float) for value in payload[key].values())
    assert payload["machine"]["cpu_count"] >= 1 and "bench_graph_scale.py" in payload["command"]
    assert not (tmp_path / "work" / "2000").exists(), "scratch files are removed after each size"
    assert "| chunks |" in out.with_suffix(".md").read_text()
