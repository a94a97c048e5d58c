"""The query entry point: embed the query, restrict to what the reader may see, rank, pack."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hopgraph.config import HopgraphConfig, RerankConfig, RetrievalConfig, apply_overrides, validate_section
from hopgraph.deadline import check_deadline, deadline_after
from hopgraph.documents import unicode_problem
from hopgraph.errors import InputError
from hopgraph.models import Embedder, load_embedder
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import METHODS, SPECS, check_method
from hopgraph.retrieve.packing import RetrievalResult, pack
from hopgraph.retrieve.query import Scope, make_query

if TYPE_CHECKING:
    from hopgraph.retrieve.partitioned import PartitionedIndex


def check_question(question: str) -> None:
    """InputError where ``question`` is not Unicode text: a command line's undecodable bytes arrive
    as lone surrogates, which the tokenizer fails on with a traceback."""
    problem = unicode_problem(question)
    if problem:
        raise InputError(f"the question {problem}; give it as UTF-8 text")


class Retriever:
    """Answers ``retrieve(question)`` over one index with any method; retrieval itself never calls the LLM."""

    SCOPES_KEPT = 8  # readers' scopes kept (each may hold a keyword-vector matrix of its own)

    def __new__(
        cls,
        index: LoadedIndex | PartitionedIndex | str | Path,
        config: RetrievalConfig | None = None,
        device: str | None = None,
        rerank: RerankConfig | None = None,
    ) -> Retriever:
        """A path to an index built with access.isolation opens as a PartitionedRetriever."""
        if cls is Retriever and not isinstance(index, LoadedIndex):
            from hopgraph.retrieve.partitioned import PartitionedIndex, PartitionedRetriever, is_partitioned  # noqa: PLC0415

            if isinstance(index, PartitionedIndex) or is_partitioned(index):
                return super().__new__(PartitionedRetriever)
        return super().__new__(cls)

    def __init__(
        self,
        index: LoadedIndex | PartitionedIndex | str | Path,
        config: RetrievalConfig | None = None,
        device: str | None = None,
        rerank: RerankConfig | None = None,
    ):
        if not isinstance(index, (LoadedIndex, str, Path)):  # a PartitionedIndex is read by PartitionedRetriever
            raise TypeError(f"Retriever reads a LoadedIndex or a path, not {type(index).__name__}")
        self.index = index if isinstance(index, LoadedIndex) else LoadedIndex(index)
        self.config = config or self.index.config.retrieval
        self.rerank = rerank  # None: the index's own [rerank] settings
        self._model_on(device)
        self._open_scope: Scope | None = None
        # Scopes of recent readers (group set + filter), with what they derive from readable material
        # (keyword and entity vectors): a reader's second request reuses them instead of recomputing.
        self._scopes: OrderedDict[str, Scope] = OrderedDict()
        self._filtered: OrderedDict[str, Scope] = OrderedDict()  # readers' scopes with a where filter
        self._scopes_lock = threading.Lock()

    @classmethod
    def configured(cls, index: LoadedIndex | PartitionedIndex | str | Path, config: HopgraphConfig) -> Retriever:
        """A retriever with a run's query-time settings: its retrieval, embedding device and reranker
        (each command's config, over the index's stored one)."""
        return cls(index, config.retrieval, device=config.embedding.device, rerank=config.rerank)

    def scope(self, metadata_filter: MetadataFilter | None) -> Scope:
        """The pieces ``metadata_filter``'s reader may use. Scopes of recent readers are kept, those
        with a ``where`` filter apart (SCOPES_KEPT of each), so requests with a new filter each
        never push out the scopes of readers' groups, where what is costly to derive is kept."""
        if metadata_filter is None or metadata_filter.is_open:
            if self._open_scope is None:
                self._open_scope = Scope(
                    np.ones(len(self.index.unit_tokens), bool), np.ones(len(self.index.chunk_tokens), bool)
                )
            return self._open_scope
        groups = MetadataFilter(groups=metadata_filter.groups, allow_unrestricted=metadata_filter.allow_unrestricted)
        readable = self._kept(self._scopes, groups, None)
        return self._kept(self._filtered, metadata_filter, readable) if metadata_filter.where else readable

    def _kept(self, kept: OrderedDict[str, Scope], metadata_filter: MetadataFilter, readable: Scope | None) -> Scope:
        if metadata_filter.is_open:  # the owner's view with a filter: access control allows everything
            return self.scope(None)
        key = json.dumps(
            [
                sorted(metadata_filter.groups or ()),
                metadata_filter.groups is None,
                metadata_filter.allow_unrestricted,
                metadata_filter.where,
            ],
            sort_keys=True,
            default=str,
        )
        with self._scopes_lock:
            if key in kept:
                kept.move_to_end(key)
                return kept[key]
        check_deadline()
        docs = self.index.units["docs"], self.index.chunks["docs"]
        if readable is None:
            units, chunks = metadata_filter.piece_scopes(self.index, *docs)
        else:  # what the groups may read is known: only the filter's matches are new
            units, chunks = MetadataFilter(where=metadata_filter.where).piece_scopes(self.index, *docs)
            units, chunks = units & readable.units, chunks & readable.chunks
        scope = Scope(units, chunks, readable=readable)
        with self._scopes_lock:
            # A reader's concurrent first requests share one scope (and what it caches).
            scope = kept.setdefault(key, scope)
            kept.move_to_end(key)
            while len(kept) > self.SCOPES_KEPT:
                _, gone = kept.popitem(last=False)
                # Filtered scopes share their groups' scope: they go with it, or it would outlive the bound.
                for narrowed in [k for k, s in self._filtered.items() if s.readable is gone]:
                    del self._filtered[narrowed]
        return scope

    def _model_on(self, device: str | None) -> None:
        """Where models and graph kernels (PPR) of every query run; the embedder loads on first use."""
        self.device = device or self.index.config.embedding.device
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        """The index's embedding model, loaded on first use: a method that reads no vector (bm25)
        answers without waiting seconds for it."""
        with self._embedder_lock:
            if self._embedder is None:
                embedding = self.index.config.embedding
                self._embedder = load_embedder(embedding.model_copy(update={"device": self.device}))
            return self._embedder

    def embed(self, questions: list[str]) -> np.ndarray:
        return self.embedder.encode_queries(questions)

    def question_vector(self, question: str, method: str, vector: np.ndarray | None) -> np.ndarray:
        """``vector``, else the question's embedding where ``method`` reads one; else an empty vector
        (any use of it fails loudly instead of scoring against zeros)."""
        if vector is not None:
            return vector
        return self.embed([question])[0] if SPECS[method].embeds else np.zeros(0, dtype=np.float32)

    def retrieve(
        self,
        question: str,
        *,
        method: str | None = None,
        budget: int | None = None,
        metadata_filter: MetadataFilter | None = None,
        vector: np.ndarray | None = None,
        overrides: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> RetrievalResult:
        """Context and provenance for ``question``; ``vector`` skips embedding (batch evaluation).

        With ``deadline`` (seconds), the work stops with DeadlineExceeded once it runs that long:
        the searches check it as they go, so nothing keeps a core busy after its caller gave up.
        """
        check_question(question)
        with deadline_after(deadline):
            return self._retrieve(question, method, budget, metadata_filter, vector, overrides)

    def settings(self, method: str | None, budget: int | None, overrides: dict[str, Any] | None) -> RetrievalConfig:
        """This retriever's retrieval settings with a request's method, budget and overrides (checked)."""
        if not (method or budget is not None or overrides):
            return self.config
        update: dict[str, Any] = dict(overrides or {})
        if method:
            update["method"] = method
        if budget is not None:  # 0 is a budget the settings refuse, not "the default"
            update["budget"] = budget
        return validate_section(
            RetrievalConfig, apply_overrides(self.config.model_dump(), update), "retrieval settings"
        )

    def _retrieve(
        self,
        question: str,
        method: str | None,
        budget: int | None,
        metadata_filter: MetadataFilter | None,
        vector: np.ndarray | None,
        overrides: dict[str, Any] | None,
    ) -> RetrievalResult:
        config = self.settings(method, budget, overrides)
        check_method(config.method, self.index.manifest)  # a method whose parts this index has not built
        vector = self.question_vector(question, config.method, vector)
        started = time.perf_counter()
        query = make_query(self.index, question, vector, self.device, self.rerank)
        candidates = METHODS[config.method](self.index, query, self.scope(metadata_filter), config)
        evidence = pack(self.index, candidates, config.budget)
        return RetrievalResult(
            query=question,
            method=config.method,
            budget=config.budget,
            evidence=evidence,
            seconds=time.perf_counter() - started,
            seeds=query.seeds,
        )
