"""LLM-graph methods end to end: the sample corpus indexed with a KG and a CUE graph extracted by
the real stand-in server over HTTP, then every LLM-tier method retrieving and answering."""

from __future__ import annotations

import gc
import shutil
import weakref

import pytest

from hopgraph.config import AnswerConfig
from hopgraph.errors import ConfigError
from hopgraph.index.pipeline import build_index
from hopgraph.llm import open_llm
from hopgraph.retrieve.answer import answer, answer_many, read_answer
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.packing import Evidence, RetrievalResult
from hopgraph.retrieve.retriever import Retriever

LLM_METHODS = ("kg", "hybrid", "ket", "g2cons", "cue")
QUESTION = "Who was the first director of the Halvern Harbor Institute?"


@pytest.fixture(scope="module")
def llm_index(tmp_path_factory, sample_index, sample_documents, sample_config, llm_server):
    from hopgraph.config import LLMConfig

    out = tmp_path_factory.mktemp("llm") / "index"
    shutil.copytree(sample_index, out)
    llm = LLMConfig(
        base_url=llm_server.base_url,
        model="smollm2-135m",
        cache=str(out.parent / "llm.sqlite"),
        max_tokens=160,
        context_tokens=4096,
        timeout=300,  # one slow call on 2 shared cores must not fail the module
    )
    config = sample_config.model_copy(
        update={
            "llm": llm,
            "extraction": sample_config.extraction.model_copy(
                update={"kg": "pagerank", "core_fraction": 0.35, "cue_alpha": 0.2}
            ),
        }
    )
    manifest = build_index(sample_documents, out, config, progress=False)
    return out, manifest, llm


def test_llm_stages_record_their_cost(llm_index):
    _, manifest, _ = llm_index
    for stage in ("kg_extract", "cue_graph"):
        usage = manifest["stages"][stage]["llm"]
        assert usage["calls"] >= 1 and usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert usage["fallbacks"] <= usage["calls"]
    assert manifest["counts"]["kg_chunks"] >= 1 and manifest["counts"]["cue_llm_chunks"] >= 1
    assert manifest["models"]["llm"] == "smollm2-135m"


@pytest.mark.parametrize("method", LLM_METHODS)
def test_llm_methods_return_evidence_within_budget(llm_index, method):
    path, _, _ = llm_index
    result = Retriever(path).retrieve(QUESTION, method=method, budget=400)
    assert result.evidence and result.tokens <= 400
    assert all(e.doc_ids and e.path for e in result.evidence)
    kinds = {e.kind for e in result.evidence}
    if method in ("kg", "ket", "hybrid", "g2cons"):
        assert kinds & {"entity", "relation", "unit"}
    if method == "cue":
        assert "bi-encoder" in " ".join(e.path for e in result.evidence)


@pytest.mark.parametrize("method", LLM_METHODS)
def test_llm_methods_never_use_forbidden_documents(llm_index, method):
    path, _, _ = llm_index
    retriever = Retriever(path)
    restricted = {
        d
        for d, acl in zip(retriever.index.documents["id"], retriever.index.documents["acl"])
        if acl and "board" in acl and "public" not in acl
    }
    assert restricted
    result = retriever.retrieve(
        "What budget did the Water Board approve for the Sorvik campus?",
        method=method,
        budget=2000,
        metadata_filter=MetadataFilter(groups=frozenset({"public"})),
    )
    assert not restricted & set(result.doc_ids)
    assert "3.1 million" not in result.context


def test_methods_refuse_an_index_without_their_graph(sample_index):
    with pytest.raises(ConfigError, match="extraction.kg"):
        Retriever(sample_index).retrieve(QUESTION, method="kg")
    with pytest.raises(ConfigError, match="cue_alpha"):
        Retriever(sample_index).retrieve(QUESTION, method="cue")


def test_answers_cite_evidence_over_http(llm_index):
    path, _, llm_config = llm_index
    result = Retriever(path).retrieve(QUESTION, method="ket", budget=600)
    reply = answer(open_llm(llm_config), result, AnswerConfig())
    assert reply.text and reply.raw
    assert all(1 <= c["evidence"] <= len(result.evidence) for c in reply.citations)
    empty = RetrievalResult(query=QUESTION, method="ket", budget=600)
    replies, usage = answer_many(open_llm(llm_config), [empty], AnswerConfig())
    assert not replies[0].found and replies[0].text == AnswerConfig().not_found and usage.calls == 0


def test_citations_are_read_and_not_found_is_explicit():
    evidence = [Evidence("unit", i, 1.0, "p", 5, f"text {i}", i, [f"d{i}"], [f"T{i}"]) for i in range(3)]
    result = RetrievalResult(query="q", method="kg", budget=100, evidence=evidence)
    reply = read_answer("Mirela Tasch [2] [3] [9]", result, AnswerConfig())
    assert reply.found and reply.text == "Mirela Tasch"
    assert [c["evidence"] for c in reply.citations] == [2, 3] and reply.citations[0]["doc_ids"] == ["d1"]
    missing = read_answer("Not found in the documents.", result, AnswerConfig())
    assert not missing.found and missing.text == AnswerConfig().not_found


def test_an_index_no_longer_used_is_not_kept_alive_by_a_method(llm_index):
    """kg kept its view of the entities per opened index in a module-wide cache: an index replaced by
    a new version lived on, its tables in memory and its deleted files mapped (disk space not freed)."""
    out, _, _ = llm_index
    retriever = Retriever(out)
    assert retriever.retrieve(QUESTION, method="kg").evidence
    opened = weakref.ref(retriever.index)
    del retriever
    gc.collect()
    assert opened() is None
