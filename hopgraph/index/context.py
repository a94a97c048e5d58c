"""What every index stage is handed: the store, the settings, the documents, and the models,
opened on first use (an LLM-free build never opens an LLM; a build on Ray reaches its actors)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from hopgraph.config import HopgraphConfig
from hopgraph.documents import Document
from hopgraph.index.analysis import ANALYSIS_SLICE, TextAnalyser, analysis_cache_path
from hopgraph.index.chunking import analyse_texts
from hopgraph.index.progress import RunProgress
from hopgraph.index.reuse import FIRST_BUILD, PreviousVersion
from hopgraph.kernels.backend import resolve_device
from hopgraph.llm import LLM, open_llm
from hopgraph.models import Embedder, embed_long_texts, load_embedder
from hopgraph.ner import CACHE_SLICE, NameFinder, cached_entity_names, entity_names, ner_processes
from hopgraph.store import IndexStore

EMBED_SLICE = 1024  # texts per call of the embedder while one progress bar runs over a stage


def embed_texts(
    config: HopgraphConfig,
    texts: list[str],
    progress: bool = False,
    embedder: Embedder | None = None,
    done: Callable[[int, int], None] | None = None,
    slice_size: int = EMBED_SLICE,
) -> np.ndarray:
    """Index-time vectors of ``texts`` (cached, long texts as averaged windows); empty input gives 0 rows.

    ``done(texts embedded, all texts)`` is told after each slice of ``slice_size`` texts (a build's
    whole-run bar)."""
    cfg = config.embedding
    embedder = embedder or load_embedder(cfg, cached=True)
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    # One bar over all the stage's texts, with an estimate of the time left: the model's own bar
    # would restart for every slice. Slices are the same with and without the bar (same vectors).
    parts = []
    with tqdm(total=len(texts), desc="embed", unit="text", disable=not progress, leave=False) as bar:
        for start in range(0, len(texts), slice_size):
            part = texts[start : start + slice_size]
            parts.append(
                embed_long_texts(embedder, part, window_tokens=cfg.window_tokens, encoding=config.chunking.encoding)
            )
            bar.update(len(part))
            if done is not None:
                done(start + len(part), len(texts))
    return np.concatenate(parts)


@dataclass
class BuildContext:
    store: IndexStore
    config: HopgraphConfig
    documents: Sequence[Document]
    progress: bool
    usage: dict[str, Any] = field(default_factory=dict)  # LLM accounting of the stage that ran last
    engine: Any = None  # a RayEngine (hopgraph.index.cluster) where model work runs on a Ray cluster
    run: RunProgress = field(default_factory=RunProgress.off)  # the build's bar: stages tell it of their work
    previous: PreviousVersion = FIRST_BUILD  # the version an update edits

    def __post_init__(self) -> None:
        # A device this machine cannot use is refused before the first stage, not by the first stage
        # that needs it (after documents, chunks and keywords were written). On a Ray cluster the
        # model runs on the actors; the graph kernels run here either way.
        device = self.config.embedding.device
        resolve_device(device, "cupy")
        if self.engine is None:
            resolve_device(device, "torch")

    @functools.cached_property
    def llm(self) -> LLM:
        return open_llm(self.config.llm, backend=self.engine.llm(self.config.llm) if self.engine else None)

    @functools.cached_property
    def embedder(self) -> Embedder:
        """Index-time embedder: the vector cache in front of the local model or the engine's actors."""
        model = self.engine.embedder(self.config.embedding) if self.engine else None
        return load_embedder(self.config.embedding, cached=True, model=model)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts`` for a stage, telling the build's bar as slices finish. On a cluster a
        slice is whole slices of :data:`EMBED_SLICE` enough to give every actor of the pool two
        batches: one of ``EMBED_SLICE`` texts fed two or three actors, however many GPUs there were."""
        slice_size = EMBED_SLICE
        if self.engine is not None:
            slice_size *= max(1, -(-self.engine.texts_in_flight() // EMBED_SLICE))
        return embed_texts(self.config, texts, self.progress, self.embedder, self.run.within, slice_size)

    @functools.cached_property
    def analyser(self) -> TextAnalyser:
        """Per-text tokens and sentences, cached beside the vector cache (on the engine's workers if any)."""
        if self.engine is None:
            return TextAnalyser(analysis_cache_path(self.config), analyse_texts, done=self.run.within)
        slice_size = max(ANALYSIS_SLICE, self.engine.task_slice(self.config.cluster.analysis_batch_size))
        return TextAnalyser(analysis_cache_path(self.config), self.engine.analyse, slice_size, self.run.within)

    def entity_names(self, texts: Sequence[str], phrases: bool = False) -> Sequence[Sequence[Sequence[str]]]:
        """spaCy's names of ``texts`` through the entity cache beside the vector cache: as Ray tasks on a
        cluster, else in ``cluster.ner_processes`` processes here."""
        compute: NameFinder
        slice_size = CACHE_SLICE
        if self.engine is not None:
            compute = functools.partial(self.engine.entity_names, phrases=phrases)
            slice_size = max(CACHE_SLICE, self.engine.task_slice(self.config.cluster.ner_batch_size))
        else:
            wanted = self.config.cluster.ner_processes

            def compute(batch: Sequence[str]) -> list[list[tuple[str, str]]]:
                return entity_names(batch, phrases, processes=ner_processes(wanted, len(batch)))

        cache = analysis_cache_path(self.config, "entities.sqlite")
        return cached_entity_names(texts, cache, phrases, compute, slice_size, self.run.within)
