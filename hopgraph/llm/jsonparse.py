"""Tolerant JSON parsing of model output: code fences, prose around the JSON, trailing commas, and
JSON cut off by max_tokens (its complete items are kept).

Hand-written rather than json-repair on purpose: json-repair closes a cut-off string and keeps the
truncated item ("description": "the daughter of the la"), while this parser keeps only items that
closed, which is what an index should store.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([\]}])")


def parse_json(text: str) -> Any | None:
    """The JSON value in ``text``, tolerating fences, surrounding prose and trailing commas; None if absent."""
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return None
    start = min(starts)
    end = body.rfind("}" if body[start] == "{" else "]")
    if end <= start:
        return _salvage(body[start:])
    candidate = body[start : end + 1]
    for attempt in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            continue
    return _salvage(body[start:])


def _salvage(text: str, tries: int = 30) -> Any | None:
    """Keep the complete items of JSON cut off mid-way (a completion that hit max_tokens).

    Scans once, remembering every point where a value inside an array or object has just closed,
    then tries those cut points from the latest, closing the brackets still open.
    """
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if stack and stack[-1] == "]":  # a string item of an array is complete
                    cuts.append((i + 1, "".join(reversed(stack))))
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack:
                break
            stack.pop()
            if stack:
                cuts.append((i + 1, "".join(reversed(stack))))
    for end, closing in reversed(cuts[-tries:]):
        try:
            return json.loads(_TRAILING_COMMA.sub(r"\1", text[:end] + closing))
        except json.JSONDecodeError:
            continue
    return None
