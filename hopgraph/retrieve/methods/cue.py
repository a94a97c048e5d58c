"""CUE-RAG Q-Iter (Algorithms 3–4): entity anchoring, beam search over knowledge units, chunk rerank.

Anchoring seeds entity nodes two ways: the K entity nodes nearest each entity spaCy finds in the
question (spreading activation) and the entities of the K units nearest the question (knowledge
anchoring). From every anchor entity the search adds one of its K units nearest the state's query
vector, subtracts that unit's vector from the state's query vector (so the next hop looks for what
is still missing), scores the state's units joined together with the reranker, keeps the M best
states, and continues from the entities of the units just added, for D depths. Chunks holding any
unit of a kept state are reranked against the question; the N best are the paper's context. The
rest of the budget is filled as every method fills it: what the search found, then the dense
ranking's chunks, so a question the graph cannot anchor (no entity found) still gets a context.

The bi-encoder fallback reranker scores from the index's vectors (a chunk's stored vector; a set
of units as the unit-length mean of theirs, as a long text is embedded as the mean of its windows)
instead of encoding every passage again for every query.

Forbidden chunks are cut out first: their units are never anchors or expansions, and an entity
whose every unit is forbidden cannot be matched, so nothing is reached through them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import scipy.sparse as sp

from hopgraph.config import CueMethod, RetrievalConfig
from hopgraph.deadline import check_deadline
from hopgraph.errors import ConfigError
from hopgraph.kernels import normalize_rows
from hopgraph.models import load_embedder
from hopgraph.ner import query_entities
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import text as dense
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import SEEDS_TRACED, Query, Scope, top_indices
from hopgraph.retrieve.registry import register
from hopgraph.retrieve.rerank import Reranker, reranker_for


@dataclass(frozen=True)
class CueGraph:
    unit_vectors: np.ndarray  # knowledge units × dim, unit length
    unit_entities: sp.csr_matrix  # units × entities (E_e)
    entity_units: sp.csr_matrix  # entities × units (E_e, other direction)
    unit_chunk: np.ndarray  # chunk of each unit (E_c)
    entity_vectors: np.ndarray  # entities × dim, unit length: each name as the index embedded it
    entity_ids: dict[str, int]  # normalised name → entity

    def entities_of(self, unit: int) -> np.ndarray:
        return self.unit_entities.indices[self.unit_entities.indptr[unit] : self.unit_entities.indptr[unit + 1]]

    def units_of(self, entity: int) -> np.ndarray:
        return self.entity_units.indices[self.entity_units.indptr[entity] : self.entity_units.indptr[entity + 1]]

    def name_vectors(
        self, names: Sequence[str], embed: Callable[[list[str]], np.ndarray], known: np.ndarray
    ) -> np.ndarray:
        """Vectors of a question's entity names made as the index made its entity nodes' (names
        compared with names): the stored vector of a name the index has and the reader may know
        (``known``, per entity), ``embed`` for the rest. A name known only from forbidden text is
        embedded like an unknown one: its stored vector answered ~4 times faster, and a reader could
        time a guessed name into a yes."""
        rows = [self.entity_ids.get(name, -1) for name in names]
        rows = [row if row >= 0 and known[row] else -1 for row in rows]
        missing = [name for name, row in zip(names, rows) if row < 0]
        fresh = iter(normalize_rows(embed(missing)) if missing else ())
        return np.stack([self.entity_vectors[row] if row >= 0 else next(fresh) for row in rows])

    def set_vectors(self, unit_sets: Sequence[tuple[int, ...]]) -> np.ndarray:
        """One unit-length vector per set of units: the normalised mean of the units' vectors."""
        if not unit_sets:
            return np.zeros((0, self.unit_vectors.shape[1]), dtype=np.float32)
        return normalize_rows(np.stack([self.unit_vectors[list(units)].sum(axis=0) for units in unit_sets]))


def cue_graph(index: LoadedIndex) -> CueGraph:
    """The multi-partite graph of an index, loaded once per opened index (and dropped with it)."""
    if not index.store.has("tables", "cue_units"):
        raise ConfigError("method cue needs an index built with --extraction.cue_alpha (0 = sentence units, no LLM)")

    def load() -> CueGraph:
        unit_entities = index.graph("cue_unit_entities")
        return CueGraph(
            index.array("cue_unit_vectors"),
            unit_entities,
            unit_entities.T.tocsr(),
            np.asarray(index.table("cue_units")["chunk"], dtype=np.int64),
            index.array("cue_entity_vectors"),
            {name: i for i, name in enumerate(index.table("cue_entities")["name"])},
        )

    return index.memo("cue", "graph", load)


