"""BM25: scores equal the textbook formula (binary tf) computed directly from the texts."""

from __future__ import annotations

import math

from hopgraph.index.chunking import searchable
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods.bm25 import K1, B
from hopgraph.retrieve.retriever import Retriever
from hopgraph.text import words


def test_bm25_scores_match_the_formula(sample_index):
    question = "Which laboratory did Anton Vell found near the harbor?"
    index = LoadedIndex(sample_index)
    result = Retriever(index).retrieve(question, method="bm25", budget=10_000)
    assert result.evidence and all(e.kind == "unit" and e.path.startswith("bm25 via keyword:") for e in result.evidence)
    units = index.units
    n = len(units["text"])
    mean_length = sum(units["tokens"]) / n
    unit_words = [set(words(t)) for t in searchable(units)]  # a piece is keyword-indexed with its heading
    terms = [w for w in dict.fromkeys(words(question)) if w in index.keyword_lookup]

    def expected(u: int) -> float:
        total = 0.0
        for w in terms:
            if w in unit_words[u]:
                df = sum(w in ws for ws in unit_words)
                idf = math.log1p((n - df + 0.5) / (df + 0.5))
                total += idf * (K1 + 1) / (1 + K1 * (1 - B + B * units["tokens"][u] / mean_length))
        return total

    for ev in result.evidence:
        assert math.isclose(ev.score, expected(ev.index), rel_tol=1e-6)
    scores = [ev.score for ev in result.evidence]
    assert scores == sorted(scores, reverse=True)
    assert {ev.index for ev in result.evidence} == {u for u in range(n) if expected(u) > 0}  # every match, nothing else


def test_bm25_ranks_nothing_without_known_words(sample_index):
    assert Retriever(sample_index).retrieve("zzzz qqqq", method="bm25", budget=500).evidence == []


def test_bm25_answers_without_loading_the_embedding_model(sample_index):
    """bm25 reads no vector: the model (seconds to load) is loaded only for a method that needs it."""
    retriever = Retriever(LoadedIndex(sample_index))
    assert retriever.retrieve("Which laboratory did Anton Vell found?", method="bm25").evidence
    assert retriever._embedder is None
    assert retriever.retrieve("Which laboratory did Anton Vell found?", method="text").evidence
    assert retriever._embedder is not None
