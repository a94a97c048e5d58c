"""Metadata and permission filters, applied to pieces before any ranking or packing.

A piece (chunk or sub-chunk) is usable only if the reader may read every document it covers, so a
forbidden passage can never reach a context, a citation or an evidence path, and if one of them at
least matches the ``where`` filter (:meth:`MetadataFilter.piece_scopes`).

A ``where`` filter maps a field to a condition: a value (equality), a flat list of values (any of
them), or an object of operators (``{"gte": "2024-01-01", "lt": "2025-01-01"}``, ``{"in": [...]}``,
``{"ne": ...}``). Fields are the document columns ``id``, ``title``, ``source``, the document's
``timestamp`` (its own, else its file's modification time) and the metadata keys of the index; an
unknown field is refused with the list of known ones (:func:`check_fields`), never silently matched
against nothing. One implementation serves the command line and the server.

A ``where`` filter comes from clients, so its size is bounded (:func:`check_where`) and its cost
is one pass over the documents per key: the allowed values of each key become a set once, and each
document's value is looked up in it (never a scan of the value list per document).
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain, compress
from typing import Any

import numpy as np

from hopgraph.documents import canonical_id, timestamp_of
from hopgraph.errors import cut
from hopgraph.retrieve.loaded import LoadedIndex

Scalar = (str, int, float, bool, type(None))
COLUMNS = ("id", "title", "source")  # document columns filterable beside the metadata keys
COMPOSED = ("id", "title")  # compared in Unicode's composed form (NFC), as they are stored
# Fields the server hides from readers' filters (admins may use them). Where `hopgraph index` read a
# document on the server's disk (an absolute path): a reader sees no source in any answer, but a range
# filter on it (gte/lt) answers yes or no per bound, so a reader could spell a path out one character
# at a time. And ``acl``: which other groups may read a document is the admins' business. And
# ``line`` (a JSONL record's line): a readable record on line 3 told that two records before it, in
# the same file, are ones the reader may not read.
READER_HIDDEN_FIELDS = ("source", "source_path", "acl", "line")
RANGE = ("gt", "gte", "lt", "lte")
OPERATORS = (*RANGE, "in", "ne", "eq")
FIELDS_LISTED = 60  # the most field names an error message lists


def _scalars(key: str, values: Iterable[Any]) -> list[Any]:
    values = list(values)
    if not all(isinstance(v, Scalar) for v in values):
        raise ValueError(
            f"filter key {cut(key)!r}: values must be strings, numbers, booleans or null, a flat list of them, or "
            f"an object of operators ({', '.join(OPERATORS)})"
        )
    return values


def _kind(value: Any) -> str:
    """How a value compares: numbers with numbers, strings (ISO dates among them) with strings."""
    if isinstance(value, bool) or value is None:
        return "boolean" if isinstance(value, bool) else "null"
    return "number" if isinstance(value, (int, float)) else "string" if isinstance(value, str) else "other"


def operator_values(key: str, condition: Any) -> dict[str, list[Any]]:
    """``condition`` as operator → list of scalar operands; a ValueError says what is malformed."""
    if isinstance(condition, dict):
        if not condition:
            raise ValueError(f"filter key {cut(key)!r}: an empty operator object matches nothing; give an operator")
        unknown = [op for op in condition if op not in OPERATORS]
        if unknown:
            raise ValueError(
                f"filter key {cut(key)!r}: unknown operator {cut(str(unknown[0]), 40)!r}; use {', '.join(OPERATORS)}"
            )
        ops = {op: _scalars(key, v if op == "in" and isinstance(v, list) else [v]) for op, v in condition.items()}
        if "in" in condition and not isinstance(condition["in"], list):
            raise ValueError(f"filter key {cut(key)!r}: 'in' takes a list of values")
        bounds = {op: v[0] for op, v in ops.items() if op in RANGE}
        kinds = {_kind(v) for v in bounds.values()}
        if kinds - {"number", "string"}:
            raise ValueError(f"filter key {cut(key)!r}: range bounds (gt, gte, lt, lte) must be numbers or strings")
        if len(kinds) > 1:
            raise ValueError(
                f"filter key {cut(key)!r}: range bounds mix numbers and strings "
                f"({', '.join(f'{op} {cut(repr(v))}' for op, v in bounds.items())}); give both of one kind"
            )
        return ops
    return {"in": _scalars(key, condition if isinstance(condition, list) else [condition])}


def check_where(where: dict[str, Any], max_keys: int, max_values: int) -> None:
    """Refuse a filter that is malformed or too large (ValueError says which); every operand counts
    towards ``max_values``."""
    if len(where) > max_keys:
        raise ValueError(f"filter has {len(where)} keys; at most {max_keys} are allowed")
    total = 0
    for key, condition in where.items():
        total += sum(len(values) for values in operator_values(key, condition).values())
        if total > max_values:
            raise ValueError(f"filter has over {max_values} allowed values in all; at most {max_values} are allowed")


def field_kinds(index: Any, reader: MetadataFilter | None = None) -> dict[str, set[str]]:
    """Filterable field → kinds of value it holds among the documents ``reader`` may read (its
    groups; its ``where`` is ignored), so no field of a forbidden document is ever named."""

    def make() -> dict[str, set[str]]:
        docs = index.documents
        readable = reader.readable_mask(index) if reader else np.ones(len(docs["id"]), dtype=bool)
        kinds: dict[str, set[str]] = {name: {"string"} for name in COLUMNS}
        for meta in compress(docs["metadata"], readable):
            for key, value in meta.items():
                kinds.setdefault(key, set()).add(_kind(value))
            if (stamp := timestamp_of(meta)) is not None:
                kinds.setdefault("timestamp", set()).add(_kind(stamp))
        return kinds

    memo = getattr(index, "memo", None)
    if memo is None:
        return make()
    who = "" if not reader or reader.groups is None else repr((sorted(reader.groups), reader.allow_unrestricted))
    return memo("filter_fields", who, make)


def check_fields(
    where: dict[str, Any], index: Any, reader: MetadataFilter | None = None, hidden: Iterable[str] = ()
) -> None:
    """Refuse a filter naming a field the index does not have (for this reader) or one of ``hidden``,
    or comparing a field with a bound of the wrong kind: a ValueError lists the filterable fields, or
    says which kind the field holds."""
    if not where:
        return
    kinds = field_kinds(index, reader)
    hidden = set(hidden)
    if hidden:
        kinds = {name: held for name, held in kinds.items() if name not in hidden}
    unknown = [key for key in where if key not in kinds]
    if unknown:
        names = sorted(kinds)
        listed = ", ".join(names[:FIELDS_LISTED]) + (
            f" … ({len(names) - FIELDS_LISTED} more)" if len(names) > FIELDS_LISTED else ""
        )
        raise ValueError(f"unknown filter field {cut(unknown[0])!r}; filterable fields: {listed}")
    for key, condition in where.items():
        bounds = [v[0] for op, v in operator_values(key, condition).items() if op in RANGE]
        held = kinds[key] & {"number", "string"}
        if bounds and held and _kind(bounds[0]) not in held:
            raise ValueError(
                f"filter key {cut(key)!r} holds {' and '.join(sorted(held))}s; compare it with "
                f"{'a number' if 'number' in held else 'a string'}, not the {_kind(bounds[0])} {cut(repr(bounds[0]))}"
            )
        if key == "timestamp":  # always a date or time: any other bound would silently match nothing
            for bound in bounds:
                if isinstance(bound, str) and _instant(bound) is None and not _YEAR_OR_MONTH.fullmatch(bound):
                    raise ValueError(
                        "filter key 'timestamp' takes ISO-8601 dates or times (2024, 2024-01, 2024-01-31, "
                        f"2024-01-31T12:00:00Z), not {cut(repr(bound))}"
                    )


def _members(value: Any) -> tuple[Hashable, ...]:
    """A document's metadata value as the set members it offers (:func:`_member`): a scalar itself, a
    list its scalar items (``{"acl": "board"}`` or ``{"tags": "q3"}`` matches a document whose list
    holds that value: it matched nothing), an object none."""
    if isinstance(value, list):
        return tuple(_member(item) for item in value if isinstance(item, Scalar))
    return (_member(value),) if isinstance(value, Scalar) else ()


def _member(value: Any) -> Hashable:
    """A scalar as a set member that tells a boolean from a number: Python's ``True == 1`` made
    ``{"eq": true}`` match a document whose value is 1 (and ``{"ne": false}`` drop one of 0)."""
    return (isinstance(value, bool), value)


# A year or a month: no instant, but as a string it orders right among ISO dates ("2024" < "2024-03-01").
_YEAR_OR_MONTH = re.compile(r"\d{4}(-(0[1-9]|1[0-2]))?")


def _instant(text: str) -> datetime | None:
    """An ISO-8601 date or time as an aware datetime (naive ones read as UTC), or None."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def seconds_of(value: Any) -> float | None:
    """A timestamp as seconds since the epoch: an ISO-8601 date or time (naive read as UTC), or a
    number taken as such; None for anything else (no time to rank)."""
    if _kind(value) == "number":
        return float(value) if math.isfinite(value) else None
    moment = _instant(value) if isinstance(value, str) else None
    return None if moment is None else moment.timestamp()


