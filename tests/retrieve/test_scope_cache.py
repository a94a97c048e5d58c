"""A restricted reader's graph structures are built once per scope, not once per request.

The walk of ``ppr`` cut to the reader's sub-chunks, the concepts and CUE entities the reader can
reach: each is derived from the scope alone, so a reader's second request must reuse it and rank
exactly as the first did (and as a fresh retriever does).
"""

from __future__ import annotations

import threading

import pytest

from hopgraph.kernels import RandomWalk
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.methods import cue, ppr
from hopgraph.retrieve.retriever import Retriever
from tests.retrieve.test_cue import with_cue_graph

QUESTION = "Who founded the laboratory that the first director of the Halvern Harbor Institute had previously led?"
OPERATIONS = MetadataFilter(groups=frozenset({"operations"}))


def ranking(result):
    return [(e.kind, e.index, e.score, e.path) for e in result.evidence]


@pytest.fixture()
def walk_builds(monkeypatch):
    """Counts the walks ppr builds (the real RandomWalk, counted: the instrument, not a stand-in)."""
    built: list[int] = []

    class CountedWalk(RandomWalk):
        def __init__(self, adjacency):
            built.append(adjacency.shape[0])
            super().__init__(adjacency)

    monkeypatch.setattr(ppr, "RandomWalk", CountedWalk)
    return built


def test_restricted_ppr_builds_its_walk_once_and_ranks_as_a_fresh_build(sample_index, walk_builds):
    retriever = Retriever(sample_index)
    first = retriever.retrieve(QUESTION, method="ppr", budget=400, metadata_filter=OPERATIONS)
    assert len(walk_builds) == 1  # the reader's walk, cut to its sub-chunks
    second = retriever.retrieve(QUESTION, method="ppr", budget=400, metadata_filter=OPERATIONS)
    other = retriever.retrieve("Who is the mayor of Sorvik?", method="ppr", budget=400, metadata_filter=OPERATIONS)
    assert len(walk_builds) == 1, "a restricted reader's later requests rebuilt the walk"
    assert other.evidence
    assert ranking(second) == ranking(first)
    fresh = Retriever(sample_index).retrieve(QUESTION, method="ppr", budget=400, metadata_filter=OPERATIONS)
    assert ranking(fresh) == ranking(first)
    assert len(walk_builds) == 2  # a new retriever has its own scopes
    # A different reader gets a walk of its own, and ranks differently from the open one.
    board = retriever.retrieve(
        QUESTION, method="ppr", budget=400, metadata_filter=MetadataFilter(groups=frozenset({"board"}))
    )
    assert len(walk_builds) == 3 and board.evidence


def test_concurrent_first_requests_of_a_reader_build_one_walk(sample_index, walk_builds):
    retriever = Retriever(sample_index)
    results: list = []

    def ask() -> None:
        results.append(ranking(retriever.retrieve(QUESTION, method="ppr", budget=400, metadata_filter=OPERATIONS)))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(walk_builds) == 1
    assert len(results) == 4 and all(r == results[0] for r in results)


def test_restricted_concept_reuses_its_reachable_concepts(sample_index):
    retriever = Retriever(sample_index)
    first = retriever.retrieve(QUESTION, method="concept", budget=400, metadata_filter=OPERATIONS)
    scope = retriever.scope(OPERATIONS)
    cached = scope.derived["concepts_reachable"]
    second = retriever.retrieve(QUESTION, method="concept", budget=400, metadata_filter=OPERATIONS)
    assert scope.derived["concepts_reachable"] is cached
    assert ranking(second) == ranking(first)


def test_restricted_cue_reuses_its_reachable_entities(sample_index, tmp_path, monkeypatch):
    retriever = Retriever(with_cue_graph(sample_index, tmp_path / "index"))
    computed: list[int] = []
    real = cue.reachable_entities

    def counted(graph, usable):
        computed.append(1)
        return real(graph, usable)

    monkeypatch.setattr(cue, "reachable_entities", counted)
    first = retriever.retrieve(QUESTION, method="cue", budget=400, metadata_filter=OPERATIONS)
    second = retriever.retrieve(QUESTION, method="cue", budget=400, metadata_filter=OPERATIONS)
    assert len(computed) == 1
    assert ranking(second) == ranking(first)


def test_a_new_where_filter_per_request_reuses_the_readers_keyword_vectors_and_pushes_out_no_reader(sample_index):
    """A filter per request rebuilt what the reader's groups derive (keyword vectors: ~60 ms on 850
    sub-chunks, growing with the corpus), and SCOPES_KEPT such requests pushed every other reader's
    scope out of the cache. Derived from readable material, it is kept once per groups."""
    retriever = Retriever(sample_index)
    retriever.retrieve(QUESTION, method="ppr", budget=400, metadata_filter=OPERATIONS)
    readers = retriever.scope(OPERATIONS)
    vectors = readers.derived["keyword_vectors"]
    for n in range(Retriever.SCOPES_KEPT + 2):
        narrowed = MetadataFilter(groups=OPERATIONS.groups, where={"title": {"ne": f"no such title {n}"}})
        assert retriever.retrieve(QUESTION, method="ppr", budget=400, metadata_filter=narrowed).evidence
        assert (
            retriever.scope(narrowed).readable is readers and "keyword_vectors" not in retriever.scope(narrowed).derived
        )
    assert retriever.scope(OPERATIONS) is readers and readers.derived["keyword_vectors"] is vectors


def test_a_where_filter_seeds_ppr_only_with_keywords_of_the_pieces_it_leaves(sample_index):
    """Keyword vectors are the groups' own, but a seed must lead somewhere the filter leaves: seed
    slots went to words of documents the filter excludes ("hydrologist", "chaired" of the water board)."""
    retriever = Retriever(sample_index)
    narrowed = MetadataFilter(where={"id": "press-2023"})
    result = retriever.retrieve(QUESTION, method="ppr", budget=2000, metadata_filter=narrowed)
    scope = retriever.scope(narrowed)
    text = " ".join(t for t, usable in zip(retriever.index.chunks["text"], scope.chunks) if usable).lower()
    words = [seed.split(":", 1)[1] for seed in result.seeds if seed.startswith("keyword:")]
    assert words and all(word in text for word in words), (words, result.seeds)
