"""Request bodies of the HTTP API: strict (unknown fields are refused), bounded, finite."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hopgraph.documents import (
    MAX_JSON_DEPTH,
    id_problem,
    more_values_than,
    text_problem,
    too_deep_at,
    unicode_problem,
)
from hopgraph.errors import cut
from hopgraph.serve.errors import finite_json

# JSON values in one question body (/v1/retrieve, /v1/answer, /v1/chat/completions), at most. A
# question, its settings, a filter and a conversation of MAX_MESSAGES need a few hundred; 200,000
# content parts (2.6 MB, under the body limit) took ~1 s of pure-Python validation each, so any
# reader could keep the server busy with a few requests a second.
MAX_QUESTION_VALUES = 10_000
TOO_MANY_VALUES = f"the body holds more than {MAX_QUESTION_VALUES:,} JSON values; a question needs far fewer"


def surely_too_many_values(body: bytes, limit: int = MAX_QUESTION_VALUES) -> bool:
    """Whether the JSON ``body`` certainly holds more than ``limit`` values, told from its bytes
    without parsing them. A reader's 3 MB of numbers (``[1e5,1e5,…]``) took json.loads ~150 ms on
    the event loop before the value count refused it, and a few such bodies a second slowed every
    other request ~80 times; this takes a few milliseconds. Sound, never refusing a smaller body:
    every string is a key or a value and every key has a value, so strings ≤ 2·values; every comma
    outside strings starts one more element or member, so commas outside strings ≤ values."""
    if json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):  # a UTF-16 letter may hold a comma's byte
        return False
    flat = body.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped quotes end no string
    if flat.count(b",") <= limit:
        return False
    if flat.count(b'"') // 2 > 2 * limit:
        return True
    return b"".join(flat.split(b'"')[::2]).count(b",") > limit  # (so few strings: the split is cheap)


def bounded_depth(data: Any) -> Any:
    """A request body as it is, unless nested deeper than MAX_JSON_DEPTH (a 422 naming where)."""
    found = too_deep_at(data)
    if found:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep at {cut(found)!r}")
    return data


def bounded_question(data: Any) -> Any:
    """A question body as it is, unless it holds more than MAX_QUESTION_VALUES JSON values (checked
    first, in at most that many steps) or nests too deep."""
    if more_values_than(data, MAX_QUESTION_VALUES):
        raise ValueError(TOO_MANY_VALUES)
    return bounded_depth(data)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    _bounded_body = model_validator(mode="before")(bounded_depth)


class RetrieveRequest(Strict):
    _bounded_body = model_validator(mode="before")(bounded_question)  # in place of Strict's (same name)
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
        description="Filter: field (id, title, a metadata key; source and source_path, server file paths, for admins "
        "only) → value, flat list of values, or operators "
        '(gt, gte, lt, lte, in, ne, eq), e.g. {"timestamp": {"gte": "2024-01-01"}}; an unknown field is refused with '
        "the filterable ones. At most serve.max_filter_keys keys and serve.max_filter_values values (operands).",
    )

    @field_validator("query")
    @classmethod
    def _has_words(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("the query is only whitespace")
        return query

    _finite_params = field_validator("params", "where")(finite_json)


class DocumentIn(Strict):
    id: str = Field(
        min_length=1,
        max_length=512,
        description="One line: no control or invisible characters (C0, DEL, C1, U+2028/9, bidi controls, U+200B, "
        "U+FEFF).",
    )
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

    _finite_metadata = field_validator("metadata", "acl")(finite_json)

    @field_validator("id")
    @classmethod
    def _one_line(cls, doc_id: str) -> str:
        problem = id_problem(doc_id)  # the corpus reader's rule for ids
        if problem:
            raise ValueError(problem)
        return doc_id

    @field_validator("id", "title", "source")
    @classmethod
    def _unicode(cls, value: str) -> str:
        problem = unicode_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class InsertRequest(Strict):
    documents: list[DocumentIn] = Field(min_length=1)