def stamp_seconds(index: Any) -> list[float | None]:
    """Every document's timestamp as :func:`seconds_of` reads it, once per loaded index: in time, not
    as text ("2024-01-01T12:00+09:00" is before "2024-01-01T05:00Z", 999 before 1000)."""
    return index.memo(
        "filter_column", "timestamp:seconds", lambda: [seconds_of(v) for v in _column(index, "timestamp")]
    )


def _comparable(value: Any, bound: Any) -> tuple[Any, Any] | None:
    """(value, bound) in a form ``<`` orders sensibly, or None where they do not compare."""
    kind = _kind(bound)
    if _kind(value) != kind:
        return None
    if kind == "string":
        a, b = _instant(value), _instant(bound)
        if a is not None and b is not None:  # ISO dates and times, time zones included
            return a, b
    return value, bound


_TESTS = {
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
}


def _in_range(value: Any, bounds: list[tuple[str, Any]]) -> bool:
    for op, bound in bounds:
        pair = _comparable(value, bound)
        if pair is None or not _TESTS[op](*pair):
            return False
    return True


def _column(index: Any, key: str) -> list[Any]:
    """Field ``key`` of every document, derived once per loaded index (not on every request)."""
    docs = index.documents

    def make() -> list[Any]:
        if key in COMPOSED:  # an index built before ids and titles were stored composed may hold them decomposed
            return [canonical_id(value) for value in docs[key]]
        if key in COLUMNS and key in docs:
            return docs[key]
        if key == "timestamp":
            return [timestamp_of(meta) for meta in docs["metadata"]]
        return [meta.get(key) for meta in docs["metadata"]]

    memo = getattr(index, "memo", None)
    return memo("filter_column", key, make) if memo is not None else make()


