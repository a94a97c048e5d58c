"""LLM knowledge-graph stage (KET Algorithm 1 on a chosen chunk set) with entity resolution.

Which chunks are sent to the LLM is the whole difference between the methods' indexes: all of
them (KG-RAG), the KNN-PageRank core (KET skeleton), a random core (KET-U) or the concept-PageRank
core (G2ConS core-KG). Every relation keeps its provenance (chunk, model, time, confidence), and
entity descriptions are stored per mention, so a reader only ever sees descriptions drawn from
chunks they may read.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from hopgraph.config import ExtractionConfig
from hopgraph.index import graphs
from hopgraph.kernels import cosine_topk
from hopgraph.text import normalise_entity


def select_core(config: ExtractionConfig, knn_rank: np.ndarray, concept_rank: np.ndarray) -> np.ndarray:
    """Chunk ids given to the LLM, in ascending order."""
    n = len(knn_rank)
    if config.kg == "all":
        return np.arange(n)
    if config.kg == "random":
        count = int(np.ceil(config.core_fraction * n))
        return np.sort(np.random.default_rng(config.seed).choice(n, size=count, replace=False))
    scores = knn_rank if config.kg == "pagerank" else concept_rank
    return np.sort(graphs.core_chunks(scores, config.core_fraction))


def resolve(names: Sequence[str], vectors: np.ndarray | None, threshold: float, neighbours: int = 5) -> np.ndarray:
    """Entity id per surface name: equal normalised names merge, then names with cosine ≥ threshold.

    ``vectors`` embeds the distinct normalised names in order of first appearance (see
    :func:`distinct_keys`); nearest neighbours come from the blocked top-k kernel (never all pairs).
    """
    keys = [normalise_entity(n) for n in names]
    distinct = distinct_keys(names)
    key_id = {k: i for i, k in enumerate(distinct)}
    rows: np.ndarray = np.zeros(0, dtype=np.int64)
    cols: np.ndarray = np.zeros(0, dtype=np.int64)
    if vectors is not None and len(distinct) > 1:
        scores, indices = cosine_topk(vectors, vectors, min(neighbours, len(distinct) - 1), exclude_self=True)
        rows, slots = np.nonzero(np.asarray(scores) >= threshold)
        cols = np.asarray(indices)[rows, slots]
    similar = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(distinct), len(distinct)))
    _, component = connected_components(similar, directed=False)
    roots = [int(component[key_id[k]]) for k in keys]
    renumber = {r: i for i, r in enumerate(dict.fromkeys(roots))}
    return np.asarray([renumber[r] for r in roots], dtype=np.int64)


def distinct_keys(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(normalise_entity(n) for n in names))


def build_tables(
    results: Sequence[dict | None], chunk_ids: Sequence[int], n_chunks: int, model: str, embed, threshold: float
) -> dict:
    """Entities, mentions, relations and the entity–chunk graph from per-chunk extraction results."""
    mention_name: list[str] = []
    mention_type: list[str] = []
    mention_desc: list[str] = []
    mention_chunk: list[int] = []
    rel_rows = []
    for result, chunk in zip(results, chunk_ids):
        if not result:
            continue
        # A name that is only punctuation is no entity, and a relation from a thing to itself says nothing.
        for e in result["entities"]:
            if normalise_entity(e["name"]):
                mention_name.append(e["name"])
                mention_type.append(e["type"])
                mention_desc.append(e["description"])
                mention_chunk.append(int(chunk))
        for r in result["relations"]:
            source, target = normalise_entity(r["source"]), normalise_entity(r["target"])
            if source and target and source != target:
                rel_rows.append((r, int(chunk)))
    # Relation endpoints the model did not list as entities become entities too.
    for r, chunk in rel_rows:
        for end in (r["source"], r["target"]):
            mention_name.append(end)
            mention_type.append("thing")
            mention_desc.append("")
            mention_chunk.append(chunk)
    relation_names = [n for r, _ in rel_rows for n in (r["source"], r["target"])]
    keys = distinct_keys(mention_name)
    vectors = embed(keys) if keys else None
    entity_of_mention = resolve(mention_name, vectors, threshold)
    n_entities = int(entity_of_mention.max()) + 1 if len(entity_of_mention) else 0
    key_entity = {normalise_entity(n): int(e) for n, e in zip(mention_name, entity_of_mention)}
    names: list[Counter[str]] = [Counter() for _ in range(n_entities)]
    types: list[Counter[str]] = [Counter() for _ in range(n_entities)]
    for name, kind, e in zip(mention_name, mention_type, entity_of_mention):
        names[e][name] += 1
        if kind != "thing":
            types[e][kind] += 1
    entity_names = [c.most_common(1)[0][0] for c in names]
    entity_chunks = sp.csr_matrix(
        (np.ones(len(mention_chunk), dtype=np.float32), (entity_of_mention, np.asarray(mention_chunk, dtype=np.int64))),
        shape=(n_entities, n_chunks),
    )
    entity_chunks.data[:] = 1.0  # duplicates summed: presence, not counts
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ends = [key_entity[normalise_entity(n)] for n in relation_names]
    merged_into_one = {
        i for i in range(len(rel_rows)) if ends[2 * i] == ends[2 * i + 1]
    }  # two names resolved to one entity
    if merged_into_one:
        rel_rows = [row for i, row in enumerate(rel_rows) if i not in merged_into_one]
        ends = [e for i in range(len(ends) // 2) if i not in merged_into_one for e in ends[2 * i : 2 * i + 2]]
    relations = {
        "source": ends[0::2],
        "target": ends[1::2],
        "description": [r["description"] for r, _ in rel_rows],
        "strength": [r["strength"] for r, _ in rel_rows],
        "source_name": [r["source"] for r, _ in rel_rows],
        "target_name": [r["target"] for r, _ in rel_rows],
        "chunk": [c for _, c in rel_rows],
        "model": [model] * len(rel_rows),
        "extracted_at": [now] * len(rel_rows),
        "confidence": [round(r["strength"] / 10, 2) for r, _ in rel_rows],
    }
    keep = [i for i, d in enumerate(mention_desc) if d]
    return {
        "entities": {"name": entity_names, "type": [t.most_common(1)[0][0] if t else "thing" for t in types]},
        "mentions": {
            "entity": entity_of_mention[keep].tolist(),
            "chunk": [mention_chunk[i] for i in keep],
            "description": [mention_desc[i] for i in keep],
        },
        "relations": relations,
        "entity_chunks": entity_chunks,
        # Every mention with its own surface name: what a reader's entity scores and labels are
        # drawn from when some of the entity's chunks are forbidden to them.
        "surfaces": {
            "entity": entity_of_mention.tolist(),
            "chunk": list(mention_chunk),
            "name": list(mention_name),
            "description": list(mention_desc),
        },
    }


def entity_texts(names: Sequence[str], mentions: dict[str, list]) -> list[str]:
    """Text embedded for each entity: its name and (the start of) its descriptions."""
    described: list[list[str]] = [[] for _ in names]
    for e, d in zip(mentions["entity"], mentions["description"]):
        if len(described[e]) < 4:
            described[e].append(d)
    return [f"{n}: {' '.join(d)}" if d else n for n, d in zip(names, described)]


def surface_texts(surfaces: dict[str, list]) -> list[str]:
    """Text embedded for each mention: its own surface name and description (one chunk's material)."""
    return [f"{n}: {d}" if d else n for n, d in zip(surfaces["name"], surfaces["description"])]


def relation_texts(relations: dict[str, list]) -> list[str]:
    """Text of each relation from its own chunk only: the surface names it was extracted with."""
    return [
        f"{a} — {b}: {d}"
        for a, b, d in zip(relations["source_name"], relations["target_name"], relations["description"])
    ]
