import tracemalloc

import numpy as np

from hopgraph.config import KeywordConfig
from hopgraph.index import keywords
from hopgraph.index.keywords import KnownPostings, build_vocabulary, incidence, vocabulary_and_incidence
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


def test_rows_taken_from_an_earlier_version_give_the_postings_tokenising_gives(monkeypatch):
    """An update takes its unchanged texts' rows from the version it edits, whose vocabulary has
    words the update lost and lacks words it gained: the result is what tokenising every text gives."""
    rng = np.random.default_rng(7)
    pool = [f"w{i:03d}" for i in range(300)] + ["Zürich", "river", "the", "a"]

    def text() -> str:
        return " ".join(rng.choice(pool, size=int(rng.integers(0, 12))))

    before = [text() for _ in range(60)]
    after = [before[i] for i in rng.permutation(60)[:40]] + [text() for _ in range(25)] + [before[3]]
    after = [after[i] for i in rng.permutation(len(after))]
    old_vocabulary, old_postings = vocabulary_and_incidence(before)
    row_of = {t: i for i, t in reversed(list(enumerate(before)))}
    known = KnownPostings(old_vocabulary, old_postings, np.array([row_of.get(t, -1) for t in after]))
    assert (known.rows >= 0).sum() >= 40 and (known.rows < 0).sum() >= 20
    vocabulary, postings = vocabulary_and_incidence(after)
    tokenised: list[str] = []
    monkeypatch.setattr(keywords, "words", lambda text, n=2: tokenised.append(text) or words(text, n))
    taken_vocabulary, taken = vocabulary_and_incidence(after, known=known)
    assert tokenised == [t for t, row in zip(after, known.rows) if row < 0]  # only the texts it lacks
    assert taken_vocabulary == vocabulary and set(vocabulary) != set(old_vocabulary)
    assert (taken != postings).nnz == 0 and taken.has_sorted_indices
    assert taken.indices.dtype == postings.indices.dtype and taken.data.dtype == np.float32


def test_taken_rows_without_any_keyword_are_taken_as_empty_rows():
    """Every row taken holds no keyword (stop words, single letters): one empty row each, no error."""
    before = ["I am a.", "Of the, to."]
    old_vocabulary, old_postings = vocabulary_and_incidence(before)
    after = [*before, "Zebra crossing"]
    known = KnownPostings(old_vocabulary, old_postings, np.array([0, 1, -1]))
    vocabulary, taken = vocabulary_and_incidence(after, known=known)
    assert vocabulary == ["crossing", "zebra"] and taken.toarray().tolist() == [[0, 0], [0, 0], [1, 1]]


def test_sentence_rows_are_taken_unless_they_hold_a_word_new_to_the_vocabulary(monkeypatch):
    """A sentence can hold whole a word no chunk held whole (a chunk cut inside a long run of
    letters); once an inserted text brings that word into the vocabulary, the sentence's earlier row
    lacks it. Such sentences are counted again, the rest taken; words the vocabulary lost are dropped."""
    sentences = ["The xylophonist tuned the harbour bells.", "Bells rang at noon.", "Tides and bells."]
    old_vocabulary = ["bells", "harbour", "noon", "rang", "tides", "tuned"]  # "xylophonist" was cut in every chunk
    old = {w: i for i, w in enumerate(old_vocabulary)}
    known = KnownPostings(old_vocabulary, incidence(sentences, old), np.arange(3))
    vocabulary = {
        w: i for i, w in enumerate(["bells", "noon", "rang", "tides", "tuned", "xylophonist"])
    }  # lost "harbour"
    tokenised: list[str] = []
    monkeypatch.setattr(keywords, "words", lambda text, n=2: tokenised.append(text) or words(text, n))
    taken = incidence(sentences, vocabulary, known=known)
    assert tokenised == sentences[:1]  # only the sentence holding the new word
    monkeypatch.undo()
    assert (taken != incidence(sentences, vocabulary)).nnz == 0 and taken[0, vocabulary["xylophonist"]] == 1
