"""Print the README's result tables from the committed result files (so no figure is copied by hand).

    python3 scripts/summarize.py            # reads scripts/results/coverage_*.json
"""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def coverage_table() -> str:
    runs = [json.loads(p.read_text()) | {"file": p.name} for p in sorted(RESULTS.glob("coverage_*.json"))]
    if not runs:
        return "(no coverage_*.json yet)"
    methods = list(dict.fromkeys(r["method"] for run in runs for r in run["results"]))
    lines = ["| dataset | ℓ | " + " | ".join(methods) + " | file |", "|---|---|" + "---|" * (len(methods) + 1)]
    for run in runs:
        by = {r["method"]: r for r in run["results"]}
        cells = [f"{by[m]['coverage']:.1f}" if m in by else "" for m in methods]
        lines.append(f"| {run['dataset']} | {run['chunk_size']} | " + " | ".join(cells) + f" | `{run['file']}` |")
    lines += ["", "Query latency without query embedding, p50 / p95 ms:", "",
              "| dataset | ℓ | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for run in runs:
        by = {r["method"]: r for r in run["results"]}
        cells = [f"{by[m]['latency_ms_p50']:.1f} / {by[m]['latency_ms_p95']:.1f}" if m in by else "" for m in methods]
        lines.append(f"| {run['dataset']} | {run['chunk_size']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(coverage_table())