def condition_mask(values: Sequence[Any], condition: Any) -> np.ndarray:
    """Which of ``values`` (one per document) meet ``condition`` (every operator of it)."""
    count = len(values)
    mask = np.ones(count, dtype=bool)
    ops = operator_values("", condition)
    for op in ("in", "eq", "ne"):
        if op in ops:
            allowed = frozenset(_member(v) for v in ops[op])
            hit = np.fromiter((not allowed.isdisjoint(_members(v)) for v in values), dtype=bool, count=count)
            mask &= ~hit if op == "ne" else hit
    bounds = [(op, ops[op][0]) for op in RANGE if op in ops]
    if bounds:
        mask &= np.fromiter((_in_range(v, bounds) for v in values), dtype=bool, count=count)
    return mask


def _per_piece(documents: np.ndarray, piece_docs: Sequence[Sequence[int]], *, every: bool) -> np.ndarray:
    """Per piece, whether every one (``every``) or any of its documents is set in ``documents``, in
    array operations: a Python step per piece and document held a reader's first request on a
    large index (a piece of no document: every is true, any false)."""
    lengths = np.fromiter(map(len, piece_docs), dtype=np.int64, count=len(piece_docs))
    flat = np.fromiter(chain.from_iterable(piece_docs), dtype=np.int64, count=int(lengths.sum()))
    held = lengths > 0
    result = np.full(len(piece_docs), every, dtype=bool)
    if held.any():
        starts = (np.cumsum(lengths) - lengths)[held]
        set_count = np.add.reduceat(documents[flat].astype(np.int64), starts)
        result[held] = set_count == lengths[held] if every else set_count > 0
    return result


