"""Prompts as data: plain text files in ``hopgraph/llm/prompts/``, shared by extraction and answers."""

from __future__ import annotations

import functools
import re
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


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def fill(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` of ``values`` put in, in one pass: text put in (a document's,
    a question) is never read for placeholders. Filled one placeholder after another, a document
    holding "{question}" got the question pasted in at each, past the budget its prompt was cut to."""
    return _PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), template)


@functools.cache
def prompt(name: str) -> str:
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8")
