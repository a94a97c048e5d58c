"""Retrieval methods: each module registers ``rank(index, query, scope, config) -> candidates``
with :func:`hopgraph.retrieve.registry.register` (name, the index stages it needs, its settings).

LLM-free: text, bm25, knng, keyword, concept, ppr. On an index with an LLM knowledge graph: kg, hybrid,
ket, g2cons. On an index with a CUE graph (any α, including 0): cue. To add a method, add a module
here and its name to the import below (see the README's "Adding a retrieval method").
"""

from __future__ import annotations

from hopgraph.retrieve.methods import bm25, concept, cue, g2cons, ket, keyword, kg, knng, ppr, text  # noqa: F401  (they register)
from hopgraph.retrieve.registry import HasManifest, MethodSpec, registered

SPECS: dict[str, MethodSpec] = registered()
METHODS = {name: spec.rank for name, spec in SPECS.items()}
LLM_FREE = tuple(name for name, spec in SPECS.items() if spec.llm_free)


def available_methods(index: HasManifest) -> list[str]:
    """Methods whose parts this index has, in registration order."""
    return [name for name, spec in SPECS.items() if spec.available(index)]
