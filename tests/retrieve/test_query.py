import numpy as np
import pytest

from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.query import Query, unit_cosine


@pytest.fixture(scope="module")
def index(sample_index):
    return LoadedIndex(sample_index)


def _query(index, seed=0):
    vector = np.random.default_rng(seed).standard_normal(index.array("unit_vectors").shape[1]).astype(np.float32)
    return Query(text="", vector=vector / np.linalg.norm(vector), keyword_ids=[])


def test_sentence_mix_blends_each_unit_with_its_best_sentence(index):
    query = _query(index)
    parents = np.asarray(index.store.read_table("sentences")["unit"])
    sentence_scores = index.array("sentence_vectors") @ query.vector
    own = index.array("unit_vectors") @ query.vector
    # Sentences belong to the sub-chunk they start in; a sub-chunk inside one long sentence keeps its own score.
    best = np.array([sentence_scores[parents == u].max() if (parents == u).any() else own[u] for u in range(len(own))])
    np.testing.assert_allclose(unit_cosine(index, query, 0.0), own, rtol=1e-6)
    np.testing.assert_allclose(unit_cosine(index, query, 1.0), best, rtol=1e-6)
    np.testing.assert_allclose(unit_cosine(index, query, 0.25), 0.75 * own + 0.25 * best, rtol=1e-5)


def test_sentence_runs_cover_every_sentence_once(index):
    starts, units = index.sentence_runs
    parents = np.asarray(index.store.read_table("sentences")["unit"])
    assert len(set(units.tolist())) == len(units) and set(units.tolist()) == set(parents.tolist())
    assert starts[0] == 0 and (np.diff(starts) > 0).all()


def test_top_indices_and_descending_match_a_stable_full_sort():
    from hopgraph.retrieve.query import descending, top_indices

    scores = np.round(np.random.default_rng(1).random(500), 2)  # many ties
    full = np.argsort(-scores, kind="stable")
    for k in (0, 1, 7, 499, 500, 600):
        assert top_indices(scores, k).tolist() == full[:k].tolist()
    assert list(descending(scores, head=10)) == full.tolist()
    assert list(descending(scores, head=1000)) == full.tolist()
    masked = np.where(np.random.default_rng(2).random(500) < 0.9, -np.inf, scores)  # a reader's mask
    full = np.argsort(-masked, kind="stable")
    for k in (0, 1, 7, 49, 51, 499, 500, 600):  # fewer, and more, than the unmasked ones
        assert top_indices(masked, k).tolist() == full[:k].tolist()
    sparse = np.zeros(500)  # a seed vector: a few positive weights, the rest at one floor value
    sparse[np.random.default_rng(3).choice(500, 12, replace=False)] = np.round(np.random.default_rng(4).random(12), 1)
    full = np.argsort(-sparse, kind="stable")
    for k in (1, 5, 12, 13, 40, 500):
        assert top_indices(sparse, k).tolist() == full[:k].tolist()
        assert top_indices(sparse - 1.0, k).tolist() == full[:k].tolist()  # a floor below zero too
