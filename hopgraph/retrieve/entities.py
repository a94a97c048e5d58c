"""The entity channel of ``ppr``: personalised PageRank over [sub-chunks; entities], with a second hop.

The index's entity layer (stage ``entities``: spaCy names and titles per sub-chunk, synonym edges)
makes a graph where a passage and the entities it names are neighbours. A question seeds it with
the entities it names (its word n-grams that are entity names, longest first) and the entities
whose name vectors are nearest the query vector; sub-chunks restart in proportion to their dense
score. The second hop needs no LLM: the entities named by the best first-hop passages, and not by
the question, seed the same walk too (a few, the most specific that lead anywhere), so "when did
X's mother die?" reaches the passage about the mother through the name the passage about X gives.

Access control is the walk's: sub-chunks the reader may not read are cut out, and so is every
entity they alone name, so a forbidden piece neither scores nor seeds nor labels a path. Synonym
edges come from each name's k nearest names, corpus-wide: exact per reader as long as no name has
more than k names above the threshold. Indexes built before the stage existed have no entity
layer; :func:`entity_layer` says so and ``ppr`` then scores as it did without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import scipy.sparse as sp

from hopgraph.artifacts import ENTITIES, ENTITY_MENTIONS, ENTITY_SENTENCES, ENTITY_SYNONYMS, ENTITY_VECTORS
from hopgraph.kernels import RandomWalk, cooccurrence_matrix, sparse_on, to_numpy
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.query import Query, Scope, top_indices
from hopgraph.text import WORD, normalise_entity, stop_words

MAX_NGRAM = 6  # longest entity name matched in a question, in words
SEED_UNITS = 20  # sub-chunks restarting the walk, by dense score
UNIT_SHARE = 0.5  # of the restart mass, the share on sub-chunks (the rest on entities)
HOP_UNITS = 3  # best first-hop passages whose entities seed the second hop
BRIDGE_WEIGHT = 0.5  # a bridge's restart weight relative to a question entity's


@dataclass(frozen=True)
class EntityLayer:
    """The stored entity layer of an index, loaded once per opened index."""

    mentions: sp.csr_matrix  # sub-chunks × entities
    synonyms: sp.csr_matrix  # entities × entities
    sentence_mentions: sp.csr_matrix  # sentences × entities, for co-occurrence (empty where built without it)
    sentence_units: np.ndarray  # the sub-chunk of each sentence
    names: list[str]  # normalised
    display: list[str]
    lookup: dict[str, int]

    @property
    def size(self) -> int:
        return len(self.names)


@dataclass
class EntityWalk:
    """What the entity channel found for one query: per-sub-chunk scores and what explains them."""

    units: np.ndarray  # walk score per sub-chunk
    entities: np.ndarray  # walk score per entity
    named: np.ndarray  # entity ids the question names
    nearest: np.ndarray  # entity ids whose names are nearest the query vector
    bridges: dict[int, int]  # bridge entity → the first-hop sub-chunk that names it
    readable: np.ndarray  # readable mentions per entity
    name: Callable[[int], str]  # how an entity is named to this reader (entity_namer)

    def __post_init__(self) -> None:
        self.named_set = set(self.named.tolist())  # membership per piece while paths are written
        self.nearest_set = set(self.nearest.tolist())


def entity_layer(index: LoadedIndex) -> EntityLayer | None:
    """The index's entity layer, or None where the index was built without it."""
    if not index.manifest.get("stages", {}).get("entities", {}).get("done"):
        return None

    def load() -> EntityLayer:
        table = index.table(ENTITIES)
        return EntityLayer(
            index.graph(ENTITY_MENTIONS),
            index.graph(ENTITY_SYNONYMS),
            index.graph(ENTITY_SENTENCES)
            if index.store.has("graphs", ENTITY_SENTENCES)
            else sp.csr_matrix((0, len(table["name"])), dtype=np.float32),
            index.sentence_units,
            table["name"],
            table["display"],
            {name: i for i, name in enumerate(table["name"])},
        )

    return index.memo("entities", "layer", load)


def readable_entities(layer: EntityLayer, scope: Scope) -> np.ndarray:
    """Mentions per entity in sub-chunks the reader may read (0 = the reader cannot know the entity)."""
    if scope.units.all():
        return np.asarray(layer.mentions.getnnz(axis=0), dtype=np.float64)
    return scope.cached(
        "entity_mentions", lambda: np.asarray(layer.mentions.T @ scope.units.astype(np.float64)).ravel()
    )


