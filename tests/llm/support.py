"""The helper the LLM tests share: a scripted OpenAI-shaped HTTP server (fixtures live in conftest.py).

Most LLM tests talk to the real stand-in (llama.cpp serving SmolLM2-135M, fixture ``llm_server``).
Faults the stand-in cannot be made to show on demand (an answer slower than the client timeout,
a 503 followed by success, a 400, a model that never writes JSON, a look at the exact request
body) come from :class:`ScriptedServer`: a real HTTP server on 127.0.0.1 in a thread, spoken to
over real sockets by the real client. It is the only stand-in for a part in these tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# reply(body, n) -> (status, content, delay_seconds): ``content`` is the assistant text for a 200
# (wrapped into an OpenAI chat completion; a Trickle is streamed) or the raw error body otherwise;
# ``n`` counts requests from 0.
Reply = Callable[[dict[str, Any], int], tuple[int, "str | Trickle", float]]


class InFlight:
    """A :data:`Reply` that answers ``text`` after ``seconds`` and counts the calls in flight: ``most``
    is the most there were at once (set it to 0 to count afresh)."""

    def __init__(self, seconds: float, text: str = "ok"):
        self.seconds, self.text = seconds, text
        self.now = self.most = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any], n: int) -> tuple[int, str, float]:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.seconds)
        with self._lock:
            self.now -= 1
        return 200, self.text, 0


class Trickle:
    """A :data:`Reply` content that is streamed as server-sent chunks of ``piece``, one every
    ``every`` seconds, ``count`` of them (None: until the client hangs up): a model that writes
    slowly, or forever. A list of pieces is streamed once, piece by piece."""

    def __init__(self, piece: str | list[str], every: float, count: int | None = None):
        self.pieces = [piece] if isinstance(piece, str) else piece
        self.every = every
        self.count = count if count is not None or isinstance(piece, str) else len(piece)


def chat_completion(text: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict[str, Any]:
    """An OpenAI-shaped chat completion response body."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedServer:
    """``with ScriptedServer(reply) as server:`` serves POST /v1/chat/completions at ``server.base_url``
    (and GET /props with ``props``, as llama.cpp's server reports its slots, and GET /v1/models
    with ``models``; other GETs are 404).

    Every request body that arrives is kept in ``server.bodies`` (in arrival order, its headers in
    ``server.headers`` with lower-case names) before the reply is computed, so a test can check
    both what the client sent and how often it tried.
    """

    def __init__(
        self, reply: Reply, raw: bool = False, props: dict[str, Any] | None = None, models: list | int | None = None
    ):
        self.reply, self.raw = reply, raw  # raw: a 200's content is sent as is, not wrapped
        self.props = props  # served at GET /props as llama.cpp does (e.g. {"total_slots": 2}); else 404
        self.models = models  # the entries of GET /v1/models' "data" (a number: that status); else 404
        self.get_delay = 0.0  # seconds before answering any GET
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner._lock:
                    n = len(owner.bodies)
                    owner.bodies.append(body)
                    owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, content, delay, *extra = owner.reply(body, n)  # (status, content, delay[, headers])
                headers = extra[0] if extra else {}
                if delay:
                    time.sleep(delay)
                if isinstance(content, Trickle):
                    self._trickle(content)
                    return
                payload = json.dumps(chat_completion(content)) if status == 200 and not owner.raw else content
                data = payload.encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (timeout tests)
                    pass

            def _trickle(self, trickle: Trickle) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                sent = 0
                try:
                    while trickle.count is None or sent < trickle.count:
                        piece = trickle.pieces[sent % len(trickle.pieces)]
                        chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                        # unescaped, as vLLM and llama.cpp write it (U+2028 and its kind included)
                        self.wfile.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
                        self.wfile.flush()
                        sent += 1
                        time.sleep(trickle.every)
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):  # the client hung up
                    pass

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                time.sleep(owner.get_delay)
                served = {"/props": owner.props, "/v1/models": {"object": "list", "data": owner.models}}
                found = served.get(self.path) if self.path != "/v1/models" or owner.models is not None else None
                status = 200 if found else 404
                if isinstance(owner.models, int) and self.path == "/v1/models":  # e.g. 503 while loading
                    found, status = None, owner.models
                data = json.dumps(found if found else {"error": {"code": status, "message": "not now"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def prompts(self) -> list[str]:
        """The user message of every request received, in arrival order."""
        return [body["messages"][-1]["content"] for body in self.bodies]

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
