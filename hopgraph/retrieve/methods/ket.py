"""KET-RAG retrieval (Algorithm 4): θ·λ from the KG skeleton, the rest from the keyword channel.

The skeleton is whatever KG the index holds (built on the PageRank core for KET-RAG-P, a random
core for KET-RAG-U). ``hybrid`` is the paper's Hybrid-RAG: the full KG and Text-RAG, half each.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

from hopgraph.config import RetrievalConfig
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import keyword, kg, text
from hopgraph.retrieve.packing import Candidate, within
from hopgraph.retrieve.query import Query, Scope
from hopgraph.retrieve.registry import register


@register(
    "ket",
    order=80,
    needs=("kg_extract",),
    settings="ket",
    description="KET-RAG: KG-skeleton channel (θ of λ) plus the keyword channel.",
)
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    share = config.ket.theta * config.budget
    return chain(
        within(index, kg.candidates(index, query, scope, config, share), share),
        keyword.rank(index, query, scope, config),
    )


@register(
    "hybrid",
    order=70,
    needs=("kg_extract",),
    settings="ket",
    description="KG channel plus the text channel, half the budget each.",
)
def rank_hybrid(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    share = 0.5 * config.budget
    return chain(
        within(index, kg.candidates(index, query, scope, config, share), share), text.rank(index, query, scope, config)
    )