@dataclass
class State:
    """One beam entry of Alg. 3: the unit set S (ascending ids: canonical, so equal sets meet), its
    query vector φ, the anchors V' for the next depth, and the reranker's score of ⊕(S)."""

    units: tuple[int, ...]
    vector: np.ndarray
    anchors: tuple[int, ...]
    route: tuple[tuple[int, int], ...]  # (unit, entity it was reached from), in the order added
    score: float = float("nan")


@dataclass
class Trace:
    """What a search did: the seed entities, per depth the queue size, the (anchor, unit) expansions
    scored and the states kept (≤ M each); every kept state together is Alg. 3's C*."""

    seeds: list[int]
    queue_sizes: list[int] = field(default_factory=list)
    expansions: list[int] = field(default_factory=list)
    beams: list[list[State]] = field(default_factory=list)


def search(
    graph: CueGraph,
    seeds: Sequence[int],
    query_vector: np.ndarray,
    usable: np.ndarray,
    score: Callable[[list[tuple[int, ...]]], np.ndarray],
    *,
    top_k: int,
    depth: int,
    beam: int,
    query_update: bool = True,
) -> Trace:
    """Alg. 3 lines 5–18. ``score`` rates a batch of unit sets (one reranker call per depth).

    A unit set reached twice in one depth (a then b, or b then a) is one state whose anchors are the
    union of both; its vector is the same either way (φ(q) minus both units).
    """
    trace = Trace(seeds=list(seeds))
    queue: list[tuple[int, np.ndarray, tuple[int, ...], tuple[tuple[int, int], ...]]] = [
        (int(v), query_vector, (), ()) for v in seeds
    ]
    for _ in range(depth):
        trace.queue_sizes.append(len(queue))
        states: dict[tuple[int, ...], State] = {}
        expansions = 0
        for entity, vector, units, route in queue:
            check_deadline()  # one expansion batch per queued anchor
            options = graph.units_of(entity)
            options = options[usable[options] & ~np.isin(options, units)]
            for unit in options[top_indices(graph.unit_vectors[options] @ vector, top_k)].tolist():
                expansions += 1
                key = tuple(sorted(units + (unit,)))
                anchors = tuple(graph.entities_of(unit).tolist())
                if key in states:
                    states[key].anchors = tuple(dict.fromkeys(states[key].anchors + anchors))
                    continue
                states[key] = State(
                    key,
                    vector - graph.unit_vectors[unit] if query_update else vector,
                    anchors,
                    route + ((unit, entity),),
                )
        trace.expansions.append(expansions)
        if not states:
            break
        candidates = list(states.values())
        for state, value in zip(candidates, score([s.units for s in candidates])):
            state.score = float(value)
        kept = sorted(candidates, key=lambda s: (-s.score, s.units))[:beam]
        trace.beams.append(kept)
        queue = [(v, s.vector, s.units, s.route) for s in kept for v in s.anchors]
    return trace


def reachable_entities(graph: CueGraph, usable: np.ndarray) -> np.ndarray:
    """Entities with at least one usable unit."""
    return np.asarray(graph.entity_units @ usable.astype(np.float32)).ravel() > 0


def anchor_entities(
    index: LoadedIndex,
    graph: CueGraph,
    query: Query,
    usable: np.ndarray,
    cfg: CueMethod,
    reachable: np.ndarray | None = None,
) -> list[int]:
    """Entity-Anchoring (Alg. 4): spreading activation, then knowledge anchoring; only entities
    that still have a usable unit (``reachable``, computed from ``usable`` when not given) can be seeds.
    Knowledge anchoring takes the K nearest units that name an entity: a unit naming none anchors
    nothing, and a question without entities relies on this source alone."""
    seeds: list[int] = []
    if reachable is None:
        reachable = reachable_entities(graph, usable)
    names = query_entities(query.text) if cfg.spreading_activation else []
    if names and reachable.any():
        # Names are embedded as the index embedded its entity names (no query prompt), by the model
        # the retriever runs on the query's device, wrapped once per index, not once per query.
        embedding = index.config.embedding.model_copy(update={"device": query.device})
        embedder = index.memo("cue", f"name_embedder:{query.device}", lambda: load_embedder(embedding))
        similarity = graph.entity_vectors @ graph.name_vectors(names, embedder.encode, reachable).T
        for column in similarity.T:
            nearest = top_indices(np.where(reachable, column, -np.inf), cfg.top_k)
            seeds.extend(nearest[reachable[nearest]].tolist())
    anchorable = usable & (np.diff(graph.unit_entities.indptr) > 0)
    if cfg.knowledge_anchoring and anchorable.any():
        nearest = top_indices(np.where(anchorable, graph.unit_vectors @ query.vector, -np.inf), cfg.top_k)
        for unit in nearest[anchorable[nearest]]:
            seeds.extend(graph.entities_of(int(unit)).tolist())
    return list(dict.fromkeys(seeds))


