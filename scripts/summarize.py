"""The README's figures, generated from the committed result files so no number is copied by hand.

    python3 scripts/summarize.py            # print the generated sections
    python3 scripts/summarize.py --readme   # rewrite them in README.md (between the marker comments)
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "scripts" / "results"


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def coverage_tables() -> str:
    runs = [_load(p.name) | {"file": p.name} for p in sorted(RESULTS.glob("coverage_*.json"))]
    methods = list(dict.fromkeys(r["method"] for run in runs for r in run["results"]))
    head = "| dataset | ℓ | " + " | ".join(methods)
    cover = [head + " | file |", "|---|---|" + "---|" * (len(methods) + 1)]
    latency = [head + " |", "|---|---|" + "---|" * len(methods)]
    for run in runs:
        by = {r["method"]: r for r in run["results"]}
        cover.append(f"| {run['dataset']} | {run['chunk_size']} | " + " | ".join(f"{by[m]['coverage']:.1f}" for m in methods) + f" | `{run['file']}` |")
        latency.append(f"| {run['dataset']} | {run['chunk_size']} | "
                       + " | ".join(f"{by[m]['latency_ms_p50']:.1f} / {by[m]['latency_ms_p95']:.1f}" for m in methods) + " |")
    return "\n".join(cover) + "\n\nQuery latency without query embedding, p50 / p95 ms (target p50 ≤ 30 ms):\n\n" + "\n".join(latency)


def speed() -> str:
    s, p = _load("index_speed_musique_l1200.json"), _load("pagerank_vs_networkx.json")
    st = s["stage_seconds"]
    return (f"Indexing MuSiQue-500 from scratch at ℓ=1200 with the vector cache off (`python3 scripts/bench_index_speed.py` → "
            f"`index_speed_musique_l1200.json`): {s['seconds_total']:.1f} s in all, of which {s['seconds_embedding']:.1f} s embedding "
            f"{s['counts']['units']:,} sub-chunks and {s['counts']['sentences']:,} sentences, so the whole index costs "
            f"{s['total_over_embedding']:.2f}× its embedding time (target ≤ 1.5×); the KNN graph takes {st['knn_graph']:.1f} s, the concept "
            f"graph {st['concept_graph']:.1f} s, and peak memory is {s['peak_memory_mb'] / 1024:.1f} GB.\n\n"
            f"PageRank on a {p['nodes']:,}-node, {p['edges']:,}-edge graph (`python3 scripts/bench_pagerank.py` → "
            f"`pagerank_vs_networkx.json`): {p['hopgraph_seconds']:.3f} s against {p['networkx_seconds']:.2f} s for "
            f"`networkx.pagerank`, {p['speedup']:.0f}× faster (target ≥ 20×), largest difference {p['max_abs_diff']:.1e}.")


def scale() -> str:
    d = _load("scale.json")
    w = d["warmup_one_replica"]
    rows = ["| chunks | sentences | index s | of which cache reads s | graphs s | peak MB |", "|---|---|---|---|---|---|"]
    for r in d["runs"]:
        graphs = r["stage_seconds"]["knn_graph"] + r["stage_seconds"]["concept_graph"]
        rows.append(f"| {r['chunks']:,} | {r['sentences']:,} | {r['seconds_total']:.1f} | {r['seconds_model_stages']:.1f} | {graphs:.1f} | {r['peak_memory_mb']:.0f} |")
    slope = d["loglog_slope"]
    return (f"The warm-up replica ({w['chunks']:,} chunks) spent {w['seconds_model_stages']:.0f} s in the model and "
            f"{w['seconds_other_stages']:.1f} s in everything else.\n\n" + "\n".join(rows)
            + f"\n\nLog-log slopes over the three sizes: index time {slope['seconds_total']:.2f}, time without cache reads "
            f"{slope['seconds_other_stages']:.2f}, peak memory {slope['peak_memory_mb']:.2f} (target ≤ 1.2).")


SECTIONS = {"coverage": coverage_tables, "speed": speed, "scale": scale}


def rewrite_readme(path: Path = REPO / "README.md") -> None:
    text = path.read_text(encoding="utf-8")
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md lacks the <!-- {name}:start/end --> markers")
        text = pattern.sub(lambda m, body=make(): m.group(1) + body + "\n" + m.group(2), text)
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", action="store_true", help="Rewrite the generated sections of README.md.")
    if parser.parse_args().readme:
        rewrite_readme()
    else:
        print("\n\n".join(make() for make in SECTIONS.values()))
