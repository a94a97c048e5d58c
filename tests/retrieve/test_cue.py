import shutil
from pathlib import Path

import numpy as np
import pytest

from hopgraph.config import EmbeddingConfig, RerankConfig, RetrievalConfig
from hopgraph.errors import ConfigError
from hopgraph.index.cue import write_cue_graph
from hopgraph.models import load_embedder, sentence_spans
from hopgraph.ner import query_entities
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import cue, text
from hopgraph.retrieve.packing import pack
from hopgraph.retrieve.query import Scope, make_query
from hopgraph.retrieve.rerank import reranker_for
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

MAYOR = "Who is the mayor of Sorvik, the town with a campus of the Halvern Harbor Institute?"
NO_ENTITY = "What happened after a series of algal blooms?"  # spaCy finds no entity in it
BUDGET = "What budget did the Orrin Basin Water Board approve for the Sorvik campus in 2025?"


def with_cue_graph(index: Path, path: Path) -> Path:
    """A copy of ``index`` at ``path`` plus a CUE graph at α=0 (punkt sentences as knowledge units),
    recorded as its stage records it: retrieval offers only the methods an index's manifest records."""
    shutil.copytree(index, path)
    store = IndexStore(path)
    chunk_units = [[text[a:b] for a, b in sentence_spans(text)] for text in store.read_table("chunks")["text"]]
    write_cue_graph(
        store, chunk_units, ["sentence"] * sum(map(len, chunk_units)), load_embedder(EmbeddingConfig(cache="")).encode
    )
    manifest = store.read_manifest()
    manifest["stages"]["cue_graph"] = {"done": True, "files": store.take_written()}
    store.write_manifest(manifest)
    return path


@pytest.fixture(scope="module")
def cue_index(sample_index, tmp_path_factory):
    return Retriever(with_cue_graph(sample_index, tmp_path_factory.mktemp("cue") / "index"))


def _query(retriever, text):
    return make_query(retriever.index, text, retriever.embed([text])[0])


def _rank(retriever, text, scope=None, **settings):
    config = RetrievalConfig.model_validate({"cue": settings})
    return list(cue.rank(retriever.index, _query(retriever, text), scope or retriever.scope(None), config))


def _cosine_score(graph, vector):
    """A cheap deterministic stand-in for the reranker: cosine of the units' mean vector to the query."""
    return lambda unit_sets: np.array([graph.unit_vectors[list(s)].mean(axis=0) @ vector for s in unit_sets])


def test_index_without_cue_graph_is_refused(sample_index):
    retriever = Retriever(LoadedIndex(sample_index))
    with pytest.raises(ConfigError, match="cue_alpha"):
        cue.rank(retriever.index, _query(retriever, MAYOR), retriever.scope(None), RetrievalConfig())


def _q_iter_then_dense(candidates):
    """Split a cue ranking into what Q-Iter found and the dense ranking that fills the budget after it."""
    found = [c for c in candidates if c.path != "dense"]
    assert candidates[: len(found)] == found, "Q-Iter's pieces come first"
    return found, candidates[len(found) :]


def test_q_iter_reaches_the_answer_and_says_how(cue_index):
    candidates = _rank(cue_index, MAYOR)
    evidence = pack(cue_index.index, candidates, 600)
    assert any("Jonah Brekke" in e.text for e in evidence)
    found, fill = _q_iter_then_dense(candidates)
    assert [c.kind for c in found[:5]] == ["chunk"] * 5  # N = 5 reranked chunks come first
    assert len({(c.kind, c.index) for c in found}) == len(found)
    for c in found:
        assert c.path.startswith("q-iter depth ") and " via entity:" in c.path
        assert c.path.endswith("(rerank: bi-encoder cosine (offline:all-minilm-l6-v2))")
    chunk_scores = [c.score for c in found if c.kind == "chunk"]
    assert chunk_scores[:5] == sorted(chunk_scores[:5], reverse=True)
    assert [c.index for c in fill] == [
        c.index for c in text.rank(cue_index.index, _query(cue_index, MAYOR), cue_index.scope(None), RetrievalConfig())
    ]