@dataclass(frozen=True)
class MetadataFilter:
    """``groups``: the reader's groups (None = no ACL check); ``where``: field → condition."""

    groups: frozenset[str] | None = None
    allow_unrestricted: bool = True
    where: dict[str, Any] = field(default_factory=dict)

    def document_mask(self, index: LoadedIndex) -> np.ndarray:
        """Documents the reader may read that match ``where``."""
        return self.readable_mask(index) & self.matching_mask(index)

    def readable_mask(self, index: LoadedIndex) -> np.ndarray:
        """Documents the reader's groups may read."""
        docs = index.documents
        count = len(docs["id"])
        if self.groups is None:
            return np.ones(count, dtype=bool)
        groups = self.groups
        return np.fromiter(
            (self.allow_unrestricted if acl is None else not groups.isdisjoint(acl) for acl in docs["acl"]),
            dtype=bool,
            count=count,
        )

    def matching_mask(self, index: LoadedIndex) -> np.ndarray:
        """Documents that match ``where``, readable or not."""
        mask = np.ones(len(index.documents["id"]), dtype=bool)
        for key, condition in self.where.items():
            mask &= condition_mask(_column(index, key), condition)
        return mask

    def piece_scopes(self, index: LoadedIndex, *pieces: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Per list of pieces (by the documents each holds), those a retrieval may use: every one of
        its documents readable, and one of them at least matching ``where``. A chunk packs several
        documents (``chunking.pack_documents``), and a filter that all of them had to match found
        nothing where the document asked for shares its chunks (``{"id": "press-2023"}`` gave no
        evidence). The document masks are made once for all the lists."""
        readable = self.readable_mask(index)
        matching = self.matching_mask(index) if self.where else None
        scopes = []
        for piece_docs in pieces:
            scope = _per_piece(readable, piece_docs, every=True)
            if matching is not None:
                scope &= _per_piece(matching, piece_docs, every=False)
            scopes.append(scope)
        return scopes

    @property
    def is_open(self) -> bool:
        return self.groups is None and not self.where


def reader_filter(
    index: Any,
    where: dict[str, Any],
    *,
    groups: frozenset[str] | None = None,
    allow_unrestricted: bool = True,
    max_keys: int,
    max_values: int,
    hidden: Iterable[str] = (),
) -> MetadataFilter:
    """The filter of one reader's request, checked against the bounds and the index's fields, none
    of ``hidden`` among them (a ValueError says what is wrong): the one entry point of the command
    line and the server."""
    check_where(where, max_keys, max_values)
    # Ids and titles compare composed on both sides (:data:`COMPOSED`), however either is spelled.
    where = {key: _composed(condition) if key in COMPOSED else condition for key, condition in where.items()}
    flt = MetadataFilter(groups=groups, allow_unrestricted=allow_unrestricted, where=where)
    check_fields(where, index, flt, hidden)
    return flt


def unnamed_groups(index: Any, groups: Iterable[str]) -> list[str]:
    """Those of ``groups`` that no document's acl of ``index`` names: a misspelt group reads nothing
    restricted, silently, unless someone says so (the owner's tools do; a server never tells a reader)."""
    named = {group for acl in index.documents["acl"] if acl for group in acl}
    return sorted(set(groups) - named)


def why_nothing(index: Any, flt: MetadataFilter, groups: str = "the reader's groups", where: str = "the filter") -> str:
    """Why ``flt`` leaves no document of ``index`` to retrieve from ('' where it leaves some), naming
    the reader's groups and the filter as ``groups`` and ``where``."""
    if not flt.readable_mask(index).any():
        return f"no document is readable by {groups}"
    if not flt.document_mask(index).any():
        return f"no readable document matches {where}" if flt.groups is not None else f"no document matches {where}"
    return ""


def _composed(condition: Any) -> Any:
    """``condition`` with every string in it in the form ids are stored in (:func:`canonical_id`)."""
    if isinstance(condition, str):
        return canonical_id(condition)
    if isinstance(condition, list):
        return [_composed(value) for value in condition]
    if isinstance(condition, dict):
        return {op: _composed(value) for op, value in condition.items()}
    return condition
