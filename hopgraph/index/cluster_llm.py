"""The LLM on the Ray cluster: chat requests through ``ray.data.llm``'s HTTP request processor
(:class:`RayHttpLLM`) or vLLM engines on the cluster's GPUs (:class:`RayVllm`). The engine they run
on, and its embedding actors, are in :mod:`hopgraph.index.cluster`."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from hopgraph.config import LLMConfig
from hopgraph.config.base import llm_address
from hopgraph.errors import ConfigError, LLMUnavailableError
from hopgraph.llm.client import HttpLLM, chat_body, completion_from_json
from hopgraph.llm.probe import ServedModel, auth_headers
from hopgraph.llm.types import ChatRequest, Completion, Done
from hopgraph.llm.vllm_engine import engine_arguments

if TYPE_CHECKING:
    from hopgraph.index.cluster import RayEngine

LIGHT_CPU = 0.05  # CPUs reserved by a worker that mostly waits (HTTP requests, reshaping rows)


class _ClusterLLM:
    """What both cluster LLMs share: ``complete`` releases the embedding actors (their CPUs and
    GPUs), reads the rows :meth:`_rows` yields as they arrive (a bar, ``on_done`` per completion,
    each completion's seconds the time since the row before) and books the wall time (:meth:`_spent`)."""

    label = "ray"

    def __init__(self, engine: RayEngine, config: LLMConfig):
        self.engine, self.config, self.name = engine, config, config.model

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        if not requests:
            return []
        self.engine.release_actors()
        rows = self._rows(requests)
        out: list[Completion | None] = [None] * len(requests)
        clock = _Clock()
        with tqdm(total=len(requests), desc=f"{desc} ({self.label})", unit="call", disable=not progress) as bar:
            for i, completion in rows(clock):
                out[i] = completion
                if on_done:
                    on_done(i, completion)
                bar.update(1)
        self._spent(clock.total())
        return [c for c in out if c is not None]

    def _rows(self, requests: Sequence[ChatRequest]) -> Callable[[_Clock], Iterator[tuple[int, Completion]]]:
        """The rows of ``requests`` to read: (position, completion) as they arrive, timed by the clock."""
        raise NotImplementedError

    def _spent(self, wall: float) -> None:
        raise NotImplementedError


class RayHttpLLM(_ClusterLLM):
    """Chat requests through ``ray.data.llm``'s HTTP request processor, spread over the endpoints.

    Rows go round-robin to ``cluster.llm_endpoints`` (or ``llm.base_url``), one processor per
    endpoint with ``cluster.llm_workers_per_endpoint`` workers each; every completion is handed to
    ``on_done`` as its row arrives (the completion cache stores it then). A request the server
    refuses on its own (e.g. longer than the context) comes back as a refused completion.
    """

    def __init__(self, engine: RayEngine, config: LLMConfig):
        super().__init__(engine, config)
        cluster = engine.config.cluster
        if not cluster.llm_endpoints:  # the endpoints are checked with the settings; the stored address here
            llm_address(config.base_url)
        self.endpoints = cluster.llm_endpoints or [config.base_url]
        self._clients: dict[str, HttpLLM] = {}  # per endpoint, for the rows Ray's processor gave up on
        # Cached under what the first endpoint serves, as the embedded engine's client caches them.
        self.served = ServedModel(config.model_copy(update={"base_url": self.endpoints[0]}))

    def _rows(self, requests: Sequence[ChatRequest]) -> Callable[[_Clock], Iterator[tuple[int, Completion]]]:
        ray = self.engine.ray
        from ray.data.llm import HttpRequestProcessorConfig, build_processor  # noqa: PLC0415

        cluster = self.engine.config.cluster
        headers = auth_headers(self.config) or None
        timeout = self.config.timeout
        outputs = []
        for e, endpoint in enumerate(self.endpoints):
            share = [i for i in range(len(requests)) if i % len(self.endpoints) == e]
            if not share:
                continue
            bodies = [{"position": i, "body": json.dumps(chat_body(self.config, requests[i]))} for i in share]
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
            blocks = max(1, math.ceil(len(bodies) / cluster.llm_batch_size))
            outputs.append(processor(ray.data.from_items(bodies, override_num_blocks=blocks)))
        dataset = outputs[0] if len(outputs) == 1 else outputs[0].union(*outputs[1:])

        def rows(clock: _Clock) -> Iterator[tuple[int, Completion]]:
            for row in dataset.iter_rows():
                position, seconds = int(row["position"]), clock.lap()
                try:
                    completion = completion_from_json(self.config, json.loads(row["response"]), seconds)
                except LLMUnavailableError:
                    # Ray's processor retries 408, 429, 502, 503 and 504 only: a 500 (or a row still
                    # refused after its retries) ended the stage, and named llm.base_url, not the
                    # endpoint. Asked again here with the embedded client's retries, at its endpoint.
                    completion = self._again(requests[position], position)
                yield position, completion

        return rows

    def _again(self, request: ChatRequest, position: int) -> Completion:
        endpoint = self.endpoints[position % len(self.endpoints)]
        if endpoint not in self._clients:
            self._clients[endpoint] = HttpLLM(self.config.model_copy(update={"base_url": endpoint, "concurrency": 1}))
        return self._clients[endpoint].complete([request])[0]

    def _spent(self, wall: float) -> None:
        self.engine.add_costs(wall, 0.0)  # the driver's wait: the endpoints' time is theirs


class _Clock:
    """Seconds since the row before (the first row: since the requests went out), so a stage's
    calls add up to its wall time of waiting for them: a running average per row, summed, counted
    Ray's start-up again for every row (316 s of LLM time in a 54 s stage)."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds

    def total(self) -> float:
        return time.perf_counter() - self.started


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


class RayVllm(_ClusterLLM):
    """Chat requests through ``ray.data.llm``'s vLLM engine processor on the cluster's GPUs.

    ``cluster.vllm_replicas`` engines (data parallelism), each over ``llm.tensor_parallel_size``
    GPUs, with the in-process engine's settings (``llm.max_model_len``, ``gpu_memory_utilization``);
    a row that fails (e.g. longer than ``max_model_len``) comes back refused instead of failing
    the batch.
    """

    label = "vllm on ray"

    def __init__(self, engine: RayEngine, config: LLMConfig):
        super().__init__(engine, config)
        if not os.path.isdir(config.model):
            raise ConfigError(
                f"llm.model {config.model!r}: with llm.backend=vllm it must be a local model folder (never downloaded)"
            )

    def _rows(self, requests: Sequence[ChatRequest]) -> Callable[[_Clock], Iterator[tuple[int, Completion]]]:
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
        requested = [{"position": i, "request": json.dumps(_request_fields(r))} for i, r in enumerate(requests)]

        def rows(clock: _Clock) -> Iterator[tuple[int, Completion]]:
            for row in processor(self.engine.ray.data.from_items(requested)).iter_rows():
                yield int(row["position"]), _generated(row, clock.lap())

        return rows

    def _spent(self, wall: float) -> None:
        gpus = self.engine.config.cluster.vllm_replicas * self.config.tensor_parallel_size
        self.engine.add_costs(wall * gpus, wall * gpus)


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


def _generated(row: dict[str, Any], seconds: float) -> Completion:
    """A row out of the vLLM processor as a completion. A row whose generation failed skips the
    postprocess (Ray passes the engine's own fields on, with ``__inference_error__``), so it is read
    here too: refused, not an empty answer the LLM cache would keep."""
    if row.get("__inference_error__"):
        row = _from_generation(row)
    return Completion(
        text=row.get("text") or "",
        prompt_tokens=int(row.get("prompt_tokens") or 0),
        completion_tokens=int(row.get("completion_tokens") or 0),
        seconds=seconds,
        refused=row.get("error") or "",
    )


def _from_generation(row: dict[str, Any]) -> dict[str, Any]:
    error = row.get("__inference_error__") or ""
    return {
        "position": row["position"],
        "text": row.get("generated_text") or "",
        "prompt_tokens": int(row.get("num_input_tokens") or 0),
        "completion_tokens": int(row.get("num_generated_tokens") or 0),
        "error": str(error)[:300] if error else "",
    }