@pytest.mark.parametrize("top_k,depth,beam", [(1, 1, 1), (2, 2, 3), (3, 3, 5), (3, 4, 2)])
def test_beam_search_stays_within_its_bounds(cue_index, top_k, depth, beam):
    index = cue_index.index
    graph = cue.cue_graph(index)
    query = _query(cue_index, MAYOR)
    usable = np.ones(len(graph.unit_chunk), dtype=bool)
    seeds = cue.anchor_entities(index, graph, query, usable, RetrievalConfig().cue.model_copy(update={"top_k": top_k}))
    trace = cue.search(
        graph, seeds, query.vector, usable, _cosine_score(graph, query.vector), top_k=top_k, depth=depth, beam=beam
    )
    most_entities = int(np.diff(graph.unit_entities.indptr).max())
    assert trace.seeds == seeds and 1 <= len(trace.beams) <= depth
    assert trace.queue_sizes[0] == len(seeds)
    for d, kept in enumerate(trace.beams):
        assert 1 <= len(kept) <= beam
        assert trace.expansions[d] <= trace.queue_sizes[d] * top_k
        assert all(len(state.units) == d + 1 == len(state.route) for state in kept)
        assert all(state.units == tuple(sorted(set(state.units))) for state in kept)
        assert [s.score for s in kept] == sorted((s.score for s in kept), reverse=True)
        for state in kept:  # query update: φ = φ(q) − Σ φ(k)
            np.testing.assert_allclose(
                state.vector, query.vector - graph.unit_vectors[list(state.units)].sum(axis=0), atol=1e-5
            )
        if d + 1 < len(trace.queue_sizes):
            assert trace.queue_sizes[d + 1] <= beam * most_entities
    for state in (s for kept in trace.beams for s in kept):
        for unit, entity in state.route:  # every hop follows an entity–unit edge
            assert entity in graph.entities_of(unit)


def test_without_query_update_every_state_keeps_the_query_vector(cue_index):
    graph = cue.cue_graph(cue_index.index)
    query = _query(cue_index, MAYOR)
    usable = np.ones(len(graph.unit_chunk), dtype=bool)
    seeds = cue.anchor_entities(cue_index.index, graph, query, usable, RetrievalConfig().cue)
    trace = cue.search(
        graph,
        seeds,
        query.vector,
        usable,
        _cosine_score(graph, query.vector),
        top_k=3,
        depth=2,
        beam=3,
        query_update=False,
    )
    assert all(np.array_equal(s.vector, query.vector) for kept in trace.beams for s in kept)


def test_anchoring_switches_select_the_seed_sources(cue_index):
    index, graph = cue_index.index, cue.cue_graph(cue_index.index)
    query = _query(cue_index, MAYOR)
    usable = np.ones(len(graph.unit_chunk), dtype=bool)
    names = index.table("cue_entities")["name"]
    base = RetrievalConfig().cue
    activation = cue.anchor_entities(
        index, graph, query, usable, base.model_copy(update={"knowledge_anchoring": False})
    )
    anchoring = cue.anchor_entities(
        index, graph, query, usable, base.model_copy(update={"spreading_activation": False})
    )
    both = cue.anchor_entities(index, graph, query, usable, base)
    assert "sorvik" in [names[e] for e in activation] and len(activation) <= 3 * 2  # ≤ K per query entity
    assert both == list(dict.fromkeys(activation + anchoring))
    assert (
        cue.anchor_entities(
            index,
            graph,
            query,
            usable,
            base.model_copy(update={"spreading_activation": False, "knowledge_anchoring": False}),
        )
        == []
    )


def test_forbidden_chunks_are_never_reached(cue_index):
    outsider = cue_index.scope(MetadataFilter(groups=frozenset({"operations"})))
    assert not outsider.chunks.all()
    small = {"top_k": 2, "depth": 2, "beam": 3}  # the bounds do not matter here; keep the test quick
    candidates = _rank(cue_index, BUDGET, outsider, **small)
    assert candidates
    units = cue_index.index.table("cue_units")
    for c in candidates:
        chunk = c.index if c.kind == "chunk" else units["chunk"][c.index]
        assert outsider.chunks[chunk]
    assert all("3.1 million" not in e.text for e in pack(cue_index.index, candidates, 5000))
    # Entities found only in forbidden units are not seeds either.
    graph = cue.cue_graph(cue_index.index)
    usable = outsider.chunks[graph.unit_chunk]
    seeds = cue.anchor_entities(cue_index.index, graph, _query(cue_index, BUDGET), usable, RetrievalConfig().cue)
    assert all(usable[graph.units_of(e)].any() for e in seeds)
    board = _rank(cue_index, BUDGET, cue_index.scope(MetadataFilter(groups=frozenset({"board"}))), **small)
    assert any("3.1 million" in e.text for e in pack(cue_index.index, board, 5000))
    nothing = Scope(outsider.units, np.zeros_like(outsider.chunks))
    assert _rank(cue_index, BUDGET, nothing) == []


