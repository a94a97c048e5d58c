"""The HTTP API of `hopgraph serve`: retrieval and answers under access control, document updates
as background jobs, index stats, health and Prometheus metrics.

Access control is applied inside retrieval (the reader's groups become the scope every method
ranks within), never by filtering what comes out. Counts of the index and the metrics are for
admins only, since they would tell a reader about documents it may not read. Every error is JSON:
``{"error": {"code", "message"}}`` with a 4xx/5xx status that says whose fault it is; messages name
no internal address (the details are logged), and ids echoed in them are cut to 80 characters.

Answers wait for the LLM in their own bounded pool (``serve.answer_concurrency`` slots), so slow
answers never take the threads that retrieval and ``/healthz`` need.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from hopgraph.config import HopgraphConfig, dotted_keys
from hopgraph.documents import Document, text_problem
from hopgraph.errors import (
    ConfigError,
    DeadlineExceeded,
    HopgraphError,
    InputError,
    LLMRequestError,
    LLMUnavailableError,
    QueueFullError,
)
from hopgraph.index.ingest import normalise_metadata
from hopgraph.llm import open_llm
from hopgraph.retrieve.answer import answer_many
from hopgraph.retrieve.filters import MetadataFilter, check_where
from hopgraph.retrieve.methods import METHODS
from hopgraph.retrieve.packing import RetrievalResult
from hopgraph.serve.auth import Principal, TokenBook
from hopgraph.serve.limits import OverLimit, check_params
from hopgraph.serve.metrics import Metrics
from hopgraph.serve.ratelimit import RateLimiter
from hopgraph.serve.state import IndexHolder, JobRunner, Snapshot
from hopgraph.version import __version__

log = logging.getLogger("hopgraph.serve")
ID_SHOWN = 80  # characters of a client-given id or name repeated in a message


def shown(value: str, limit: int = ID_SHOWN) -> str:
    """``value`` quoted for a message, cut to ``limit`` characters with an ellipsis (never echo a huge id)."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def non_finite_at(value: Any, where: str = "") -> str | None:
    """The dotted place of the first NaN or ±Infinity in nested JSON data, or None if all numbers are finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "value"
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = non_finite_at(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def _finite(value: Any) -> Any:
    """Pydantic check: JSON from clients may spell Infinity, NaN or 1e999; none is a usable setting."""
    found = non_finite_at(value)
    if found:
        raise ValueError(f"{found}: numbers must be finite (no NaN, Infinity or overflowing literals)")
    return value


class APIError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


# ------------------------------------------------------------------------------------ request bodies
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrieveRequest(Strict):
    query: str = Field(min_length=1, description="The question.")
    method: str | None = Field(
        None, description="Retrieval method (GET /v1/index lists those this index offers); default: the server's."
    )
    budget: int | None = Field(None, ge=50, description="λ: context budget in tokens (at most serve.max_budget).")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Retrieval settings for this request, as in the [retrieval] config section, e.g. "
        '{"ppr": {"damping": 0.6}}.',
    )
    where: dict[str, Any] = Field(
        default_factory=dict,
        description="Metadata filter: key → allowed value or flat list of values (at most serve.max_filter_keys "
        "keys and serve.max_filter_values values).",
    )

    @field_validator("query")
    @classmethod
    def _has_words(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("the query is only whitespace")
        return query

    _finite_params = field_validator("params", "where")(_finite)


class DocumentIn(Strict):
    id: str = Field(min_length=1, max_length=512, pattern=r"^[^\x00-\x1f]+$")
    text: str = Field(min_length=1)
    title: str = ""
    source: str = ""
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Carried to every chunk; acl (list of groups) and timestamp have a meaning."
    )
    acl: list[str] | None = Field(None, description="Groups allowed to read the document (same as metadata.acl).")

    @field_validator("text")
    @classmethod
    def _indexable(cls, text: str) -> str:
        problem = text_problem(text)  # the same rule as the corpus reader's
        if problem:
            raise ValueError(problem)
        return text

    _finite_metadata = field_validator("metadata")(_finite)


class InsertRequest(Strict):
    documents: list[DocumentIn] = Field(min_length=1)


# ------------------------------------------------------------------------------------ middleware
_ENDPOINTS = [
    (re.compile(r"^/v1/documents/.+$"), "/v1/documents/{id}"),
    (re.compile(r"^/v1/jobs/[^/]+$"), "/v1/jobs/{id}"),
]
_KNOWN = {"/v1/retrieve", "/v1/answer", "/v1/documents", "/v1/index", "/healthz", "/metrics", "/docs", "/openapi.json"}


def endpoint_label(path: str) -> str:
    """Bounded label set: ids never become metric labels."""
    for pattern, label in _ENDPOINTS:
        if pattern.match(path):
            return label
    return path if path in _KNOWN else "other"


class _BodyTooLarge(Exception):
    """Raised from ``receive`` once a body (declared or chunked) passes the limit."""


class GuardMiddleware:
    """Refuses oversized bodies before they are read, and times every request for the metrics.

    A body without Content-Length (chunked) is counted as it arrives; once over the limit, reading
    stops and whatever the app would answer to the broken read is replaced by the 413.
    """

    def __init__(self, app: Callable, metrics: Metrics, max_body_bytes: int):
        self.app, self.metrics, self.max_body = app, metrics, max_body_bytes

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
            method = scope.get("state", {}).get("method", "")
            self.metrics.observe(endpoint_label(scope["path"]), method, status["code"], time.perf_counter() - started)


# ------------------------------------------------------------------------------------ the app
def create_app(root: str | Path, config: HopgraphConfig, tokens: TokenBook, *, start_jobs: bool = True) -> FastAPI:
    """The ASGI app over index ``root``; loads the live version (all of it) before returning."""
    root = Path(root)
    serve = config.serve
    holder = IndexHolder(root, config)
    jobs = JobRunner(root, holder, config)
    metrics = Metrics()
    limiter = RateLimiter(serve.rate_limit, serve.rate_burst)
    llm = open_llm(config.llm.model_copy(update={"timeout": serve.answer_timeout, "retries": 0}))
    # Answers wait for the LLM here, never in the pool that serves retrieval; the semaphore bounds
    # how many wait for a slot, and for how long (serve.answer_timeout).
    answer_pool = ThreadPoolExecutor(max_workers=serve.answer_concurrency, thread_name_prefix="hopgraph-answer")
    answer_slots = asyncio.Semaphore(serve.answer_concurrency)
    busy_retry = str(max(1, math.ceil(serve.answer_timeout)))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_jobs:
            jobs.start()
        yield
        if start_jobs:
            jobs.stop()
        answer_pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        lifespan=lifespan,
        title="hopgraph",
        version=__version__,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        description="Multi-hop retrieval and answers with provenance over a private index. "
        "Every endpoint needs `Authorization: Bearer <token>` except /healthz (liveness and live version) and "
        "/docs and /openapi.json (this API description, which holds no index data). "
        "Index counts and /metrics need the admin scope.",
    )
    app.state.holder, app.state.jobs, app.state.metrics = holder, jobs, metrics

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals: a body that is not UTF-8 JSON (400), unknown path (404), wrong verb (405).
        code = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, f"http_{exc.status_code}"
        )
        message = "the request body is not valid UTF-8 JSON" if exc.status_code == 400 else str(exc.detail)
        return JSONResponse(error_body(code, message), exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return JSONResponse(error_body("malformed_json", "the request body is not valid UTF-8 JSON"), 400)
        details = [
            {"field": ".".join(str(x) for x in p.get("loc", ())[1:]), "problem": p.get("msg", "")} for p in problems
        ]
        message = "; ".join(f"{d['field'] or 'body'}: {d['problem']}" for d in details)
        return JSONResponse(error_body("invalid_request", message, details=details), 422)

    @app.exception_handler(HopgraphError)
    async def hopgraph_error(request: Request, exc: HopgraphError) -> JSONResponse:
        # LLM and server faults name internal addresses and paths: logged here, never sent to clients.
        if isinstance(exc, LLMUnavailableError):
            log.warning("%s %s: %s", request.method, request.url.path, exc)
            return JSONResponse(
                error_body("llm_unavailable", "the answer model is down or too slow; try again later"),
                503,
                headers={"Retry-After": "30"},
            )
        if isinstance(exc, LLMRequestError):
            log.warning("%s %s: %s", request.method, request.url.path, exc)
            return JSONResponse(
                error_body(
                    "llm_rejected",
                    "the answer model refused the request (e.g. a prompt too long for its context); "
                    "retrying the same request will not help",
                ),
                422,
            )
        if isinstance(exc, (ConfigError, InputError)):
            return JSONResponse(error_body("invalid_request", str(exc)), 422)
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(error_body("server_error", "the server failed to handle the request (logged)"), 500)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug is still a JSON error to the client; the traceback goes to the log only.
        log.error("%s %s: unexpected %s", request.method, request.url.path, type(exc).__name__, exc_info=exc)
        return JSONResponse(error_body("server_error", "the server failed to handle the request (logged)"), 500)

    def principal(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(
                401,
                "unauthenticated",
                "missing bearer token (Authorization: Bearer <token>)",
                {"WWW-Authenticate": "Bearer"},
            )
        who = tokens.lookup(token.strip())
        if who is None:
            # Guessing tokens is rate-limited per client address like any token's requests.
            wait = limiter.allow(f"unknown-token@{request.client.host if request.client else '?'}")
            if wait:
                metrics.rate_limited.inc()
                raise APIError(
                    429,
                    "rate_limited",
                    "too many requests with unknown tokens",
                    {"Retry-After": str(max(1, round(wait)))},
                )
            raise APIError(401, "unauthenticated", "unknown token", {"WWW-Authenticate": "Bearer"})
        wait = limiter.allow(hashlib.sha256(token.strip().encode()).hexdigest())
        if wait:
            metrics.rate_limited.inc()
            raise APIError(
                429,
                "rate_limited",
                f"rate limit of {serve.rate_limit:g} requests/s exceeded",
                {"Retry-After": str(max(1, round(wait)))},
            )
        return who

    def admin(who: Principal = Depends(principal)) -> Principal:
        if not who.admin:
            raise APIError(
                403,
                "forbidden",
                f"user {shown(who.user)} lacks the admin scope needed for this (changing documents, index counts, "
                "metrics)",
            )
        return who

    def reader_filter(who: Principal, where: dict[str, Any]) -> MetadataFilter:
        try:
            check_where(where, serve.max_filter_keys, serve.max_filter_values)
        except ValueError as exc:
            raise APIError(422, "invalid_filter", f"where: {exc}") from None
        return MetadataFilter(
            groups=who.groups, allow_unrestricted=serve.unrestricted_documents == "everyone", where=where
        )

    def run_retrieval(
        request: Request, body: RetrieveRequest, who: Principal, snap: Snapshot
    ) -> tuple[Snapshot, RetrievalResult]:
        method = body.method or config.retrieval.method
        request.state.method = method if method in METHODS else "unknown"
        if method not in METHODS:
            raise APIError(
                400, "unknown_method", f"unknown method {shown(method)}; this index offers {', '.join(snap.methods)}"
            )
        if method not in snap.methods:
            raise APIError(
                400,
                "unsupported_method",
                f"method {shown(method)} needs LLM-built parts this index lacks; it offers {', '.join(snap.methods)}",
            )
        if len(body.query) > serve.max_query_chars:
            raise APIError(
                422, "query_too_long", f"query of {len(body.query)} characters; the limit is {serve.max_query_chars}"
            )
        if body.budget is not None and body.budget > serve.max_budget:
            raise APIError(422, "budget_too_large", f"budget {body.budget} over the server's limit {serve.max_budget}")
        overrides = dotted_keys(body.params)
        if "budget" in overrides or "method" in overrides:
            raise APIError(422, "invalid_request", "give method and budget as fields of the request, not in params")
        try:
            check_params(overrides, serve.request_limits)
        except OverLimit as exc:
            raise APIError(422, "over_limit", str(exc)) from None
        flt = reader_filter(who, body.where)
        # No lock across the retrieval: the models lock themselves per call, so a long search
        # only ever delays others by one model call, and the deadline stops it.
        try:
            return snap, snap.retriever.retrieve(
                body.query,
                method=method,
                budget=body.budget,
                metadata_filter=flt,
                overrides=overrides,
                deadline=serve.request_deadline,
            )
        except DeadlineExceeded as exc:
            raise APIError(504, "deadline_exceeded", f"{exc} (serve.request_deadline)") from None

    def retrieval_in_snapshot(
        request: Request, body: RetrieveRequest, who: Principal
    ) -> tuple[Snapshot, RetrievalResult]:
        """The retrieval under a counted snapshot: garbage collection spares its version until it ends."""
        with holder.snapshot() as snap:
            return run_retrieval(request, body, who, snap)

    def finite(payload: dict[str, Any]) -> dict[str, Any]:
        """JSON has no Infinity/NaN: a result with one is refused, never sent as null or as a bare literal."""
        found = non_finite_at(payload)
        if found:
            raise APIError(
                422,
                "non_finite_result",
                f"{found} is not a finite number: the request's params make scores overflow; use smaller settings",
            )
        return payload

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, Any]:
        """Liveness and the live version (no token needed)."""
        return {"status": "ok", "version": holder.current.version}

    @app.get("/metrics", tags=["service"], response_class=Response)
    def prometheus(who: Principal = Depends(admin)) -> Response:
        """Prometheus text format (admin scope).

        Request counts and latencies, LLM tokens, documents, job queue depth.
        """
        metrics.queue_depth.set(jobs.queue_depth())
        metrics.documents.set(len(holder.current.doc_ids))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/index", tags=["index"])
    def index_info(who: Principal = Depends(principal)) -> dict[str, Any]:
        """Live version, models, limits and the methods this index offers; counts and pending jobs for admins only."""
        snap = holder.current
        manifest = snap.index.manifest
        info: dict[str, Any] = {
            "version": snap.version,
            "methods": list(snap.methods),
            "default_method": config.retrieval.method,
            # Local model folders are server paths: readers get their names only.
            "models": {
                k: Path(v).name if isinstance(v, str) and not who.admin else v
                for k, v in manifest.get("models", {}).items()
            },
            "limits": {
                "max_query_chars": serve.max_query_chars,
                "max_budget": serve.max_budget,
                "max_documents": serve.max_documents,
                "max_filter_keys": serve.max_filter_keys,
                "max_filter_values": serve.max_filter_values,
            },
        }
        if who.admin:  # counts include documents a reader may not read
            info.update(counts=manifest.get("counts", {}), jobs_pending=jobs.queue_depth())
        return info

    @app.post("/v1/retrieve", tags=["query"])
    def retrieve(request: Request, body: RetrieveRequest, who: Principal = Depends(principal)) -> dict[str, Any]:
        """Context and provenance (piece, chunk, documents, graph path) the reader is allowed to see."""
        snap, result = retrieval_in_snapshot(request, body, who)
        return finite({**result.to_dict(), "version": snap.version})

    @app.post("/v1/answer", tags=["query"])
    async def answer(request: Request, body: RetrieveRequest, who: Principal = Depends(principal)) -> dict[str, Any]:
        """An answer with citations and the evidence path; 503 with Retry-After if the LLM backend is down or slow or
        every answer slot stays busy for serve.answer_timeout; ``evidence_dropped`` counts evidence left out
        to fit the model's context."""
        snap, result = await run_in_threadpool(retrieval_in_snapshot, request, body, who)
        evidence = finite(result.to_dict())["evidence"]
        try:
            await asyncio.wait_for(answer_slots.acquire(), serve.answer_timeout)
        except TimeoutError:
            raise APIError(
                503,
                "answers_busy",
                f"all {serve.answer_concurrency} answer slots stayed busy for {serve.answer_timeout:g} s; try "
                "again later",
                {"Retry-After": busy_retry},
            ) from None
        try:
            (reply,), usage = await asyncio.get_running_loop().run_in_executor(
                answer_pool, answer_many, llm, [result], config.answer
            )
        finally:
            answer_slots.release()
        metrics.llm_tokens.labels("prompt").inc(usage.prompt_tokens)
        metrics.llm_tokens.labels("completion").inc(usage.completion_tokens)
        return {
            "answer": reply.text,
            "found": reply.found,
            "citations": reply.citations,
            "version": snap.version,
            "evidence": evidence,
            "evidence_dropped": reply.evidence_dropped,
            "method": result.method,
            "budget": result.budget,
        }

    @app.post("/v1/documents", tags=["documents"], status_code=202)
    def insert(body: InsertRequest, who: Principal = Depends(admin)) -> dict[str, Any]:
        """Queue an insert (an existing id is replaced); poll GET /v1/jobs/{id}."""
        if len(body.documents) > serve.max_documents:
            raise APIError(
                413, "too_many_documents", f"{len(body.documents)} documents; at most {serve.max_documents} per request"
            )
        ids = [d.id for d in body.documents]
        if len(set(ids)) != len(ids):
            raise APIError(422, "duplicate_ids", "the same document id appears twice in the request")
        documents = []
        for d in body.documents:
            metadata = dict(d.metadata)
            if d.acl is not None:
                metadata["acl"] = d.acl
            try:
                normalise_metadata(metadata)
            except ValueError as exc:
                raise APIError(422, "invalid_request", f"document {shown(d.id)}: {exc}") from None
            documents.append(Document(id=d.id, text=d.text, title=d.title, source=d.source or "api", metadata=metadata))
        try:
            return jobs.submit(documents, [])
        except QueueFullError as exc:
            raise APIError(
                429, "queue_full", str(exc), {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
            ) from None

    @app.delete("/v1/documents/{doc_id:path}", tags=["documents"], status_code=202)
    def delete(doc_id: str, who: Principal = Depends(admin)) -> dict[str, Any]:
        """Queue the removal of a document and everything derived only from it.

        Any id that can be inserted can be deleted: "/" included, percent-encoded.
        """
        try:
            return jobs.submit([], [doc_id])
        except InputError:  # the only way a single delete can fail validation
            raise APIError(
                404, "unknown_document", f"no document {shown(doc_id)} in the index or its queued updates"
            ) from None
        except QueueFullError as exc:
            raise APIError(
                429, "queue_full", str(exc), {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
            ) from None

    @app.get("/v1/jobs/{job_id}", tags=["documents"])
    def job(job_id: str, who: Principal = Depends(admin)) -> dict[str, Any]:
        """Status of an update job.

        queued, running, publishing (built, the server is switching to it), done (served now, with its
        version) or failed (with why).
        """
        try:
            return jobs.job(job_id)
        except InputError:
            raise APIError(404, "unknown_job", f"no job {shown(job_id)}") from None

    app.add_middleware(GuardMiddleware, metrics=metrics, max_body_bytes=serve.max_body_bytes)
    return app
