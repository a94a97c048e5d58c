"""The documents of an index's live version, as a person or a script lists them, and the ids of its files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

from hopgraph.documents import timestamp_of
from hopgraph.index.versions import read_documents
from hopgraph.store import IndexStore, live_root, live_version


def list_documents(index_dir: str | Path) -> dict[str, Any]:
    """``{"version", "documents": [{id, title, source, acl, timestamp}]}`` of the live version, in index order.

    ``timestamp`` is the document's own (metadata ``timestamp``), else its file's modification time.
    """
    root = live_root(index_dir)
    IndexStore(root).require_complete()
    rows = [document_row(doc.id, doc.title, doc.source, doc.metadata) for doc in read_documents(root)]
    return {"version": live_version(index_dir) or "root", "documents": rows}


def document_row(doc_id: str, title: str, source: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """One listed document: ``{id, title, source, acl, timestamp}``, the same for the CLI and the server.

    ``timestamp`` is the document's own (metadata ``timestamp``), else its file's modification time.
    """
    acl = metadata.get("acl")
    return {
        "id": doc_id,
        "title": title,
        "source": source,
        "acl": None if acl is None else [str(group) for group in acl],
        "timestamp": timestamp_of(metadata),
    }


def file_ids(index_dir: str | Path) -> dict[str, str]:
    """Source file → id of every document that is a whole file (not a JSONL record or benchmark passage).

    Reading the same file again for an update then gives it the id it was indexed under, however
    the path is passed this time.
    """
    documents = read_documents(live_root(index_dir))
    per_source = Counter(doc.source for doc in documents)
    return {
        doc.source: doc.id
        for doc in documents
        if doc.source and per_source[doc.source] == 1 and "line" not in doc.metadata
    }


def namesakes(index_dir: str | Path, ids: list[str]) -> list[tuple[str, str]]:
    """(new id, existing id) where an id to add is new but a document of the same file name exists.

    The usual cause is a file passed without the ``--root`` its original was indexed under, which
    adds a second document instead of replacing the first.
    """
    return pair_namesakes([doc.id for doc in read_documents(live_root(index_dir))], ids)


def pair_namesakes(existing: list[str], ids: list[str]) -> list[tuple[str, str]]:
    """(new id, existing id) of the same file name, for each id of ``ids`` not in ``existing``, in order.

    One lookup per id in a table from file name to existing ids: an update of many documents
    against a large index stays linear.
    """
    known = set(existing)
    by_name: dict[str, list[str]] = {}
    for old in existing:
        by_name.setdefault(PurePosixPath(old).name, []).append(old)
    return [(new, old) for new in ids if new not in known for old in by_name.get(PurePosixPath(new).name, ())]