def entity_namer(index: LoadedIndex, layer: EntityLayer, scope: Scope) -> Callable[[int], str]:
    """How a reader is shown each entity: a title's entity as the title is written where the reader
    may read a document of that title, else by its normalised name. A title is registered before the
    names of passages, so the written form of a name a public passage gives can be the title of a
    document this reader may not read ("The NIGHTJAR Project" of the board's minutes)."""
    scope = scope.acl  # what the groups may read, whatever a where filter leaves
    if scope.full:
        return layer.display.__getitem__

    def readable_titles() -> set[str]:  # of documents in readable sub-chunks (all of whose documents are readable)
        docs, titles = index.units["docs"], index.documents["title"]
        return {titles[d].strip() for u in np.flatnonzero(scope.units).tolist() for d in docs[u]}

    def name(entity: int) -> str:
        written = layer.display[entity]
        if written == layer.names[entity] or written in scope.cached("entity_titles", readable_titles):
            return written
        return layer.names[entity]

    return name


def walk_adjacency(layer: EntityLayer, sentences: np.ndarray | None, cooccurrence_weight: float) -> sp.csr_matrix:
    """[sub-chunks; entities] adjacency: mentions both ways, synonyms, and co-occurrence edges counted
    over ``sentences`` (a mask; None = all), ``cooccurrence_weight`` per shared sentence, at most 1."""
    entity_edges = layer.synonyms
    if cooccurrence_weight > 0 and layer.sentence_mentions.shape[0]:
        said = layer.sentence_mentions if sentences is None else layer.sentence_mentions[sentences]
        linked = cooccurrence_matrix(said.T.tocsr())
        linked.data = np.minimum(linked.data * cooccurrence_weight, 1.0)
        entity_edges = (entity_edges + linked).tocsr()
    return sp.bmat([[None, layer.mentions], [layer.mentions.T, entity_edges]], format="csr")


def _walk(
    index: LoadedIndex, layer: EntityLayer, scope: Scope, xp: ModuleType, cooccurrence_weight: float
) -> tuple[RandomWalk, np.ndarray | None]:
    """The walk over [sub-chunks; entities] and the nodes it keeps.

    For a restricted reader the walk runs on the readable nodes alone (not on a graph where the
    others are merely cut off): a forbidden node left in place would still count in the walk's
    size, and through the start vector and the stopping rule change every score a little. Its
    co-occurrence edges are counted over readable sentences only, so a forbidden sentence links no
    two names for it.
    """
    walk_name = f"entities:{cooccurrence_weight}:{xp.__name__}"
    if scope.units.all():
        whole = index.memo(
            "walk", walk_name, lambda: RandomWalk(sparse_on(xp, walk_adjacency(layer, None, cooccurrence_weight)))
        )
        return whole, None
    kept = np.flatnonzero(np.concatenate([scope.units, readable_entities(layer, scope) > 0]))

    def restricted() -> RandomWalk:
        adjacency = walk_adjacency(layer, scope.units[layer.sentence_units], cooccurrence_weight)
        return RandomWalk(sparse_on(xp, adjacency[kept][:, kept].tocsr()))

    return scope.cached(walk_name, restricted), kept


def question_entities(layer: EntityLayer, text: str, readable: np.ndarray) -> list[int]:
    """Readable entities the question names: its longest word n-grams that are entity names, no stop word alone."""
    tokens = WORD.findall(normalise_entity(text))
    found: list[int] = []
    taken = np.zeros(len(tokens), dtype=bool)
    stops = stop_words()
    for n in range(min(MAX_NGRAM, len(tokens)), 0, -1):
        for start in range(len(tokens) - n + 1):
            if taken[start : start + n].any() or (n == 1 and tokens[start] in stops):
                continue
            entity = layer.lookup.get(" ".join(tokens[start : start + n]), -1)
            if entity >= 0 and readable[entity] > 0:
                found.append(entity)
                taken[start : start + n] = True
    return found


def _bridges(
    layer: EntityLayer, first_hop: np.ndarray, seeded: np.ndarray, readable: np.ndarray, limit: int
) -> dict[int, int]:
    """Up to ``limit`` entities named by the first-hop sub-chunks and not seeded by the question: those
    named elsewhere too (else they lead nowhere), fewest readable mentions first (the most specific)."""
    found: dict[int, int] = {}
    for unit in first_hop.tolist():
        for entity in layer.mentions.indices[layer.mentions.indptr[unit] : layer.mentions.indptr[unit + 1]].tolist():
            if readable[entity] >= 2 and not seeded[entity]:
                found.setdefault(entity, unit)
    chosen = sorted(found, key=lambda e: (readable[e], e))[:limit]
    return {e: found[e] for e in chosen}


