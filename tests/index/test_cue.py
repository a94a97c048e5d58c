import itertools
import math
import re
from collections import Counter

import numpy as np
import pytest

from hopgraph.config import EmbeddingConfig
from hopgraph.errors import InputError
from hopgraph.index.cue import bleu_scores, cosine_scores, knapsack_select, select_chunks, write_cue_graph
from hopgraph.models import count_tokens, load_embedder
from hopgraph.ner import query_entities
from hopgraph.store import IndexStore
from hopgraph.text import normalise_entity

CORPUS = [
    "The Halvern Harbor Institute is a marine research centre founded in 1962 on the shore of Lake Orrin.",
    "Sorvik is a small town on the eastern shore of Lake Orrin with a population of roughly 4,200.",
    "The University of Castel Brun was chartered in 1821 and is known for its faculty of earth sciences.",
    "The Halvern Harbor Institute is a marine research centre founded in 1962 on the shore of Lake Orrin.",
]


def reference_bleu(texts: list[str]) -> list[float]:
    """Textbook BLEU-4 of each text against all others (clipped counts, closest-length brevity penalty)."""
    tokens = [re.findall(r"[^\W_]+", t.lower()) for t in texts]
    scores = []
    for i, hyp in enumerate(tokens):
        refs = [r for j, r in enumerate(tokens) if j != i]
        log_p = 0.0
        for n in range(1, 5):
            grams = Counter(tuple(hyp[p : p + n]) for p in range(len(hyp) - n + 1))
            ref_max = Counter()
            for ref in refs:
                for g, c in Counter(tuple(ref[p : p + n]) for p in range(len(ref) - n + 1)).items():
                    ref_max[g] = max(ref_max[g], c)
            matched = sum(min(c, ref_max[g]) for g, c in grams.items())
            total = max(sum(grams.values()), 1)
            log_p = -math.inf if matched == 0 or log_p == -math.inf else log_p + math.log(matched / total) / 4
        closest = min((len(r) for r in refs), key=lambda length: (abs(length - len(hyp)), length))
        penalty = 1.0 if len(hyp) >= closest else math.exp(1 - closest / len(hyp))
        scores.append(0.0 if log_p == -math.inf else math.exp(log_p) * penalty)
    return scores


def test_bleu_prefers_chunks_the_rest_of_the_corpus_repeats():
    scores = bleu_scores(CORPUS)
    # CUE-RAG sends chunks *similar* to others to the LLM: a duplicated chunk scores highest (1.0).
    assert scores[0] == pytest.approx(1.0) and scores[3] == pytest.approx(1.0)
    assert scores[1] < 0.5 and scores[2] < 0.5
    np.testing.assert_allclose(scores, reference_bleu(CORPUS), atol=1e-12)


def test_bleu_matches_the_textbook_definition_on_random_corpora():
    rng = np.random.default_rng(7)
    for vocabulary in ("a b c", "a b c d e f g"):
        words = vocabulary.split()
        texts = [" ".join(rng.choice(words, size=rng.integers(0, 25))) for _ in range(30)]
        np.testing.assert_allclose(bleu_scores(texts), reference_bleu(texts), atol=1e-12)


def test_cosine_scores_are_nearest_other_chunk_similarity():
    vectors = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0.6, 0.8]], dtype=np.float32)
    np.testing.assert_allclose(cosine_scores(vectors), [1.0, 1.0, 0.6, 0.6], atol=1e-6)


def brute_force(values, weights, capacity):
    best = 0.0
    for r in range(len(values) + 1):
        for subset in itertools.combinations(range(len(values)), r):
            if weights[list(subset)].sum() <= capacity:
                best = max(best, values[list(subset)].sum())
    return best


def test_knapsack_is_exactly_optimal_on_small_cases():
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 11))
        weights = rng.integers(0, 25, n)
        values = rng.integers(-3, 20, n).astype(np.float64)  # integers: sums compare exactly
        capacity = int(rng.integers(0, 80))
        chosen = knapsack_select(values, weights, capacity)
        assert list(chosen) == sorted(set(chosen.tolist()))
        assert weights[chosen].sum() <= capacity
        assert values[chosen].sum() == brute_force(values, weights, capacity)


def test_knapsack_on_a_large_instance_fits_and_is_near_the_lp_bound():
    rng = np.random.default_rng(1)
    weights = rng.integers(50, 1300, 4000)
    values = rng.random(4000)
    capacity = int(weights.sum() * 0.4)
    chosen = knapsack_select(values, weights, capacity)
    assert weights[chosen].sum() <= capacity
    order = np.argsort(-values / weights, kind="stable")
    cumulative = np.cumsum(weights[order])
    k = int(np.searchsorted(cumulative, capacity, side="right"))
    greedy = values[order[:k]].sum()
    lp_bound = greedy + values[order[k]] * (capacity - cumulative[k - 1]) / weights[order[k]]
    assert greedy <= values[chosen].sum() <= lp_bound + 1e-9


