import pytest

from hopgraph.evaluate.metrics import coverage_hit
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.retrieve.retriever import Retriever

QUESTION = "Who founded the laboratory that the first director of the Halvern Harbor Institute had previously led?"


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


@pytest.mark.parametrize("method", LLM_FREE)
def test_each_method_fits_the_budget_and_keeps_provenance(retriever, method):
    result = retriever.retrieve(QUESTION, method=method, budget=300)
    assert result.evidence and result.tokens <= 300
    for ev in result.evidence:
        assert ev.doc_ids and ev.path and ev.text
        assert ev.kind == ("chunk" if method == "text" else "unit")
    assert len({(e.kind, e.index) for e in result.evidence}) == len(result.evidence)


@pytest.mark.parametrize("method", LLM_FREE)
def test_each_method_finds_the_bridge_passage_with_a_generous_budget(retriever, method):
    result = retriever.retrieve(QUESTION, method=method, budget=600)
    assert coverage_hit(result.context, ["Anton Vell"]), result.context[:500]


@pytest.mark.parametrize("method", LLM_FREE)
def test_acl_filter_applies_before_packing(retriever, method):
    question = "What budget did the water board approve for the Sorvik campus in 2025?"
    outsider = retriever.retrieve(
        question, method=method, budget=2000, metadata_filter=MetadataFilter(groups=frozenset({"operations"}))
    )
    assert "budget-2025" not in outsider.doc_ids
    assert all("3.1 million" not in e.text for e in outsider.evidence)
    assert "memo-2024-03" in outsider.doc_ids or method == "text" or outsider.tokens < 2000
    board = retriever.retrieve(
        question, method=method, budget=2000, metadata_filter=MetadataFilter(groups=frozenset({"board"}))
    )
    assert "budget-2025" in board.doc_ids


def test_where_filter_and_unrestricted_default(retriever):
    none_open = MetadataFilter(groups=frozenset({"nobody"}), allow_unrestricted=False)
    assert retriever.retrieve(QUESTION, method="text", metadata_filter=none_open).evidence == []
    only_press = MetadataFilter(where={"timestamp": "2023-06-20T08:00:00Z"})
    # A piece is usable where one document it covers passes (packed pieces mix documents: the press
    # release shares its chunks), so every piece names the press release, some a neighbour too.
    result = retriever.retrieve("tide gauges", method="keyword", metadata_filter=only_press)
    assert result.evidence and all("press-2023" in ev.doc_ids for ev in result.evidence)


def test_knng_best_neighbour_matches_a_row_by_row_scan():
    import numpy as np
    import scipy.sparse as sp

    from hopgraph.retrieve.methods.knng import _best_neighbour

    graph = sp.random(300, 300, density=0.01, random_state=1, format="csr")
    scores = np.round(np.random.default_rng(0).random(300), 1)  # rounded: many ties
    best, via = _best_neighbour(graph, scores)
    for row in range(300):
        neighbours = graph.indices[graph.indptr[row] : graph.indptr[row + 1]]
        expected = (
            (scores[neighbours].max(), neighbours[np.argmax(scores[neighbours])]) if len(neighbours) else (-np.inf, -1)
        )
        assert (best[row], via[row]) == expected


def test_unknown_method_is_refused_with_the_registered_choices(sample_index):
    """Method names are checked against the registry (config only checks their spelling)."""
    from hopgraph.errors import ConfigError
    from hopgraph.retrieve.retriever import Retriever

    with pytest.raises(ConfigError, match="unknown method .nope.*text, bm25, knng, keyword, concept, ppr"):
        Retriever(sample_index).retrieve("anything", method="nope")