def entity_walk(
    index: LoadedIndex,
    layer: EntityLayer,
    query: Query,
    scope: Scope,
    dense: np.ndarray,
    first_hop: np.ndarray,
    *,
    seed_entities: int,
    bridges: int,
    damping: float,
    cooccurrence_weight: float = 0.0,
    xp: ModuleType = np,
) -> EntityWalk:
    """Personalised PageRank over [sub-chunks; entities] from the question's entities, the first-hop
    passages' bridge entities and the dense score of sub-chunks (``dense``, 0..1 on readable ones)."""
    n_units = len(dense)
    readable, name = readable_entities(layer, scope), entity_namer(index, layer, scope)
    named = question_entities(layer, query.text, readable)
    entity_seeds = np.zeros(layer.size)
    if layer.size:
        embedded = index.memo("entities", "embedded", lambda: np.flatnonzero(index.array(ENTITY_VECTORS).any(axis=1)))
        vectors = index.memo("entities", "vectors", lambda: np.ascontiguousarray(index.array(ENTITY_VECTORS)[embedded]))
        similarity = np.full(layer.size, -np.inf)
        similarity[embedded] = np.where(readable[embedded] > 0, vectors @ query.vector, -np.inf)
        nearest = top_indices(similarity, seed_entities)
        # Fewer readable (or embedded) names than seed slots: no unreadable or unembedded one fills in.
        nearest = nearest[(readable[nearest] > 0) & (similarity[nearest] > 0)]
        entity_seeds[nearest] = np.maximum(similarity[nearest], 0)
        entity_seeds[named] = 1.0
    else:
        nearest = np.zeros(0, dtype=np.int64)
    asked = np.zeros(layer.size, dtype=bool)
    asked[named] = True
    found = _bridges(layer, first_hop, asked, readable, bridges)
    chosen = list(found)
    entity_seeds[chosen] = np.maximum(entity_seeds[chosen], BRIDGE_WEIGHT)
    unit_seeds = np.zeros(n_units)
    best = top_indices(np.where(scope.units, dense, -np.inf), SEED_UNITS)
    best = best[scope.units[best]]
    unit_seeds[best] = np.maximum(dense[best], 0)
    unit_mass, entity_mass = unit_seeds.sum(), entity_seeds.sum()
    asked_ids = np.asarray(named, dtype=np.int64)
    if unit_mass + entity_mass <= 0:  # nothing readable near the question: nothing to walk from
        return EntityWalk(np.zeros(n_units), np.zeros(layer.size), asked_ids, nearest, {}, readable, name)
    restart = np.concatenate(
        [
            unit_seeds * (UNIT_SHARE / unit_mass if unit_mass else 0.0),
            entity_seeds * ((1 - UNIT_SHARE) / entity_mass if entity_mass else 0.0),
        ]
    )
    query.seeds.extend(f"entity:{name(e)}" for e in named)
    query.seeds.extend(f"bridge:{name(e)}" for e in found)
    walker, kept = _walk(index, layer, scope, xp, cooccurrence_weight)
    if kept is None:
        scores = to_numpy(walker.run(personalization=xp.asarray(restart), damping=damping, tol=1e-7))
    else:
        scores = np.zeros(len(restart))
        scores[kept] = to_numpy(walker.run(personalization=xp.asarray(restart[kept]), damping=damping, tol=1e-7))
    return EntityWalk(scores[:n_units], scores[n_units:], asked_ids, nearest, found, readable, name)


def entity_path(layer: EntityLayer, walk: EntityWalk, unit: int) -> str | None:
    """How the entity channel reached ``unit``: query → entity → piece for an entity the question names,
    piece → shared entity → piece for a bridge (naming the first-hop piece), query → entity → piece for
    an entity near the query; None if none of them."""
    own = layer.mentions.indices[layer.mentions.indptr[unit] : layer.mentions.indptr[unit + 1]].tolist()
    named = [e for e in own if e in walk.named_set]
    if named:
        return f"ppr via entity:{walk.name(max(named, key=walk.entities.__getitem__))} (named in the query)"
    bridged = [e for e in own if walk.bridges.get(e, unit) != unit]
    if bridged:
        e = max(bridged, key=lambda b: walk.entities[b] / max(walk.readable[b], 1))  # what b sends each piece
        return f"ppr via entity:{walk.name(e)} (from unit {walk.bridges[e]})"
    near = [e for e in own if e in walk.nearest_set]
    if near:
        return f"ppr via entity:{walk.name(max(near, key=walk.entities.__getitem__))} (near the query)"
    return None
