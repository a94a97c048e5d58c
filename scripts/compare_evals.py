"""Coverage of two code versions side by side, from eval result files of the same datasets.

Each side is a folder of `hopgraph eval` results named DATASET-L.json (e.g. musique-1200.json),
made on the same machine in one sitting, one version checked out per side (a git worktree):

    git worktree add /tmp/before BASE_COMMIT
    (cd /tmp/before && hopgraph eval ../shared/data/musique/ketrag_500 --index /tmp/i/before-m1200 \
        --out /tmp/before-results/musique-1200.json -q)        # likewise after, and for every set and ℓ
    python3 scripts/compare_evals.py /tmp/before-results /tmp/after-results --out scripts/results/NAME.json

The result records each side's commit and command (from the eval files) and the difference per
method; a .md table is written beside it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def compare(before: Path, after: Path) -> dict:
    rows = []
    for new_file in sorted(after.glob("*.json")):
        old_file = before / new_file.name
        if not old_file.exists():
            continue
        old, new = (json.loads(f.read_text(encoding="utf-8")) for f in (old_file, new_file))
        old_by = {r["method"]: r for r in old["results"]}
        for result in new["results"]:
            was = old_by.get(result["method"])
            if was is None:
                continue
            rows.append(
                {
                    "dataset": new["dataset"],
                    "chunk_size": new["chunk_size"],
                    "method": result["method"],
                    "coverage_before": was["coverage"],
                    "coverage_after": result["coverage"],
                    "delta": round(result["coverage"] - was["coverage"], 1),
                    "whole_word_before": was.get("coverage_whole_word"),
                    "whole_word_after": result.get("coverage_whole_word"),
                    "commit_before": old.get("git_commit"),
                    "commit_after": new.get("git_commit"),
                    "command_before": old.get("command"),
                    "command_after": new.get("command"),
                }
            )
    if not rows:
        raise SystemExit(f"no result file of {after} has a namesake in {before}")
    return {
        "rows": rows,
        "largest_drop": min(r["delta"] for r in rows),
        "machine": json.loads(next(after.glob("*.json")).read_text(encoding="utf-8")).get("machine"),
    }


def table(result: dict) -> str:
    lines = ["| dataset | ℓ | method | before | after | Δ |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(
            f"| {r['dataset']} | {r['chunk_size']} | {r['method']} | {r['coverage_before']:.1f} | "
            f"{r['coverage_after']:.1f} | {r['delta']:+.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="Folder of the earlier version's eval results.")
    parser.add_argument("after", type=Path, help="Folder of the later version's eval results (same file names).")
    parser.add_argument("--out", type=Path, required=True, help="Result JSON (a .md table is written beside it).")
    args = parser.parse_args()
    result = compare(args.before, args.after)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(table(result) + "\n", encoding="utf-8")
    print(table(result))
