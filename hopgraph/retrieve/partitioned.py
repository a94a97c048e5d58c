"""Reading an index built with ``access.isolation``: one complete sub-index per ACL partition.

A reader's query runs only in the partitions holding a document the reader may read; each ranks
and packs its own evidence exactly as a separate index would, and the per-partition evidence is
merged by score (each partition's own order kept) and packed to the budget again. Nothing of a
partition the reader cannot read is opened for that query, so a reader's results are the results
of an index of the partitions they may read, however many forbidden documents exist beside them.

Piece numbers (``Evidence.index``, ``Evidence.chunk``) are made unique within one answer by
offsetting each partition's numbers by the sizes of the readable partitions before it (never by
the sizes of partitions the reader cannot read, which would tell how much forbidden text exists);
the unrestricted partition comes first, so its numbers equal those of an index of the
unrestricted documents alone. The same piece may carry other numbers for a reader of other groups.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hopgraph.config import RerankConfig, RetrievalConfig, validate_config
from hopgraph.deadline import deadline_after
from hopgraph.errors import ConfigError, IndexFormatError
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import check_method
from hopgraph.retrieve.packing import Evidence, RetrievalResult
from hopgraph.retrieve.retriever import Retriever, check_question
from hopgraph.store import PARTITIONS, IndexStore, live_root

# Table whose rows candidates of each kind number (pieces composed at query time included).
KIND_TABLES = {
    "chunk": "chunks",
    "unit": "units",
    "cue_unit": "cue_units",
    "entity": "kg_entities",
    "relation": "kg_relations",
}


def is_partitioned(path: str | Path) -> bool:
    """True for an index directory whose live version was built with access.isolation."""
    store = IndexStore(live_root(path))
    return store.exists() and bool(store.read_manifest().get("partitions"))


def open_index(path: str | Path) -> LoadedIndex | PartitionedIndex:
    """The live version of ``path`` opened for reading, isolated (partitioned) or not."""
    return PartitionedIndex(path) if is_partitioned(path) else LoadedIndex(path)


@dataclass(frozen=True)
class Partition:
    name: str
    acl: list[str] | None
    index: LoadedIndex

    def rows(self, kind: str) -> int:
        """How many pieces of ``kind`` this partition numbers (0 where it has no such table)."""
        table = KIND_TABLES.get(kind, kind)
        if not self.index.store.has("tables", table):
            return 0
        return len(next(iter(self.index.table(table).values()), []))


class PartitionedIndex:
    """The live version of an isolated index: its manifest, corpus table and opened partitions."""

    def __init__(self, path: str | Path):
        live = live_root(path)
        self.version = "" if live == Path(path) else live.name
        self.store = IndexStore(live)
        self.manifest = self.store.require_complete()
        if not self.manifest.get("partitions"):
            raise IndexFormatError(f"{live}: not an index built with access.isolation (no partitions in its manifest)")
        self.config = validate_config(self.manifest["config"], source=f"{live}/manifest.json")
        self.partitions = [
            Partition(p["name"], p["acl"], LoadedIndex(live / PARTITIONS / p["name"]))
            for p in self.manifest["partitions"]
        ]

    @functools.cached_property
    def documents(self) -> dict[str, list]:
        table = self.store.read_table("documents")
        table["metadata"] = [json.loads(m) for m in table["metadata"]]
        return table


def readable(partition: Partition, metadata_filter: MetadataFilter | None) -> bool:
    """Whether the reader may read any document of the partition (only those are queried)."""
    return (
        metadata_filter is None or metadata_filter.is_open or bool(metadata_filter.document_mask(partition.index).any())
    )


def merge(streams: list[list[Evidence]], budget: int) -> list[Evidence]:
    """Evidence of several partitions by score, each partition's order kept (ties: earlier
    partition first), packed greedily to ``budget``; one stream comes back unchanged."""
    used, packed = 0, []
    for ev in heapq.merge(*streams, key=lambda e: -e.score):
        if used + ev.tokens > budget:
            if budget - used < 8:
                break
            continue
        used += ev.tokens
        packed.append(ev)
    return packed


class PartitionedRetriever(Retriever):
    """``Retriever`` over an isolated index: each readable partition retrieves on its own."""

    def __init__(
        self,
        index: PartitionedIndex | str | Path,
        config: RetrievalConfig | None = None,
        device: str | None = None,
        rerank: RerankConfig | None = None,
    ):
        # The partitions are the indexes; this one only lists them (so no LoadedIndex here).
        self.index = index if isinstance(index, PartitionedIndex) else PartitionedIndex(index)  # type: ignore[assignment]
        self.partitioned: PartitionedIndex = self.index  # type: ignore[assignment]
        self.config = config or self.index.config.retrieval
        self.rerank = rerank
        self._model_on(device)  # one model, here: the partitions are handed the question's vector
        self.parts = [Retriever(p.index, self.config, device, rerank) for p in self.partitioned.partitions]

    def scope(self, metadata_filter: MetadataFilter | None) -> Any:
        raise ConfigError("an isolated index has one scope per partition; call retrieve()")

    def retrieve(
        self,
        question: str,
        *,
        method: str | None = None,
        budget: int | None = None,
        metadata_filter: MetadataFilter | None = None,
        vector: np.ndarray | None = None,
        overrides: dict[str, Any] | None = None,
        **options: Any,
    ) -> RetrievalResult:
        check_question(question)
        # Checked here, not only by the partitions: a reader who may read none of them had any
        # settings accepted (a damping of 7 answered with empty evidence, not a ConfigError).
        config = self.settings(method, budget, overrides)
        chosen = config.method
        check_method(chosen, self.partitioned.manifest)  # its stages are done where every partition's are
        started = time.perf_counter()
        streams, settled, seeds = [], None, {}
        offsets: dict[str, int] = {}  # pieces numbered over the partitions this reader may read, nothing else
        with deadline_after(options.get("deadline")):  # one deadline for all partitions (a nested one never extends it)
            vector = self.question_vector(question, chosen, vector)
            for part, retriever in zip(self.partitioned.partitions, self.parts):
                if not readable(part, metadata_filter):
                    continue
                result = retriever.retrieve(
                    question,
                    method=method,
                    budget=budget,
                    metadata_filter=metadata_filter,
                    vector=vector,
                    overrides=overrides,
                    **options,
                )
                settled = result
                seeds.update(dict.fromkeys(result.seeds))
                streams.append([numbered(ev, offsets) for ev in result.evidence])
                for kind in {*KIND_TABLES, *(ev.kind for ev in result.evidence)}:
                    offsets[kind] = offsets.get(kind, 0) + part.rows(kind)
        final_budget = settled.budget if settled else config.budget
        return RetrievalResult(
            query=question,
            method=settled.method if settled else chosen,
            budget=final_budget,
            evidence=merge(streams, final_budget),
            seconds=time.perf_counter() - started,
            seeds=list(seeds),
        )


def numbered(ev: Evidence, offsets: dict[str, int]) -> Evidence:
    """``ev`` with its piece and chunk numbers offset past the readable partitions before its own."""
    chunk = ev.chunk + offsets.get("chunk", 0) if ev.chunk >= 0 else ev.chunk
    return dataclasses.replace(ev, index=ev.index + offsets.get(ev.kind, 0), chunk=chunk)
