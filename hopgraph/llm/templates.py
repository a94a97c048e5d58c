"""Prompts as data: plain text files in ``hopgraph/llm/prompts/``, shared by extraction and answers."""

from __future__ import annotations

import functools
from pathlib import Path

PROMPTS = Path(__file__).parent / "prompts"
# Prompts are counted with cl100k, but the served model's tokenizer differs (SmolLM2, Llama, Qwen
# use up to ~30% more tokens on prose with names and numbers), so counts are scaled by this factor
# and a fixed reserve is kept for the chat template around the prompt.
TOKENIZER_SLACK = 1.3
RESERVE_TOKENS = 48


def prompt_room(context_tokens: int, max_tokens: int) -> float:
    """cl100k tokens a prompt may hold so that it and a completion of ``max_tokens`` fit a model
    with ``context_tokens`` of context, whatever its own tokenizer and chat template."""
    return (context_tokens - max_tokens - RESERVE_TOKENS) / TOKENIZER_SLACK


@functools.cache
def prompt(name: str) -> str:
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8")
