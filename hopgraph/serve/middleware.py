"""The outermost layer of the server: body-size guard, per-request timing for the metrics, and
the request log line."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

from hopgraph.serve.errors import error_body
from hopgraph.serve.logs import RequestLog, entry
from hopgraph.serve.metrics import Metrics

_KNOWN = {
    "/",
    "/v1/retrieve",
    "/v1/answer",
    "/v1/documents",
    "/v1/documents/upload",
    "/v1/index",
    "/v1/chat/completions",
    "/v1/models",
    "/healthz",
    "/metrics",
    "/docs",
    "/redoc",
    "/openapi.json",
}
_ENDPOINTS = [  # tried after the known paths, so /v1/documents/upload is not an id
    (re.compile(r"^/v1/documents/.+$"), "/v1/documents/{id}"),
    (re.compile(r"^/v1/jobs/[^/]+$"), "/v1/jobs/{id}"),
    (re.compile(r"^/v1/models/[^/]+$"), "/v1/models/{id}"),
]


def endpoint_label(path: str) -> str:
    """Bounded label set: ids never become metric labels."""
    if path in _KNOWN:
        return path
    return next((label for pattern, label in _ENDPOINTS if pattern.fullmatch(path)), "other")


class _BodyTooLarge(Exception):
    """Raised from ``receive`` once a body (declared or chunked) passes the limit."""


class GuardMiddleware:
    """Refuses oversized bodies before they are read, times every request for the metrics, and
    queues its line for the request log (when there is one).

    A body without Content-Length (chunked) is counted as it arrives; once over the limit, reading
    stops and whatever the app would answer to the broken read is replaced by the 413.
    """

    def __init__(self, app: Callable, metrics: Metrics, max_body_bytes: int, request_log: RequestLog | None = None):
        self.app, self.metrics, self.max_body, self.log = app, metrics, max_body_bytes, request_log

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}
        state = {"too_large": False, "started": False}
        too_large = JSONResponse(error_body("body_too_large", f"request body over {self.max_body} bytes"), 413)

        async def send_recording(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                state["started"] = True
            await send(message)

        async def send_guarded(message: MutableMapping[str, Any]) -> None:
            if not state["too_large"]:
                await send_recording(message)
            elif message["type"] == "http.response.start" and not state["started"]:
                await too_large(scope, receive, send_recording)  # instead of the app's answer to the cut-off body

        try:
            declared = dict(scope.get("headers", [])).get(b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
                await too_large(scope, receive, send_recording)
                return
            seen = 0

            async def receive_counting() -> dict:
                nonlocal seen
                message = await receive()
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    state["too_large"] = True
                    raise _BodyTooLarge()
                return message

            try:
                await self.app(scope, receive_counting, send_guarded)
            except Exception:  # the cut-off read, or whatever it led to inside the app
                if not state["too_large"]:
                    raise
                if not state["started"]:
                    await too_large(scope, receive, send_recording)
        finally:
            seconds = time.perf_counter() - started
            endpoint = endpoint_label(scope["path"])
            self.metrics.observe(endpoint, scope.get("state", {}).get("method", ""), status["code"], seconds)
            if self.log is not None:
                self.log.write(entry(scope, endpoint, status["code"], seconds))