def _assemble(
    index: LoadedIndex, graph: CueGraph, query: Query, trace: Trace, reranker: Reranker, n_chunks: int
) -> Iterator[Candidate]:
    """Alg. 3 lines 19–23, then the rest of what the search found, to fill the budget: the N best
    chunks by rerank score, the knowledge units of C* from other chunks (best state first), the
    remaining chunks by rerank score."""
    names = index.table("cue_entities")["name"]
    reached: dict[int, tuple[int, int, float]] = {}  # unit -> (depth, entity, best state score)
    for state in sorted((s for kept in trace.beams for s in kept), key=lambda s: (-s.score, s.units)):
        for hop, (unit, entity) in enumerate(state.route, 1):
            reached.setdefault(unit, (hop, entity, state.score))
    first_unit: dict[int, int] = {}
    for unit in reached:
        first_unit.setdefault(int(graph.unit_chunk[unit]), unit)
    chunks = list(first_unit)
    if not chunks:
        return
    tag = f"(rerank: {reranker.name})"

    def how(unit: int) -> str:
        hop, entity, _ = reached[unit]
        return f"q-iter depth {hop} via entity:{names[entity]}"

    scores = reranker.score_embedded(
        query.text,
        query.vector,
        [index.chunks["text"][c] for c in chunks],
        index.array("chunk_vectors")[np.asarray(chunks)],
    )
    order = sorted(range(len(chunks)), key=lambda i: (-scores[i], chunks[i]))
    top = {chunks[i] for i in order[:n_chunks]}
    for rank_, i in enumerate(order[:n_chunks], 1):
        yield Candidate(
            "chunk", chunks[i], float(scores[i]), f"{how(first_unit[chunks[i]])}, chunk rerank #{rank_} {tag}"
        )
    for unit, (_, _, score) in reached.items():
        if int(graph.unit_chunk[unit]) not in top:
            yield Candidate("cue_unit", unit, score, f"{how(unit)}, beam {tag}")
    for rank_, i in enumerate(order[n_chunks:], n_chunks + 1):
        yield Candidate(
            "chunk", chunks[i], float(scores[i]), f"{how(first_unit[chunks[i]])}, chunk rerank #{rank_} {tag}"
        )


@register(
    "cue",
    order=100,
    needs=("cue_graph",),
    settings="cue",
    description="CUE-RAG Q-Iter over the chunk–unit–entity graph, then a chunk rerank; dense chunks fill the rest.",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    cfg = config.cue
    graph = cue_graph(index)
    # Per reader's scope, not per request: which units and entities the reader may reach.
    usable = scope.cached("cue_usable", lambda: scope.chunks[graph.unit_chunk])
    reachable = scope.cached("cue_reachable", lambda: reachable_entities(graph, usable))
    reranker = reranker_for(index, query.rerank, query.device)
    texts = index.table("cue_units")["text"]

    def score(unit_sets: list[tuple[int, ...]]) -> np.ndarray:
        return reranker.score_embedded(
            query.text,
            query.vector,
            [" ".join(texts[u] for u in units) for units in unit_sets],
            graph.set_vectors(unit_sets),
        )

    seeds = anchor_entities(index, graph, query, usable, cfg, reachable)
    names = index.table("cue_entities")["name"]
    query.seeds.extend(f"entity:{names[e]}" for e in seeds[:SEEDS_TRACED])
    trace = search(
        graph,
        seeds,
        query.vector,
        usable,
        score,
        top_k=cfg.top_k,
        depth=cfg.depth,
        beam=cfg.beam,
        query_update=cfg.query_update,
    )
    return chain(_assemble(index, graph, query, trace, reranker, cfg.chunks), dense.rank(index, query, scope, config))
