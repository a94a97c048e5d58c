"""Document endpoints for people and tools that hold files rather than JSON: upload files in the
formats ``hopgraph index`` reads, and list the documents of the live version (admin scope).

An upload is read by the corpus reader (:func:`hopgraph.index.ingest.read_corpus`: ``.txt``,
``.md``, ``.jsonl`` and benchmark ``.json``) and then queued exactly as ``POST /v1/documents``
would queue the same documents, so the bounds (body size, documents per request, ids, text,
metadata) and the job are the same.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from pydantic import ValidationError

from hopgraph.errors import InputError
from hopgraph.index.ingest import read_corpus
from hopgraph.serve.auth import Principal
from hopgraph.serve.errors import APIError, shown
from hopgraph.serve.routes import insert
from hopgraph.serve.schemas import DocumentIn, InsertRequest
from hopgraph.serve.service import Service, admin, service_of

router = APIRouter(tags=["documents"])
MAX_PAGE = 1000  # documents in one page of GET /v1/documents
MAX_PROBLEMS = 20  # unreadable files or records named in one error


def upload_name(raw: str | None) -> str:
    """The file's own name (a client may send a path; only its last part is used)."""
    name = Path((raw or "").replace("\\", "/")).name
    if not name or name in (".", "..") or any(ord(c) < 32 for c in name):
        raise APIError(422, "invalid_file_name", f"file name {shown(raw or '')} is not usable")
    return name


def documents_of(folder: Path, names: list[str], acl: list[str] | None) -> list[DocumentIn]:
    """The uploaded files (saved in ``folder``) read as ``hopgraph index`` reads them; 422 naming every
    file or record that cannot be used (one bad part refuses the whole upload, as a JSON insert does)."""
    default = {"acl": acl} if acl else None
    try:
        result = read_corpus([folder / name for name in names], default_metadata=default)
    except InputError as exc:
        raise APIError(422, "unreadable_upload", str(exc).replace(f"{folder}/", "")) from None
    if result.problems:
        listed = "; ".join(str(p).replace(f"{folder}/", "") for p in result.problems[:MAX_PROBLEMS])
        more = len(result.problems) - MAX_PROBLEMS
        raise APIError(422, "unreadable_upload", listed + (f"; and {more} more" if more > 0 else ""))
    documents = []
    for doc in result.documents:
        source = Path(doc.source).name if doc.source else ""
        metadata = {k: v for k, v in doc.metadata.items() if k != "source_path"}  # a path on the server
        try:
            documents.append(DocumentIn(id=doc.id, text=doc.text, title=doc.title, source=source, metadata=metadata))
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in exc.errors())
            raise APIError(422, "invalid_request", f"document {shown(doc.id)}: {problem}") from None
    return documents


@router.post("/v1/documents/upload", status_code=202)
def upload(
    files: Annotated[list[UploadFile], File(description="Files as `hopgraph index` reads them: .txt .md .jsonl .json")],
    acl: Annotated[str, Form(description="Groups that may read the documents, comma-separated (empty: no acl)")] = "",
    who: Principal = Depends(admin),
    service: Service = Depends(service_of),
) -> dict[str, Any]:
    """Queue an insert of uploaded files (an existing id is replaced); poll GET /v1/jobs/{id}.

    A text or Markdown file is one document whose id is its file name; a JSONL file holds one
    document per line (``id``, ``text``, ``title``, ``metadata``)."""
    names = [upload_name(f.filename) for f in files]
    if len(set(names)) != len(names):
        raise APIError(422, "duplicate_files", "the same file name appears twice in the upload")
    groups = [g.strip() for g in acl.split(",") if g.strip()]
    with tempfile.TemporaryDirectory(prefix="hopgraph-upload-") as tmp:
        folder = Path(tmp)
        for name, part in zip(names, files):
            (folder / name).write_bytes(part.file.read())
        documents = documents_of(folder, names, groups or None)
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
    """The documents of the live version, in index order (admin scope): id, title, source, acl, timestamp."""
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
            {
                "id": table["id"][i],
                "title": table["title"][i],
                "source": table["source"][i] if "source" in table else "",
                "acl": table["metadata"][i].get("acl"),
                "timestamp": table["metadata"][i].get("timestamp"),
            }
            for i in rows
        ],
    }
