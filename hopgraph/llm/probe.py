"""What an OpenAI-compatible server says about itself: how many requests it runs at once, and
whether it is up at all, so that the client matches its concurrency to the server and tells a
slow server from one that is down.

llama.cpp's server (the stand-in) reports its parallel slots as ``total_slots`` at ``/props``;
vLLM and others do not report a count (they batch many requests at once), so the configured
fallback applies there.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from hopgraph.config import LLMConfig

# Requests in flight when llm.concurrency is 0 and the server does not say how many it runs at once.
FALLBACK_CONCURRENCY = 4
# How long a probe may take: a server that is up answers a request without model work at once
# (within llm.timeout where that is shorter, but never under a second: a busy CPU server is not down).
PROBE_SECONDS = 5.0


def auth_headers(config: LLMConfig) -> dict[str, str]:
    """The Authorization header for the server: the key in ``llm.api_key_env``, where one is set."""
    key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
    return {"Authorization": f"Bearer {key}"} if key else {}


def server_root(base_url: str) -> str:
    """The server's address without the API's ``/v1`` (llama.cpp serves ``/props`` and ``/health`` there)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _get(config: LLMConfig, url: str, headers: Any) -> Any:
    import httpx  # noqa: PLC0415

    return httpx.get(url, headers=headers, timeout=min(PROBE_SECONDS, max(config.timeout, 1.0)))


def server_slots(config: LLMConfig, headers: Any = None) -> tuple[bool, int | None]:
    """(whether the server answered, the number of requests it runs at once where it reports one:
    llama.cpp's ``/props`` ``total_slots``; None where it does not say)."""
    import httpx  # noqa: PLC0415

    try:
        response = _get(config, server_root(config.base_url) + "/props", headers)
    except httpx.HTTPError:
        return False, None
    slots = _json_field(response, "total_slots")
    return True, slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None


def server_answers(config: LLMConfig, headers: Any = None) -> bool:
    """Whether the server answers a request that needs no model work (``GET /v1/models``) within a
    few seconds: any HTTP answer, even an error status, means it is running."""
    import httpx  # noqa: PLC0415

    try:
        _get(config, config.base_url.rstrip("/") + "/models", headers)
    except httpx.HTTPError:
        return False
    return True


def served_model(config: LLMConfig, headers: Any = None) -> str | None:
    """What the server says it serves: its ``/v1/models`` entry named ``llm.model`` (else its only
    entry), with the folder or file the model was loaded from where the server reports it (vLLM's
    ``root``, llama.cpp's ``/props`` ``model_path``); "" when it names nothing, None while it
    cannot tell (unreachable, busy or loading). llama.cpp answers any model name with whatever it
    loaded, so ``llm.model`` alone ("default") does not tell two models apart."""
    import httpx  # noqa: PLC0415

    try:
        listed = _get(config, config.base_url.rstrip("/") + "/models", headers)
    except httpx.HTTPError:
        return None
    if listed.status_code == 429 or listed.status_code >= 500:  # busy, or still loading its model: ask later
        return None
    entries = _json_field(listed, "data")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    entry = next((e for e in entries if e.get("id") == config.model), entries[0] if len(entries) == 1 else {})
    parts = [entry.get("id"), entry.get("root")]
    try:
        parts.append(_json_field(_get(config, server_root(config.base_url) + "/props", headers), "model_path"))
    except httpx.HTTPError:
        pass
    return "|".join(str(part) for part in parts if isinstance(part, str | int) and str(part))


def _json_field(response: Any, name: str) -> Any:
    """``name`` of a 200 response's JSON object; None for anything else."""
    try:
        data = response.json() if response.status_code == 200 else None
    except ValueError:
        return None
    return data.get(name) if isinstance(data, dict) else None


class ServedModel:
    """What the server at ``llm.base_url`` says it serves (:func:`served_model`): asked until it
    answers (every ``ask_unreached`` seconds at most), then again every ``ask_again`` seconds, so a
    long run (an evaluation, a build, a program using the Python API) notices the LLM server
    restarted with another model. While it is asked, callers go on with what it said before; only
    the first answer is waited for."""

    ask_again = 60.0
    ask_unreached = 5.0

    def __init__(self, config: LLMConfig) -> None:
        self.config, self.headers = config, auth_headers(config)
        self.where = config.model  # the name asked for, under which what it served is remembered
        self._said: str | None = None
        self._next = 0.0  # when to ask next (monotonic seconds)
        self._asking = False
        self._answered = threading.Condition()

    def __call__(self) -> str | None:
        with self._answered:
            if self._asking and self._said is None:  # the first answer: keys depend on it
                self._answered.wait_for(lambda: not self._asking, timeout=4 * PROBE_SECONDS)
            if self._asking or time.monotonic() < self._next:
                return self._said
            self._asking = True
        said = None
        try:
            said = served_model(self.config, self.headers)  # not under the lock: it may take seconds
        finally:
            with self._answered:
                self._asking = False
                self._said = said if said is not None else self._said
                self._next = time.monotonic() + (self.ask_again if said is not None else self.ask_unreached)
                self._answered.notify_all()
        return self._said


def resolved_concurrency(config: LLMConfig, headers: Any = None) -> int | None:
    """Requests to keep in flight: an explicit ``llm.concurrency`` is honoured; 0 means as many as
    the server runs at once (asked only then), else :data:`FALLBACK_CONCURRENCY` where the server
    does not say. None while the server cannot be reached (ask again later)."""
    if config.concurrency:
        return config.concurrency
    answered, slots = server_slots(config, headers)
    return (slots or FALLBACK_CONCURRENCY) if answered else None


def start_hint(config: LLMConfig) -> str:
    """How to start the server the settings point at (the stand-in's command for a local port)."""
    import httpx  # noqa: PLC0415

    url = httpx.URL(config.base_url)
    if url.host in {"127.0.0.1", "localhost"}:
        port = url.port or 80
        return f"`hopgraph llm-server --port {port}` (the CPU stand-in) or `vllm serve MODEL_DIR --port {port}`"
    return "`vllm serve MODEL_DIR` there (or another OpenAI-compatible server)"
