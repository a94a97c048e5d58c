"""Text-RAG: dense top-k over ℓ-token chunks (the baseline every graph method must beat)."""

from __future__ import annotations

from collections.abc import Iterator

from hopgraph.config import RetrievalConfig
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.packing import Candidate
from hopgraph.retrieve.query import Query, Scope, ranked
from hopgraph.retrieve.registry import register


@register("text", order=10, needs=(), settings=None, description="Chunks by query cosine (the vector-RAG baseline).")
def rank(index: LoadedIndex, query: Query, scope: Scope, config: RetrievalConfig) -> Iterator[Candidate]:
    scores = index.array("chunk_vectors") @ query.vector
    return ranked("chunk", scores, scope.chunks, "dense")
