"""The Ray engine: the model work of an index build on a Ray cluster (``cluster.engine = "ray"``).

Four parts of a build cost model time or scale with the corpus text, and each runs on the cluster
here: documents are tokenised and sentence-split, and spaCy finds the named entities of sentences
and units, in Ray Data CPU tasks; texts are embedded by a pool
of actors (one GPU and fp16 per actor on GPU nodes) that lives across embedding stages, so a model
loads once per actor for a run of stages instead of once per stage; LLM extraction goes through
``ray.data.llm`` — its HTTP request processor spread over one or several OpenAI-compatible
endpoints (``vllm serve`` replicas), or its vLLM engine processor on GPU nodes.

Everything else is the embedded engine's: the engine only replaces *where* vectors and completions
are computed. They reach the same content-addressed caches (vectors by (model, text), completions
by request) as each batch or row arrives, through the same wrappers, so a re-run or a resumed run
pays for nothing twice, and the graph stages and the index store run here as they always do. The
index equals the embedded engine's (tests/index/test_cluster.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from hopgraph import ner
from hopgraph.config import EmbeddingConfig, HopgraphConfig, LLMConfig
from hopgraph.config.base import llm_address
from hopgraph.errors import ConfigError, DependencyError
from hopgraph.index.chunking import TextAnalysis, analyse_texts
from hopgraph.llm.client import chat_body, completion_from_json
from hopgraph.llm.types import ChatRequest, Completion, Done
from hopgraph.llm.vllm_engine import engine_arguments
from hopgraph.models import model_batches

# Restarts of one embedding actor (and retries of its batch) before the build fails: enough for lost
# nodes and killed workers, few enough that an actor that crashes every time ends the build.
ACTOR_RESTARTS = 8
LIGHT_CPU = 0.05  # CPUs reserved by a worker that mostly waits (HTTP requests, reshaping rows)
MISSING_RAY = (
    "--engine ray needs Ray on this node and on every node of the cluster: pip install 'hopgraph[cluster]' "
    "(ray[data] and aiohttp)"
)


def model_key(config: EmbeddingConfig) -> str:
    """One string per embedding configuration (what an actor pool or embedder is kept for)."""
    return json.dumps(config.model_dump(), sort_keys=True)


def import_ray() -> Any:
    """The ``ray`` module with Ray Data and ``ray.data.llm``, or a DependencyError naming the extra."""
    try:
        import ray  # noqa: PLC0415
        import ray.data  # noqa: PLC0415, F401
        import ray.data.llm  # noqa: PLC0415, F401
    except ImportError:
        raise DependencyError(MISSING_RAY) from None
    return ray


class RayEngine:
    """A connection to a Ray cluster (started here when no address is given) and the workers on it.

    ``costs()`` tells how much worker time the model work took since it was last asked, GPU-seconds
    included, so each stage records its own.
    """

    def __init__(self, config: HopgraphConfig):
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never report usage anywhere
        self.ray = ray = import_ray()
        self.config = config
        cluster = config.cluster
        self.started_here = False
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.ERROR,
            }
            if cluster.address:
                ray.init(address=cluster.address, **options)
            else:
                ray.init(
                    address="local",  # a new instance, even where another one runs on this node
                    num_cpus=cluster.num_cpus,
                    num_gpus=cluster.num_gpus,
                    object_store_memory=cluster.object_store_mb * 1024**2 or None,
                    **options,
                )
            self.started_here = True
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # no lines per dataset execution or progress bar
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # one tqdm bar per step here instead of Ray's per operator
        context.print_on_execution_start = False
        self._costs = {"worker_seconds": 0.0, "gpu_seconds": 0.0}
        self._embedders: dict[str, RayEmbedder] = {}
        # The embedding actors of one model (its config's key): those not known to have started (by
        # their dimension request), and those that did (-> the dimension); each holds pool_gpus GPUs.
        self._pool_key = ""
        self._starting: dict[Any, Any] = {}
        self._ready: dict[Any, int] = {}
        self._pool_size = 0
        self.pool_gpus = 0.0

    def close(self) -> None:
        try:
            self.release_actors()
        finally:
            if self.started_here:
                self.ray.shutdown()
                self.started_here = False

    def add_costs(self, worker_seconds: float, gpu_seconds: float) -> None:
        self._costs["worker_seconds"] += worker_seconds
        self._costs["gpu_seconds"] += gpu_seconds

    def costs(self) -> dict[str, float]:
        """Worker and GPU seconds spent since the last call (rounded), then reset."""
        out = {key: round(value, 3) for key, value in self._costs.items() if value}
        self._costs = dict.fromkeys(self._costs, 0.0)
        return out

    def embedding_actors(self) -> tuple[int, float]:
        """(actors, GPUs per actor): the configured values, or what the cluster holds where they are empty."""
        cluster, resources = self.config.cluster, self.ray.cluster_resources()
        gpus = cluster.gpus_per_actor
        if gpus is None:
            gpus = 1.0 if resources.get("GPU", 0) >= 1 and self.config.embedding.device != "cpu" else 0.0
        actors = cluster.embed_actors
        if actors is None:
            slots = resources.get("GPU", 0) / gpus if gpus else resources.get("CPU", 1) / cluster.cpus_per_actor
            actors = max(1, int(slots))
        return actors, gpus

    def _start_pool(self, config: EmbeddingConfig) -> None:
        """Make the pool ``config``'s model's: embedding actors, kept for the following embedding
        stages, as many as the work asks for (:meth:`ready_actors`) up to the configured count.
        Loading the model per stage cost seconds on CPU (~7 s of a 100-text stage on the 2-core test
        cluster) and tens of seconds for large models on GPUs; starting every actor for an update of
        a few texts would load it on every GPU of the cluster for one batch.

        They hold their CPUs or GPUs while they live, so any other work on the cluster (document
        analysis, LLM calls) releases them first (:meth:`release_actors`), as does closing the engine.
        A killed actor is restarted and its batch run again (Ray's actor restarts and task retries).
        Actors the cluster cannot place yet (its resources taken by another job) get no batch until
        they start (:meth:`ready_actors`): a stage runs on those that did.
        """
        self.release_actors()
        self._pool_size, self.pool_gpus = self.embedding_actors()
        self._pool_key = model_key(config)

    def _grow_pool(self, config: EmbeddingConfig, wanted: int) -> None:
        """Start actors until the pool has ``wanted`` (at most its configured size)."""
        cpus = self.config.cluster.cpus_per_actor
        remote = self.ray.remote(_EmbedActor).options(
            num_cpus=cpus, num_gpus=self.pool_gpus, max_restarts=ACTOR_RESTARTS, max_task_retries=ACTOR_RESTARTS
        )
        while len(self._starting) + len(self._ready) < min(wanted, self._pool_size):
            actor = remote.remote(config.model_dump(), self.pool_gpus, math.ceil(cpus))
            self._starting[actor.dimension.remote()] = actor

    def ready_actors(self, config: EmbeddingConfig, *, wait: bool, wanted: int = 1) -> dict[Any, int]:
        """The pool's actors that have loaded their model (-> its dimension): those started by now,
        or with ``wait`` at least one (waiting for the first to start). The pool becomes
        ``config``'s model's where another model's (or none) runs, and grows to ``wanted`` actors
        (the work at hand: a small update needs one)."""
        if self._pool_key != model_key(config):
            self._start_pool(config)
        self._grow_pool(config, wanted)
        while self._starting:
            started, _ = self.ray.wait(list(self._starting), num_returns=1, timeout=None if wait else 0)
            if not started:
                break
            for ref in started:
                self._ready[self._starting.pop(ref)] = int(self.ray.get(ref))
            wait = False
        return self._ready

    def release_actors(self) -> None:
        """End the embedding actors, giving their CPUs and GPUs back to the cluster."""
        pool = [*self._starting.values(), *self._ready]
        self._pool_key, self._starting, self._ready = "", {}, {}
        for actor in pool:
            with contextlib.suppress(Exception):  # a lost connection must not hide why the build stopped
                self.ray.kill(actor)

    # ------------------------------------------------------------------ per-text CPU work
    def map_texts(self, texts: Sequence[str], task: Any, batch: int, **options: Any) -> list[Any]:
        """``task(texts, **options)`` (one JSON-able value per text) as Ray Data CPU tasks over batches of
        ``texts``; the values in the order of ``texts``."""
        if not texts:
            return []
        # The tasks need CPUs: embedding actors that hold half the cluster's or more are ended (they load
        # their model again for the next embedding); GPU actors, holding one CPU each, mostly stay.
        if self.ray.available_resources().get("CPU", 0) < max(1.0, self.ray.cluster_resources().get("CPU", 0) / 2):
            self.release_actors()
        rows = [{"position": i, "text": text} for i, text in enumerate(texts)]
        dataset = self.ray.data.from_items(rows, override_num_blocks=max(1, math.ceil(len(rows) / batch)))
        kwargs = {"task": task, "options": options}
        done = dataset.map_batches(_text_task, fn_kwargs=kwargs, batch_size=batch, batch_format="pandas", num_cpus=1)
        out: list[Any] = [None] * len(texts)
        for frame in done.iter_batches(batch_size=None, batch_format="pandas"):
            for position, value in zip(frame["position"], frame["value"]):
                out[int(position)] = json.loads(value)
            self.add_costs(float(frame["seconds"].sum()), 0.0)
        return out

    def analyse(self, texts: Sequence[str], encoding: str) -> list[TextAnalysis]:
        """:func:`hopgraph.index.chunking.analyse_texts` as Ray tasks over batches of documents."""
        found = self.map_texts(texts, _analysis_values, self.config.cluster.analysis_batch_size, encoding=encoding)
        return [TextAnalysis(offsets, [tuple(s) for s in spans]) for offsets, spans in found]

    def entity_names(self, texts: Sequence[str], phrases: bool = False) -> list[list[tuple[str, str]]]:
        """:func:`hopgraph.ner.entity_names` as Ray tasks over batches of texts (spaCy loads once per worker);
        fewer than ``ner.PARALLEL_FROM`` texts (an update's) are read here, where the model is at hand."""
        if len(texts) < ner.PARALLEL_FROM:
            return ner.entity_names(texts, phrases)
        found = self.map_texts(texts, ner.entity_names, self.config.cluster.ner_batch_size, phrases=phrases)
        return [[(name, label) for name, label in names] for names in found]

    # ------------------------------------------------------------------ embeddings
    def embedder(self, config: EmbeddingConfig) -> RayEmbedder:
        key = model_key(config)
        if key not in self._embedders:  # one dimension probe per model, not per stage
            self._embedders[key] = RayEmbedder(self, config)
        return self._embedders[key]

    # ------------------------------------------------------------------ LLM
    def llm(self, config: LLMConfig) -> Any:
        """The LLM on the cluster; its calls release the embedding actors first (their CPUs and GPUs)."""
        return RayVllm(self, config) if config.backend == "vllm" else RayHttpLLM(self, config)


def _text_task(frame: Any, task: Any, options: dict[str, Any]) -> Any:
    """Ray Data task: ``task``'s value per text of a batch, as JSON (one string column keeps Arrow simple),
    and the task's seconds spread over its rows (the stage's worker time)."""
    started = time.perf_counter()
    values = task(list(frame["text"]), **options)
    frame = frame[["position"]].copy()
    frame["value"] = [json.dumps(v) for v in values]
    frame["seconds"] = (time.perf_counter() - started) / max(1, len(frame))
    return frame


def _analysis_values(texts: list[str], encoding: str) -> list[Any]:
    return [[a.offsets, a.spans] for a in analyse_texts(texts, encoding)]


class _EmbedActor:
    """Ray actor: loads the model once, then embeds batch after batch (reporting its time)."""

    def __init__(self, embedding: dict[str, Any], gpus: float, threads: int):
        import torch  # noqa: PLC0415

        from hopgraph.models import load_model  # noqa: PLC0415

        if gpus == 0:
            torch.set_num_threads(max(1, threads))
        config = EmbeddingConfig.model_validate({**embedding, "device": "cuda" if gpus > 0 else "cpu", "cache": ""})
        self.model = load_model(config)

    def dimension(self) -> int:
        return int(self.model.dim)

    def embed(self, texts: list[str]) -> tuple[np.ndarray, float]:
        started = time.perf_counter()
        vectors = np.asarray(self.model.encode(texts), np.float32)
        return vectors, time.perf_counter() - started


class RayEmbedder:
    """Embeds on the engine's actor pool; what :func:`hopgraph.models.load_embedder` wraps as ``model``.

    Only texts missing from the vector cache get here (the cache wrapper asks), and vectors come
    back batch by batch (:meth:`encode_batches`), so each batch is cached on arrival.
    """

    def __init__(self, engine: RayEngine, config: EmbeddingConfig):
        from hopgraph.models import EMBEDDING_BACKENDS  # noqa: PLC0415

        if config.backend not in EMBEDDING_BACKENDS:
            raise ConfigError(f"embedding.backend {config.backend!r} is not registered")
        self.engine, self.config = engine, config
        self.name = config.model
        self.dim = next(iter(engine.ready_actors(config, wait=True).values()))

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for positions, vectors in self.encode_batches(texts, progress=progress):
            out[positions] = vectors
        return out

    def encode_batches(
        self, texts: Sequence[str], *, progress: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions in ``texts``, their vectors) per batch, in the order batches finish.

        A batch sent to an actor is one or more whole batches of :func:`hopgraph.models.model_batches`
        (up to ``cluster.embed_batch_size`` texts, at least one model batch, never more than one
        slice), which the actor's model computes as they are, so every vector is bitwise the one
        the embedded engine computes on the same hardware with as many threads. Each
        actor has two batches in flight (one embedding, one waiting), so none idles between them.
        """
        if not texts:
            return
        ray, size = self.engine.ray, self.engine.config.cluster.embed_batch_size
        batches = actor_batches(texts, self.config.batch_size, size)
        waiting = iter(batches)
        wanted = math.ceil(len(batches) / 2)  # two batches per actor: more would get none
        running: dict[Any, tuple[Any, np.ndarray]] = {}  # result ref -> (actor, positions)
        fed: set[Any] = set()  # actors given their first batches

        def submit(actor: Any) -> None:
            positions = next(waiting, None)
            if positions is not None:
                running[actor.embed.remote([texts[i] for i in positions])] = (actor, positions)

        def feed_started(wait: bool) -> None:
            for actor in self.engine.ready_actors(self.config, wait=wait, wanted=wanted):
                if actor not in fed:
                    fed.add(actor)
                    submit(actor)
                    submit(actor)

        feed_started(wait=True)
        try:
            with tqdm(total=len(texts), desc="embed (ray)", unit="text", disable=not progress) as bar:
                while running:
                    [done], _ = ray.wait(list(running), num_returns=1)
                    actor, positions = running.pop(done)
                    vectors, seconds = ray.get(done)
                    submit(actor)
                    feed_started(wait=False)  # actors that started meanwhile take batches too
                    self.engine.add_costs(seconds, seconds * self.engine.pool_gpus)
                    bar.update(len(positions))
                    yield positions, vectors
        finally:
            for ref in running:  # a failed batch (or a consumer that stopped): the rest are not waited for
                ray.cancel(ref)


def actor_batches(texts: Sequence[str], batch_size: int, size: int) -> list[np.ndarray]:
    """Positions of the batches sent to embedding actors: consecutive whole batches of
    :func:`hopgraph.models.model_batches` within one slice, up to ``size`` texts (at least one batch).
    Longest first within a slice, ties in order, so an actor's model cuts each into those same batches."""
    out: list[np.ndarray] = []
    for model_slice in model_batches(texts, batch_size):
        group: list[int] = []
        for batch in model_slice:
            if group and len(group) + len(batch) > size:
                out.append(np.array(group, dtype=np.int64))
                group = []
            group.extend(batch)
        out.append(np.array(group, dtype=np.int64))
    return out


class RayHttpLLM:
    """Chat requests through ``ray.data.llm``'s HTTP request processor, spread over the endpoints.

    Rows go round-robin to ``cluster.llm_endpoints`` (or ``llm.base_url``), one processor per
    endpoint with ``cluster.llm_workers_per_endpoint`` workers each; every completion is handed to
    ``on_done`` as its row arrives (the completion cache stores it then). A request the server
    refuses on its own (e.g. longer than the context) comes back as a refused completion.
    """

    def __init__(self, engine: RayEngine, config: LLMConfig):
        self.engine, self.config, self.name = engine, config, config.model
        cluster = engine.config.cluster
        if not cluster.llm_endpoints:  # the endpoints are checked with the settings; the stored address here
            llm_address(config.base_url)
        self.endpoints = cluster.llm_endpoints or [config.base_url]

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        if not requests:
            return []
        self.engine.release_actors()
        ray = self.engine.ray
        from ray.data.llm import HttpRequestProcessorConfig, build_processor  # noqa: PLC0415

        cluster = self.engine.config.cluster
        key = os.environ.get(self.config.api_key_env, "") if self.config.api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else None
        timeout = self.config.timeout
        outputs = []
        for e, endpoint in enumerate(self.endpoints):
            share = [i for i in range(len(requests)) if i % len(self.endpoints) == e]
            if not share:
                continue
            rows = [{"position": i, "body": json.dumps(chat_body(self.config, requests[i]))} for i in share]
            processor = build_processor(
                HttpRequestProcessorConfig(
                    url=endpoint.rstrip("/") + "/chat/completions",
                    headers=headers,
                    batch_size=cluster.llm_batch_size,
                    concurrency=cluster.llm_workers_per_endpoint,
                    max_retries=self.config.retries,
                    base_retry_wait_time_in_s=0.5,
                    session_factory=_SessionFactory(timeout),
                    http_request_stage={"num_cpus": LIGHT_CPU},
                ),
                preprocess=_to_payload,
                postprocess=_from_response,
                # Light steps: reserving a whole CPU each would starve a small cluster. One task at a
                # time each: at 0.05 CPU Ray Data would otherwise start a task (and a worker process,
                # ~1.3 CPU-seconds to start) per block at once; on 2 cores with two pinned replicas that
                # start-up took more CPU than the requests (measured: 13 worker processes, 17.7 s).
                preprocess_map_kwargs=_light_step(ray),
                postprocess_map_kwargs=_light_step(ray),
            )
            blocks = max(1, math.ceil(len(rows) / cluster.llm_batch_size))
            outputs.append(processor(ray.data.from_items(rows, override_num_blocks=blocks)))
        dataset = outputs[0] if len(outputs) == 1 else outputs[0].union(*outputs[1:])
        out: list[Completion | None] = [None] * len(requests)
        started = time.perf_counter()
        with tqdm(total=len(requests), desc=f"{desc} (ray)", unit="call", disable=not progress) as bar:
            for row in dataset.iter_rows():
                i = int(row["position"])
                completion = completion_from_json(self.config, json.loads(row["response"]), 0.0)
                completion.seconds = (time.perf_counter() - started) / (bar.n + 1)
                out[i] = completion
                if on_done:
                    on_done(i, completion)
                bar.update(1)
        self.engine.add_costs(time.perf_counter() - started, 0.0)
        return [c for c in out if c is not None]


def _light_step(ray: Any) -> dict[str, Any]:
    return {"num_cpus": LIGHT_CPU, "compute": ray.data.TaskPoolStrategy(size=1)}


class _SessionFactory:
    """aiohttp sessions with the configured per-request timeout (a picklable callable for Ray)."""

    def __init__(self, timeout: float):
        self.timeout = timeout

    def __call__(self) -> Any:
        import aiohttp  # noqa: PLC0415

        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))