def test_a_readers_scope_is_reused_across_requests(retriever):
    """What a restricted reader derives from readable material is computed once, not per request."""
    reader = MetadataFilter(groups=frozenset({"operations"}))
    first = retriever.retrieve(QUESTION, method="ppr", budget=300, metadata_filter=reader)
    scope = retriever.scope(MetadataFilter(groups=frozenset({"operations"})))
    assert "keyword_vectors" in scope.derived  # filled by the first request
    assert (
        retriever.scope(reader) is scope and retriever.scope(MetadataFilter(groups=frozenset({"board"}))) is not scope
    )
    again = retriever.retrieve(QUESTION, method="ppr", budget=300, metadata_filter=reader)
    assert [(e.kind, e.index, e.score) for e in again.evidence] == [(e.kind, e.index, e.score) for e in first.evidence]


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_knng_lifts_a_chunk_only_from_a_readable_neighbour(sample_index, weight):
    """A chunk whose KNN neighbours are all forbidden was 'lifted' from one at neighbour_weight 0 (its
    -1 times 0 beat a negative cosine): the path named the forbidden chunk."""
    import numpy as np

    from hopgraph.config import RetrievalConfig
    from hopgraph.retrieve.loaded import LoadedIndex
    from hopgraph.retrieve.methods import knng
    from hopgraph.retrieve.query import Scope, make_query
    from hopgraph.retrieve.retriever import Retriever

    index = LoadedIndex(sample_index)
    graph = index.graph("knn")
    chunk = int(np.flatnonzero(np.diff(graph.indptr))[0])  # one with neighbours, all of them forbidden here
    chunks = np.zeros(graph.shape[0], dtype=bool)
    chunks[chunk] = True
    scope = Scope(chunks[index.unit_chunk], chunks)
    question = "banana smoothie recipe"  # far from every chunk: negative cosines
    query = make_query(index, question, Retriever(index).embed([question])[0])
    config = RetrievalConfig.model_validate({"knng": {"neighbour_weight": weight}})
    found = list(knng.rank(index, query, scope, config))
    assert found and {c.path for c in found} == {"dense seed"}, [c.path for c in found]
    everything = Scope(np.ones(len(index.unit_tokens), bool), np.ones(len(index.chunk_tokens), bool))
    lifted = {c.path for c in knng.rank(index, query, everything, config)} - {"dense seed"}
    assert bool(lifted) == (weight > 0), lifted  # a share of 0 lifts nothing, readable neighbours or not


def test_ppr_freshness_ranks_timestamps_in_time_not_as_text(tmp_path):
    """Sorted as text, 12:00 at +09:00 (03:00 UTC) was newer than 05:00 UTC, and 999 newer than 1000."""
    import numpy as np

    from hopgraph.config import load_config
    from hopgraph.documents import Document
    from hopgraph.index.pipeline import build_index
    from hopgraph.retrieve.filters import seconds_of
    from hopgraph.retrieve.loaded import LoadedIndex
    from hopgraph.retrieve.methods.ppr import _freshness
    from hopgraph.retrieve.query import Scope

    stamps = {"tokyo": "2024-01-01T12:00:00+09:00", "utc": "2024-01-01T05:00:00Z"}
    corpus = [
        Document(id=name, title=name, text=f"The {name} harbour log of the ferry.", metadata={"timestamp": stamp})
        for name, stamp in stamps.items()
    ]
    settings = {"chunking.size": 48, "chunking.overlap": 0, "chunking.splits": 0, "chunking.pack_documents": False}
    build_index(corpus, tmp_path / "index", load_config(None, settings), progress=False)
    index = LoadedIndex(tmp_path / "index")
    fresh = _freshness(index, Scope(np.ones(len(index.unit_tokens), bool), np.ones(len(index.chunk_tokens), bool)))
    unit = {index.documents["id"][docs[0]]: u for u, docs in enumerate(index.units["docs"])}
    assert fresh[unit["utc"]] > fresh[unit["tokyo"]]
    assert seconds_of(999) < seconds_of(1000) and seconds_of("2024-13-01") is None and seconds_of(float("nan")) is None


def test_keyword_stops_once_nothing_more_can_be_reached(sample_index, monkeypatch):
    """With a pool target above what the reader may read, the walk went on through every keyword of
    the index, forbidden ones included (~10 µs each: seconds at a million keywords). Counted through
    the deadline check each step makes (the real one, wrapped)."""
    import numpy as np

    from hopgraph.config import RetrievalConfig
    from hopgraph.retrieve.loaded import LoadedIndex
    from hopgraph.retrieve.methods import keyword
    from hopgraph.retrieve.query import Scope, make_query
    from hopgraph.retrieve.retriever import Retriever

    index = LoadedIndex(sample_index)
    steps = []
    real = keyword.check_deadline
    monkeypatch.setattr(keyword, "check_deadline", lambda: steps.append(1) or real())
    chunks = np.zeros(len(index.chunk_tokens), dtype=bool)
    chunks[index.unit_chunk[0]] = True  # one chunk readable, and its sub-chunks
    scope = Scope(chunks[index.unit_chunk], chunks)
    question = "Which laboratory did Anton Vell found?"
    query = make_query(index, question, Retriever(index).embed([question])[0])
    found = list(keyword.rank(index, query, scope, RetrievalConfig(budget=100_000)))
    assert {c.index for c in found} == set(np.flatnonzero(scope.units).tolist())
    assert len(steps) < len(index.keywords) // 4, (len(steps), len(index.keywords))
