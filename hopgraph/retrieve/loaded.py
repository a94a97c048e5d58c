"""A built index opened for querying: tables, vectors and graphs, loaded once and kept in memory
(arrays memory-mapped, shared by every process that serves the same version)."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import scipy.sparse as sp

from hopgraph.artifacts import UPDATE_COLUMNS
from hopgraph.config import HopgraphConfig, validate_config
from hopgraph.errors import IndexFormatError
from hopgraph.files import file_stamp
from hopgraph.store import IndexStore, live_root

T = TypeVar("T")


class LoadedIndex:
    """Read-only view of the live version of an index directory; parts load on first use.

    The live version is resolved once, here: an update that switches versions later does not
    change what this object reads (versions are immutable), so a reader never mixes two.
    """

    def __init__(self, path: str | Path):
        live = live_root(path)
        self.version = "" if live == Path(path) else live.name  # "" = the root index
        self.store = IndexStore(live)
        self._stamp = file_stamp(self.store.manifest_path)  # before reading it: a rebuild meanwhile is seen
        self.manifest = self.store.require_complete()
        if self.manifest.get("partitions"):
            raise IndexFormatError(
                f"{live}: built with access.isolation (one sub-index per ACL partition); open it with Retriever(path)"
            )
        self.config: HopgraphConfig = validate_config(self.manifest["config"], source=f"{live}/manifest.json")
        # Everything derived from this version lives here and dies with this object: a server opens
        # one LoadedIndex per published version, so no cache outside it may be keyed by an index.
        self._memo: dict[tuple[str, str], Any] = {}
        self._memo_lock = threading.RLock()

    def memo(self, kind: str, name: str, make: Callable[[], T]) -> T:
        """``make()`` computed once per (kind, name) for this index (thread-safe; readers share it)."""
        key = (kind, name)
        try:
            return self._memo[key]
        except KeyError:
            pass
        with self._memo_lock:
            if key not in self._memo:
                self.still_the_index_opened()
                made = make()
                self.still_the_index_opened()  # a rebuild rewrites the manifest before any other file
                self._memo[key] = made
            return self._memo[key]

    def still_the_index_opened(self) -> None:
        """IndexFormatError where the files were replaced since this object opened them: the root
        index rebuilt in place (``hopgraph index --overwrite``). Parts load on first use, so a reader
        would otherwise mix the old index's parts with the new one's, and fail on an index out of
        bounds or, worse, answer with another corpus's text. A manifest rewritten with the same
        stages (the same build run again) is the same index."""
        stamp = file_stamp(self.store.manifest_path)
        if stamp == self._stamp:
            return
        if not self.store.root.exists():
            raise self.store.removed()
        try:
            same = self.store.read_manifest().get("stages") == self.manifest.get("stages")
        except IndexFormatError:
            same = False
        if not same:
            raise IndexFormatError(
                f"{self.store.root}: the index was rebuilt while it was open (`hopgraph index --overwrite`); "
                "open it again"
            )
        self._stamp = stamp

    # The tables below are the memoised ones (``table``), so each is held in memory once.
    @functools.cached_property
    def documents(self) -> dict[str, list]:
        return {**self.table("documents"), "metadata": [json.loads(m) for m in self.table("documents")["metadata"]]}

    @functools.cached_property
    def chunks(self) -> dict[str, list]:
        return self.table("chunks")

    @functools.cached_property
    def units(self) -> dict[str, list]:
        return self.table("units")

    @functools.cached_property
    def keywords(self) -> list[str]:
        return self.table("keywords")["keyword"]

    @functools.cached_property
    def keyword_lookup(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.keywords)}

    @functools.cached_property
    def unit_chunk(self) -> np.ndarray:
        return np.asarray(self.units["chunk"], dtype=np.int64)

    @functools.cached_property
    def unit_tokens(self) -> np.ndarray:
        return np.asarray(self.units["tokens"], dtype=np.int64)

    @functools.cached_property
    def sentence_units(self) -> np.ndarray:
        """The sub-chunk of each sentence (read once; the sentences' text is not kept)."""
        read = lambda: np.asarray(self.store.read_table("sentences", ["unit"])["unit"], dtype=np.int64)  # noqa: E731
        return self.memo("column", "sentences.unit", read)

    @functools.cached_property
    def sentence_runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(first sentence index, sub-chunk) of each run of sentences that share a sub-chunk."""
        parent = self.sentence_units
        if len(parent) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
        return starts, parent[starts]

    @functools.cached_property
    def chunk_tokens(self) -> np.ndarray:
        return np.asarray(self.chunks["tokens"], dtype=np.int64)

    PIECE_TABLES = {"chunk": "chunks", "unit": "units", "cue_unit": "cue_units"}

    def pieces(self, kind: str) -> dict[str, list]:
        """The table behind candidates of ``kind``: columns text, tokens, docs (and chunk, except for chunks)."""
        if kind == "chunk":
            return self.chunks
        if kind == "unit":
            return self.units
        return self.table(self.PIECE_TABLES.get(kind, kind))

    def table(self, name: str) -> dict[str, list]:
        def read() -> dict[str, list]:
            table = self.store.read_arrow(name)
            return table.select([c for c in table.column_names if c not in UPDATE_COLUMNS]).to_pydict()

        return self.memo("table", name, read)

    def array(self, name: str) -> np.ndarray:
        """A stored array, memory-mapped read-only: processes serving the same version share its pages,
        and a version's files never change once written (an update writes a new version)."""
        return self.memo("array", name, lambda: np.asarray(self.store.read_array(name, mmap=True)))

    def graph(self, name: str) -> sp.csr_matrix:
        return self.memo("graph", name, lambda: self.store.read_graph(name))

    @functools.cached_property
    def entity_mentions(self) -> list[list[int]]:
        """Rows of table kg_mentions per entity (descriptions are kept per source chunk)."""
        rows: list[list[int]] = [[] for _ in self.table("kg_entities")["name"]]
        for r, e in enumerate(self.table("kg_mentions")["entity"]):
            rows[e].append(r)
        return rows

    @functools.cached_property
    def keyword_units(self) -> sp.csr_matrix:
        """Postings keyword → sub-chunks (rows = keywords)."""
        return self.graph("postings_units").T.tocsr()
