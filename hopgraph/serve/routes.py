"""The core HTTP API: retrieval and answers under access control, document updates as background
jobs, index stats, health and Prometheus metrics.

Access control is applied inside retrieval (the reader's groups become the scope every method
ranks within), never by filtering what comes out. Counts of the index and the metrics are for
admins only, since they would tell a reader about documents it may not read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from hopgraph.documents import Document, repeated_id
from hopgraph.errors import InputError, QueueFullError, UnknownDocumentError
from hopgraph.index.ingest import normalise_metadata
from hopgraph.serve.auth import Principal
from hopgraph.serve.errors import APIError, shown
from hopgraph.serve.schemas import InsertRequest, RetrieveRequest
from hopgraph.serve.service import (
    FastJSON,
    Service,
    admin,
    answer_payload,
    finite,
    finite_response,
    principal,
    service_of,
)

router = APIRouter()


def queue_full(exc: QueueFullError, limit: int) -> APIError:
    """429 with Retry-After; the message is the server's own (the error's names the index folder, a server path)."""
    message = (
        f"the update-job queue is full: the limit is {limit} jobs queued or running; try again when one has finished"
    )
    return APIError(429, "queue_full", message, {"Retry-After": str(max(1, math.ceil(exc.retry_after)))})


@router.get("/healthz", tags=["service"])
@router.head("/healthz", include_in_schema=False)  # uptime checkers often send HEAD
async def healthz(service: Service = Depends(service_of)) -> dict[str, Any]:
    """Liveness and the live version (no token needed)."""
    return {"status": "ok", "version": service.holder.current.version}


@router.get("/metrics", tags=["service"], response_class=Response)
def prometheus(who: Principal = Depends(admin), service: Service = Depends(service_of)) -> Response:
    """Prometheus text format (admin scope).

    Request counts and latencies, LLM tokens, documents, job queue depth, request log lines dropped.
    """
    service.metrics.queue_depth.set(service.jobs.queue_depth())
    service.metrics.documents.set(len(service.holder.current.doc_ids))
    return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")


@router.get("/v1/index", tags=["index"])
def index_info(who: Principal = Depends(principal), service: Service = Depends(service_of)) -> dict[str, Any]:
    """Live version, models, limits and the methods this index offers; counts and pending jobs for admins only."""
    snap = service.holder.current
    manifest = snap.index.manifest
    serve = service.serve
    info: dict[str, Any] = {
        "version": snap.version,
        "methods": list(snap.methods),
        "default_method": service.config.retrieval.method,
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
        info.update(counts=manifest.get("counts", {}), jobs_pending=service.jobs.queue_depth())
    return info


@router.post("/v1/retrieve", tags=["query"], response_class=FastJSON)
def retrieve(
    request: Request,
    body: RetrieveRequest,
    who: Principal = Depends(principal),
    service: Service = Depends(service_of),
) -> FastJSON:
    """Context and provenance (piece, chunk, documents, graph path) the reader is allowed to see."""
    version, result = service.retrieve(request, body, who)
    return finite_response({**result.to_dict(), "version": version})


@router.post("/v1/answer", tags=["query"], response_class=FastJSON)
async def answer(
    request: Request,
    body: RetrieveRequest,
    who: Principal = Depends(principal),
    service: Service = Depends(service_of),
) -> FastJSON:
    """An answer with citations and the evidence path; 503 with Retry-After if the LLM backend is down or slow or
    every answer slot stays busy for serve.answer_timeout; ``evidence_dropped`` counts evidence left out
    to fit the model's context."""
    version, result = await service.retrieve_async(request, body, who)
    evidence = finite(result.to_dict())["evidence"]
    reply, _ = await service.generate(request, result)
    return FastJSON(answer_payload(reply, result, version, evidence))  # the evidence was checked above


@router.post("/v1/documents", tags=["documents"], status_code=202)
def insert(
    body: InsertRequest, who: Principal = Depends(admin), service: Service = Depends(service_of)
) -> dict[str, Any]:
    """Queue an insert (an existing id is replaced); poll GET /v1/jobs/{id}."""
    limit = service.serve.max_documents
    if len(body.documents) > limit:
        raise APIError(413, "too_many_documents", f"{len(body.documents)} documents; at most {limit} per request")
    twice = repeated_id([d.id for d in body.documents])
    if twice is not None:
        raise APIError(422, "duplicate_ids", f"the document id {shown(twice)} appears twice in the request")
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
        return service.jobs.submit(documents, [], who.user)
    except QueueFullError as exc:
        raise queue_full(exc, service.serve.max_queued_jobs) from None


@router.delete("/v1/documents/{doc_id:path}", tags=["documents"], status_code=202)
def delete(doc_id: str, who: Principal = Depends(admin), service: Service = Depends(service_of)) -> dict[str, Any]:
    """Queue the removal of a document and everything derived only from it.

    Any id that can be inserted can be deleted: "/" included, percent-encoded.
    """
    try:
        return service.jobs.submit([], [doc_id], who.user)
    except UnknownDocumentError:
        raise APIError(
            404, "unknown_document", f"no document {shown(doc_id)} in the index or its queued updates"
        ) from None
    except InputError as exc:  # it would delete the last document
        raise APIError(409, "update_refused", str(exc)) from None
    except QueueFullError as exc:
        raise queue_full(exc, service.serve.max_queued_jobs) from None


@router.get("/v1/jobs/{job_id}", tags=["documents"])
def job(job_id: str, who: Principal = Depends(admin), service: Service = Depends(service_of)) -> dict[str, Any]:
    """Status of an update job.

    queued, running, publishing (built, the server is switching to it), done (served now, with its
    version) or failed (with why).
    """
    try:
        return service.jobs.job(job_id)
    except InputError:
        raise APIError(404, "unknown_job", f"no job {shown(job_id)}") from None
