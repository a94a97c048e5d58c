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
