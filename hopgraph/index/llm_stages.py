"""The stages that ask an LLM: KET/G2ConS knowledge-graph extraction and CUE-RAG's knowledge units.

Completions are cached by request, so a resumed or repeated build pays for none twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hopgraph.config import HopgraphConfig
from hopgraph.index import cue, kg
from hopgraph.index.context import BuildContext, embed_texts
from hopgraph.llm import Usage
from hopgraph.llm.extract import extract
from hopgraph.models import Embedder, load_embedder
from hopgraph.store import IndexStore


def stage_kg_extract(ctx: BuildContext) -> dict[str, int]:
    """LLM entities and relations for the configured chunk set, resolved into one graph."""
    cfg = ctx.config
    core = kg.select_core(
        cfg.extraction, ctx.store.read_array("chunk_rank_knn"), ctx.store.read_array("chunk_rank_concept")
    )
    texts = ctx.store.read_table("chunks", ["text"])["text"]
    results, usage = extract(
        ctx.llm, "kg", [texts[c] for c in core], cfg.llm, progress=ctx.progress, tell=ctx.run.within
    )
    counts = write_kg(
        ctx.store, cfg, results, core.tolist(), ctx.llm.name, progress=ctx.progress, embedder=ctx.embedder
    )
    ctx.usage = usage.to_dict()
    return {"kg_chunks": len(core), **counts, "kg_fallbacks": usage.fallbacks}


def write_kg(
    store: IndexStore,
    config: HopgraphConfig,
    results: Sequence[dict | None],
    core: list[int],
    model: str,
    *,
    progress: bool = False,
    embedder: Embedder | None = None,
) -> dict[str, int]:
    """Resolve per-chunk extraction results (of chunks ``core``) into the KG tables, graph and vectors.

    Besides the entity vectors (name plus descriptions, for readers who may read every mention)
    each mention gets its own vector, so a reader's entity scores can be drawn from readable
    mentions only.
    """
    n_chunks = len(store.read_table("chunks", ["tokens"])["tokens"])
    embedder = embedder or load_embedder(config.embedding, cached=True)
    tables = kg.build_tables(
        results,
        core,
        n_chunks,
        model,
        embedder.encode,
        config.extraction.resolve_threshold,
    )
    for name in ("entities", "mentions", "relations", "surfaces"):
        store.write_table(f"kg_{name}", tables[name])
    store.write_graph("kg_entity_chunks", tables["entity_chunks"])
    store.write_array(
        "kg_entity_vectors",
        embed_texts(config, kg.entity_texts(tables["entities"]["name"], tables["mentions"]), progress, embedder),
    )
    for name, texts in (
        ("kg_surface_vectors", kg.surface_texts(tables["surfaces"])),
        ("kg_relation_vectors", kg.relation_texts(tables["relations"])),
    ):
        store.write_array(name, embed_texts(config, texts, progress, embedder))
    return {"kg_entities": len(tables["entities"]["name"]), "kg_relations": len(tables["relations"]["source"])}


def stage_cue_graph(ctx: BuildContext) -> dict[str, int]:
    """CUE-RAG hybrid extraction: LLM knowledge units for the knapsack-selected chunks, punkt sentences for the rest."""
    cfg = ctx.config
    chunks = ctx.store.read_table("chunks", ["text", "tokens"])
    vectors = ctx.store.read_array("chunk_vectors") if cfg.extraction.cue_metric == "cosine" else None
    chosen = cue.select_chunks(
        chunks["text"],
        np.asarray(chunks["tokens"]),
        cfg.extraction.cue_alpha or 0.0,
        cfg.extraction.cue_metric,
        vectors,
    )
    units, usage = (
        extract(
            ctx.llm, "units", [chunks["text"][c] for c in chosen], cfg.llm, progress=ctx.progress, tell=ctx.run.within
        )
        if len(chosen)
        else ([], Usage())
    )
    # Chunks the edited version holds, unchosen there and here, keep their sentence units and names.
    kept = cue.kept_chunks(ctx.previous, chunks["text"], chosen)
    split = np.flatnonzero(kept < 0)
    spans = ctx.analyser.sentence_spans([chunks["text"][c] for c in split])
    chunk_units: list[list[str]] = [[] for _ in chunks["text"]]
    sources: list[list[str]] = [[] for _ in chunks["text"]]
    for c, pieces in zip(split.tolist(), spans):
        text = chunks["text"][c]
        chunk_units[c] = [text[a:b] for a, b in pieces]
        sources[c] = ["sentence"] * len(pieces)
    for c, found in zip(chosen, units):
        if found:
            chunk_units[c], sources[c] = found, ["llm"] * len(found)
        else:
            sources[c] = ["fallback"] * len(chunk_units[c])
    counts = cue.write_cue_graph(
        ctx.store,
        chunk_units,
        [s for per in sources for s in per],
        ctx.embed,
        ctx.entity_names,
        previous=ctx.previous,
        kept=kept,
    )
    ctx.usage = usage.to_dict()
    return {**counts, "cue_llm_chunks": len(chosen), "cue_fallbacks": usage.fallbacks}
