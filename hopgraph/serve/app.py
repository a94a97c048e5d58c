"""The HTTP API of `hopgraph serve`: retrieval and answers under access control, document updates
as background jobs, index stats, health and Prometheus metrics.

Access control is applied inside retrieval (the reader's groups become the scope every method
ranks within), never by filtering what comes out. Every error is JSON: ``{"error": {"code",
"message"}}`` with a 4xx/5xx status that says whose fault it is.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import re
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from hopgraph import __version__
from hopgraph.config import HopgraphConfig, dotted_keys
from hopgraph.documents import Document
from hopgraph.errors import ConfigError, HopgraphError, InputError, LLMUnavailableError, QueueFullError
from hopgraph.index.ingest import normalise_metadata
from hopgraph.llm import open_llm
from hopgraph.retrieve.answer import answer_many
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.methods import METHODS
from hopgraph.retrieve.packing import RetrievalResult
from hopgraph.serve.auth import Principal, TokenBook
from hopgraph.serve.metrics import Metrics, RateLimiter
from hopgraph.serve.state import IndexHolder, JobRunner, Snapshot


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
    method: str | None = Field(None, description="Retrieval method (GET /v1/index lists those this index offers); default: the server's.")
    budget: int | None = Field(None, ge=50, description="λ: context budget in tokens (at most serve.max_budget).")
    params: dict[str, Any] = Field(default_factory=dict, description="Retrieval settings for this request, as in the [retrieval] config section, e.g. {\"ppr\": {\"damping\": 0.6}}.")
    where: dict[str, Any] = Field(default_factory=dict, description="Metadata filter: key → allowed value or list of values.")


class DocumentIn(Strict):
    id: str = Field(min_length=1, max_length=512, pattern=r"^[^\x00-\x1f]+$")
    text: str = Field(min_length=1)
    title: str = ""
    source: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict, description="Carried to every chunk; acl (list of groups) and timestamp have a meaning.")
    acl: list[str] | None = Field(None, description="Groups allowed to read the document (same as metadata.acl).")


class InsertRequest(Strict):
    documents: list[DocumentIn] = Field(min_length=1)


# ------------------------------------------------------------------------------------ middleware
_ENDPOINTS = [(re.compile(r"^/v1/documents/[^/]+$"), "/v1/documents/{id}"), (re.compile(r"^/v1/jobs/[^/]+$"), "/v1/jobs/{id}")]
_KNOWN = {"/v1/retrieve", "/v1/answer", "/v1/documents", "/v1/index", "/healthz", "/metrics", "/docs", "/openapi.json"}


def endpoint_label(path: str) -> str:
    """Bounded label set: ids never become metric labels."""
    for pattern, label in _ENDPOINTS:
        if pattern.match(path):
            return label
    return path if path in _KNOWN else "other"


class GuardMiddleware:
    """Refuses oversized bodies before they are read, and times every request for the metrics."""

    def __init__(self, app: Callable, metrics: Metrics, max_body_bytes: int):
        self.app, self.metrics, self.max_body = app, metrics, max_body_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_recording(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            declared = dict(scope.get("headers", [])).get(b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
                await JSONResponse(error_body("body_too_large", f"request body over {self.max_body} bytes"), 413)(scope, receive, send_recording)
                return
            seen = 0

            async def receive_counting() -> dict:
                nonlocal seen
                message = await receive()
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise APIError(413, "body_too_large", f"request body over {self.max_body} bytes")
                return message

            await self.app(scope, receive_counting, send_recording)
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
    # Hugging Face fast tokenizers are not safe to call from several threads at once.
    model_lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_jobs:
            jobs.start()
        yield
        if start_jobs:
            jobs.stop()

    app = FastAPI(lifespan=lifespan, title="hopgraph", version=__version__, description="Multi-hop retrieval and answers with provenance over a private index. "
                  "Every endpoint except /healthz needs `Authorization: Bearer <token>`.")
    app.state.holder, app.state.jobs, app.state.metrics = holder, jobs, metrics

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals: a body that is not UTF-8 JSON (400), unknown path (404), wrong verb (405).
        code = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        message = "the request body is not valid UTF-8 JSON" if exc.status_code == 400 else str(exc.detail)
        return JSONResponse(error_body(code, message), exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return JSONResponse(error_body("malformed_json", "the request body is not valid UTF-8 JSON"), 400)
        details = [{"field": ".".join(str(x) for x in p.get("loc", ())[1:]), "problem": p.get("msg", "")} for p in problems]
        message = "; ".join(f"{d['field'] or 'body'}: {d['problem']}" for d in details)
        return JSONResponse(error_body("invalid_request", message, details=details), 422)

    @app.exception_handler(HopgraphError)
    async def hopgraph_error(request: Request, exc: HopgraphError) -> JSONResponse:
        if isinstance(exc, LLMUnavailableError):
            return JSONResponse(error_body("llm_unavailable", str(exc)), 503, headers={"Retry-After": "30"})
        if isinstance(exc, (ConfigError, InputError)):
            return JSONResponse(error_body("invalid_request", str(exc)), 422)
        return JSONResponse(error_body("server_error", str(exc)), 500)

    def principal(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(401, "unauthenticated", "missing bearer token (Authorization: Bearer <token>)", {"WWW-Authenticate": "Bearer"})
        who = tokens.lookup(token.strip())
        if who is None:
            raise APIError(401, "unauthenticated", "unknown token", {"WWW-Authenticate": "Bearer"})
        wait = limiter.allow(hashlib.sha256(token.strip().encode()).hexdigest())
        if wait:
            metrics.rate_limited.inc()
            raise APIError(429, "rate_limited", f"rate limit of {serve.rate_limit:g} requests/s exceeded", {"Retry-After": str(max(1, round(wait)))})
        return who

    def admin(who: Principal = Depends(principal)) -> Principal:
        if not who.admin:
            raise APIError(403, "forbidden", f"user {who.user!r} lacks the admin scope needed to change documents")
        return who

    def reader_filter(who: Principal, where: dict[str, Any]) -> MetadataFilter:
        return MetadataFilter(groups=who.groups, allow_unrestricted=serve.unrestricted_documents == "everyone", where=where)

    def run_retrieval(request: Request, body: RetrieveRequest, who: Principal, snap: Snapshot) -> tuple[Snapshot, RetrievalResult]:
        method = body.method or config.retrieval.method
        request.state.method = method if method in METHODS else "unknown"
        if method not in METHODS:
            raise APIError(400, "unknown_method", f"unknown method {method!r}; this index offers {', '.join(snap.methods)}")
        if method not in snap.methods:
            raise APIError(400, "unsupported_method", f"method {method!r} needs LLM-built parts this index lacks; it offers {', '.join(snap.methods)}")
        if len(body.query) > serve.max_query_chars:
            raise APIError(422, "query_too_long", f"query of {len(body.query)} characters; the limit is {serve.max_query_chars}")
        if body.budget is not None and body.budget > serve.max_budget:
            raise APIError(422, "budget_too_large", f"budget {body.budget} over the server's limit {serve.max_budget}")
        overrides = dotted_keys(body.params)
        if "budget" in overrides or "method" in overrides:
            raise APIError(422, "invalid_request", "give method and budget as fields of the request, not in params")
        flt = reader_filter(who, body.where)
        with model_lock:
            vector = snap.retriever.embed([body.query])[0]
            if method == "cue":  # its reranker calls the model too
                return snap, snap.retriever.retrieve(body.query, method=method, budget=body.budget, metadata_filter=flt, vector=vector, overrides=overrides)
        return snap, snap.retriever.retrieve(body.query, method=method, budget=body.budget, metadata_filter=flt, vector=vector, overrides=overrides)

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        """Liveness and the live version (no token needed)."""
        return {"status": "ok", "version": holder.current.version}

    @app.get("/metrics", tags=["service"], response_class=Response)
    def prometheus(who: Principal = Depends(principal)) -> Response:
        """Prometheus text format: request counts and latencies, LLM tokens, job queue depth."""
        metrics.queue_depth.set(jobs.queue_depth())
        metrics.documents.set(len(holder.current.doc_ids))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/index", tags=["index"])
    def index_info(who: Principal = Depends(principal)) -> dict[str, Any]:
        """Live version, counts, models and the methods this index offers."""
        snap = holder.current
        manifest = snap.index.manifest
        return {"version": snap.version, "methods": list(snap.methods), "default_method": config.retrieval.method,
                "counts": manifest.get("counts", {}), "models": manifest.get("models", {}), "jobs_pending": jobs.queue_depth(),
                "limits": {"max_query_chars": serve.max_query_chars, "max_budget": serve.max_budget, "max_documents": serve.max_documents}}

    @app.post("/v1/retrieve", tags=["query"])
    def retrieve(request: Request, body: RetrieveRequest, who: Principal = Depends(principal)) -> dict[str, Any]:
        """Context and provenance (piece, chunk, documents, graph path) the reader is allowed to see."""
        with holder.snapshot() as snap:
            snap, result = run_retrieval(request, body, who, snap)
        return {**result.to_dict(), "version": snap.version}

    @app.post("/v1/answer", tags=["query"])
    def answer(request: Request, body: RetrieveRequest, who: Principal = Depends(principal)) -> dict[str, Any]:
        """An answer with citations and the evidence path; 503 if the LLM backend is down or slow."""
        with holder.snapshot() as snap:
            snap, result = run_retrieval(request, body, who, snap)
        (reply,), usage = answer_many(llm, [result], config.answer)
        metrics.llm_tokens.labels("prompt").inc(usage.prompt_tokens)
        metrics.llm_tokens.labels("completion").inc(usage.completion_tokens)
        return {"answer": reply.text, "found": reply.found, "citations": reply.citations, "version": snap.version,
                "evidence": result.to_dict()["evidence"], "method": result.method, "budget": result.budget}

    @app.post("/v1/documents", tags=["documents"], status_code=202)
    def insert(body: InsertRequest, who: Principal = Depends(admin)) -> dict[str, Any]:
        """Queue an insert (an existing id is replaced); poll GET /v1/jobs/{id}."""
        if len(body.documents) > serve.max_documents:
            raise APIError(413, "too_many_documents", f"{len(body.documents)} documents; at most {serve.max_documents} per request")
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
                raise APIError(422, "invalid_request", f"document {d.id!r}: {exc}") from None
            documents.append(Document(id=d.id, text=d.text, title=d.title, source=d.source or "api", metadata=metadata))
        try:
            return jobs.submit(documents, [])
        except QueueFullError as exc:
            raise APIError(429, "queue_full", str(exc), {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}) from None

    @app.delete("/v1/documents/{doc_id}", tags=["documents"], status_code=202)
    def delete(doc_id: str, who: Principal = Depends(admin)) -> dict[str, Any]:
        """Queue the removal of a document and everything derived only from it."""
        try:
            return jobs.submit([], [doc_id])
        except InputError:  # the only way a single delete can fail validation
            raise APIError(404, "unknown_document", f"no document {doc_id!r} in the index or its queued updates") from None
        except QueueFullError as exc:
            raise APIError(429, "queue_full", str(exc), {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}) from None

    @app.get("/v1/jobs/{job_id}", tags=["documents"])
    def job(job_id: str, who: Principal = Depends(admin)) -> dict[str, Any]:
        """Status of an update job: queued, running, publishing (built, the server is switching to it), done (served now, with its version) or failed (with why)."""
        try:
            return jobs.job(job_id)
        except InputError:
            raise APIError(404, "unknown_job", f"no job {job_id!r}") from None

    app.add_middleware(GuardMiddleware, metrics=metrics, max_body_bytes=serve.max_body_bytes)
    return app
