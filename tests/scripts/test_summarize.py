"""scripts/summarize.py, which prints the README's tables from the committed result files."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_summarize():
    spec = importlib.util.spec_from_file_location("summarize", REPO / "scripts" / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_files_that_compare_other_methods_share_one_table(tmp_path):
    """A result file with methods another lacks (cue at α=0 beside the LLM-free six) was a KeyError."""
    shutil.copy(REPO / "scripts" / "results" / "coverage_musique_l150.json", tmp_path / "coverage_musique_l150.json")
    run = json.loads((tmp_path / "coverage_musique_l150.json").read_text(encoding="utf-8"))
    ppr = next(r for r in run["results"] if r["method"] == "ppr")
    cue = {**ppr, "method": "cue", "coverage": 72.6}
    run["results"] = [ppr, cue]
    (tmp_path / "coverage_musique_l1200.json").write_text(json.dumps(run), encoding="utf-8")
    tables = load_summarize().coverage_tables(tmp_path)
    rows = [line for line in tables.splitlines() if line.startswith("| musique/ketrag_500 |") and "`coverage_" in line]
    assert any("| 72.6 (" in row and "coverage_musique_l1200.json" in row for row in rows)
    assert len(rows) == 2 and rows[0].count("|") == rows[1].count("|")  # every column in each row
