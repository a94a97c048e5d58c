"""Retrieval methods: each module registers ``rank(index, query, scope, config) -> candidates``
with :func:`hopgraph.retrieve.registry.register` (name, the index stages it needs, its settings).

LLM-free: text, bm25, knng, keyword, concept, ppr. On an index with an LLM knowledge graph: kg, hybrid,
ket, g2cons. On an index with a CUE graph (any α, including 0): cue. To add a method, add a module
here and its name to the import below (see the README's "Adding a retrieval method").
"""

from __future__ import annotations

from typing import Any

from hopgraph.errors import ConfigError, cut
from hopgraph.retrieve.methods import bm25, concept, cue, g2cons, ket, keyword, kg, knng, ppr, text  # noqa: F401  (they register)
from hopgraph.retrieve.registry import HasManifest, MethodSpec, registered

SPECS: dict[str, MethodSpec] = registered()
METHODS = {name: spec.rank for name, spec in SPECS.items()}
LLM_FREE = tuple(name for name, spec in SPECS.items() if spec.llm_free)


def available_methods(index: HasManifest) -> list[str]:
    """Methods whose parts this index has, in registration order."""
    return [name for name, spec in SPECS.items() if spec.available(index)]


# How an index gets the stages only some methods need (an LLM builds them).
BUILT_BY = {
    "kg_extract": "built with --extraction.kg all (or pagerank, random, concept) and an LLM at --llm.base_url",
    "cue_graph": "built with --extraction.cue_alpha A (an LLM at --llm.base_url; 0: none needed)",
}


def how_built(stages: list[str]) -> str:
    """How to build each of ``stages`` (the commands and settings that do)."""
    return "; ".join(BUILT_BY.get(stage, "built by hopgraph index") for stage in stages)


def check_method(method: str, manifest: dict[str, Any] | None = None, source: str = "") -> None:
    """Refuse (ConfigError) a method the registry does not have or, given an index's ``manifest``,
    one whose stages that index has not built, naming the methods it offers: a wrong default is
    then found where it is set, not by every query that relies on it. A retriever calls it per
    query: the methods an index offers are listed only for the message."""
    if method in SPECS and (manifest is None or not SPECS[method].missing(manifest)):
        return
    where = f"{source}: " if source else ""
    if manifest is None:
        offers = f"choose one of {', '.join(SPECS)}"
    else:
        offered = ", ".join(name for name, spec in SPECS.items() if not spec.missing(manifest))
        offers = f"it offers {offered}"
    if method not in SPECS:
        if manifest is not None:  # ``source`` is then the index, which is not what is wrong
            raise ConfigError(
                f"unknown method {cut(method)!r} (retrieval.method); {source or 'the index'} offers {offered}"
            )
        raise ConfigError(f"{where}unknown method {cut(method)!r}; {offers}")
    missing = SPECS[method].missing(manifest) if manifest is not None else []
    if missing:
        raise ConfigError(
            f"{where}method {method!r} needs parts this index lacks (stage {', '.join(missing)}: "
            f"{how_built(missing)}); {offers}"
        )
