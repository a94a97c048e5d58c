"""Answers from packed evidence: numbered evidence, the question repeated after it (CUE §4.1), a
short-answer instruction, citations back to chunks and documents, and an explicit "not found"."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from hopgraph.config import AnswerConfig
from hopgraph.evaluate.metrics import normalize_answer
from hopgraph.llm.client import LLM, ChatRequest, Usage
from hopgraph.llm.extract import prompt
from hopgraph.retrieve.packing import RetrievalResult

_CITATION = re.compile(r"\[(\d+)\]")


@dataclass
class Answer:
    text: str  # the answer without citation marks
    found: bool
    citations: list[dict[str, Any]] = field(default_factory=list)  # evidence number, chunk, documents, path
    raw: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def answer_request(result: RetrievalResult, config: AnswerConfig) -> ChatRequest:
    context = "\n\n".join(f"[{n}] ({', '.join(t for t in ev.titles if t) or 'untitled'}) {ev.text}" for n, ev in enumerate(result.evidence, 1))
    text = prompt("answer").replace("{not_found}", config.not_found).replace("{context}", context).replace("{question}", result.query)
    return ChatRequest((("user", text),), None, config.max_tokens, 0.0)


def read_answer(raw: str, result: RetrievalResult, config: AnswerConfig) -> Answer:
    cited = [int(n) for n in dict.fromkeys(_CITATION.findall(raw)) if 1 <= int(n) <= len(result.evidence)]
    text = " ".join(_CITATION.sub("", raw).split()).strip(" .") or config.not_found
    found = bool(result.evidence) and not normalize_answer(text).startswith(normalize_answer(config.not_found)[:20])
    citations = [{"evidence": n, "chunk": result.evidence[n - 1].chunk, "doc_ids": result.evidence[n - 1].doc_ids,
                  "titles": result.evidence[n - 1].titles, "path": result.evidence[n - 1].path} for n in cited]
    return Answer(text=text if found else config.not_found, found=found, citations=citations, raw=raw)


def answer_many(llm: LLM, results: Sequence[RetrievalResult], config: AnswerConfig, *, progress: bool = False) -> tuple[list[Answer], Usage]:
    """One answer per retrieval result; with no evidence at all the answer is "not found" without a call."""
    usage = Usage()
    asked = [i for i, r in enumerate(results) if r.evidence]
    done = llm.complete([answer_request(results[i], config) for i in asked], progress=progress, desc="answers")
    usage.add(done)
    answers = [Answer(config.not_found, False) for _ in results]
    for i, completion in zip(asked, done):
        answers[i] = read_answer(completion.text, results[i], config)
    return answers, usage


def answer(llm: LLM, result: RetrievalResult, config: AnswerConfig) -> Answer:
    return answer_many(llm, [result], config)[0][0]


__all__ = ["Answer", "answer", "answer_many"]
