"""Settings of the query server (`hopgraph serve`), including the bounds on what one request may ask."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from hopgraph.config.base import CommaList, Section


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
    ppr_seed_entities: int = Field(
        100, ge=1, le=10_000, description="Largest retrieval.ppr.seed_entities a request may give."
    )
    ppr_bridge_entities: int = Field(
        50, ge=0, le=1000, description="Largest retrieval.ppr.bridge_entities a request may give."
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
    max_question_body_bytes: int = Field(
        3_000_000,
        ge=1024,
        description="Largest body of /v1/retrieve, /v1/answer and /v1/chat/completions (a question, its settings and "
        "at most 400,000 characters of conversation); larger ones get 413 before they are parsed.",
    )
    max_query_chars: int = Field(2000, ge=1, le=100_000, description="Longest question accepted.")
    max_budget: int = Field(32000, ge=50, le=1_000_000, description="Largest context budget λ a request may ask for.")
    max_documents: int = Field(1000, ge=1, description="Most documents in one insert request.")
    request_read_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a whole request (headers and body) once the server waits for it, "
        "and to start reading a response again once it stopped; a slower one is disconnected (slow clients hold "
        "connections: slowloris).",
    )
    max_connections: int = Field(
        500,
        ge=1,
        le=100_000,
        description="Open connections one server process keeps; more are closed at once (keep it under the "
        "process's file limit, `ulimit -n`).",
    )
    max_connections_per_client: int = Field(
        100,
        ge=1,
        le=100_000,
        description="Open connections one server process keeps from one client address; more are closed at once "
        "(behind a proxy every client is the proxy's address: set it to max_connections there).",
    )
    forwarded_allow_ips: CommaList = Field(
        [],
        description="Addresses (or networks, e.g. 10.0.0.0/24) of reverse proxies whose X-Forwarded-For header "
        "names the client; empty = the header is ignored, as it is from anyone else (a client that could set it "
        "would pick the address its unknown-token rate limit and log line count). Comma-separated on the command "
        "line. Behind a proxy: its address.",
    )
    upload_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Seconds an upload's files may take to read (in a child process, so a slow file never holds the "
        "server); a slower upload is refused with 422.",
    )
    upload_memory_mb: int = Field(
        1024,
        ge=0,
        le=1_048_576,  # 1 TiB: a limit past what setrlimit takes failed every upload
        description="MiB of memory the child process reading an upload may allocate (its data segment, RLIMIT_DATA; "
        "a 9 MB JSONL of 300,000 one-letter records needs 129-192); a file needing more is refused with 422, so no "
        "file can take the machine's memory. 0 = no limit; else at least 64 plus 4 per MB of max_body_bytes (the "
        "upload itself is held three to four times over before it is read).",
    )
    max_uploads: int = Field(
        2,
        ge=1,
        le=64,
        description="Uploads read at once (each in a child process for up to upload_seconds); more get 503 with "
        "Retry-After, so uploads never take the threads that retrieval and /healthz need.",
    )
    rate_limit: float = Field(
        20.0, ge=0, description="Sustained requests per second per token (0 = no limit); bursts up to rate_burst."
    )
    rate_burst: int = Field(40, ge=1, description="Requests a token may send at once before the rate limit applies.")
    answer_timeout: float = Field(
        60.0,
        gt=0,
        le=100_000_000,  # the answer LLM's request timeout too: past ~9e9 s every answer was a 500
        description="Seconds an answer may take, whole (/v1/answer, /v1/chat/completions) or "
        "streamed, once it has an answer slot; a whole answer is then 503, a stream ends with an llm_unavailable "
        "error event (retrieval is unaffected).",
    )
    job_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="Unix nice increment of the update worker: a running insert/delete job gets a smaller CPU "
        "share than readers (0 = equal).",
    )
    worker_linger: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="Seconds the update worker stays alive after its last build, looking for more jobs every "
        "refresh_seconds: a job submitted meanwhile skips the process start and model loading (most of a small "
        "insert's CPU time). 0 = a fresh worker per batch.",
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
    answer_slots_per_user: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Answer slots one user may hold at once; more of their answers wait (429 after answer_timeout). "
        "Empty = half of answer_concurrency, at least 1, so no one reader keeps every slot busy. A front end that "
        "asks for many people with one token (Open WebUI) may need answer_concurrency.",
    )
    max_queued_jobs: int = Field(
        8,
        ge=1,
        le=10_000,
        description="Update jobs queued or running at most; a submit beyond it gets 429 with Retry-After.",
    )
    job_seconds: float = Field(
        0.0,
        ge=0,
        le=100_000_000,  # ~3 years: a wait past ~9e9 s fails in the thread layer (OverflowError)
        description="Longest one build of update jobs may run, in seconds (0: no limit); a build "
        "past it fails its jobs (those of a batch then run alone, each within the limit), so one huge document "
        "cannot hold the queue. Builds with an LLM tier may take hours: set it from what yours take.",
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
    keep_jobs: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Finished update job records (done or failed) kept in INDEX/jobs; older ones are deleted after "
        "each job (a deleted job's status is then 404), so the queue, read on every look, stays small on a server "
        "that runs for months.",
    )
    max_filter_keys: int = Field(16, ge=1, le=1000, description="Most metadata keys in one request's `where` filter.")
    max_filter_values: int = Field(
        256,
        ge=1,
        le=5_000,
        description="Most allowed values, summed over keys, in one request's `where` filter (at most 5,000: a "
        "question body holds at most 10,000 JSON values in all).",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes on this machine sharing the port; each loads the index (vectors are "
        "memory-mapped, so their pages are shared) and follows the live version on its own.",
    )
    socket_per_worker: bool = Field(
        False,
        description="With workers > 1 on Linux: each process binds the port itself (SO_REUSEPORT) once it has "
        "loaded the index, so the kernel spreads new connections over the processes, and hopgraph supervises them "
        "(replaces one that ends or whose event loop is silent for 20 s; stops if one cannot start). false = "
        "uvicorn's supervisor: one socket that every process accepts from, where a burst of connections mostly "
        "goes to one process (README, Results: on 2 cores neither was clearly faster; spreading is for many cores).",
    )
    jobs: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Who runs update jobs: auto = the one process (of every worker and replica over this index "
        "directory) holding the lock INDEX/jobs/.leader, taken over when its holder dies; always / never for "
        "storage whose file locks do not work (give exactly one replica 'always', with workers = 1).",
    )
    refresh_seconds: float = Field(
        2.0,
        gt=0,
        le=600,
        description="Seconds between looks at INDEX/CURRENT (a version published elsewhere is served within this "
        "plus its load time), at the job queue (jobs submitted to another replica) and at the leader lock.",
    )
    replica_timeout: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="Seconds after which a replica whose heartbeat (INDEX/replicas/) stopped changing counts as "
        "gone: garbage collection no longer spares the versions it served (at least 3 x refresh_seconds).",
    )
    batch_wait_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="Milliseconds the query embedder waits, once a question arrives, for others to share its model "
        "call (dynamic batching; it stops early at batch_max); questions arriving during a call join the next one. "
        "An idle server adds at most this to a request.",
    )
    batch_max: int = Field(
        32, ge=1, le=1024, description="Most questions embedded in one model call (1 = no batching)."
    )
    batch_group: int = Field(
        8,
        ge=1,
        le=1024,
        description="Questions per forward pass within a batch, shortest first: a pass pads every question to its "
        "longest, so small groups of like length pad least.",
    )
    compute_threads: int = Field(
        1,
        ge=0,
        le=256,
        description="Threads of torch (the query embedder) and of numpy's BLAS per server process, set at start; "
        "0 = their default of one per core. Requests already run on threads of their own: keep 1, above all "
        "with several processes on few cores.",
    )
    request_log: str = Field(
        "",
        description="Where one JSON line per request goes (user, endpoint, status, latency, piece ids; never text "
        'or tokens): a file path, "-" for stderr, or "" for none. Written by a background thread.',
    )
    trace: bool = Field(
        False,
        description="Add to each retrieval's and answer's log line its trace: the seeds, and per piece used its "
        "graph path, chunk and documents (needs request_log).",
    )
    request_limits: RequestLimits = RequestLimits()

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        if len(value) > 256:
            raise ValueError("at most 256 proxy addresses")
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"not an IP address or network: {item!r}") from None
        return value

    @model_validator(mode="after")
    def _room_to_read_an_upload(self) -> ServeConfig:
        least = 64 + 4 * self.max_body_bytes // 2**20
        if 0 < self.upload_memory_mb < least:
            raise ValueError(
                f"upload_memory_mb {self.upload_memory_mb} leaves an upload no room to be read: 0 (no limit) or at "
                f"least {least} (64 plus 4 per MB of max_body_bytes {self.max_body_bytes:,})"
            )
        return self
