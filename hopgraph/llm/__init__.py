"""LLM tier: backends (HTTP / vLLM), completion cache and accounting, structured extraction, stand-in server."""

from hopgraph.llm.client import open_llm
from hopgraph.llm.types import LLM, ChatRequest, Completion, Usage

__all__ = ["LLM", "ChatRequest", "Completion", "Usage", "open_llm"]
