"""G2ConS dual-path retrieval with the weighted context ensemble (§3.2.1).

The core-KG channel (the index's KG, built on the concept-PageRank core) may fill λ_w·λ tokens and
the concept channel (1−λ_w)·λ; sub-chunks both channels found are voted up and packed first.
"""

from __future__ import annotations

from collections.abc import Iterator

from hopgraph.config import RetrievalConfig
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import concept, kg
from hopgraph.retrieve.packing import Candidate, within
from hopgraph.retrieve.query import Query, Scope
from hopgraph.retrieve.registry import register


@register(
    "g2cons",
    order=90,
    needs=("kg_extract",),
    settings="g2cons",
    description="G2ConS: core-KG channel plus the concept channel.",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    kg_share = config.g2cons.kg_weight * config.budget
    from_kg = list(within(index, kg.candidates(index, query, scope, config, kg_share), kg_share))
    from_concepts = list(within(index, concept.rank(index, query, scope, config), config.budget - kg_share))
    concept_units = {c.index for c in from_concepts if c.kind == "unit"}
    both = {c.index for c in from_kg if c.kind == "unit" and c.index in concept_units}
    for cand in from_kg:
        if cand.kind == "unit" and cand.index in both:
            yield Candidate(cand.kind, cand.index, cand.score, f"{cand.path} + concept (both paths)")
    yield from (c for c in from_kg if not (c.kind == "unit" and c.index in both))
    yield from (c for c in from_concepts if c.index not in both)
