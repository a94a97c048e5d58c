"""Rerankers: score (query, passage) pairs for CUE-RAG's Q-Iter and final chunk rerank.

The paper uses the BGE-reranker-v2-m3 cross-encoder. Its weights are not on PyPI, so where no local
folder is configured the fallback is bi-encoder cosine with the index's embedding model, and its
name says so: results made with it must not be read as cross-encoder results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hopgraph.config import EmbeddingConfig, RerankConfig
from hopgraph.deadline import check_deadline
from hopgraph.errors import ConfigError, DependencyError
from hopgraph.models import Embedder, FairLock, embed_long_texts, load_embedder, resolve_device
from hopgraph.retrieve.loaded import LoadedIndex


class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One relevance score per text (higher = more relevant), float32."""

    def score_embedded(
        self, query: str, query_vector: np.ndarray, texts: Sequence[str], vectors: np.ndarray
    ) -> np.ndarray:
        """:meth:`score` for passages the index has already embedded (``vectors``, unit rows, one per
        text) and a query it has embedded (``query_vector``): a reranker that only compares
        embeddings reads them instead of encoding every passage again per query."""


class CrossEncoderReranker:
    """A BGE cross-encoder (FlagEmbedding ``FlagReranker``) from a local folder; fp16 on CUDA."""

    def __init__(self, config: RerankConfig, device: str = "auto"):
        folder = Path(config.model).expanduser()
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"rerank.model {config.model!r} is not a local model folder (no config.json; models are never "
                "downloaded)"
            )
        try:
            from FlagEmbedding import FlagReranker  # noqa: PLC0415
        except ImportError:
            raise DependencyError(
                "rerank.model is a cross-encoder folder and needs FlagEmbedding: pip install 'hopgraph[bge]'"
            ) from None
        device = resolve_device(device)
        self.model = FlagReranker(str(folder), use_fp16=device == "cuda", devices=device, batch_size=config.batch_size)
        self.batch_size = config.batch_size
        self.name = f"cross-encoder {folder.name}"
        self.tokenizer = self.model.tokenizer
        self.limit = model_length_limit(self.tokenizer, getattr(getattr(self.model, "model", None), "config", None))
        self._lock = FairLock()  # the model and its fast tokenizer are not safe to call from two threads

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        def one_batch(batch: Sequence[str]) -> np.ndarray:
            with self._lock:
                length = pair_max_length(pair_lengths(self.tokenizer, query, batch), self.limit)
                scores = self.model.compute_score(
                    [[query, t] for t in batch], batch_size=self.batch_size, max_length=length, normalize=True
                )
            return np.atleast_1d(np.asarray(scores, dtype=np.float32))

        return in_batches(texts, self.batch_size, one_batch)

    def score_embedded(
        self, query: str, query_vector: np.ndarray, texts: Sequence[str], vectors: np.ndarray
    ) -> np.ndarray:
        """A cross-encoder reads query and passage together; stored vectors do not help it."""
        return self.score(query, texts)


# Fallback limit of a cross-encoder whose tokenizer and config record none (BERT-sized models).
DEFAULT_LENGTH_LIMIT = 512


