"""KG-RAG local search (KET Algorithm 2): seed entities, then their relations up to a share of the
budget, then the sub-chunks most adjacent to the seeds and relations.

Only what the reader may see takes part: an entity counts if one of its chunks is readable, its
text carries only descriptions from readable chunks, and a relation is used only if the chunk it
was extracted from is readable. An entity is scored by the mean vector of its readable mentions
(each embedded as its own surface name and description) and named by its most frequent readable
surface name, so text the reader cannot read never ranks or labels it; a relation is named by the
surface names of its own chunk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from hopgraph.config import RetrievalConfig
from hopgraph.deadline import check_deadline
from hopgraph.errors import ConfigError
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate, piece_tokens
from hopgraph.retrieve.query import SEEDS_TRACED, Query, Scope, ranked, top_indices, unit_cosine
from hopgraph.retrieve.registry import register


def require_kg(index: LoadedIndex) -> None:
    if not index.manifest["stages"].get("kg_extract", {}).get("done"):
        raise ConfigError(
            f"{index.store.root} has no LLM knowledge graph: rebuild it with --extraction.kg "
            "all|pagerank|random|concept"
        )
    if not index.store.has("tables", "kg_surfaces"):
        raise ConfigError(
            f"{index.store.root}: its knowledge graph predates per-mention vectors (needed to score entities from "
            "readable text only); rebuild it with `hopgraph index --overwrite`"
        )


def _mention_view(index: LoadedIndex, readable: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per entity: the normalised mean vector of its ``readable`` mentions and their most frequent
    surface name (ties: first seen), the same formula for every reader, so whether an entity also
    has forbidden mentions changes nothing a reader can observe."""
    surfaces = index.table("kg_surfaces")
    n = len(index.table("kg_entities")["name"])
    entity = np.asarray(surfaces["entity"], dtype=np.int64)
    rows = np.flatnonzero(readable)
    pick = sp.csr_matrix((np.ones(len(rows), np.float32), (entity[rows], np.arange(len(rows)))), shape=(n, len(rows)))
    sums = np.asarray(pick @ index.array("kg_surface_vectors")[rows], dtype=np.float32)
    counts: list[Counter[str]] = [Counter() for _ in range(n)]
    for r in rows:
        counts[entity[r]][surfaces["name"][r]] += 1
    names = [c.most_common(1)[0][0] if c else "" for c in counts]
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12), names


def _open_view(index: LoadedIndex) -> tuple[np.ndarray, list[str]]:
    def everything() -> tuple[np.ndarray, list[str]]:
        return _mention_view(index, np.ones(len(index.table("kg_surfaces")["entity"]), dtype=bool))

    return index.memo("kg", "open_view", everything)


def _entity_view(index: LoadedIndex, scope: Scope) -> tuple[np.ndarray, list[str]]:
    """Entity vectors and names drawn from the mentions the reader may read (computed once per
    opened index for a reader who may read everything)."""
    if scope.full:
        return _open_view(index)
    chunks = np.asarray(index.table("kg_surfaces")["chunk"], dtype=np.int64)
    return scope.cached("kg_entities", lambda: _mention_view(index, scope.chunks[chunks]))


def _entity_text(index: LoadedIndex, entity: int, scope: Scope, name: str) -> tuple[str, list[int], int]:
    """Name plus descriptions from readable chunks; the documents and first chunk they come from."""
    mentions = index.table("kg_mentions")
    rows = index.entity_mentions[entity]
    readable = [r for r in rows if scope.chunks[mentions["chunk"][r]]]
    descriptions = list(dict.fromkeys(mentions["description"][r] for r in readable))[:3]
    chunks = [mentions["chunk"][r] for r in readable] or [
        int(c) for c in index.graph("kg_entity_chunks")[entity].indices if scope.chunks[c]
    ]
    docs = list(dict.fromkeys(d for c in chunks[:3] for d in index.chunks["docs"][c]))
    return (f"{name}: {' '.join(descriptions)}" if descriptions else name), docs, (chunks[0] if chunks else -1)


def candidates(
    index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig, budget: float
) -> Iterator[Candidate]:
    """Entities, relations and sub-chunks for one KG channel of ``budget`` tokens."""
    require_kg(index)
    cfg = config.kg
    entity_chunks = index.graph("kg_entity_chunks")
    visible = scope.cached(
        "kg_visible", lambda: np.asarray(entity_chunks @ scope.chunks.astype(np.float32)).ravel() > 0
    )
    if not visible.any():
        return
    entity_vectors, names = _entity_view(index, scope)
    entity_scores = np.where(visible, entity_vectors @ query.vector, -np.inf)
    seeds = top_indices(entity_scores, min(cfg.seed_entities, int(visible.sum())))
    query.seeds.extend(f"entity:{names[e]}" for e in seeds[:SEEDS_TRACED])
    is_seed = np.zeros(len(entity_scores), dtype=bool)
    is_seed[seeds] = True
    used = 0
    for e in seeds:
        text, docs, chunk = _entity_text(index, int(e), scope, names[e])
        cand = Candidate("entity", int(e), float(entity_scores[e]), "kg seed entity", text=text, chunk=chunk, docs=docs)
        used += piece_tokens(index, cand)
        yield cand
    relations = index.table("kg_relations")
    source, target, rel_chunk = (np.asarray(relations[k], dtype=np.int64) for k in ("source", "target", "chunk"))
    seed_ends = is_seed[source].astype(int) + is_seed[target].astype(int) if len(source) else np.zeros(0, int)
    usable = (seed_ends > 0) & scope.chunks[rel_chunk] if len(source) else np.zeros(0, bool)
    relation_scores = index.array("kg_relation_vectors") @ query.vector if len(source) else np.zeros(0)
    chosen = []
    # Relations joining two seeds first, then those touching one; by cosine within each group.
    for r in np.flatnonzero(usable)[np.lexsort((-relation_scores[usable], -seed_ends[usable]))]:
        check_deadline()
        text = f"{relations['source_name'][r]} — {relations['target_name'][r]}: {relations['description'][r]}"
        cand = Candidate(
            "relation",
            int(r),
            float(relation_scores[r]),
            f"kg relation of seed {names[source[r]] if is_seed[source[r]] else names[target[r]]}",
            text=text,
            chunk=int(rel_chunk[r]),
            docs=list(index.chunks["docs"][rel_chunk[r]]),
        )
        tokens = piece_tokens(index, cand)
        if used + tokens > cfg.relation_share * budget:
            break
        used += tokens
        chosen.append(int(r))
        yield cand
    # Chunks by adjacency to the seeds and chosen relations (rewired to sub-chunks), cosine breaks ties.
    adjacency = np.asarray(entity_chunks[seeds].sum(axis=0)).ravel()
    if chosen:
        adjacency += np.bincount(rel_chunk[chosen], minlength=len(adjacency))
    unit_chunk = index.unit_chunk
    near = adjacency[unit_chunk] > 0
    scores = adjacency[unit_chunk] + 0.5 * unit_cosine(index, query, config.sentence_mix)
    yield from ranked("unit", scores, scope.units & near, lambda u: f"kg: chunk {unit_chunk[u]} of seed entities")


@register(
    "kg",
    order=60,
    needs=("kg_extract",),
    settings="kg",
    description="KG local search: seed entities, their relations, adjacent sub-chunks (KG-RAG / KET Alg. 2).",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    return candidates(index, query, scope, config, config.budget)
