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
import functools
import json
import logging
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from hopgraph import errors as hopgraph_errors
from hopgraph import ner
from hopgraph.config import EmbeddingConfig, HopgraphConfig, LLMConfig
from hopgraph.errors import ClusterError, ConfigError, DependencyError, HopgraphError, cut
from hopgraph.index.chunking import TextAnalysis, analyse_texts
from hopgraph.models import model_batches

# Restarts of one embedding actor (and retries of its batch) before the build fails: enough for lost
# nodes and killed workers, few enough that an actor that crashes every time ends the build.
ACTOR_RESTARTS = 8
ACTOR_START_SECONDS = 600.0  # waited for the first embedding actor of a stage (a model loads in seconds to minutes)
CONNECT_SECONDS = 5.0  # for a cluster address to answer at all
WATCH_SECONDS = 2.0  # how often a build looks that the cluster's GCS still answers
LOST_SECONDS = 10.0  # a GCS silent this long is taken for lost (Ray itself waits 60 s, then ends the process)
MISSING_RAY = (
    "--engine ray needs Ray on this node and on every node of the cluster: pip install 'hopgraph[cluster]' "
    "(ray[data,client] and aiohttp)"
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


def _first_line(exc: BaseException) -> str:
    """The reason a Ray error carries, in one line: the last "SomeError: message" line of the
    remote traceback it holds (the hopgraph error a worker raised), else its first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception): ", line)]
    raised = [line for line in raised if not line.startswith("ray.")] or raised  # the cause under Ray's wrappers
    line = raised[-1] if raised else (lines[0] if lines else type(exc).__name__)
    return cut(re.sub(r"^hopgraph\.errors\.\w+: ", "", line), 300)


def lost_seconds() -> float:
    """How long the GCS may be silent before a build takes the cluster for lost: LOST_SECONDS, or where
    Ray is told to wait longer for its GCS to come back (a cluster with GCS fault tolerance), 5 s less
    than Ray waits, so the build still ends with this line and not Ray's."""
    configured = os.environ.get("RAY_gcs_rpc_server_reconnect_timeout_s", "")
    try:
        return max(LOST_SECONDS, float(configured) - 5.0) if configured else LOST_SECONDS
    except ValueError:
        return LOST_SECONDS


def _listening(address: str) -> None:
    """ConfigError at once where nothing listens at a HOST:PORT address: Ray's own connection
    attempts went on for 14 minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray reports on itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address!r} ({exc.strerror or exc}); start it (`ray start --head`) "
            "or fix cluster.address"
        ) from None


def _check_window(embedding: EmbeddingConfig) -> None:
    """ConfigError, before any stage, where this machine (the driver) cannot tell the embedding window:
    without ``embedding.window_tokens`` it reads the model folder's limit, and the folder may be on
    the GPU nodes alone. The embedding stage failed with a traceback, after the stages before it."""
    if embedding.effective_window_tokens is not None:
        return
    folder = Path(embedding.model).expanduser()
    why = "declares no input limit" if folder.is_dir() else "is not on this machine (the driver)"
    raise ConfigError(
        f"embedding.window_tokens: the model folder {str(folder)!r} {why}, and the driver reads the model's input "
        "limit from it (its .json files); copy them here or give --embedding.window_tokens: 3/4 of the model's "
        "input limit in cl100k tokens (MiniLM 192, BGE-M3 6144)"
    )


class RayEngine:
    """A connection to a Ray cluster (started here when no address is given) and the workers on it.

    ``costs()`` tells how much worker time the model work took since it was last asked, GPU-seconds
    included, so each stage records its own.
    """

    def __init__(self, config: HopgraphConfig):
        _check_window(config.embedding)
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
            try:
                if cluster.address:
                    _listening(cluster.address)
                    ray.init(address=cluster.address, **options)
                else:
                    ray.init(
                        address="local",  # a new instance, even where another one runs on this node
                        num_cpus=cluster.num_cpus,
                        num_gpus=cluster.num_gpus,
                        object_store_memory=cluster.object_store_mb * 1024**2 or None,
                        **options,
                    )
            except HopgraphError:
                raise
            except Exception as exc:  # Ray's own: no instance at "auto", a refused token, a bad setting
                where = f"the Ray cluster at {cluster.address!r}" if cluster.address else "a local Ray instance"
                raise ConfigError(f"cannot start or join {where}: {_first_line(exc)}") from None
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
        self.stage = "(before the first)"  # the build stage under way (set by the pipeline), for messages
        self._closed = threading.Event()
        if not cluster.address.startswith("ray://"):  # Ray Client reconnects on its own, to an address of its own
            gcs = ray.get_runtime_context().gcs_address
            threading.Thread(target=self._watch, args=(gcs,), name="hopgraph-ray-watch", daemon=True).start()

    def failure(self, exc: BaseException) -> HopgraphError | None:
        """One line for a Ray error that ended the stage under way, None for any other error. A task
        whose own code raised is that error (hopgraph's own rebuilt from the remote traceback, which
        is all Ray Data sends of it: the cluster is fine, and running again would fail alike); a
        lost node, actor or cluster says that nothing finished is lost."""
        errors = self.ray.exceptions
        if not isinstance(exc, errors.RayError):
            return None
        if isinstance(exc, errors.RayTaskError):
            named = re.findall(r"^\s*hopgraph\.errors\.(\w+): (.+)$", str(exc), re.MULTILINE)
            kind = getattr(hopgraph_errors, named[-1][0], None) if named else None
            if isinstance(kind, type) and issubclass(kind, HopgraphError):
                return kind(named[-1][1])
            return ClusterError(f"stage {self.stage} failed on the Ray cluster: {_first_line(exc)}")
        return ClusterError(self._failed(_first_line(exc)))

    def _failed(self, reason: str) -> str:
        where = f"the Ray cluster at {self.config.cluster.address!r}" if self.config.cluster.address else "Ray"
        return (
            f"{where} failed in stage {self.stage}: {reason}. Finished stages and the model work cached are kept: "
            "run the same command again once the cluster is back"
        )

    def _watch(self, gcs: str) -> None:
        """Ends this process with one line once the cluster's GCS has not answered for LOST_SECONDS.
        Ray itself ends the process a minute after losing its GCS, with its own log line and status 1,
        wherever the build was; every write of a build is atomic, so ending it is as safe as a kill."""
        host, _, port = gcs.rpartition(":")
        host = host.strip("[]")  # an IPv6 address
        silent_since: float | None = None
        while not self._closed.wait(WATCH_SECONDS):
            try:
                socket.create_connection((host, int(port)), timeout=WATCH_SECONDS).close()
                silent_since = None
            except OSError as exc:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since >= lost_seconds() and not self._closed.is_set():
                    reason = f"its GCS at {gcs} has not answered for {lost_seconds():g} s ({exc.strerror or exc})"
                    print(f"\nerror: {self._failed(reason)}", file=sys.stderr, flush=True)
                    os._exit(2)  # hopgraph's exit status for an error

    def close(self) -> None:
        self._closed.set()
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
        self._check_placeable(self.config.cluster.cpus_per_actor, self.pool_gpus)
        self._pool_key = model_key(config)

    def _check_placeable(self, cpus: float, gpus: float) -> None:
        """ConfigError where no node of the cluster could ever hold an actor of ``cpus`` and ``gpus``:
        Ray would keep it pending for good, and the build would wait without a word."""
        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        if any(n.get("CPU", 0) >= cpus and n.get("GPU", 0) >= gpus for n in nodes):
            return
        most_cpus = max((n.get("CPU", 0) for n in nodes), default=0)
        most_gpus = max((n.get("GPU", 0) for n in nodes), default=0)
        raise ConfigError(
            f"no node of the Ray cluster can hold an embedding actor of cluster.cpus_per_actor {cpus:g} and "
            f"{gpus:g} GPUs (cluster.gpus_per_actor): its nodes have at most {most_cpus:g} CPUs and "
            f"{most_gpus:g} GPUs"
        )

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
        wait = wait and not self._ready  # actors that started already do the work: never wait for more
        patience = time.monotonic() + ACTOR_START_SECONDS
        while self._starting:
            timeout = min(5.0, max(0.0, patience - time.monotonic())) if wait else 0
            started, _ = self.ray.wait(list(self._starting), num_returns=1, timeout=timeout)
            if not started and wait and time.monotonic() < patience:
                continue
            if not started and wait:
                raise ClusterError(
                    f"no embedding actor started on the Ray cluster within {ACTOR_START_SECONDS:g} s: its CPUs or "
                    "GPUs are held by other work (another build?); try again when they are free, or lower "
                    "cluster.cpus_per_actor / cluster.gpus_per_actor"
                )
            if not started:
                break
            for ref in started:
                actor = self._starting.pop(ref)
                try:
                    self._ready[actor] = int(self.ray.get(ref))
                except self.ray.exceptions.RayActorError as exc:  # its model did not load there
                    raise ClusterError(f"an embedding actor could not start: {_first_line(exc)}") from None
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

    def task_slice(self, batch: int) -> int:
        """Texts to give :meth:`map_texts` at a time (and store once done) in tasks of ``batch``:
        four tasks per CPU of the cluster, so a slice keeps every CPU busy."""
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return 4 * max(1, cpus) * batch

    # ------------------------------------------------------------------ embeddings
    def texts_in_flight(self) -> int:
        """Texts the whole actor pool embeds at once: two batches of ``cluster.embed_batch_size`` per actor."""
        return 2 * self.embedding_actors()[0] * self.config.cluster.embed_batch_size

    def embedder(self, config: EmbeddingConfig) -> RayEmbedder:
        key = model_key(config)
        if key not in self._embedders:  # one dimension probe per model, not per stage (and none before a text needs it)
            self._embedders[key] = RayEmbedder(self, config)
        return self._embedders[key]

    # ------------------------------------------------------------------ LLM
    def llm(self, config: LLMConfig) -> Any:
        """The LLM on the cluster; its calls release the embedding actors first (their CPUs and GPUs)."""
        from hopgraph.index.cluster_llm import RayHttpLLM, RayVllm  # noqa: PLC0415

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

    @functools.cached_property
    def dim(self) -> int:
        """The model's dimension, from the first actor that loads it: asked only once a text is not in
        the vector cache, so a run whose vectors are all cached starts no actor (no model loaded)."""
        return next(iter(self.engine.ready_actors(self.config, wait=True).values()))

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
