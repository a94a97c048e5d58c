"""vLLM's in-process engine for batch indexing on a GPU machine (same requests as the HTTP path)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from hopgraph.config import LLMConfig
from hopgraph.errors import ConfigError, DependencyError
from hopgraph.llm.types import ChatRequest, Completion, Done


class VllmEngine:
    """Runs a batch of chat requests through ``vllm.LLM.chat``; the model is a local folder."""

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
        self._vllm = vllm
        self.config = config
        self.name = config.model
        self.engine = vllm.LLM(model=config.model, seed=0)

    def _params(self, request: ChatRequest):
        kwargs = {"max_tokens": request.max_tokens, "temperature": request.temperature, "seed": request.attempt}
        if request.schema is not None and self.config.structured:
            from vllm.sampling_params import StructuredOutputsParams  # noqa: PLC0415

            kwargs["structured_outputs"] = StructuredOutputsParams(json=request.schema)
        return self._vllm.SamplingParams(**kwargs)

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        if not requests:
            return []
        started = time.perf_counter()
        conversations = [[{"role": role, "content": content} for role, content in r.messages] for r in requests]
        outputs = self.engine.chat(conversations, [self._params(r) for r in requests], use_tqdm=progress)
        share = (time.perf_counter() - started) / len(requests)
        done = []
        for i, out in enumerate(outputs):
            completion = Completion(
                text=out.outputs[0].text,
                prompt_tokens=len(out.prompt_token_ids),
                completion_tokens=len(out.outputs[0].token_ids),
                seconds=share,
            )
            if on_done:
                on_done(i, completion)
            done.append(completion)
        return done
