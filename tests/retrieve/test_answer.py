"""Answers read from the model's text: "not found" never comes with citations, wherever it is shown
(the answer reader, `hopgraph query --answer`, the server's /v1/answer and its OpenAI-compatible
chat endpoint, which all read answers through :func:`read_answer`).

Small models often write "not found" followed by the evidence numbers they were shown; that
listed every piece of evidence as a source of an answer that has none. The model for the end-to-end
test is :class:`tests.llm.ScriptedServer` (a real HTTP server in a thread): the stand-in cannot be
made to write exactly this on demand.
"""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from hopgraph.cli import main
from hopgraph.config import AnswerConfig, LLMConfig
from hopgraph.errors import LLMRequestError
from hopgraph.llm.client import HttpLLM
from hopgraph.retrieve.answer import answer_many, answer_request, evidence_that_fits, read_answer
from hopgraph.retrieve.packing import Evidence, RetrievalResult
from tests.llm.support import ScriptedServer
from tests.serve.support import LiveServer, auth

NOT_FOUND_WITH_MARKS = "Not found in the documents. [1] [2] [3] [4] [5] [6] [7] [8]"
QUESTION = "Who chairs the Orrin Basin Water Board?"


def result_with(n: int) -> RetrievalResult:
    evidence = [Evidence("unit", i, 1.0, "p", 5, f"text {i}", i, [f"d{i}"], [f"T{i}"]) for i in range(n)]
    return RetrievalResult(query="q", method="text", budget=100, evidence=evidence)


def test_a_document_s_placeholders_are_its_text_not_the_prompt_s():
    """The prompt was filled one placeholder after another, so a document holding "{question}" got
    the question pasted in at each: the prompt outgrew the budget its evidence was cut to (a 4,096-
    token model was sent 54,583 tokens) and the model read a passage other than the one cited."""
    question = "Who chairs the board? " + "x" * 1900
    text = "{question} " * 150 + "{context} {not_found}"
    evidence = [Evidence("unit", 0, 1.0, "p", 5, text, 0, ["d0"], ["T0"])]
    result = RetrievalResult(query=question, method="text", budget=100, evidence=evidence)
    [[_, sent]] = answer_request(result, AnswerConfig()).messages
    assert sent.count(text) == 1 and sent.count(question) == 1  # the document as it is, the question once
    assert evidence_that_fits(result, AnswerConfig(), 4096) == 1  # and it fits as measured: ~700 tokens, not 54,000
    assert len(sent) < len(text) + len(question) + 2000


@pytest.mark.parametrize(
    "raw", [NOT_FOUND_WITH_MARKS, "[1][2] Not found in the documents", "not found in the documents [3]."]
)
def test_not_found_cites_nothing_whatever_marks_the_model_wrote(raw):
    reply = read_answer(raw, result_with(8), AnswerConfig())
    assert not reply.found and reply.text == AnswerConfig().not_found
    assert reply.citations == [] and reply.raw == raw


def test_a_found_answer_keeps_its_citations():
    reply = read_answer("Mirela Tasch [2] [3] [9]", result_with(3), AnswerConfig())
    assert reply.found and [c["evidence"] for c in reply.citations] == [2, 3]
    # A mark of 5,000 digits (a model with a large answer.max_tokens) raised ValueError: a 500.
    long = read_answer("Mirela Tasch [1] [" + "1" * 5000 + "] [03]", result_with(3), AnswerConfig())
    assert long.found and [c["evidence"] for c in long.citations] == [1, 3]


def test_an_evaluation_counts_a_refused_answer_as_not_found_instead_of_ending(tmp_path):
    """One prompt the model refused (too long for its context, say) ended a whole evaluation,
    every method's results unwritten; the refusal is the same next time. Scripted: the stand-in
    cannot be made to refuse one chosen prompt."""

    def reply(body, n):
        asked = body["messages"][-1]["content"]
        return (400, '{"error": {"message": "too long"}}', 0) if "refuse me" in asked else (200, "Mirela Tasch [1]", 0)

    results = [result_with(2), result_with(2)]
    results[1].query = "refuse me"
    with ScriptedServer(reply) as server:
        llm = HttpLLM(LLMConfig(base_url=server.base_url, model="scripted", cache="", retries=0))
        answers, usage = answer_many(llm, results, AnswerConfig(), refused_as_not_found=True)
        assert [a.found for a in answers] == [True, False] and answers[1].text == AnswerConfig().not_found
        assert usage.refused == 1 and usage.calls == 2
        with pytest.raises(LLMRequestError, match="refused the request: HTTP 400"):
            answer_many(llm, results, AnswerConfig())  # a query's one answer: the refusal is its error


def test_not_found_carries_no_citations_in_the_cli_and_the_server(sample_index, sample_config, tmp_path):
    with ScriptedServer(lambda body, n: (200, NOT_FOUND_WITH_MARKS, 0)) as llm:
        options = ["--llm.base_url", llm.base_url, "--llm.model", "scripted", "--llm.cache", ""]
        runner = CliRunner()
        shown = runner.invoke(main, ["query", str(sample_index), QUESTION, "--answer", *options])
        as_json = runner.invoke(main, ["query", str(sample_index), QUESTION, "--answer", "--json", *options])
        assert shown.exit_code == 0, shown.output
        assert as_json.exit_code == 0, as_json.output
        assert len(llm.bodies) == 2  # both asked the model, with evidence
        assert "answer: Not found in the documents." in shown.output and "  [1] chunk" not in shown.output
        cli_answer = json.loads(as_json.output)["answer"]
        assert cli_answer["found"] is False and cli_answer["citations"] == []

        llm_config = sample_config.llm.model_copy(update={"base_url": llm.base_url, "model": "scripted", "cache": ""})
        config = sample_config.model_copy(
            update={
                "llm": llm_config,
                "serve": sample_config.serve.model_copy(update={"rate_limit": 0.0}),
                "embedding": sample_config.embedding.model_copy(update={"cache": str(tmp_path / "vectors.sqlite")}),
            }
        )
        with LiveServer(sample_index, config) as live, httpx.Client(base_url=live.url, timeout=60) as client:
            answer = client.post("/v1/answer", json={"query": QUESTION, "method": "text"}, headers=auth("guest"))
            chat = client.post(
                "/v1/chat/completions",
                json={"model": "hopgraph-text", "messages": [{"role": "user", "content": QUESTION}]},
                headers=auth("guest"),
            )
    assert answer.status_code == 200, answer.text
    assert answer.json()["found"] is False and answer.json()["citations"] == [] and answer.json()["evidence"]
    assert chat.status_code == 200, chat.text
    assert chat.json()["hopgraph"]["citations"] == [] and chat.json()["hopgraph"]["found"] is False
    assert "Sources:" not in chat.json()["choices"][0]["message"]["content"]
