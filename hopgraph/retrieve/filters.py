"""Metadata and permission filters, applied to pieces before any ranking or packing.

A piece (chunk or sub-chunk) is usable only if every document it covers passes the filter, so a
forbidden passage can never reach a context, a citation or an evidence path.

A ``where`` filter comes from clients, so its size is bounded (:func:`check_where`) and its cost
is one pass over the documents per key: the allowed values of each key become a set once, and each
document's value is looked up in it (never a scan of the value list per document).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hopgraph.retrieve.loaded import LoadedIndex

Scalar = (str, int, float, bool, type(None))


def check_where(where: dict[str, Any], max_keys: int, max_values: int) -> None:
    """Refuse a filter that is too large or not key → scalar / flat list of scalars (ValueError says which)."""
    if len(where) > max_keys:
        raise ValueError(f"filter has {len(where)} keys; at most {max_keys} are allowed")
    total = 0
    for key, allowed in where.items():
        values = allowed if isinstance(allowed, list) else [allowed]
        for value in values:
            if not isinstance(value, Scalar):
                raise ValueError(
                    f"filter key {key[:80]!r}: values must be strings, numbers, booleans or null, or a flat list "
                    "of them"
                )
        total += len(values)
        if total > max_values:
            raise ValueError(f"filter has over {max_values} allowed values in all; at most {max_values} are allowed")


def _lookup_key(value: Any) -> Hashable:
    """A document's metadata value as a set member; lists and objects never equal a scalar filter value."""
    return value if isinstance(value, Scalar) else _UNMATCHABLE


_UNMATCHABLE = object()


@dataclass(frozen=True)
class MetadataFilter:
    """``groups``: the reader's groups (None = no ACL check); ``where``: metadata key → allowed values."""

    groups: frozenset[str] | None = None
    allow_unrestricted: bool = True
    where: dict[str, Any] = field(default_factory=dict)

    def document_mask(self, index: LoadedIndex) -> np.ndarray:
        docs = index.documents
        count = len(docs["id"])
        mask = np.ones(count, dtype=bool)
        if self.groups is not None:
            groups = self.groups
            mask &= np.fromiter(
                (self.allow_unrestricted if acl is None else not groups.isdisjoint(acl) for acl in docs["acl"]),
                dtype=bool,
                count=count,
            )
        metadata = docs["metadata"]
        for key, allowed in self.where.items():
            values = frozenset(
                _lookup_key(v) for v in (allowed if isinstance(allowed, (list, tuple, set, frozenset)) else [allowed])
            )
            mask &= np.fromiter((_lookup_key(meta.get(key)) in values for meta in metadata), dtype=bool, count=count)
        return mask

    @property
    def is_open(self) -> bool:
        return self.groups is None and not self.where


def piece_mask(doc_mask: np.ndarray, piece_docs: Sequence[Sequence[int]]) -> np.ndarray:
    return np.fromiter((all(doc_mask[d] for d in docs) for docs in piece_docs), dtype=bool, count=len(piece_docs))
