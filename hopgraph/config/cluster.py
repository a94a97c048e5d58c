"""How an index is built, not what it holds: the embedded engine (one process) or a Ray cluster.

Nothing here enters a stage's settings key: an index built on a cluster equals the one the
embedded engine builds from the same corpus and settings, so switching engines never invalidates
finished stages.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from hopgraph.config.base import CommaList, Section, web_address


class ClusterConfig(Section):
    engine: Literal["local", "ray"] = Field(
        "local",
        description="local: one process builds the index (the default); ray: documents are analysed, texts "
        "embedded and LLM calls made on a Ray cluster (the 'cluster' extra), the graph stages run here.",
    )
    address: str = Field(
        "",
        max_length=300,
        description="Ray cluster to join: empty = start a local Ray instance on this node's CPUs and GPUs; 'auto' = "
        "the cluster this node belongs to (`ray start`); 'ray://host:10001' = a remote cluster through Ray Client.",
    )
    num_cpus: int | None = Field(
        None, ge=1, le=4096, description="With a local Ray instance: CPUs it may use (empty = all of this node's)."
    )
    num_gpus: int | None = Field(
        None, ge=0, le=1024, description="With a local Ray instance: GPUs it may use (empty = all of this node's)."
    )
    object_store_mb: int = Field(
        0,
        ge=0,
        le=1_048_576,
        description="With a local Ray instance: object store size in MiB (0 = Ray's default, 30% of memory).",
    )
    embed_actors: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Most embedding actors; each loads the model once and embeds batch after batch, and a stage "
        "starts one per two batches it has, up to this. Empty = as many as the cluster holds: one per GPU with GPU "
        "actors, else one per cpus_per_actor CPUs.",
    )
    gpus_per_actor: float | None = Field(
        None,
        ge=0,
        le=8,
        description="GPUs per embedding actor (fp16 there; fractions share a GPU); 0 = CPU actors. Empty = 1 where "
        "the cluster has GPUs (and embedding.device is not cpu), else 0.",
    )
    cpus_per_actor: float = Field(
        1.0,
        gt=0,
        le=256,
        description="CPUs reserved per embedding actor; a CPU actor also uses this many threads (rounded up).",
    )
    embed_batch_size: int = Field(
        256,
        ge=1,
        le=65_536,
        description="Texts per batch sent to an embedding actor (vectors reach the cache batch by batch): whole "
        "batches of embedding.batch_size, at least one, within slices of 2,048 texts.",
    )
    analysis_batch_size: int = Field(
        500, ge=1, le=1_000_000, description="Documents per Ray task that tokenises and sentence-splits them."
    )
    ner_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="local engine: processes spaCy's NER runs in, each with its own model (0 = one per usable "
        "core, at most 8), from 1,000 texts on (fewer run in the build's own process). A setting of the machine, "
        "not of the index: an update may change it.",
    )
    ner_batch_size: int = Field(
        500, ge=1, le=1_000_000, description="Texts per Ray task that finds their named entities with spaCy."
    )
    llm_endpoints: CommaList = Field(
        [],  # pydantic copies a mutable default per instance
        description="OpenAI-compatible /v1 addresses of the LLM replicas (`vllm serve` on several nodes), requests "
        "spread evenly over them; empty = llm.base_url alone. Comma-separated on the command line. With "
        "llm.backend=vllm: unused.",
    )
    llm_workers_per_endpoint: int = Field(
        4, ge=1, le=1024, description="Requests in flight per LLM endpoint (Ray actors sending them)."
    )
    llm_batch_size: int = Field(4, ge=1, le=4096, description="Requests per batch handed to one LLM worker.")
    vllm_replicas: int = Field(
        1,
        ge=1,
        le=1024,
        description="With llm.backend=vllm: vLLM engine replicas (data parallelism), each on llm.tensor_parallel_size "
        "GPUs of its own.",
    )
    vllm_accelerator: str = Field(
        "",
        max_length=40,
        description="With llm.backend=vllm: Ray accelerator type the replicas need (e.g. H100); empty = any GPU.",
    )

    @field_validator("llm_endpoints")
    @classmethod
    def _http_urls(cls, value: list[str]) -> list[str]:
        if len(value) > 256:
            raise ValueError("at most 256 endpoints")
        for url in value:
            web_address(url)
        return value
