"""Metadata and permission filters, applied to pieces before any ranking or packing.

A piece (chunk or sub-chunk) is usable only if every document it covers passes the filter, so a
forbidden passage can never reach a context, a citation or an evidence path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from hopgraph.retrieve.loaded import LoadedIndex


@dataclass(frozen=True)
class MetadataFilter:
    """``groups``: the reader's groups (None = no ACL check); ``where``: metadata key → allowed values."""

    groups: frozenset[str] | None = None
    allow_unrestricted: bool = True
    where: dict[str, Any] = field(default_factory=dict)

    def document_mask(self, index: LoadedIndex) -> np.ndarray:
        docs = index.documents
        mask = np.ones(len(docs["id"]), dtype=bool)
        if self.groups is not None:
            for i, acl in enumerate(docs["acl"]):
                mask[i] = self.allow_unrestricted if acl is None else bool(self.groups.intersection(acl))
        for key, allowed in self.where.items():
            values = allowed if isinstance(allowed, (list, tuple, set, frozenset)) else [allowed]
            for i, meta in enumerate(docs["metadata"]):
                mask[i] &= meta.get(key) in values
        return mask

    @property
    def is_open(self) -> bool:
        return self.groups is None and not self.where


def piece_mask(doc_mask: np.ndarray, piece_docs: Sequence[Sequence[int]]) -> np.ndarray:
    return np.fromiter((all(doc_mask[d] for d in docs) for docs in piece_docs), dtype=bool, count=len(piece_docs))