def test_fallback_reranker_scores_from_the_index_vectors(cue_index, monkeypatch):
    """The bi-encoder fallback read every passage through the model again for every query."""
    index = cue_index.index
    query = _query(cue_index, MAYOR)
    reranker = reranker_for(index)
    units = index.table("cue_units")["text"]
    vectors = index.array("cue_unit_vectors")
    # Same math: the stored vector of a text is what the fallback computes from the text.
    np.testing.assert_allclose(
        reranker.score_embedded(MAYOR, query.vector, units, vectors), reranker.score(MAYOR, units), atol=1e-5
    )
    graph = cue.cue_graph(index)
    pair = (0, 3)  # a set of units: the unit-length mean of their vectors, as windows of a long text are
    expected = vectors[list(pair)].mean(axis=0)
    np.testing.assert_allclose(graph.set_vectors([pair])[0], expected / np.linalg.norm(expected), atol=1e-6)

    encoded: list[str] = []
    passages = reranker.embedder.encode

    def counting(texts, **kwargs):
        encoded.extend(texts)
        return passages(texts, **kwargs)

    monkeypatch.setattr(reranker.embedder, "encode", counting)  # a spy on the real embedder: it still embeds
    candidates = _rank(cue_index, MAYOR)
    assert candidates and encoded == []  # no passage embedded at query time
    chunk_vectors = index.array("chunk_vectors")
    for c in _q_iter_then_dense(candidates)[0][:5]:  # the chunk rerank is the stored chunk vector's cosine
        assert c.score == pytest.approx(float(chunk_vectors[c.index] @ query.vector), abs=1e-6)


def test_a_small_search_still_fills_the_budget(cue_index):
    """Q-Iter reaches few chunks; the dense ranking fills the rest of the budget after them."""
    index = cue_index.index
    candidates = _rank(cue_index, MAYOR, top_k=1, depth=1, beam=1)
    found, fill = _q_iter_then_dense(candidates)
    assert found and fill and all(c.kind == "chunk" for c in fill)
    chunks = index.chunks
    evidence = pack(index, candidates, sum(chunks["tokens"]))  # room for every chunk
    assert {e.chunk for e in evidence} == set(range(len(chunks["text"])))
    assert [e.path for e in evidence[: len(found)]] == [c.path for c in found]


def test_a_question_without_entities_is_still_anchored(cue_index):
    """spaCy finds no entity in the question: cue used to return nothing; knowledge anchoring now seeds it."""
    assert query_entities(NO_ENTITY) == []
    index, graph = cue_index.index, cue.cue_graph(cue_index.index)
    query = _query(cue_index, NO_ENTITY)
    usable = np.ones(len(graph.unit_chunk), dtype=bool)
    seeds = cue.anchor_entities(index, graph, query, usable, RetrievalConfig().cue.model_copy(update={"top_k": 1}))
    assert seeds
    found, _ = _q_iter_then_dense(_rank(cue_index, NO_ENTITY, top_k=1))
    assert found and found[0].path.startswith("q-iter depth ")
    # With no anchoring at all, the context is the dense ranking's, not empty.
    alone = _rank(cue_index, NO_ENTITY, spreading_activation=False, knowledge_anchoring=False)
    assert [c.index for c in alone] == [
        c.index for c in text.rank(index, query, cue_index.scope(None), RetrievalConfig())
    ]


def test_question_entities_the_index_has_take_their_stored_vectors(cue_index):
    """Anchoring embedded the question's entity names for every query; a known name has its vector."""
    graph = cue.cue_graph(cue_index.index)
    embedder = load_embedder(cue_index.index.config.embedding)
    asked: list[list[str]] = []

    def embed(names: list[str]) -> np.ndarray:
        asked.append(names)
        return embedder.encode(names)

    known = [n for n in query_entities(MAYOR) if n in graph.entity_ids]
    assert known and asked == []
    readable = np.ones(len(graph.entity_ids), dtype=bool)
    vectors = graph.name_vectors([*known, "ermengarde of tours"], embed, readable)
    assert asked == [["ermengarde of tours"]]  # only the name the index lacks goes to the model
    np.testing.assert_allclose(vectors, embedder.encode([*known, "ermengarde of tours"]), atol=1e-5)
    # A name the reader may not know (named only in forbidden text) is embedded like an unknown one:
    # its stored vector answered ~4 times faster, a yes to a guessed name for whoever times it.
    asked.clear()
    graph.name_vectors(known, embed, np.zeros(len(graph.entity_ids), dtype=bool))
    assert asked == [known]


def test_the_run_s_reranker_settings_are_the_ones_used(cue_index):
    """query, eval and serve built the reranker from the index's stored [rerank] settings: a run's
    --rerank.model was ignored (and an eval's result file still recorded it as used)."""
    config = cue_index.index.config.model_copy(update={"rerank": RerankConfig(model="/nonexistent/bge-reranker")})
    with pytest.raises(ConfigError, match="rerank.model '/nonexistent/bge-reranker' is not a local model folder"):
        Retriever.configured(cue_index.index, config).retrieve(MAYOR, method="cue")
    assert Retriever.configured(cue_index.index, cue_index.index.config).retrieve(MAYOR, method="cue").evidence
