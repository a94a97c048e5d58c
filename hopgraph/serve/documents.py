"""Document endpoints for people and tools that hold files rather than JSON: upload files in the
formats ``hopgraph index`` reads, and list the documents of the live version (admin scope).

An upload is read file by file as ``hopgraph index`` reads a file (:func:`hopgraph.index.ingest.read_upload`:
``.txt``, ``.md``, ``.pdf``, ``.docx``, ``.html``, ``.jsonl``) and then queued exactly as ``POST /v1/documents``
would queue the same documents, so the bounds (body size, documents per request, ids, text,
metadata) and the job are the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from pydantic import ValidationError

from hopgraph.config import ServeConfig
from hopgraph.documents import name_control, repeated_id
from hopgraph.errors import InputError, QueueFullError, listed
from hopgraph.index.catalog import document_row
from hopgraph.index.formats import DOCUMENT_SUFFIXES
from hopgraph.serve.auth import Principal
from hopgraph.serve.errors import APIError, problems_of, shown
from hopgraph.serve.parsing import read_files
from hopgraph.serve.routes import insert, queue_full
from hopgraph.serve.schemas import DocumentIn, InsertRequest
from hopgraph.serve.service import Service, admin, service_of

router = APIRouter(tags=["documents"])
MAX_PAGE = 1000  # documents in one page of GET /v1/documents
_FORMATS = " ".join((*DOCUMENT_SUFFIXES, ".jsonl"))  # what an upload may be (the page's picker offers the same)


def upload_name(raw: str | None) -> str:
    """The file's own name (a client may send a path; only its last part is used)."""
    name = Path((raw or "").replace("\\", "/")).name
    control = name_control(name)
    if not name or name in (".", "..") or control:
        why = f" (it holds the control character {control})" if control else ""
        raise APIError(422, "invalid_file_name", f"file name {shown(raw or '')} is not usable{why}")
    return name


def documents_of(files: list[tuple[str, bytes]], acl: list[str] | None, serve: ServeConfig) -> list[DocumentIn]:
    """The uploaded files (name, bytes) read as ``hopgraph index`` reads them, in a child process
    bounded by ``serve`` (:mod:`hopgraph.serve.parsing`); 422 naming every file or record that cannot
    be used (one bad part refuses the whole upload, as a JSON insert does), or text past
    ``serve.max_body_bytes`` in all (a 268 kB DOCX unzips to 97 MB: the body bound must hold for the
    text too); 413 past ``serve.max_documents``, as for a JSON insert, found by the child before the
    server decodes them.

    The form's ``acl``, when given, is set on every document, whatever a JSONL record says: an admin
    who uploads for a group must not have a record widen (``"acl": null``) or move its audience."""
    try:
        reads = read_files(files, serve)
    except InputError as exc:
        raise APIError(422, "unreadable_upload", str(exc)) from None
    problems = [problem for _, found, _ in reads for problem in found]
    if problems:
        raise APIError(422, "unreadable_upload", listed(problems, total=sum(count for _, _, count in reads)))
    if sum(len(read) for read, _, _ in reads) > serve.max_documents:
        raise APIError(
            413,
            "too_many_documents",
            f"the upload holds more than {serve.max_documents} documents (serve.max_documents); "
            "index such files with `hopgraph update` instead",
        )
    documents: list[DocumentIn] = []
    for doc in (doc for read, _, _ in reads for doc in read):
        metadata = {k: v for k, v in doc.metadata.items() if k != "source_path"}
        if acl:
            metadata["acl"] = acl
        try:
            documents.append(
                DocumentIn(id=doc.id, text=doc.text, title=doc.title, source=doc.source, metadata=metadata)
            )
        except ValidationError as exc:
            _, problem = problems_of(exc.errors(), whole="document")
            raise APIError(422, "invalid_request", f"document {shown(doc.id)}: {problem}") from None
    return documents


@router.post("/v1/documents/upload", status_code=202)
def upload(
    files: Annotated[list[UploadFile], File(description="Files as `hopgraph index` reads them: " + _FORMATS)],
    acl: Annotated[
        str,
        Form(
            description="Groups that may read the documents, comma-separated; set on every document "
            "(empty: as the files say)"
        ),
    ] = "",
    who: Principal = Depends(admin),
    service: Service = Depends(service_of),
) -> dict[str, Any]:
    """Queue an insert of uploaded files (an existing id is replaced); poll GET /v1/jobs/{id}.

    A text, Markdown, PDF, DOCX or HTML file is one document whose id is its file name; a JSONL file
    holds one document per line (``id``, ``text``, ``title``, ``metadata``). An HTML page of over
    100,000 elements or nested over 512 levels is refused (422, with its line and column), and so is
    an upload that takes longer than ``serve.upload_seconds`` to read."""
    names = [upload_name(f.filename) for f in files]
    groups = [g.strip() for g in acl.split(",") if g.strip()]
    if acl and not groups:  # ", ," or " " read as no acl: the documents were public (fails open)
        raise APIError(422, "invalid_request", f"acl {shown(acl)} names no group: give group names, comma-separated")
    twice = repeated_id(names)
    if twice is not None:
        raise APIError(422, "duplicate_files", f"the file name {shown(twice)} appears twice in the upload")
    serve = service.config.serve
    try:
        service.jobs.check_room()  # before the files are read
    except QueueFullError as exc:
        raise queue_full(exc, serve.max_queued_jobs) from None
    if not service.upload_slots.acquire(blocking=False):
        raise APIError(
            503,
            "uploads_busy",
            f"{serve.max_uploads} uploads are being read (serve.max_uploads); try again shortly",
            {"Retry-After": "5"},
        )
    try:
        files_read = [(name, part.file.read()) for name, part in zip(names, files)]
        documents = documents_of(files_read, groups or None, serve)
    finally:
        service.upload_slots.release()
    try:
        body = InsertRequest(documents=documents)
    except ValidationError:  # the only field left to fail: no documents
        raise APIError(422, "unreadable_upload", "the upload holds no document") from None
    return insert(body, who, service)  # the job; its ``add`` lists the ids read from the files


@router.get("/v1/documents")
def list_documents(
    offset: Annotated[int, Query(ge=0, description="Documents to skip.")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Documents in this page (at most {MAX_PAGE}).")] = 100,
    who: Principal = Depends(admin),
    service: Service = Depends(service_of),
) -> dict[str, Any]:
    """The documents of the live version, in index order (admin scope): id, title, source, acl, timestamp
    (the document's own, else its file's modification time), as ``hopgraph documents`` lists them."""
    snap = service.holder.current
    table = snap.index.documents
    total = len(table["id"])
    rows = range(offset, min(offset + limit, total))
    return {
        "version": snap.version,
        "total": total,
        "offset": offset,
        "limit": limit,
        "documents": [
            document_row(
                table["id"][i], table["title"][i], table["source"][i] if "source" in table else "", table["metadata"][i]
            )
            for i in rows
        ],
    }