def test_select_chunks_keeps_the_token_budget():
    tokens = [count_tokens(t) for t in CORPUS]
    assert len(select_chunks(CORPUS, tokens, 0.0)) == 0
    assert select_chunks(CORPUS, tokens, 1.0).tolist() == [0, 1, 2, 3]
    half = select_chunks(CORPUS, tokens, 0.5)
    assert sum(tokens[i] for i in half) <= math.ceil(0.5 * sum(tokens))
    assert half.tolist() == [0, 3]  # the duplicated pair: highest BLEU within budget
    vectors = load_embedder(EmbeddingConfig(cache="")).encode(CORPUS)
    assert select_chunks(CORPUS, tokens, 0.5, "cosine", vectors).tolist() == [0, 3]
    with pytest.raises(InputError):
        select_chunks(CORPUS, tokens, 0.5, "cosine")


def test_entity_names_are_normalised():
    assert normalise_entity("The Halvern Harbor Institute's") == "halvern harbor institute"
    assert normalise_entity("U.S.") == "u s" and normalise_entity("O'Sullivan") == "o sullivan"
    assert "halvern harbor institute" in query_entities("Who was the first director of the Halvern Harbor Institute?")


def test_write_cue_graph_links_units_chunks_and_entities(tmp_path):
    store = IndexStore(tmp_path / "index")
    store.write_table(
        "chunks",
        {
            "text": CORPUS[:3],
            "tokens": [count_tokens(t) for t in CORPUS[:3]],
            "docs": [[0], [0, 1], [2]],
            "acl": [None, None, ["board"]],
        },
    )
    chunk_units = [
        [
            "The Halvern Harbor Institute is a marine research centre.",
            "The Halvern Harbor Institute was founded in 1962.",
            "  ",
        ],
        [CORPUS[1]],
        [
            "The University of Castel Brun was chartered in 1821.",
            "The University of Castel Brun is known for earth sciences.",
        ],
    ]
    sources = ["llm", "llm", "llm", "sentence", "fallback", "fallback"]
    embedder = load_embedder(EmbeddingConfig(cache=""))
    counts = write_cue_graph(store, chunk_units, sources, embedder.encode)
    assert counts == {"cue_units": 5, "cue_entities": counts["cue_entities"], "cue_llm_units": 2}
    units = store.read_table("cue_units")
    assert units["chunk"] == [0, 0, 1, 2, 2] and units["source"] == ["llm", "llm", "sentence", "fallback", "fallback"]
    assert units["docs"] == [[0], [0], [0, 1], [2], [2]]
    assert units["tokens"] == [count_tokens(t) for t in units["text"]]
    entities = store.read_table("cue_entities")
    names = entities["name"]
    assert len(names) == len(set(names)) == counts["cue_entities"]
    assert {"halvern harbor institute", "university of castel brun", "1962", "1821", "lake orrin"} <= set(names)
    graph = store.read_graph("cue_unit_entities")
    assert graph.shape == (5, len(names)) and graph.dtype == np.float32
    institute, university = names.index("halvern harbor institute"), names.index("university of castel brun")
    assert graph[:, institute].nonzero()[0].tolist() == [0, 1]  # one node shared by both units
    assert graph[:, university].nonzero()[0].tolist() == [3, 4]
    assert entities["label"][names.index("1962")] == "DATE"
    for name, rows in (("cue_unit_vectors", 5), ("cue_entity_vectors", len(names))):
        vectors = store.read_array(name)
        assert vectors.shape == (rows, embedder.dim) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    with pytest.raises(InputError, match="source labels"):
        write_cue_graph(store, chunk_units, sources[:-1], embedder.encode)
    with pytest.raises(InputError, match="2 chunks"):
        write_cue_graph(store, chunk_units[:2], sources, embedder.encode)


def test_units_that_are_index_sentences_reuse_their_vectors(tmp_path):
    """At α=0 nearly every unit is one of the index's sentences, which the build has embedded
    already: embedding them again doubled the model work of the CUE graph."""
    store = IndexStore(tmp_path / "index")
    texts = CORPUS[:2]
    store.write_table(
        "chunks", {"text": texts, "tokens": [count_tokens(t) for t in texts], "docs": [[0], [1]], "acl": [None, None]}
    )
    embedder = load_embedder(EmbeddingConfig(cache=""))
    sentences = [CORPUS[0], "Sorvik is a small town on the eastern shore of Lake Orrin."]
    store.write_table("sentences", {"text": sentences})
    store.write_array("sentence_vectors", embedder.encode(sentences))
    embedded: list[str] = []

    def embed(batch: list[str]) -> np.ndarray:
        embedded.extend(batch)
        return embedder.encode(batch)

    cut = "It has a population of roughly 4,200."  # a unit the index has no sentence for
    write_cue_graph(store, [[CORPUS[0]], [sentences[1], cut]], ["sentence"] * 3, embed)
    names = store.read_table("cue_entities")["name"]
    assert embedded == [cut, *names]  # units: only the new one; then the entity names
    np.testing.assert_allclose(store.read_array("cue_unit_vectors"), embedder.encode([*sentences, cut]), atol=1e-5)


def test_an_entity_takes_the_label_it_was_said_with_most_often_and_the_first_of_equals():
    from hopgraph.index.cue import most_said

    org, person, gpe = 0, 1, 2
    entity = np.array([0, 0, 1, 0, 1, 2, 2])  # one (entity, label) per mention, in the order said
    label = np.array([org, person, gpe, person, org, org, gpe])
    assert most_said(entity, label, 4).tolist() == [person, gpe, org, -1]  # entity 3: never said
