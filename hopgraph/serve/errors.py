"""How the server says no: every error is JSON ``{"error": {"code", "message", "type", "param"}}``
(OpenAI's shape) with a 4xx/5xx status that says whose fault it is; messages name no internal address
(the details are logged), ids and field names echoed in them are cut to 80 characters, and at most 20
problems are listed."""

from __future__ import annotations

import errno
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from hopgraph.documents import first_place, invalid_unicode_at
from hopgraph.errors import (
    SHOWN_CHARS,
    SHOWN_PROBLEMS,
    ConfigError,
    HopgraphError,
    IndexFormatError,
    InputError,
    LLMRequestError,
    LLMUnavailableError,
    cut,
    listed,
    storage_state,
)

log = logging.getLogger("hopgraph.serve")
NOSNIFF_HEADER = {"X-Content-Type-Options": "nosniff"}  # on every response: no type is ever guessed


def shown(value: str, limit: int = SHOWN_CHARS) -> str:
    """``value`` quoted for a message, cut to ``limit`` characters with an ellipsis (never echo a huge id)."""
    return repr(cut(value, limit))


def all_finite(value: Any) -> bool:
    """True if every number in nested JSON data is finite: the fast check of every response
    (:func:`non_finite_at` then names the place, only when one is not)."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        for item in value.values():
            if not all_finite(item):
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:
            if not all_finite(item):
                return False
        return True
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return non_finite_at(value) is None  # subclasses of dict or list: the general walk


def non_finite_at(value: Any) -> str | None:
    """The dotted place of the first NaN or ±Infinity in nested JSON data, or None if all numbers are finite."""
    return first_place(value, lambda item: isinstance(item, float) and not math.isfinite(item))


def finite_json(value: Any) -> Any:
    """Pydantic check: JSON from clients may spell Infinity, NaN or 1e999, none a usable setting,
    and lone surrogates ("\\ud800"), which no file or response can hold."""
    found = non_finite_at(value)
    if found:
        raise ValueError(f"{cut(found)}: numbers must be finite (no NaN, Infinity or overflowing literals)")
    found = invalid_unicode_at(value)
    if found:
        raise ValueError(f"{cut(found)}: holds a lone surrogate (not Unicode text)")
    return value


class APIError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers

    def response(self) -> JSONResponse:
        """The refusal as the server sends it (from an endpoint's handler or from the middleware)."""
        return error_response(self.status, self.code, self.message, self.headers)


# OpenAI's error types by status: its SDKs and the chat UIs built on them read ``type`` and ``param``
# (``BadRequestError.type``) beside ``code`` and ``message``.
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


def error_body(status: int, code: str, message: str, param: str | None = None, **extra: Any) -> dict[str, Any]:
    """``{"error": {...}}`` in OpenAI's shape: ``code`` (hopgraph's), ``message``, ``type`` (by status)
    and ``param`` (the field at fault, where one is), plus ``extra`` fields."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"code": code, "message": message, "type": kind, "param": param, **extra}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(error_body(status, code, message, **extra), status, headers=headers)


# The OpenAI-compatible endpoints: OpenAI answers a request it cannot take with 400 where hopgraph's own
# endpoints say 422, and its SDKs raise BadRequestError (what clients catch) for 400 only.
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")


Handler = Callable[[Request, Any], Awaitable[JSONResponse]]


def openai_status(path: str, status: int) -> int:
    """OpenAI's 400 in place of 422 where ``path`` is an OpenAI-compatible endpoint."""
    return 400 if status == 422 and path.startswith(OPENAI_PATHS) else status


def as_openai_says(request: Request, response: JSONResponse) -> JSONResponse:
    """``response`` with :func:`openai_status`."""
    response.status_code = openai_status(request.url.path, response.status_code)
    return response


def problems_of(errors: Sequence[Any], *, skip: int = 0, whole: str = "body") -> tuple[list[dict[str, str]], str]:
    """Pydantic's validation errors as ``[{"field", "problem"}]`` and one message ``field: problem; …``
    (``skip`` leading parts of each location dropped, e.g. FastAPI's "body"; ``whole`` names an
    error about the object itself)."""
    details = [
        {"field": cut(".".join(str(x) for x in e.get("loc", ())[skip:])), "problem": e.get("msg", "")}
        for e in errors[:SHOWN_PROBLEMS]
    ]
    problems = [f"{d['field'] or whole}: {d['problem']}" for d in details]
    return details, listed(problems, total=len(errors))


# What a request meets that is the server's state, not the request's fault: (error, status, code,
# message, headers).
_SERVER_STATES: tuple[tuple[type[HopgraphError], int, str, str, dict[str, str] | None], ...] = (
    (
        LLMUnavailableError,
        503,
        "llm_unavailable",
        "the answer model is down or too slow; try again later",
        {"Retry-After": "30"},
    ),
    (
        LLMRequestError,
        422,
        "llm_rejected",
        "the answer model refused the request (e.g. a prompt too long for its context); retrying the same "
        "request will not help",
        None,
    ),
    (  # the index on disk: being rebuilt, left half-built or damaged
        IndexFormatError,
        503,
        "index_unavailable",
        "the index on disk cannot take this now (it is being rebuilt, or an operator must finish or repair it: "
        "the server log says which); reads go on from the version being served",
        {"Retry-After": "60"},
    ),
)


def install_error_handlers(app: FastAPI) -> None:
    """Every failure, FastAPI's own and unexpected bugs included, answers as an error body (with
    OpenAI's 400 for 422 on its endpoints, :func:`as_openai_says`, whichever handler made it)."""

    def handles(kind: type[Exception]) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            async def answer(request: Request, exc: Exception) -> JSONResponse:
                return as_openai_says(request, await handler(request, exc))

            app.add_exception_handler(kind, answer)
            return handler

        return register

    @handles(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @handles(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals: a body that is not UTF-8 JSON or a form that cannot be read (400),
        # unknown path (404), wrong verb (405). A form's reason is the multipart reader's own ("Too
        # many files. Maximum number of files is 1000."); it was reported as JSON that is not JSON.
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        message = str(exc.detail)
        if exc.status_code == 400 and request.headers.get("content-type", "").lower().startswith("multipart/"):
            code, message = "malformed_form", f"the upload form could not be read: {shown(message)}"
        elif exc.status_code == 400:
            code, message = "malformed_json", "the request body is not valid UTF-8 JSON"
        return error_response(exc.status_code, code, message, getattr(exc, "headers", None))

    @handles(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error_response(400, "malformed_json", "the request body is not valid UTF-8 JSON")
        details, message = problems_of(problems, skip=1)
        return error_response(422, "invalid_request", message, param=details[0]["field"] or None, details=details)

    @handles(HopgraphError)
    async def hopgraph_error(request: Request, exc: HopgraphError) -> JSONResponse:
        if isinstance(exc, (ConfigError, InputError)):
            return error_response(422, "invalid_request", str(exc))
        # LLM and index faults name internal addresses and paths: logged here, never sent to clients.
        for kind, status, code, message, headers in _SERVER_STATES:
            if isinstance(exc, kind):
                log.warning("%s %s: %s", request.method, request.url.path, exc)
                return error_response(status, code, message, headers)
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return error_response(500, "server_error", "the server failed to handle the request (logged)")

    @handles(OSError)
    async def storage(request: Request, exc: OSError) -> JSONResponse:
        # A full or read-only disk is the server's state, not a bug: said as such, with a retry hint
        # (the path and details go to the log only). Other OS errors are unexpected.
        state = storage_state(exc)
        if state is None:
            return await unexpected(request, exc)
        log.error("%s %s: %s", request.method, request.url.path, exc)
        status, code = {errno.EROFS: (503, "storage_read_only"), errno.EIO: (503, "storage_failing")}.get(
            exc.errno or 0, (507, "storage_full")
        )
        return error_response(
            status,
            code,
            f"the server's storage is {state}; nothing was changed, try again once an operator has fixed it",
            {"Retry-After": "60"},
        )

    @handles(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug is still a JSON error to the client; the traceback goes to the log only.
        log.error("%s %s: unexpected %s", request.method, request.url.path, type(exc).__name__, exc_info=exc)
        # Starlette answers this outside every middleware: the header the guard adds to all else.
        failed = "the server failed to handle the request (logged)"
        return error_response(500, "server_error", failed, NOSNIFF_HEADER)
