import tracemalloc

import numpy as np

from hopgraph.config import KeywordConfig
from hopgraph.index.keywords import build_vocabulary, incidence
from hopgraph.kernels import mean_vectors
from hopgraph.text import words


def test_words_drop_stop_words_and_short_tokens():
    assert words("The Rudolf Wolf of Zürich was born in 1816, a year.") == [
        "rudolf",
        "wolf",
        "zürich",
        "born",
        "1816",
        "year",
    ]


def test_incidence_is_binary_postings():
    vocab = {w: i for i, w in enumerate(["river", "town", "mill"])}
    m = incidence(["River town river.", "The mill.", "Nothing here."], vocab)
    assert m.toarray().tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 0]]


def test_tfidf_keeps_distinctive_terms():
    chunks = ["alpha beta gamma common", "delta epsilon common", "zeta common eta"]
    vocab = build_vocabulary(chunks, KeywordConfig(method="tfidf", tfidf_top=2))
    assert "common" not in vocab and len(vocab) == 6
    assert build_vocabulary(chunks, KeywordConfig()) == sorted(set(" ".join(chunks).split()))


def test_keyword_vector_is_normalised_mean_of_its_sentences():
    vocab = {"x": 0, "y": 1}  # "x" is in sentences 0 and 1, "y" in 1 and 2
    postings = incidence(["xx x", "x y", "y"], vocab, min_length=1)
    sentences = np.array([[1, 0], [0, 1], [0, 1]], dtype=np.float32)
    vectors = mean_vectors(postings, sentences)
    assert np.allclose(vectors[0], np.array([1, 1]) / np.sqrt(2))
    assert np.allclose(vectors[1], [0, 1])


def test_vocabulary_memory_grows_with_the_vocabulary_not_the_corpus():
    # 1000 chunks of 60 tokens over 300 words: holding every chunk's tokens at once peaks at ~4 MB;
    # tokenising one chunk at a time keeps only the vocabulary and the current chunk's tokens.
    rng = np.random.default_rng(3)
    lexicon = [f"word{i}" for i in range(300)]
    chunks = [" ".join(rng.choice(lexicon, 60).tolist()) for _ in range(1000)]
    for method in ("tokens", "tfidf"):
        tracemalloc.start()
        vocabulary = build_vocabulary(chunks, KeywordConfig(method=method, tfidf_top=5))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(vocabulary) > 250
        assert peak < 1_000_000, (method, peak)
