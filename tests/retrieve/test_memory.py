"""A server opens one LoadedIndex per published version: each must be freed once dropped, with
everything cached for it (tables, graphs, the PPR walk, the CUE graph, the reranker)."""

import gc
import weakref

from hopgraph.retrieve.methods import cue, ppr
from hopgraph.retrieve.rerank import reranker_for
from hopgraph.retrieve.retriever import Retriever
from tests.retrieve.test_cue import MAYOR, cue_index  # noqa: F401  (the CUE fixture: sample index + α=0 graph)


def test_dropped_indexes_are_collected_with_their_caches(cue_index):  # noqa: F811
    root = cue_index.index.store.root
    refs = []
    for _ in range(3):
        retriever = Retriever(root)
        for method in ("ppr", "cue", "concept", "keyword", "text"):
            assert retriever.retrieve(MAYOR, method=method, budget=400).evidence
        index = retriever.index
        assert reranker_for(index) is reranker_for(index) and ppr.open_walk(index) is ppr.open_walk(index)
        assert cue.cue_graph(index) is cue.cue_graph(index)
        refs += [
            weakref.ref(retriever),
            weakref.ref(index),
            weakref.ref(cue.cue_graph(index)),
            weakref.ref(ppr.open_walk(index)),
        ]
        del retriever, index
    gc.collect()
    assert [r for r in refs if r() is not None] == []
