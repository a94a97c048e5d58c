"""LLM tier: backends (HTTP / vLLM), completion cache and accounting, structured extraction, stand-in server."""
from hopgraph.llm.client import LLM, ChatRequest, Completion, Usage, open_llm

__all__ = ["LLM", "ChatRequest", "Completion", "Usage", "open_llm"]
