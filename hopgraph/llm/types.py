"""What every LLM backend speaks: requests, completions, usage accounting and the backend protocol.

Kept apart from the backends so that each (HTTP client, vLLM engine, cache) imports these and
none imports another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion; ``schema`` asks for JSON output constrained to it (when the backend can)."""

    messages: tuple[tuple[str, str], ...]  # (role, content)
    schema: dict[str, Any] | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    attempt: int = 0  # part of the cache key: a retry after a parse failure is a different call

    def key(self, model: str) -> str:
        payload = json.dumps(
            [model, self.messages, self.schema, self.max_tokens, self.temperature, self.attempt], sort_keys=True
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float = 0.0
    cached: bool = False
    # Why the backend refused this one request (e.g. a prompt longer than the model's context); a
    # refused completion has no text, is never cached, and extraction records it as a fallback.
    refused: str = ""


@dataclass
class Usage:
    """What LLM work cost: every call counted, whether it was paid now or came from the cache."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    paid_prompt_tokens: int = 0
    paid_completion_tokens: int = 0
    parse_failures: int = 0
    fallbacks: int = 0
    retry_calls: int = 0  # calls that re-asked for an output that did not parse (included in calls)
    retry_tokens: int = 0  # their prompt + completion tokens (included in the token counts)
    refused: int = 0  # requests the backend refused one by one (each ends as a fallback)
    seconds: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)

    def add(self, done: Sequence[Completion]) -> None:
        for c in done:
            self.calls += 1
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens
            if c.cached:
                self.cached_calls += 1
            else:
                self.paid_prompt_tokens += c.prompt_tokens
                self.paid_completion_tokens += c.completion_tokens
                self.seconds += c.seconds

    @property
    def new_calls(self) -> int:
        return self.calls - self.cached_calls

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("extra"))
        out["new_calls"] = self.new_calls
        out["seconds"] = round(self.seconds, 3)
        return out


Done = Callable[[int, Completion], None]


class LLM(Protocol):
    name: str

    def complete(
        self, requests: Sequence[ChatRequest], *, progress: bool = False, desc: str = "llm", on_done: Done | None = None
    ) -> list[Completion]:
        """One completion per request, in order; ``on_done(i, completion)`` as each arrives.

        Raises LLMUnavailableError when the backend cannot answer (down, slow, 5xx) and
        LLMRequestError when it refuses every request alike (401, 403, 404: the settings are wrong); a
        refusal of one request (400, 413, 422: e.g. longer than the context) is a completion with
        ``refused`` set. Completions that arrived before an error have been passed to ``on_done``
        (that is how the cache keeps them).
        """
