"""The capacity model script: its report names the dominating stage and cites only sources it records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
URL = re.compile(r"https?://[^\s)\"'`,]+")


def run_model(tmp_path: Path) -> tuple[dict, str]:
    out = tmp_path / "capacity_model.json"
    # A graph_scale.json that does not exist: the model falls back to the committed scale.json.
    command = [sys.executable, str(REPO / "scripts" / "capacity_model.py"), "--out", str(out)]
    command += ["--graph-scale", str(tmp_path / "absent.json")]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True, text=True, timeout=120)
    return json.loads(out.read_text(encoding="utf-8")), out.with_suffix(".md").read_text(encoding="utf-8")


def test_report_names_the_dominant_stage_and_cites_recorded_sources(tmp_path: Path) -> None:
    payload, report = run_model(tmp_path)
    rows = [r for rows in payload["scenarios"].values() for r in rows]
    assert {r["documents"] for r in rows} == {1_000_000, 10_000_000}
    assert {r["nodes"] for r in rows} == {1, 2, 4, 8, 16}
    assert "## Which stage dominates" in report and "## Where the driver takes over" in report
    for row in rows:
        assert row["dominant_stage"] in row["stage_hours"]
        assert f"{row['dominant_stage']} ({row['dominant_share']:.0%})" in report
    cited = {u.rstrip(".:;") for u in URL.findall(report)}
    recorded = json.dumps(payload["inputs"], ensure_ascii=False)
    assert cited, "the report cites no source"
    assert {u for u in cited if u not in recorded} == set()
    assert payload["inputs"]["graph_stages"]["source"] == "scripts/results/scale.json"


def test_cluster_stages_scale_with_nodes_and_the_driver_does_not(tmp_path: Path) -> None:
    payload, _ = run_model(tmp_path)
    rows = {(r["documents"], r["nodes"]): r for r in payload["scenarios"]["llm_l150"]}
    one, sixteen = rows[(10_000_000, 1)], rows[(10_000_000, 16)]
    assert one["driver_hours"] == sixteen["driver_hours"]
    assert abs(one["cluster_stage_hours"] / sixteen["cluster_stage_hours"] - 16) < 0.1
    assert one["gpu_busy_hours"] == sixteen["gpu_busy_hours"]
    for r in rows.values():
        assert abs(r["wall_hours"] - r["driver_hours"] - r["cluster_stage_hours"]) < 0.02
