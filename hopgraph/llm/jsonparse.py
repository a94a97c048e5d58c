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
_THINKING = re.compile(r"<think>.*?</think>", re.S)  # a reasoning model's drafts before its answer
_DECODER = json.JSONDecoder()
MAX_STARTS = 2000  # brackets tried as the start of a value in one text ("[[[[…" would be quadratic)


def parse_json(text: str) -> Any | None:
    """The JSON value in ``text``, tolerating fences, surrounding prose and trailing commas; None if
    absent. A reasoning model's <think> block is left out; each fenced block is tried, then the
    whole text; in each, the largest JSON object or array it holds, or what closed of one cut off
    at the end (prose may hold brackets of its own: "Sure [1]: {…}")."""
    text = _THINKING.sub("", text)
    for body in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        found = _largest_value(body)
        if found is not None:
            return found
    return None


def _largest_value(body: str) -> Any | None:
    best: tuple[int, Any] | None = None
    at, tried, first_failed = 0, 0, None
    while tried < MAX_STARTS:
        starts = [i for i in (body.find("{", at), body.find("[", at)) if i >= 0]
        if not starts:
            break
        start, tried = min(starts), tried + 1
        try:
            decoded = _decoded_at(body, start)
        except RecursionError:  # nested past the interpreter's limit: no answer here or further in
            break
        if decoded is None:
            first_failed = start if first_failed is None else first_failed
            at = start + 1
            continue
        if best is None or decoded[0] > best[0]:
            best = decoded
        at = start + decoded[0]  # (no further than its end, where trailing commas were taken out)
    if first_failed is not None:  # a value cut off (max_tokens): what closed of it, if that is more
        salvaged = _salvage(_without_trailing_commas(body[first_failed:]))
        if salvaged is not None and (best is None or salvaged[0] > best[0]):
            best = salvaged
    return best[1] if best is not None else None


def _decoded_at(body: str, start: int) -> tuple[int, Any] | None:
    """(length, value) of the JSON value starting at ``start``, as written or with its trailing
    commas taken out (from ``start`` on: a quote in the prose before it cannot turn its strings
    inside out); None where there is none."""
    try:
        value, end = _DECODER.raw_decode(body, start)
    except json.JSONDecodeError as error:
        # Only where it stopped at a trailing comma's bracket is the value read again without them
        # (each start doing so whatever the error took seconds on long prose with [n] citations).
        if body[error.pos : error.pos + 1] not in ("]", "}") or not body[: error.pos].rstrip().endswith(","):
            return None
        try:
            value, end = _DECODER.raw_decode(body[:start] + _without_trailing_commas(body[start:]), start)
        except json.JSONDecodeError:
            return None
    return end - start, value


def _without_trailing_commas(text: str) -> str:
    """``text`` without commas right before a closing bracket, outside strings only (a regular
    expression also took them out of "a, ]" inside a string)."""
    out: list[str] = []
    in_string = escaped = False
    pending = -1  # where in ``out`` a comma waits to see what follows it
    for ch in text:
        if in_string:
            in_string = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
        elif ch == '"':
            in_string, pending = True, -1
        elif ch in "]}" and pending >= 0:
            del out[pending]
            pending = -1
        elif ch == ",":
            pending = len(out)
        elif not ch.isspace():
            pending = -1
        out.append(ch)
    return "".join(out)


def _salvage(text: str, tries: int = 30) -> tuple[int, Any] | None:
    """Keep the complete items of JSON cut off mid-way (a completion that hit max_tokens).

    Scans once, remembering every point where a value inside an array or object has just closed,
    then tries those cut points from the latest, closing the brackets still open; (length kept, value).
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
            return end, json.loads(_without_trailing_commas(text[:end] + closing))
        except (json.JSONDecodeError, RecursionError):  # nested past the interpreter's limit: not an answer
            continue
    return None
