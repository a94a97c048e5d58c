"""Prompts as data: plain text files in ``hopgraph/llm/prompts/``, shared by extraction and answers."""

from __future__ import annotations

import functools
from pathlib import Path

PROMPTS = Path(__file__).parent / "prompts"


@functools.cache
def prompt(name: str) -> str:
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8")
