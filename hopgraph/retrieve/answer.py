"""Answers from packed evidence: numbered evidence, the question repeated after it (CUE §4.1), a
short-answer instruction, citations back to chunks and documents, and an explicit "not found".

The retrieval budget λ is chosen for coverage, not for the answer model, so the evidence is fitted
to the model's context window before the call: whole items are dropped from the end (the lowest
ranked) and the answer says how many (``evidence_dropped``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hopgraph.config import AnswerConfig
from hopgraph.errors import LLMRequestError
from hopgraph.llm.client import context_window
from hopgraph.llm.templates import fill, prompt, prompt_room
from hopgraph.llm.types import LLM, ChatRequest, Completion, Usage
from hopgraph.models import count_tokens
from hopgraph.retrieve.packing import RetrievalResult
from hopgraph.text import normalize_answer

_CITATION = re.compile(r"\[(\d+)\]")


@dataclass
class Answer:
    text: str  # the answer without citation marks
    found: bool
    citations: list[dict[str, Any]] = field(default_factory=list)  # evidence number, chunk, documents, places, path
    raw: str = ""
    evidence_dropped: int = 0  # evidence items left out of the prompt to fit the model's context

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _item(n: int, ev: Any) -> str:
    return f"[{n}] ({', '.join(t for t in ev.titles if t) or 'untitled'}) {ev.text}"


def _prompt(result: RetrievalResult, config: AnswerConfig, context: str) -> str:
    return fill(prompt("answer"), not_found=config.not_found, context=context, question=result.query)


def evidence_that_fits(result: RetrievalResult, config: AnswerConfig, context_tokens: int) -> int:
    """How many leading evidence items fit in a prompt for a model with ``context_tokens`` of context."""
    room = prompt_room(context_tokens, config.max_tokens) - count_tokens(_prompt(result, config, ""))
    used = 0.0
    for n, ev in enumerate(result.evidence, 1):
        used += count_tokens(_item(n, ev)) + (2 if n > 1 else 0)  # the blank line between items
        if used > room:
            return n - 1
    return len(result.evidence)


def answer_request(result: RetrievalResult, config: AnswerConfig, keep: int | None = None) -> ChatRequest:
    """The chat request over the first ``keep`` evidence items (all when None)."""
    context = "\n\n".join(_item(n, ev) for n, ev in enumerate(result.evidence[:keep], 1))
    return ChatRequest((("user", _prompt(result, config, context)),), None, config.max_tokens, 0.0)


def read_answer(raw: str, result: RetrievalResult, config: AnswerConfig, keep: int | None = None) -> Answer:
    """The answer in ``raw`` with its citations; "not found" cites nothing, whatever marks the model
    wrote after it (evidence that does not hold the answer is no source of it)."""
    shown = len(result.evidence) if keep is None else keep
    text = " ".join(_CITATION.sub("", raw).split()).strip(" .") or config.not_found
    found = bool(result.evidence) and not normalize_answer(text).startswith(normalize_answer(config.not_found)[:20])
    # (A mark of thousands of digits is no evidence number, and int() refuses over 4,300 of them.)
    marks = [n for n in dict.fromkeys(_CITATION.findall(raw)) if len(n) <= 9]
    cited = [int(n) for n in marks if 1 <= int(n) <= shown] if found else []
    citations = [
        {
            "evidence": n,
            "chunk": result.evidence[n - 1].chunk,
            "doc_ids": result.evidence[n - 1].doc_ids,
            "titles": result.evidence[n - 1].titles,
            "places": result.evidence[n - 1].places,
            "path": result.evidence[n - 1].path,
        }
        for n in cited
    ]
    return Answer(
        text=text if found else config.not_found,
        found=found,
        citations=citations,
        raw=raw,
        evidence_dropped=len(result.evidence) - shown,
    )


def refusal_error(completions: Sequence[Completion]) -> None:
    """Raises when the backend refused a request: an answer cannot fall back like an extraction."""
    refused = next((c.refused for c in completions if c.refused), "")
    if refused:
        raise LLMRequestError(f"the answer model refused the request: {refused}")


def not_found(result: RetrievalResult, config: AnswerConfig) -> Answer:
    """The answer where no evidence fits the model's context: "not found", without a call."""
    return Answer(config.not_found, False, evidence_dropped=len(result.evidence))


def answer_many(
    llm: LLM,
    results: Sequence[RetrievalResult],
    config: AnswerConfig,
    *,
    progress: bool = False,
    refused_as_not_found: bool = False,
) -> tuple[list[Answer], Usage]:
    """One answer per retrieval result, its evidence fitted to the model's context; with no evidence
    (or none that fits) the answer is "not found" without a call. A request the model refuses
    raises, or with ``refused_as_not_found`` (an evaluation: one refusal ended a whole run, results
    unwritten, and the next run met it again) is "not found", counted in ``usage.refused``."""
    usage = Usage()
    window = context_window(llm)
    keep = [evidence_that_fits(r, config, window) for r in results]
    asked = [i for i, r in enumerate(results) if keep[i]]
    done = llm.complete([answer_request(results[i], config, keep[i]) for i in asked], progress=progress, desc="answers")
    usage.add(done)
    usage.refused += sum(1 for c in done if c.refused)
    if not refused_as_not_found:
        refusal_error(done)
    answers = [not_found(r, config) for r in results]
    for i, completion in zip(asked, done):
        if not completion.refused:
            answers[i] = read_answer(completion.text, results[i], config, keep[i])
    return answers, usage


def answer(llm: LLM, result: RetrievalResult, config: AnswerConfig) -> Answer:
    return answer_many(llm, [result], config)[0][0]


__all__ = ["Answer", "answer", "answer_many"]
