"""vLLM's in-process engine for batch indexing on a GPU machine (same requests as the HTTP path).

Requests are fed to the engine's own step loop (what ``vllm.LLM.chat`` runs inside), so each
completion is handed to ``on_done`` (where the completion cache stores it) the moment it finishes,
not after the whole batch: an interrupted indexing job keeps every completion that was finished.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hopgraph.config import LLMConfig
from hopgraph.errors import ConfigError, DependencyError
from hopgraph.llm.types import ChatRequest, Completion, Done

# Oldest vLLM this engine is written against (StructuredOutputsParams, the V1 engine loop); the
# `vllm` extra pins the same floor.
VLLM_MIN_VERSION = (0, 11)


def check_vllm_version(version: str) -> None:
    """Refuse a vLLM older than :data:`VLLM_MIN_VERSION`, naming both versions and the fix."""
    numbers = [int(n) for n in re.findall(r"\d+", version.split("+")[0])[:2]]
    if len(numbers) < 2 or tuple(numbers) < VLLM_MIN_VERSION:
        floor = ".".join(map(str, VLLM_MIN_VERSION))
        raise DependencyError(
            f"llm.backend=vllm needs vLLM >= {floor}, but vLLM {version!r} is installed: "
            f"pip install 'vllm>={floor}' (or the 'vllm' extra)"
        )


def engine_arguments(config: LLMConfig) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for these settings (an unset max_model_len = the model's own)."""
    arguments: dict[str, Any] = {
        "model": config.model,
        "seed": 0,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "tensor_parallel_size": config.tensor_parallel_size,
    }
    if config.max_model_len is not None:
        arguments["max_model_len"] = config.max_model_len
    return arguments


def run_engine_loop(
    engine: Any,
    prompts: Sequence[Any],
    params: Sequence[Any],
    finished: Callable[[int, Any, float], None],
    refused: Callable[[int, str], None],
) -> None:
    """Add every prompt to a vLLM ``LLMEngine`` and step it until all are done; ``finished(i, output,
    seconds)`` is called for prompt ``i`` as soon as its output is final. vLLM schedules the whole
    set as one continuous batch, so throughput is that of a single ``LLM.chat`` call. ``seconds`` is
    the time since the previous completion, so they sum to the wall time of the batch. A prompt the
    engine refuses (its ValueError: longer than ``max_model_len``) is ``refused(i, why)``, as the HTTP
    path's 400 for that one request, not the end of the batch.

    Whatever ends the loop early (``finished`` failing to store a completion, say), this batch's
    requests left in the engine are aborted: the next batch's numbers would otherwise be handed
    outputs of this one. Outputs of any other request are never delivered as this batch's."""
    prefix = f"hopgraph-{next(_BATCHES)}-"
    last = time.perf_counter()
    pending: set[str] = set()
    try:
        for i, (prompt, sampling) in enumerate(zip(prompts, params)):
            try:
                engine.add_request(f"{prefix}{i}", prompt, sampling)
            except ValueError as exc:
                refused(i, str(exc)[:300])
            else:
                pending.add(f"{prefix}{i}")
        while pending and engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished and output.request_id in pending:
                    pending.discard(output.request_id)
                    now = time.perf_counter()
                    finished(int(output.request_id.removeprefix(prefix)), output, now - last)
                    last = now
    finally:
        if pending:
            engine.abort_request(sorted(pending))


_BATCHES = itertools.count()  # request ids stay unique across calls on one engine


class VllmEngine:
    """Runs chat requests through vLLM's in-process engine; the model is a local folder."""

    def __init__(self, config: LLMConfig):
        if not Path(config.model).is_dir():
            raise ConfigError(
                f"llm.model {config.model!r}: with llm.backend=vllm it must be a local model folder (never downloaded)"
            )
        try:
            import vllm  # noqa: PLC0415
        except ImportError:
            raise DependencyError(
                "llm.backend=vllm needs vLLM installed (a GPU machine); use llm.backend=http with `vllm serve` or "
                "the stand-in"
            ) from None
        check_vllm_version(getattr(vllm, "__version__", "0"))
        self._vllm = vllm
        self.config = config
        self.name = config.model
        self.engine = vllm.LLM(**engine_arguments(config))
        self.tokenizer = self.engine.get_tokenizer()
        # One batch steps the engine at a time: two callers stepping it at once (the server's answer
        # threads) would each be handed outputs of the other's requests.
        self._stepping = threading.Lock()

    def _params(self, request: ChatRequest):
        kwargs = {"max_tokens": request.max_tokens, "temperature": request.temperature, "seed": request.attempt}
        if request.schema is not None and self.config.structured:
            from vllm.sampling_params import StructuredOutputsParams  # noqa: PLC0415

            kwargs["structured_outputs"] = StructuredOutputsParams(json=request.schema)
        return self._vllm.SamplingParams(**kwargs)

    def _prompt(self, request: ChatRequest) -> str:
        """The chat rendered with the model's template, as ``LLM.chat`` renders it."""
        conversation = [{"role": role, "content": content} for role, content in request.messages]
        return self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        if not requests:
            return []
        done: list[Completion | None] = [None] * len(requests)
        bar = None
        if progress:
            from tqdm import tqdm  # noqa: PLC0415

            bar = tqdm(total=len(requests), desc=desc)

        def finished(i: int, out: Any, seconds: float) -> None:
            completion = Completion(
                text=out.outputs[0].text,
                prompt_tokens=len(out.prompt_token_ids or ()),
                completion_tokens=len(out.outputs[0].token_ids),
                seconds=seconds,
            )
            done[i] = completion
            if on_done:
                on_done(i, completion)
            if bar is not None:
                bar.update()

        def refused(i: int, why: str) -> None:  # never cached: another engine or a longer context may take it
            done[i] = completion = Completion("", 0, 0, refused=f"vLLM: {why}")
            if on_done:
                on_done(i, completion)
            if bar is not None:
                bar.update()

        try:
            with self._stepping:
                run_engine_loop(
                    self.engine.llm_engine,
                    [self._prompt(r) for r in requests],
                    [self._params(r) for r in requests],
                    finished,
                    refused,
                )
        finally:
            if bar is not None:
                bar.close()
        missing = [i for i, c in enumerate(done) if c is None]
        if missing:
            raise RuntimeError(f"vLLM engine stopped with {len(missing)} of {len(requests)} requests unfinished")
        return [c for c in done if c is not None]
