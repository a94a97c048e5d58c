"""Structured extraction that survives small models.

Each passage becomes one chat request whose output is JSON constrained by a schema (when the
backend supports it). Output is parsed tolerantly (code fences, prose around the JSON, trailing
commas; :mod:`hopgraph.llm.jsonparse`), validated item by item (bad items are dropped, not the
whole answer), retried a bounded number of times, and finally replaced by a recorded fallback: a
broken completion never breaks an index. Prompts are text files (:mod:`hopgraph.llm.templates`).

The schemas stay hand-written JSON Schema rather than generated from pydantic models: they are part
of every cached request's key (a generated schema adds titles and changes every key), and the
validators are deliberately more tolerant than a schema (bad items are dropped, fields default).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hopgraph.config import LLMConfig
from hopgraph.llm.jsonparse import parse_json
from hopgraph.llm.templates import fill, prompt, prompt_room
from hopgraph.llm.types import LLM, ChatRequest, Completion, Usage
from hopgraph.models import count_tokens, get_encoding

# Bounded string lengths matter with small models: their typical failure is a description that
# loops ("... the daughter of the late ... the daughter of the late ...") until max_tokens cuts the
# JSON before a single item is complete. A grammar that enforces maxLength closes the string and
# keeps the item; a backend that ignores the bound loses nothing.
NAME = {"type": "string", "maxLength": 100}
SENTENCE = {"type": "string", "maxLength": 300}

KG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "maxItems": 40,
            "items": {
                "type": "object",
                "properties": {"name": NAME, "type": {"type": "string", "maxLength": 40}, "description": SENTENCE},
                "required": ["name", "type", "description"],
            },
        },
        "relations": {
            "type": "array",
            "maxItems": 40,
            "items": {
                "type": "object",
                "properties": {
                    "source": NAME,
                    "target": NAME,
                    "description": SENTENCE,
                    "strength": {"type": "integer", "minimum": 1, "maximum": 10},
                },
                "required": ["source", "target", "description", "strength"],
            },
        },
    },
    "required": ["entities", "relations"],
}

UNITS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"knowledge_units": {"type": "array", "maxItems": 80, "items": SENTENCE}},
    "required": ["knowledge_units"],
}


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def validate_kg(data: Any) -> dict[str, list[dict]] | None:
    """Entities need a name, relations two endpoints; other fields default. None if not a KG object."""
    if not isinstance(data, dict) or not isinstance(data.get("entities"), list):
        return None
    entities = []
    for item in data["entities"]:
        if isinstance(item, dict) and _text(item.get("name")):
            entities.append(
                {
                    "name": _text(item["name"]),
                    "type": _text(item.get("type")) or "thing",
                    "description": _text(item.get("description")),
                }
            )
    relations = []
    for item in data.get("relations") or []:
        if isinstance(item, dict) and _text(item.get("source")) and _text(item.get("target")):
            strength = item.get("strength")
            relations.append(
                {
                    "source": _text(item["source"]),
                    "target": _text(item["target"]),
                    "description": _text(item.get("description")),
                    "strength": int(strength) if isinstance(strength, (int, float)) and 1 <= strength <= 10 else 5,
                }
            )
    return {"entities": entities, "relations": relations}


def validate_units(data: Any) -> list[str] | None:
    """Non-empty statement strings; accepts the key spellings small models produce, or a bare list."""
    if isinstance(data, dict):
        data = next((data[k] for k in ("knowledge_units", "knowledge units", "units") if k in data), None)
    if not isinstance(data, list):
        return None
    units = [_text(u) for u in data if _text(u)]
    return units or None


@dataclass(frozen=True)
class Task:
    """One kind of extraction: its prompt file, schema and validator."""

    prompt: str
    schema: dict[str, Any]
    validate: Callable[[Any], Any]


TASKS = {
    "kg": Task("kg_extract", KG_SCHEMA, validate_kg),
    "units": Task("knowledge_units", UNITS_SCHEMA, validate_units),
}


def fit_passage(passage: str, template: str, config: LLMConfig) -> str:
    """Cut the passage so prompt + completion fit the model's context window, in the model's own
    tokens (a passage cut to the cl100k count alone was 2,173 SmolLM2 tokens with its completion
    in a 2,048 context: vLLM refuses such a prompt, and every run asked it again)."""
    room = int(prompt_room(config.context_tokens, config.max_tokens)) - count_tokens(template)
    tokens = get_encoding().encode(passage, disallowed_special=())
    return passage if len(tokens) <= room else get_encoding().decode(tokens[: max(room, 0)])


def extract(
    llm: LLM,
    task_name: str,
    passages: Sequence[str],
    config: LLMConfig,
    *,
    progress: bool = False,
    tell: Callable[[int, int], None] | None = None,
) -> tuple[list[Any | None], Usage]:
    """Validated results per passage (None where every attempt failed: the caller's fallback applies).

    ``tell(passages answered, all passages)`` as the first attempt's completions arrive (cached ones
    first), so a build's whole-run bar follows the calls; retries of the few that failed are not counted."""
    task = TASKS[task_name]
    template = prompt(task.prompt)
    messages = [(("user", fill(template, passage=fit_passage(p, template, config))),) for p in passages]
    results: list[Any | None] = [None] * len(passages)
    usage = Usage()
    # Without structured output the schema is not sent, so it must not be part of the request
    # either: the cache key then tells a prompt-only completion from a constrained one.
    schema = task.schema if config.structured else None
    pending = list(range(len(passages)))
    answered = 0

    def arrived(i: int, completion: Completion) -> None:
        nonlocal answered
        answered += 1
        if tell is not None:
            tell(answered, len(passages))

    for attempt in range(config.parse_retries + 1):
        if not pending:
            break
        # A retry samples (temperature > 0) so it can differ from the failed greedy answer.
        temperature = config.temperature if attempt == 0 else max(config.temperature, 0.7)
        requests = [ChatRequest(messages[i], schema, config.max_tokens, temperature, attempt) for i in pending]
        done = llm.complete(
            requests,
            progress=progress,
            desc=f"{task_name} extraction" + (f" retry {attempt}" if attempt else ""),
            on_done=arrived if attempt == 0 and tell is not None else None,
        )
        usage.add(done)
        if attempt:
            usage.retry_calls += len(done)
            usage.retry_tokens += sum(c.prompt_tokens + c.completion_tokens for c in done)
        failed = []
        for i, completion in zip(pending, done):
            if completion.refused:  # refused as it is (e.g. too long for the context): asking again cannot help
                usage.refused += 1
                continue
            value = task.validate(parse_json(completion.text))
            if value is None:
                failed.append(i)
            else:
                results[i] = value
        usage.parse_failures += len(failed)
        pending = failed
    usage.fallbacks = sum(r is None for r in results)
    return results, usage
