"""The registry of retrieval methods: each method module registers itself with what it needs.

A method is a function ``rank(index, query, scope, config) -> candidates`` decorated with
:func:`register`, which records the index stages it needs (none for LLM-free methods), the
[retrieval] config section it reads and a one-line description. Everything that lists methods
(the config check, the CLI, the server's ``/v1/index``, the evaluation harness) asks this registry,
so adding a method is one module in ``hopgraph/retrieve/methods/`` (and, if it has settings, its
section in ``RetrievalConfig``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hopgraph.config import RetrievalConfig
    from hopgraph.retrieve.loaded import LoadedIndex
    from hopgraph.retrieve.packing import Candidate
    from hopgraph.retrieve.query import Query, Scope


class HasManifest(Protocol):
    """An opened index, partitioned or not: its manifest says which stages are done."""

    manifest: dict[str, Any]


RankFn = Callable[["LoadedIndex", "Query", "Scope", "RetrievalConfig"], "Iterable[Candidate]"]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    rank: RankFn
    needs: tuple[str, ...]  # pipeline stages the index must have finished (LLM stages: kg_extract, cue_graph)
    settings: str | None  # the [retrieval.<settings>] section it reads, if any
    description: str
    order: int  # where it is listed (LLM-free methods first)
    embeds: bool = True  # reads the question's vector; False (bm25) answers without loading the embedding model

    @property
    def llm_free(self) -> bool:
        """Built entirely without an LLM (the LLM-built stages are the only ones a method can need)."""
        return not self.needs

    def missing(self, manifest: dict[str, Any]) -> list[str]:
        """The stages it needs that the index of ``manifest`` has not finished."""
        stages = manifest.get("stages", {})
        return [stage for stage in self.needs if not stages.get(stage, {}).get("done")]

    def available(self, index: HasManifest) -> bool:
        return not self.missing(index.manifest)


_METHODS: dict[str, MethodSpec] = {}


def register(
    name: str,
    *,
    order: int = 1000,
    needs: tuple[str, ...] = (),
    settings: str | None = None,
    description: str = "",
    embeds: bool = True,
) -> Callable[[RankFn], RankFn]:
    """Decorator: make ``rank`` the method ``name``; registering a name twice is a programming error."""

    def decorate(rank: RankFn) -> RankFn:
        if name in _METHODS and _METHODS[name].rank is not rank:
            raise ValueError(f"retrieval method {name!r} registered twice")
        _METHODS[name] = MethodSpec(
            name, rank, needs, settings, description or (rank.__doc__ or "").strip().split("\n")[0], order, embeds
        )
        return rank

    return decorate


def registered() -> dict[str, MethodSpec]:
    """Every registered method (the built-in ones are registered by importing ``hopgraph.retrieve.methods``)."""
    import hopgraph.retrieve.methods  # noqa: F401  (registers the built-in methods)

    return {spec.name: spec for spec in sorted(_METHODS.values(), key=lambda s: (s.order, s.name))}
