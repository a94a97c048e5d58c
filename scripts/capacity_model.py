"""Capacity model: predicted wall time and cost of indexing 1M and 10M documents on N nodes × 8 GPUs.

A transparent formula, not a measurement. The build runs its stages one after the other
(``hopgraph/index/pipeline.py``), so the predicted wall time is a sum:

    wall(D, N) = driver(D) + analysis(D, N) + embed(D, N) + llm(D, N)

* ``driver(D)`` — stages that run in the single ``hopgraph index`` process on the driver node:
  the driver's part of chunking (decoding the workers' token offsets, cutting chunks; its share
  of the chunks stage measured at run time) and the graph stages (keywords, keyword vectors, kNN
  graph, concept graph, PageRank). Per graph stage: seconds measured on this repository's 2-core
  machine at the largest measured chunk count C0, extrapolated with the measured log-log slope b
  of that stage: t(C) = t(C0) · (C / C0)^b. Chunking is linear in tokens (seconds per token measured).
* ``analysis(D, N)`` — tokenising and sentence splitting, Ray tasks over the nodes' CPU cores.
* ``embed(D, N)`` — texts to embed (units + sentences) × tokens each, over N·8 GPUs at a
  per-GPU rate (data parallel: one embedding actor per GPU).
* ``llm(D, N)`` — generated tokens of KG extraction (on the KET core fraction of chunks) and CUE
  extraction (at α), over N·8 GPUs at a per-GPU output-token rate (data parallel: one vLLM
  replica per GPU; an 8B model fits one GPU).

The corpus is assumed to look like MuSiQue-500 (tokens, chunks, units and sentences per
document from the committed result files). Every input is printed with its source file or URL.

    python3 scripts/capacity_model.py                                   # writes scripts/results/capacity_model.{json,md}
    python3 scripts/capacity_model.py --out /tmp/capacity.json --price 2.0
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hopgraph.evaluate.report import markdown_table, provenance, write_json

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "scripts" / "results"
RESULT = RESULTS / "capacity_model.json"
GRAPH_SCALE = RESULTS / "graph_scale.json"  # scripts/bench_graph_scale.py; scale.json where it is absent
DOCUMENTS = (1_000_000, 10_000_000)
NODES = (1, 2, 4, 8, 16)
GPUS_PER_NODE = 8
KG_CORE_FRACTION = 0.8
CUE_ALPHA = 0.5
EMBED, LLM = "embed (GPUs)", "llm extraction (GPUs)"
ANALYSIS = "analysis (CPU workers)"
GPU_STAGES = (EMBED, LLM)
CLUSTER_STAGES = (ANALYSIS, EMBED, LLM)  # stages whose work is spread over the nodes
CPU_CORES_PER_NODE = 64  # ASSUMPTION: cores per 8-GPU node running the analysis tasks
MUSIQUE = REPO.parent / "shared" / "data" / "musique" / "ketrag_500"

from capacity_sources import EMBED_ANCHOR, EMBED_ASSUMPTIONS, LLM_RATE, PRICE  # noqa: E402  (published rates, cited)


# ------------------------------------------------------------------ measured inputs (this repository)
def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def corpus_shape() -> dict[str, Any]:
    """Per-document figures of MuSiQue-500 at ℓ=1200 (index speed run) and ℓ=150 (scale warm-up)."""
    speed_path, scale_path = RESULTS / "index_speed_musique_l1200.json", RESULTS / "scale.json"
    speed, scale = load(speed_path), load(scale_path)
    c, warm = speed["counts"], scale["warmup_one_replica"]
    docs = c["documents"]
    tokens = c["tokens"] / docs
    return {
        "source": f"{rel(speed_path)} (ℓ=1200), {rel(scale_path)} warmup_one_replica (ℓ=150)",
        "documents_measured": docs,
        "tokens_per_document": tokens,
        "l1200": {
            "chunks_per_document": c["chunks"] / docs,
            "units_per_document": c["units"] / docs,
            "sentences_per_document": c["sentences"] / docs,
            # Unit windows overlap (measured); sentences partition the text, so their tokens ≈ the corpus tokens.
            "embedding_tokens_per_document": (c["embedding_tokens"] + c["tokens"]) / docs,
        },
        "l150": {
            "chunks_per_document": warm["chunks"] / warm["documents"],
            # A 150-token chunk fits one 192-token embedding window: one unit per chunk.
            "units_per_document": warm["chunks"] / warm["documents"],
            "sentences_per_document": warm["sentences"] / warm["documents"],
            "embedding_tokens_per_document": 2 * tokens,
        },
        "chunking_seconds_per_token": speed["stage_seconds"]["chunks"] / c["tokens"],
        "machine": "2 CPU cores (x86_64), measured with scripts/bench_index_speed.py and scripts/bench_scale.py",
    }


def chunking_split(documents: int = 1000) -> dict[str, Any]:
    """Share of the chunks stage left on the driver by the Ray engine, measured here on MuSiQue documents.

    Workers tokenise and sentence-split (``analyse_texts``); the driver decodes their JSON columns and
    cuts the token streams into chunks (``build_layers``). Without the dataset: the whole stage (upper bound).
    """
    if not MUSIQUE.exists():
        return {"driver_share": 1.0, "source": f"{MUSIQUE} absent: the whole stage on the driver (upper bound)"}
    import time

    from hopgraph.config import HopgraphConfig
    from hopgraph.index.chunking import TextAnalysis, analyse_texts, build_layers
    from hopgraph.index.datasets import load_benchmark

    docs = load_benchmark(MUSIQUE).documents[:documents]
    config = HopgraphConfig().chunking
    started = time.perf_counter()
    analyses = analyse_texts([d.text for d in docs], config.encoding)
    analyse_s = time.perf_counter() - started
    columns = [(json.dumps(a.offsets), json.dumps(a.spans)) for a in analyses]
    started = time.perf_counter()
    decoded = [TextAnalysis(json.loads(o), [tuple(x) for x in json.loads(sp)]) for o, sp in columns]
    build_layers(docs, config, lambda texts, encoding: decoded)
    driver_s = time.perf_counter() - started
    return {
        "driver_share": round(driver_s / (driver_s + analyse_s), 3),
        "analyse_seconds": round(analyse_s, 3),
        "driver_seconds": round(driver_s, 3),
        "documents": len(docs),
        "source": f"measured by this script at run time on the first {len(docs)} documents of {MUSIQUE.name} "
        "(analyse_texts on workers; JSON decoding + build_layers on the driver), this machine; Ray's own "
        "transfer overhead is not included",
    }


def fit_slope(points: list[tuple[float, float]]) -> float:
    xs, ys = zip(*points)
    return float(np.polyfit(np.log(xs), np.log(np.maximum(ys, 1e-3)), 1)[0])


def graph_curves(path: Path = GRAPH_SCALE) -> dict[str, Any]:
    """Per graph stage: seconds at the largest measured chunk count and the log-log slope of time.

    graph_scale.json (100k–1M synthetic chunks, each stage in its own process) where it exists;
    otherwise scale.json (MuSiQue replicated up to 100k chunks), slopes fitted here over its runs.
    The driver's peak memory follows the same rule (largest measured peak, fitted log-log slope).
    """
    if path.exists():
        data = load(path)
        peaks = [(r["chunks"], r["peak_mb_max"]) for r in data["runs"] if r.get("peak_mb_max")]
        stages: dict[str, Any] = {}
        ceilings = []
        for run in data["runs"]:
            for name, fig in run["stages"].items():
                if fig.get("status") not in ("ok", "skipped"):
                    ceilings.append({"stage": name, "chunks": run["chunks"], "status": fig.get("status")})
                if fig.get("status") == "ok":
                    prev = stages.get(name)
                    if prev is None or run["chunks"] > prev["chunks"]:
                        stages[name] = {
                            "chunks": run["chunks"],
                            "seconds": fig["seconds"],
                            "cpu_seconds": fig.get("cpu_seconds"),
                            "peak_mb": fig.get("peak_mb"),
                        }
        # The measuring machine was shared: min(wall, CPU) is the stage's time there without waiting (CPU where
        # it waited for a core, wall where it used both cores).
        cpu = all(c["cpu_seconds"] is not None for c in stages.values()) and "slope_cpu_time" in data
        key = "slope_cpu_time" if cpu else "slope_time"
        for name, curve in stages.items():
            curve["model_seconds"] = min(curve["cpu_seconds"], curve["seconds"]) if cpu else curve["seconds"]
            slope = data.get(key, {}).get(name)
            if slope is None or slope < 0:
                curve["slope"] = 1.0
                why = "one size measured" if slope is None else f"measured {slope} is noise"
                curve["slope_source"] = f"ASSUMPTION: linear ({why})"
            else:
                curve["slope"], curve["slope_source"] = float(slope), key
        return {
            "source": f"{rel(path)} (`{data.get('command', '?')}`, commit {str(data.get('git_commit', '?'))[:12]})",
            "chunk_tokens": 150,
            "stages": stages,
            "memory": memory_curve(peaks),
            "ceilings": ceilings,
        }
    path = RESULTS / "scale.json"
    data = load(path)
    runs = [data["warmup_one_replica"], *data["runs"]]
    peaks = [(r["chunks"], r["peak_memory_mb"]) for r in runs]
    stages = {}
    for name in ("keywords", "keyword_vectors", "knn_graph", "concept_graph"):
        points = [(r["chunks"], r["stage_seconds"][name]) for r in runs]
        top = max(points)
        stages[name] = {
            "chunks": top[0],
            "seconds": top[1],
            "model_seconds": top[1],
            "slope": fit_slope(points),
            "slope_source": f"fitted here over {len(points)} sizes",
        }
    return {"source": rel(path), "chunk_tokens": 150, "stages": stages, "memory": memory_curve(peaks), "ceilings": []}


def memory_curve(peaks: list[tuple[float, float]]) -> dict[str, Any]:
    top = max(peaks)
    if len(peaks) > 1:
        return {"chunks": top[0], "peak_mb": top[1], "slope": round(fit_slope(peaks), 3), "slope_source": "fitted"}
    return {"chunks": top[0], "peak_mb": top[1], "slope": 1.0, "slope_source": "ASSUMPTION: linear (one size)"}


def llm_tokens_per_chunk() -> dict[str, Any]:
    """Generated and prompt tokens per chunk of KG extraction (all chunks) and of CUE at α=0.5 (ℓ=150)."""
    path = RESULTS / "llm_tier_musique_subset.json"
    data = load(path)
    variants = {v["variant"]: v for v in data["variants"]}
    kg, cue = variants["kg (all chunks)"], variants[f"cue α={CUE_ALPHA:g}"]
    chunks = kg["counts"]["kg_chunks"]  # KG of every chunk: one call per chunk of the subset
    usage_kg, usage_cue = kg["index_llm"], cue["index_llm"]
    return {
        "source": f"{rel(path)} (variants 'kg (all chunks)' and 'cue α={CUE_ALPHA:g}', {chunks} chunks at ℓ=150)",
        "chunks": chunks,
        "kg_completion_per_chunk": usage_kg["completion_tokens"] / chunks,
        "kg_prompt_per_chunk": usage_kg["prompt_tokens"] / chunks,
        "cue_completion_per_chunk": (usage_cue["completion_tokens"] + usage_cue["retry_tokens"] / 2) / chunks,
        "cue_prompt_per_chunk": usage_cue["prompt_tokens"] / chunks,
        "cue_calls_per_chunk": usage_cue["calls"] / chunks,
        "llm": data["llm"],
        "note": "Token counts of the CPU stand-in (its tokenizer and output lengths); a production 8B model's "
        "outputs may be longer or shorter. CUE retry tokens (parse failures) are counted half as generated.",
    }


def optional_context() -> dict[str, Any]:
    """Ray-engine figures measured on this machine, where their result files exist (context, not inputs)."""
    out: dict[str, Any] = {}
    for name, key in (("cluster_musique.json", "wall_ratio"), ("cluster_llm_replicas.json", None)):
        path = RESULTS / name
        if path.exists():
            data = load(path)
            out[name] = data.get(key) if key else {k: v for k, v in data.items() if not isinstance(v, dict | list)}
    return out


# ------------------------------------------------------------------ the model
@dataclass
class Model:
    """The inputs the formula reads; every method is a closed-form expression of them."""

    shape: dict[str, Any]
    curves: dict[str, Any]
    llm: dict[str, Any]
    split: dict[str, Any]
    embed_rate: float
    price: float

    def stage_seconds(self, documents: float, nodes: int, chunk_size: int, with_llm: bool) -> dict[str, float]:
        """Seconds per stage: driver stages first, then the GPU stages (data parallel over nodes × 8 GPUs)."""
        layer, gpus = self.shape[f"l{chunk_size}"], nodes * GPUS_PER_NODE
        chunks = documents * layer["chunks_per_document"]
        chunking = documents * self.shape["tokens_per_document"] * self.shape["chunking_seconds_per_token"]
        share = self.split["driver_share"]
        out = {"chunks (driver)": chunking * share}
        for name, c in self.curves["stages"].items():
            out[name] = c["model_seconds"] * (chunks / c["chunks"]) ** c["slope"]
        out[ANALYSIS] = chunking * (1 - share) / (nodes * CPU_CORES_PER_NODE)
        out[EMBED] = documents * layer["embedding_tokens_per_document"] / self.embed_rate / gpus
        if with_llm:
            per_chunk = KG_CORE_FRACTION * self.llm["kg_completion_per_chunk"] + self.llm["cue_completion_per_chunk"]
            out[LLM] = chunks * per_chunk / LLM_RATE["value"] / gpus
        return out

    def predict(self, documents: int, nodes: int, chunk_size: int, with_llm: bool) -> dict[str, Any]:
        stages = self.stage_seconds(documents, nodes, chunk_size, with_llm)
        gpus = nodes * GPUS_PER_NODE
        cluster = sum(v for k, v in stages.items() if k in CLUSTER_STAGES)
        gpu_s = sum(v for k, v in stages.items() if k in GPU_STAGES) * gpus
        wall = sum(stages.values())
        driver = wall - cluster
        chunks = documents * self.shape[f"l{chunk_size}"]["chunks_per_document"]
        mem = self.curves["memory"]
        dominant = max(stages, key=lambda k: stages[k])
        return {
            "documents": documents,
            "nodes": nodes,
            "gpus": gpus,
            "chunk_size": chunk_size,
            "llm": with_llm,
            "chunks": round(chunks),
            "stage_hours": {k: round(v / 3600, 3) for k, v in stages.items()},
            "driver_hours": round(driver / 3600, 2),
            "driver_peak_gb": round(mem["peak_mb"] * (chunks / mem["chunks"]) ** mem["slope"] / 1024, 1),
            "cluster_stage_hours": round(cluster / 3600, 2),
            "wall_hours": round(wall / 3600, 2),
            "gpu_busy_hours": round(gpu_s / 3600, 1),
            "cost_cluster_usd": round(gpus * wall / 3600 * self.price),
            "cost_gpu_busy_usd": round(gpu_s / 3600 * self.price),
            "dominant_stage": dominant,
            "dominant_share": round(stages[dominant] / wall, 2),
        }

    def crossover_documents(self, nodes: int, chunk_size: int, with_llm: bool) -> float | None:
        """Fewest documents (on a log grid from 10⁵ to 10⁹, 20 steps a decade) at which the driver's stages
        take longer than the stages spread over the nodes; None where they never do up to 10⁹."""
        for step in range(4 * 20 + 1):
            documents = 10 ** (5 + step / 20)
            stages = self.stage_seconds(documents, nodes, chunk_size, with_llm)
            spread = sum(v for k, v in stages.items() if k in CLUSTER_STAGES)
            if sum(stages.values()) - spread > spread:
                return float(documents)
        return None


def crossover_nodes(rows: list[dict[str, Any]]) -> int | None:
    """Fewest nodes at which the driver's stages take longer than the cluster's (None: not within NODES)."""
    for r in sorted(rows, key=lambda r: r["nodes"]):
        if r["driver_hours"] > r["cluster_stage_hours"]:
            return int(r["nodes"])
    return None


def count(documents: float | None) -> str:
    """A document count rounded for reading (None: the driver is ahead everywhere or nowhere searched)."""
    if documents is None:
        return "none up to 1B"
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if documents >= size:
            return f"{documents / size:.3g}{unit}"
    return f"{documents:.0f}"


def hours(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def summary(payload: dict[str, Any]) -> str:
    inp = payload["inputs"]
    shape, curves, llm, split = inp["corpus_shape"], inp["graph_stages"], inp["llm_tokens"], inp["chunking_split"]
    lines = [
        "# Capacity model: indexing 1M and 10M documents on N nodes × 8 GPUs",
        "",
        f"Written by `{payload['command']}` (commit {payload['git_commit']}). A formula, not a measurement: "
        "wall = driver stages + analysis tasks/nodes + embedding/GPUs + LLM extraction/GPUs (the build runs its "
        "stages one after "
        "another). See the script's docstring.",
        "",
        "## Results",
        "",
    ]
    for key, rows in payload["scenarios"].items():
        lines += [f"### {payload['scenario_titles'][key]}", ""]
        table = [
            {
                "documents": f"{r['documents']:,}",
                "nodes × 8 GPUs": r["nodes"],
                "chunks": f"{r['chunks']:,}",
                "driver h": hours(r["driver_hours"]),
                "cluster stages h": hours(r["cluster_stage_hours"]),
                "wall h": hours(r["wall_hours"]),
                "driver peak GB": r["driver_peak_gb"],
                "cluster cost $": f"{r['cost_cluster_usd']:,}",
                "GPU-busy cost $": f"{r['cost_gpu_busy_usd']:,}",
                "dominant stage": f"{r['dominant_stage']} ({r['dominant_share']:.0%})",
            }
            for r in rows
        ]
        lines.append(markdown_table(table, list(table[0])))
        for documents in DOCUMENTS:
            cross = crossover_nodes([r for r in rows if r["documents"] == documents])
            where = (
                f"from {cross} node{'s' if cross > 1 else ''} on" if cross else f"at no size up to {NODES[-1]} nodes"
            )
            lines.append(
                f"- {documents:,} documents: the driver's single-process stages outweigh the cluster's {where}."
            )
        lines.append("")
    cross_rows = [
        {"scenario": payload["scenario_titles"][key], **{f"{n} × 8 GPUs": count(v) for n, v in by_nodes.items()}}
        for key, by_nodes in payload["crossover_documents"].items()
    ]
    lines += [
        "## Where the driver takes over",
        "",
        "Documents beyond which the driver's single-process stages (chunking and graph stages, growing with "
        "their measured slopes) take longer than the stages spread over the nodes (analysis tasks, embedding, LLM "
        "extraction: linear, divided by the nodes). "
        "Searched from 100k to 1B documents (20 steps a decade); '100k' means already at the smallest size searched.",
        "",
        markdown_table(cross_rows, list(cross_rows[0])),
        "## Which stage dominates",
        "",
        payload["dominance"],
        "",
        "## Inputs",
        "",
    ]
    lines += [
        f"**Corpus shape** (ASSUMPTION: the corpus looks like MuSiQue-500) — {shape['source']}: "
        f"{shape['tokens_per_document']:.1f} tokens per document; at ℓ=1200: "
        f"{shape['l1200']['chunks_per_document']:.3f} chunks, {shape['l1200']['units_per_document']:.3f} units, "
        f"{shape['l1200']['sentences_per_document']:.2f} sentences, "
        f"{shape['l1200']['embedding_tokens_per_document']:.0f} embedded tokens per document; at ℓ=150: "
        f"{shape['l150']['chunks_per_document']:.3f} chunks (= units), {shape['l150']['sentences_per_document']:.2f} "
        f"sentences, {shape['l150']['embedding_tokens_per_document']:.0f} embedded tokens per document.",
        "",
        f"**Chunking** — {shape['chunking_seconds_per_token'] * 1e6:.2f} µs per token "
        f"({shape['source'].split(' ')[0]}, stage `chunks`, one process), linear in tokens. Share left on the "
        f"driver by the Ray engine: {split['driver_share']:.2f} ({split['source']}); the rest runs as Ray tasks "
        f"on {CPU_CORES_PER_NODE} cores per node (ASSUMPTION: the cores of an 8-GPU server available to them).",
        "",
        f"**Graph stages** — {curves['source']} ({curves['chunk_tokens']}-token chunks), measured on "
        f"{shape['machine'].split(',')[0]}; extrapolated beyond the largest measured size with each stage's "
        "measured log-log slope of time (an extrapolation, not a measurement). Driver peak memory: "
        f"{curves['memory']['peak_mb']:,.0f} MB at {curves['memory']['chunks']:,} chunks, slope "
        f"{curves['memory']['slope']} ({curves['memory']['slope_source']}).",
        "",
        markdown_table(
            [
                {
                    "stage": n,
                    "measured at chunks": f"{c['chunks']:,}",
                    "seconds (wall)": f"{c['seconds']:.2f}",
                    "CPU seconds": "" if c.get("cpu_seconds") is None else f"{c['cpu_seconds']:.2f}",
                    "slope": f"{c['slope']:.3f}",
                    "slope from": c["slope_source"],
                }
                for n, c in curves["stages"].items()
            ],
            ["stage", "measured at chunks", "seconds (wall)", "CPU seconds", "slope", "slope from"],
        ),
        (
            "Measured ceilings (a stage that failed, timed out or ran out of memory there; predictions past them "
            "assume it is fixed): "
            + "; ".join(f"{c['stage']} at {c['chunks']:,} chunks: {c['status']}" for c in curves["ceilings"])
            + ".\n"
            if curves["ceilings"]
            else ""
        )
        + "Graph stages are modelled per chunk from ~150-token chunks; at ℓ=1200 a chunk carries 8× the tokens "
        "(keywords are capped per chunk, but the vocabulary pass reads every token), so the ℓ=1200 graph figures "
        "are a lower bound. Where CPU seconds were measured the model's input is min(wall, CPU) (the 2-core "
        "machine was shared while measuring: CPU where a stage waited for a core, wall where it used both cores), "
        "with the CPU-time slopes (less disturbed by the sharing); slopes fitted over few sizes are uncertain.",
        "",
        f"**LLM tokens** — {llm['source']}: KG {llm['kg_completion_per_chunk']:.0f} generated + "
        f"{llm['kg_prompt_per_chunk']:.0f} prompt tokens per chunk, applied to the KET core fraction "
        f"{KG_CORE_FRACTION} of chunks; CUE α={CUE_ALPHA:g} {llm['cue_completion_per_chunk']:.0f} generated + "
        f"{llm['cue_prompt_per_chunk']:.0f} prompt tokens per chunk ({llm['cue_calls_per_chunk']:.2f} calls per "
        f"chunk). {llm['note']} LLM extraction is modelled at ℓ=150, the setting of that measurement.",
        "",
        f'**LLM rate** — {LLM_RATE["value"]:,.0f} {LLM_RATE["unit"]}: "{LLM_RATE["quote"]}" — {LLM_RATE["source"]}. '
        f"Conditions: {LLM_RATE['conditions']}. {LLM_RATE['note']} Generation time is modelled from generated "
        "tokens only; our prompts are ~1.5× the generated tokens, shorter than MLPerf's, so this leans slow.",
        "",
        f"**Embedding rate** — {payload['embed_rate']:,.0f} tokens/s per H100 = {EMBED_ANCHOR['value']:,.0f} "
        f'{EMBED_ANCHOR["unit"]} × {EMBED_ASSUMPTIONS["h100_over_l4"]:g}. Anchor: "{EMBED_ANCHOR["quote"]}" — '
        f"{EMBED_ANCHOR['source']} ({EMBED_ANCHOR['conditions']}). {EMBED_ASSUMPTIONS['why']}",
        "",
        f'**Price** — ${PRICE["value"]:.2f} {PRICE["unit"].removeprefix("$ ")}: "{PRICE["quote"]}" — '
        f"{PRICE['source']}. {PRICE['note']} *Cluster cost* = N·8 GPUs × wall hours × price; *GPU-busy cost* = "
        "hours the GPUs actually compute × price (the floor, whatever N).",
        "",
        "**Not modelled** — Ray start-up and model loading per actor (minutes, constant), the driver's KG/CUE "
        "graph assembly and entity resolution (not measured at scale), network transfer of texts and vectors, "
        "index store writes, and the CPU cores of GPU nodes (assumed enough to feed the GPUs).",
        "",
    ]
    if payload["context"]:
        lines += [f"**Context (not used)** — Ray engine on this machine: {json.dumps(payload['context'])}", ""]
    return "\n".join(lines)


def dominance_text(scenarios: dict[str, list[dict[str, Any]]], titles: dict[str, str]) -> str:
    parts = []
    for key, rows in scenarios.items():
        for documents in DOCUMENTS:
            sub = sorted((r for r in rows if r["documents"] == documents), key=lambda r: r["nodes"])
            first, last = sub[0], sub[-1]
            parts.append(
                f"- {titles[key]}, {documents:,} documents: {first['dominant_stage']} dominates at "
                f"{first['nodes']} node ({first['wall_hours']:.2f} h), {last['dominant_stage']} at "
                f"{last['nodes']} nodes ({last['wall_hours']:.2f} h)."
            )
    parts.append(
        "- `chunks (driver)` is the part of chunking left on the driver (decoding the workers' token offsets, "
        "cutting chunks); tokenising and sentence splitting run as `analysis (CPU workers)`."
    )
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULT, help="JSON result; the .md summary goes next to it.")
    parser.add_argument("--price", type=float, default=PRICE["value"], help="$ per GPU-hour.")
    parser.add_argument(
        "--graph-scale",
        type=Path,
        default=GRAPH_SCALE,
        help=f"Graph stages at scale (default {rel(GRAPH_SCALE)}; scale.json where it is absent).",
    )
    args = parser.parse_args()
    shape, curves, llm = corpus_shape(), graph_curves(args.graph_scale), llm_tokens_per_chunk()
    embed_rate = EMBED_ANCHOR["value"] * EMBED_ASSUMPTIONS["h100_over_l4"]
    split = chunking_split()
    model = Model(shape, curves, llm, split, embed_rate, args.price)
    titles = {
        "llm_free_l1200": "LLM-free, ℓ=1200",
        "llm_free_l150": "LLM-free, ℓ=150",
        "llm_l150": f"With LLM extraction (KG on core fraction {KG_CORE_FRACTION}, CUE α={CUE_ALPHA:g}), ℓ=150",
    }
    setups = {"llm_free_l1200": (1200, False), "llm_free_l150": (150, False), "llm_l150": (150, True)}
    scenarios = {
        key: [model.predict(d, n, size, with_llm) for d in DOCUMENTS for n in NODES]
        for key, (size, with_llm) in setups.items()
    }
    crossover = {
        key: {str(n): model.crossover_documents(n, size, with_llm) for n in NODES}
        for key, (size, with_llm) in setups.items()
    }
    payload = {
        "benchmark": "capacity model (predicted, not measured)",
        "formula": "wall = Σ graph stages t(C0)·(C/C0)^slope + tokens·seconds_per_token·driver_share + "
        "tokens·seconds_per_token·(1-driver_share)/(N·cores) + embedding_tokens/(N·8·embed_rate) + "
        "generated_tokens/(N·8·llm_rate)",
        "scenario_titles": titles,
        "scenarios": scenarios,
        "crossover_documents": crossover,
        "dominance": dominance_text(scenarios, titles),
        "embed_rate": embed_rate,
        "price_per_gpu_hour": args.price,
        "inputs": {
            "corpus_shape": shape,
            "graph_stages": curves,
            "llm_tokens": llm,
            "chunking_split": split,
            "cpu_cores_per_node": CPU_CORES_PER_NODE,
            "llm_rate": LLM_RATE,
            "embed_anchor": EMBED_ANCHOR,
            "embed_assumptions": EMBED_ASSUMPTIONS,
            "price": {**PRICE, "value": args.price},
            "kg_core_fraction": KG_CORE_FRACTION,
            "cue_alpha": CUE_ALPHA,
            "gpus_per_node": GPUS_PER_NODE,
        },
        "context": optional_context(),
        **provenance(),
    }
    write_json(args.out, payload)
    args.out.with_suffix(".md").write_text(summary(payload), encoding="utf-8")
    print(payload["dominance"])
    if not math.isfinite(sum(r["wall_hours"] for rows in scenarios.values() for r in rows)):
        raise SystemExit("non-finite prediction: check the inputs")


if __name__ == "__main__":
    main()
