"""Result files of `hopgraph eval` and the README tables made from them: whole-word Coverage
reported beside the papers' Coverage, and older files without it still summarised."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from hopgraph.config import load_config
from hopgraph.evaluate.runner import evaluate, write_outputs

REPO = Path(__file__).resolve().parents[2]


def _summarize():
    spec = importlib.util.spec_from_file_location("summarize", REPO / "scripts" / "summarize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eval_reports_whole_word_coverage_beside_the_papers(tmp_path: Path) -> None:
    """A yes/no question whose context says "not known": the papers' Coverage counts it, whole words do not."""
    records = [
        {
            "id": "q1",
            "question": "Was the Brekke lighthouse ever rebuilt?",
            "answer": "no",
            "answer_aliases": [],
            "answerable": True,
            "paragraphs": [
                {
                    "idx": 0,
                    "title": "Brekke lighthouse",
                    "paragraph_text": "The Brekke lighthouse stands on Sorvik point. Who designed it is not known.",
                    "is_supporting": True,
                }
            ],
        },
        {
            "id": "q2",
            "question": "Which town has the Brekke lighthouse?",
            "answer": "Sorvik",
            "answer_aliases": [],
            "answerable": True,
            "paragraphs": [],
        },
    ]
    dataset = tmp_path / "tiny.json"
    dataset.write_text(json.dumps(records), encoding="utf-8")
    config = load_config(None, {"chunking.size": 150, "chunking.overlap": 0, "embedding.cache": ""})
    payload = evaluate(dataset, tmp_path / "index", config, ["text"], progress=False)
    (row,) = payload["results"]
    assert row["coverage"] == 100.0 and row["coverage_whole_word"] == 50.0
    out = tmp_path / "coverage_tiny_l150.json"
    write_outputs(payload, out)
    assert json.loads(out.read_text(encoding="utf-8"))["results"][0]["coverage_whole_word"] == 50.0
    table = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "| method | coverage | coverage_whole_word |" in table and "| text | 100.0 | 50.0 |" in table

    summary = _summarize().coverage_tables(tmp_path)
    assert f"| {payload['dataset']} | 150 | 100.0 (50.0) | `coverage_tiny_l150.json` |" in summary
    assert "whole-word Coverage" in summary


def test_summary_tolerates_files_without_whole_word_coverage(tmp_path) -> None:
    summarize = _summarize()
    old = {"dataset": "musique/ketrag_500", "chunk_size": 1200, "results": [{"method": "text", "coverage": 29.2}]}
    old["results"][0] |= {"latency_ms_p50": 0.3, "latency_ms_p95": 0.5}
    (tmp_path / "coverage_musique_l1200.json").write_text(json.dumps(old), encoding="utf-8")
    written_before = summarize.coverage_tables(tmp_path)  # a file written before it was measured
    assert "| musique/ketrag_500 | 1200 | 29.2 |" in written_before and "whole-word" not in written_before
    assert summarize._coverage_cell({"coverage": 58.0}) == "58.0"
    assert summarize._coverage_cell({"coverage": 58.0, "coverage_whole_word": 52.25}) == "58.0 (52.2)"
