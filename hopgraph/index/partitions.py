"""Isolated builds (``access.isolation``): one complete index per ACL partition, so a reader's
results depend only on documents the reader may read."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hopgraph.config import AccessConfig, HopgraphConfig
from hopgraph.documents import Document
from hopgraph.index.pipeline import (
    BuildContext,
    build_index,
    corpus_fingerprint,
    peak_memory_mb,
    stage_documents,
    start_manifest,
)
from hopgraph.store import PARTITIONS, IndexStore


def partition_name(acl: Sequence[str] | None) -> str:
    """Directory name of the partition of documents with this ACL (None = unrestricted)."""
    if acl is None:
        return "public"
    return "acl-" + hashlib.sha256(json.dumps(sorted(set(acl))).encode()).hexdigest()[:16]


def acl_partitions(documents: Sequence[Document]) -> list[dict[str, Any]]:
    """Documents grouped by identical ACL sets: the unrestricted partition first, then by ACL.

    Each entry has ``name``, ``acl`` (sorted groups, or None) and ``documents`` (indices, in
    corpus order). Putting the unrestricted one first gives its pieces the same numbers as in an
    index of the unrestricted documents alone.
    """
    groups: dict[tuple[str, ...] | None, list[int]] = {}
    for i, doc in enumerate(documents):
        groups.setdefault(None if doc.acl is None else tuple(sorted(set(doc.acl))), []).append(i)
    keys = sorted(groups, key=lambda k: (k is not None, k or ()))
    return [{"name": partition_name(k), "acl": None if k is None else list(k), "documents": groups[k]} for k in keys]


def build_partitioned(
    documents: Sequence[Document],
    out: str | Path,
    config: HopgraphConfig,
    *,
    progress: bool = True,
    overwrite: bool = False,
    stop_after: str | None = None,
    engine: Any = None,
    previous: str | Path | None = None,
) -> dict:
    """The isolated build: every ACL partition is a complete index of its own documents, built by
    the ordinary pipeline (same stages, caches and resume) under ``out/partitions/<name>``, so its
    vocabulary, IDF, graphs, PageRank and entity resolution see no other partition's text.

    ``out`` itself holds the documents table (the corpus, for updates) and a manifest listing the
    partitions with their ACL; it is complete once every partition is.
    """
    store = IndexStore(out)
    manifest = start_manifest(store, config, corpus_fingerprint(documents), overwrite)
    if overwrite and (store.root / PARTITIONS).is_dir():
        shutil.rmtree(store.root / PARTITIONS)
    partitions = acl_partitions(documents)
    manifest["partitions"] = [
        {"name": p["name"], "acl": p["acl"], "documents": len(p["documents"])} for p in partitions
    ]
    store.write_manifest(manifest)
    stage_documents(BuildContext(store, config, documents, progress))
    inner = config.model_copy(update={"access": AccessConfig(isolation=False)})
    stages: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for part in partitions:
        built = build_index(
            [documents[i] for i in part["documents"]],
            store.root / PARTITIONS / part["name"],
            inner,
            progress=progress,
            overwrite=overwrite,
            stop_after=stop_after,
            engine=engine,
            previous=Path(previous) / PARTITIONS / part["name"] if previous is not None else None,
        )
        for name, record in built["stages"].items():
            total = stages.setdefault(name, {"done": True, "seconds": 0.0})
            total["done"] &= bool(record.get("done"))
            total["seconds"] = round(total["seconds"] + record.get("seconds", 0.0), 3)
            if record.get("taken_from_previous"):
                total["taken_from_previous"] = total.get("taken_from_previous", 0) + record["taken_from_previous"]
        for key, value in built["counts"].items():
            counts[key] = counts.get(key, 0) + value
        if not built["complete"]:
            manifest.update(stages=stages, counts=counts)
            store.write_manifest(manifest)
            return manifest
    manifest.update(
        stages=stages,
        counts=counts,
        complete=True,
        peak_memory_mb=peak_memory_mb(),
        models={
            "embedding": config.embedding.model,
            "embedding_backend": config.embedding.backend,
            "llm": config.llm.model if config.extraction.active() else None,
        },
    )
    store.write_manifest(manifest)
    return manifest
