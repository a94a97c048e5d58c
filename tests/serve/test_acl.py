"""Access control as a property, through the HTTP API: randomized queries by users with overlapping
groups, over every method (the LLM ones on a graph the real stand-in extracted), must never return
a piece, citation, path or description of a document the user may not read."""

from __future__ import annotations

import re

import httpx
import pytest

from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.methods import METHODS
from tests.serve.support import CODEWORDS, LiveServer, audit_acl, auth


@pytest.fixture(scope="module")
def llm_index(tmp_path_factory, acl_documents, serve_config, llm_server):
    """The ACL corpus with a KG of every chunk and CUE units for half the tokens, by the stand-in."""
    from hopgraph.config import ExtractionConfig, LLMConfig

    cache = tmp_path_factory.mktemp("acl-llm")
    llm = LLMConfig(
        base_url=llm_server.base_url,
        model="smollm2-135m",
        cache=str(cache / "llm.sqlite"),
        max_tokens=160,
        context_tokens=4096,
        retries=1,
        timeout=300,
    )
    # Larger chunks than the other tests keep the stand-in's work to a few calls.
    chunking = serve_config.chunking.model_copy(update={"size": 300})
    config = serve_config.model_copy(
        update={"llm": llm, "chunking": chunking, "extraction": ExtractionConfig(kg="all", cue_alpha=0.5)}
    )
    build_index(acl_documents, cache / "index", config, progress=False)
    return cache / "index", config


@pytest.fixture(scope="module")
def server(llm_index):
    root, config = llm_index
    # The stand-in reads a 2,000-token prompt in ~25-30 s on a quiet core: the default 60 s answer
    # timeout left a busy 2-core machine little room (a 503 counts as an audit error).
    config = config.model_copy(update={"serve": config.serve.model_copy(update={"answer_timeout": 300.0})})
    with LiveServer(root, config) as live:
        yield live


def test_the_llm_index_offers_every_method(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.get("/v1/index", headers=auth("guest")).json()["methods"] == list(METHODS)  # every registered one


def test_no_forbidden_piece_in_1000_random_queries_over_every_method(server, acl_documents):
    doc_acl = {d.id: d.acl for d in acl_documents}
    vocabulary = sorted({w for d in acl_documents for w in re.findall(r"[A-Za-z]{4,}", d.text)})
    with httpx.Client(base_url=server.url, timeout=120) as client:
        report = audit_acl(client, list(METHODS), doc_acl, vocabulary, queries=1000, seed=7)
    assert report.queries == 1000 and set(report.by_method) == set(METHODS)
    assert report.errors == 0, report.violations[:3]
    assert report.forbidden_chunks == 0 and report.leaked_codewords == 0, report.violations[:3]


def test_answers_cite_only_readable_documents(server, acl_documents):
    doc_acl = {d.id: d.acl for d in acl_documents}
    vocabulary = ["settlement", "ferry", "succession", "board", "vessel", "aground", "Sorvik", "Orrin"]
    with httpx.Client(base_url=server.url, timeout=300) as client:
        report = audit_acl(client, ["text", "kg", "cue"], doc_acl, vocabulary, queries=6, seed=3, endpoint="/v1/answer")
        one = client.post(
            "/v1/answer",
            json={"query": "Which survey was the Long Reach on when it ran aground?", "method": "text", "budget": 400},
            headers=auth("ops"),
        ).json()
    assert report.errors == 0 and report.forbidden_chunks == 0 and report.leaked_codewords == 0, report.violations[:3]
    assert {"answer", "found", "citations", "evidence"} <= set(one)
    assert all(
        set(c["doc_ids"]) <= {d for d, acl in doc_acl.items() if acl is None or "operations" in acl}
        for c in one["citations"]
    )
    assert CODEWORDS["secret-ops"] in " ".join(ev["text"] for ev in one["evidence"])  # ops may read it