def model_length_limit(tokenizer: Any, model_config: Any = None) -> int:
    """The longest input a cross-encoder reads, in its tokens (bge-reranker-v2-m3: 8192).

    The tokenizer's ``model_max_length`` when it records one (tokenizers without one hold a huge
    sentinel), else the position table of the model config (XLM-R and RoBERTa reserve two).
    """
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < 1_000_000:
        return declared
    positions = getattr(model_config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        return positions - 2 if getattr(model_config, "model_type", "") in ("xlm-roberta", "roberta") else positions
    return DEFAULT_LENGTH_LIMIT


def pair_lengths(tokenizer: Any, query: str, texts: Sequence[str]) -> list[int]:
    """Tokens of each (query, text) pair as the cross-encoder reads it, special tokens included."""
    if not texts:
        return []
    encoded = tokenizer([query] * len(texts), list(texts), add_special_tokens=True, truncation=False)
    return [len(ids) for ids in encoded["input_ids"]]


def pair_max_length(lengths: Sequence[int], limit: int, multiple: int = 8) -> int:
    """The max length for one batch: its longest pair, rounded up to ``multiple`` (padding the GPU
    likes), never above the model's ``limit``. A fixed 512 cut long pieces mid-text and padded short
    ones; this reads every piece whole whenever the model can."""
    longest = max(lengths, default=1)
    return max(1, min(limit, -(-longest // multiple) * multiple))


def in_batches(texts: Sequence[str], size: int, score: Callable[[Sequence[str]], np.ndarray]) -> np.ndarray:
    """``score`` over batches of ``size`` texts, checking the request deadline before each: a long
    rerank stops within one batch of its deadline, and a shared model is held one batch at a time."""
    parts = []
    for start in range(0, len(texts), size):
        check_deadline()
        parts.append(score(texts[start : start + size]))
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, dtype=np.float32)


class BiEncoderReranker:
    """Cosine between query and passage embeddings: no query–passage interaction, so weaker than a
    cross-encoder. Long passages are embedded as averaged windows, as at indexing time."""

    def __init__(
        self, embedder: Embedder, config: EmbeddingConfig, encoding: str = "cl100k_base", batch_size: int = 32
    ):
        self.embedder = embedder
        self.window_tokens = config.effective_window_tokens
        self.encoding = encoding
        self.batch_size = batch_size  # rerank.batch_size: passages per model call (and per deadline check)
        self.name = f"bi-encoder cosine ({config.model})"

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        q = self.embedder.encode_queries([query])[0]

        def one_batch(batch: Sequence[str]) -> np.ndarray:
            return (
                embed_long_texts(self.embedder, list(batch), window_tokens=self.window_tokens, encoding=self.encoding)
                @ q
            )

        return in_batches(texts, self.batch_size, one_batch)

    def score_embedded(
        self, query: str, query_vector: np.ndarray, texts: Sequence[str], vectors: np.ndarray
    ) -> np.ndarray:
        """The same cosine from the index's vectors: they come from this embedder, with long texts
        averaged over windows as :meth:`score` does, so only the per-query encoding is saved."""
        check_deadline()
        if len(vectors) != len(texts):
            raise ValueError(f"{len(vectors)} stored vectors for {len(texts)} passages")
        return np.asarray(vectors @ query_vector, dtype=np.float32).reshape(len(texts))


def make_reranker(rerank: RerankConfig, embedding: EmbeddingConfig, encoding: str = "cl100k_base") -> Reranker:
    """The cross-encoder when ``rerank.model`` names a folder, else the labelled bi-encoder fallback."""
    if rerank.model:
        return CrossEncoderReranker(rerank, embedding.device)
    return BiEncoderReranker(load_embedder(embedding), embedding, encoding, rerank.batch_size)


def reranker_for(index: LoadedIndex, rerank: RerankConfig | None = None, device: str | None = None) -> Reranker:
    """The reranker of ``rerank`` settings (the index's own where None), on ``device`` (the index's
    embedding device where None). Shared by every index with the same settings (the partitions of
    an isolated index, the versions a server publishes), so a cross-encoder is loaded once per
    process, not once per index; it holds no index, so a dropped index is still collected."""
    config = index.config
    embedding = config.embedding if device is None else config.embedding.model_copy(update={"device": device})
    return _shared_reranker(
        (rerank or config.rerank).model_dump_json(), embedding.model_dump_json(), config.chunking.encoding
    )


@functools.lru_cache(maxsize=4)
def _shared_reranker(rerank: str, embedding: str, encoding: str) -> Reranker:
    return make_reranker(
        RerankConfig.model_validate_json(rerank), EmbeddingConfig.model_validate_json(embedding), encoding
    )