def _to_payload(row: dict[str, Any]) -> dict[str, Any]:
    return {"position": row["position"], "payload": json.loads(row["body"])}


def _from_response(row: dict[str, Any]) -> dict[str, Any]:
    return {"position": row["position"], "response": json.dumps(row["http_response"], default=str)}


class RayVllm:
    """Chat requests through ``ray.data.llm``'s vLLM engine processor on the cluster's GPUs.

    ``cluster.vllm_replicas`` engines (data parallelism), each over ``llm.tensor_parallel_size``
    GPUs, with the in-process engine's settings (``llm.max_model_len``, ``gpu_memory_utilization``);
    a row that fails (e.g. longer than ``max_model_len``) comes back refused instead of failing
    the batch.
    """

    def __init__(self, engine: RayEngine, config: LLMConfig):
        self.engine, self.config, self.name = engine, config, config.model
        if not os.path.isdir(config.model):
            raise ConfigError(
                f"llm.model {config.model!r}: with llm.backend=vllm it must be a local model folder (never downloaded)"
            )

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        if not requests:
            return []
        self.engine.release_actors()
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig  # noqa: PLC0415

        cluster = self.engine.config.cluster
        engine_kwargs = {k: v for k, v in engine_arguments(self.config).items() if k != "model"}
        processor = build_processor(
            vLLMEngineProcessorConfig(
                model_source=self.config.model,
                engine_kwargs=engine_kwargs,
                concurrency=cluster.vllm_replicas,
                batch_size=cluster.llm_batch_size,
                accelerator_type=cluster.vllm_accelerator or None,
                should_continue_on_error=True,
            ),
            preprocess=_VllmRow(self.config.structured),
            postprocess=_from_generation,
        )
        rows = [{"position": i, "request": json.dumps(_request_fields(r))} for i, r in enumerate(requests)]
        out: list[Completion | None] = [None] * len(requests)
        started = time.perf_counter()
        with tqdm(total=len(requests), desc=f"{desc} (vllm on ray)", unit="call", disable=not progress) as bar:
            for row in processor(self.engine.ray.data.from_items(rows)).iter_rows():
                i = int(row["position"])
                completion = Completion(
                    text=row["text"] or "",
                    prompt_tokens=int(row["prompt_tokens"] or 0),
                    completion_tokens=int(row["completion_tokens"] or 0),
                    seconds=(time.perf_counter() - started) / (bar.n + 1),
                    refused=row["error"] or "",
                )
                out[i] = completion
                if on_done:
                    on_done(i, completion)
                bar.update(1)
        wall = time.perf_counter() - started
        gpus = cluster.vllm_replicas * self.config.tensor_parallel_size
        self.engine.add_costs(wall * gpus, wall * gpus)
        return [c for c in out if c is not None]


def _request_fields(request: ChatRequest) -> dict[str, Any]:
    return {
        "messages": [{"role": role, "content": content} for role, content in request.messages],
        "schema": request.schema,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "seed": request.attempt,
    }


class _VllmRow:
    """A request as the vLLM engine processor wants it (sampling parameters per row)."""

    def __init__(self, structured: bool):
        self.structured = structured

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        request = json.loads(row["request"])
        sampling: dict[str, Any] = {
            "max_tokens": request["max_tokens"],
            "temperature": request["temperature"],
            "seed": request["seed"],
        }
        if request["schema"] is not None and self.structured:
            sampling["structured_outputs"] = {"json": request["schema"]}
        return {"position": row["position"], "messages": request["messages"], "sampling_params": sampling}


def _from_generation(row: dict[str, Any]) -> dict[str, Any]:
    error = row.get("__inference_error__") or ""
    return {
        "position": row["position"],
        "text": row.get("generated_text") or "",
        "prompt_tokens": int(row.get("num_input_tokens") or 0),
        "completion_tokens": int(row.get("num_generated_tokens") or 0),
        "error": str(error)[:300] if error else "",
    }
