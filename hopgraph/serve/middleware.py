"""The outermost layer of the server: who may send a body, body-size guard, per-request timing for
the metrics, and the request log line."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from hopgraph.serve.errors import NOSNIFF_HEADER, APIError, openai_status
from hopgraph.serve.logs import RequestLog, entry
from hopgraph.serve.metrics import Metrics
from hopgraph.serve.schemas import TOO_MANY_VALUES, surely_too_many_values

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


# Requests whose body the app reads: under /v1/ every one needs a token, checked before the body is.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
((_NAME, _VALUE),) = NOSNIFF_HEADER.items()
NOSNIFF = (_NAME.lower().encode(), _VALUE.encode())  # the header as an ASGI message spells it
# (Authorization header, client address) → the principal of a known token; raises APIError otherwise.
Gate = Callable[[str, str], Any]


class _ClientGone(Exception):
    """The client left before its body ended: there is no one to answer."""


async def _whole_body(receive: Callable) -> bytes:
    """The request's body, read to its end (``receive`` bounds its size); _ClientGone if the client
    leaves first (the part read is no request to answer)."""
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _ClientGone()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _replay(body: bytes, receive: Callable) -> Callable:
    """A ``receive`` that gives the app ``body`` (already read), then waits on the client as usual."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if sent:
            return await receive()  # a disconnect, for an app that listens for one (a stream)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _too_many_values(path: str) -> APIError:
    """What the question schemas say of such a body, as the endpoint would (OpenAI's 400, else 422)."""
    return APIError(openai_status(path, 422), "invalid_request", f"body: {TOO_MANY_VALUES}")


class GuardMiddleware:
    """Refuses a body before reading it when its sender has no known token (``gate``; a known one's
    principal is left in the request's state for the endpoint), is no admin on ``admin_paths``, or it is over
    the limit (``question_paths`` have the smaller ``max_question_bytes``), times every request for
    the metrics, and queues its line for the request log (when there is one).

    The app parses a JSON body before any endpoint code (the token check included) runs: without
    the gate, anyone could make the server parse megabytes per request without a token.
    A body without Content-Length (chunked) is counted as it arrives; once over the limit, reading
    stops and whatever the app would answer to the broken read is replaced by the 413.
    """

    def __init__(
        self,
        app: Callable,
        metrics: Metrics,
        max_body_bytes: int,
        request_log: RequestLog | None = None,
        *,
        gate: Gate | None = None,
        question_paths: frozenset[str] = frozenset(),
        max_question_bytes: int | None = None,
        admin_paths: frozenset[str] = frozenset(),
    ):
        self.app, self.metrics, self.max_body, self.log = app, metrics, max_body_bytes, request_log
        self.gate, self.question_paths, self.admin_paths = gate, question_paths, admin_paths
        self.max_question = min(max_question_bytes or max_body_bytes, max_body_bytes)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}
        state = {"too_large": False, "started": False}
        limit = self.max_question if scope["path"] in self.question_paths else self.max_body
        too_large = APIError(413, "body_too_large", f"request body over {limit} bytes").response()

        async def send_recording(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                state["started"] = True
                headers = list(message.get("headers", []))
                if not any(name.lower() == NOSNIFF[0] for name, _ in headers):
                    message["headers"] = [*headers, NOSNIFF]  # every response, JSON and assets too: no type is guessed
            await send(message)

        async def send_guarded(message: MutableMapping[str, Any]) -> None:
            if not state["too_large"]:
                await send_recording(message)
            elif message["type"] == "http.response.start" and not state["started"]:
                await too_large(scope, receive, send_recording)  # instead of the app's answer to the cut-off body

        try:
            headers = dict(scope.get("headers", []))
            try:
                self._admit(scope)
            except APIError as refused:
                await refused.response()(scope, receive, send_recording)
                return
            declared = headers.get(b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > limit):
                await too_large(scope, receive, send_recording)
                return
            seen = 0

            async def receive_counting() -> dict:
                nonlocal seen
                message = await receive()
                seen += len(message.get("body", b""))
                if seen > limit:
                    state["too_large"] = True
                    raise _BodyTooLarge()
                return message

            try:
                receive_app = receive_counting
                if scope["path"] in self.question_paths and scope["method"] in _BODY_METHODS:
                    try:
                        body = await _whole_body(receive_counting)
                    except _ClientGone:
                        status["code"] = 499  # (nginx's "client closed request", for the metrics and the log)
                        return
                    if surely_too_many_values(body):
                        await _too_many_values(scope["path"]).response()(scope, receive, send_recording)
                        return
                    receive_app = _replay(body, receive)
                await self.app(scope, receive_app, send_guarded)
            except Exception:  # the cut-off read, or whatever it led to inside the app
                if not state["too_large"]:
                    raise
                if not state["started"]:
                    await too_large(scope, receive, send_recording)
        finally:
            seconds = time.perf_counter() - started
            endpoint = endpoint_label(scope["path"])
            request_state = scope.get("state", {})
            # A stream that ended with an error event counts under the status its error carries.
            outcome = request_state.get("stream_error", {}).get("status", status["code"])
            self.metrics.observe(endpoint, request_state.get("method", ""), outcome, seconds)
            if self.log is not None:
                self.log.write(entry(scope, endpoint, status["code"], seconds))

    def _admit(self, scope: dict) -> None:
        if self.gate is None or scope["method"] not in _BODY_METHODS or not scope["path"].startswith("/v1/"):
            return
        client = scope.get("client") or ("?", 0)
        # The first Authorization header, as the endpoint reads it (a dict of the headers keeps the last).
        authorization = next((value for name, value in scope.get("headers", []) if name == b"authorization"), b"")
        who = self.gate(authorization.decode("latin-1"), str(client[0]))
        state = scope.setdefault("state", {})
        state["principal"], state["user"] = who, who.user  # a refusal below is logged with who it was
        if scope["path"] in self.admin_paths:  # a reader's token must not buy the parse of a 10 MB body either
            who.require_admin()
