"""What the chat API tests share: an ``openai`` client for a user, a chat request, a raw stream's
events, and a server whose one answer slot waits on a scripted LLM."""

from __future__ import annotations

import httpx
import openai

from tests.serve.support import USERS, LiveServer, auth

QUESTION = "Who chairs the Orrin Basin Water Board?"


def client_for(server: LiveServer, user: str = "guest", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=USERS[user]["token"], max_retries=0, **kw)


def ask(user: str, question: str = QUESTION, **fields) -> dict:
    return {"model": "hopgraph-text", "messages": [{"role": "user", "content": question}], **fields}


def stream_events(live: LiveServer, user: str = "guest") -> tuple[httpx.Response, list[str]]:
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=ask(user, stream=True), headers=auth(user)) as r:
        return r, [line for line in r.iter_lines() if line]


def one_slot_and_a_silent_llm(serve_config, llm, **serve):
    """``serve_config`` with one answer slot and, as LLM, ``llm`` (a ScriptedServer)."""
    serve = serve_config.serve.model_copy(update={"answer_concurrency": 1, "answer_timeout": 20.0, **serve})
    llm_config = serve_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
    return serve_config.model_copy(update={"serve": serve, "llm": llm_config})
