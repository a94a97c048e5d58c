"""Model backends on the offline wheels: tokens, sentences and embeddings (real MiniLM on CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from hopgraph.config import EmbeddingConfig
from hopgraph.errors import ConfigError
from hopgraph.models import BgeM3Embedder, count_tokens, embed_long_texts, load_embedder, sentence_spans


@pytest.fixture(scope="module")
def minilm():
    return load_embedder(EmbeddingConfig(device="cpu"))


def test_sentences_are_character_spans():
    text = "The mill was built in 1881. Dr. Brun ran it until 1902! Was it profitable?"
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == [
        "The mill was built in 1881.",
        "Dr. Brun ran it until 1902!",
        "Was it profitable?",
    ]


def test_minilm_vectors_are_normalised_and_meaningful(minilm):
    vectors = minilm.encode(
        ["A harbour research institute on a lake.", "A marine science centre by the water.", "Quarterly tax forms."]
    )
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_long_text_is_the_mean_of_equal_windows_not_a_truncation(minilm):
    sentences = [f"Sentence number {i} talks about topic {i % 7} in the archive." for i in range(60)]
    long_text = " ".join(sentences)
    assert count_tokens(long_text) > 3 * 192
    short = "A short text embedded in one pass."
    vectors = embed_long_texts(minilm, [short, long_text], window_tokens=192)
    # Batched and single encodes differ by ~3e-4 where the weights are half precision.
    np.testing.assert_allclose(vectors[0], minilm.encode([short])[0], atol=1e-3)
    from hopgraph.models import get_encoding

    tokens = get_encoding().encode(long_text)
    pieces = -(-len(tokens) // 192)
    step = -(-len(tokens) // pieces)
    windows = [get_encoding().decode(tokens[i : i + step]) for i in range(0, len(tokens), step)]
    mean = minilm.encode(windows).mean(axis=0)
    np.testing.assert_allclose(vectors[1], mean / np.linalg.norm(mean), atol=1e-3)
    truncated = minilm.encode([long_text])[0]
    assert not np.allclose(vectors[1], truncated, atol=1e-3)


def test_models_are_local_folders_only(tmp_path):
    with pytest.raises(ConfigError, match="never downloaded"):
        load_embedder(EmbeddingConfig(model="BAAI/bge-m3", backend="bge-m3"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="colbert_linear.pt, sparse_linear.pt"):
        BgeM3Embedder(str(tmp_path), "cpu", 8)


def test_query_and_passage_prompts_go_before_the_text(tmp_path):
    """e5/BGE-style instructions: passages and questions get their own prompt; the cache keys the prompted text."""
    import numpy as np

    from hopgraph.config import EmbeddingConfig
    from hopgraph.models import load_embedder

    plain = load_embedder(EmbeddingConfig(cache=""))
    prompted = load_embedder(
        EmbeddingConfig(cache=str(tmp_path / "v.sqlite"), query_prompt="query: ", passage_prompt="passage: "),
        cached=True,
    )
    text = "The Halvern Harbor Institute was founded in 1931."
    assert np.allclose(prompted.encode([text])[0], plain.encode(["passage: " + text])[0], atol=1e-5)
    assert np.allclose(prompted.encode_queries([text])[0], plain.encode(["query: " + text])[0], atol=1e-5)
    assert np.allclose(
        plain.encode_queries([text])[0], plain.encode([text])[0], atol=1e-6
    )  # no prompts: the same vectors
    assert not np.allclose(prompted.encode([text])[0], plain.encode([text])[0], atol=1e-3)


def test_embedding_backends_come_from_the_registry():
    import pytest

    from hopgraph.config import EmbeddingConfig
    from hopgraph.errors import ConfigError
    from hopgraph.models import EMBEDDING_BACKENDS, load_embedder

    assert {"sentence-transformers", "bge-m3"} <= set(EMBEDDING_BACKENDS)
    with pytest.raises(ConfigError, match="not registered; choose one of sentence-transformers, bge-m3"):
        load_embedder(EmbeddingConfig(backend="word2vec", cache=""))
    with pytest.raises(ConfigError, match="takes no query/passage prompts"):
        load_embedder(EmbeddingConfig(backend="bge-m3", query_prompt="query: ", cache=""))


def test_default_window_is_the_models_own_limit_and_stays_192_for_minilm(minilm):
    """Empty window_tokens = the model's limit at 3/4; MiniLM's is the 192 its indexes were built with."""
    from hopgraph.config import load_config
    from hopgraph.index.pipeline import stage_keys

    default = EmbeddingConfig()
    assert default.window_tokens is None and default.effective_window_tokens == 192
    assert default.model_dump()["window_tokens"] == 192  # what manifests and stage settings keys record
    assert minilm.window_tokens == 192  # the loaded model (max_seq_length 256) agrees with its folder
    assert stage_keys(load_config(None)) == stage_keys(load_config(None, {"embedding.window_tokens": 192}))
    assert EmbeddingConfig(window_tokens=100).effective_window_tokens == 100  # an explicit value wins


def test_a_long_context_model_gets_a_long_window(tmp_path):
    """A BGE-M3 folder (XLM-R, 8192 tokens) was cut into MiniLM's 192-token windows before."""
    from hopgraph.config.build import model_input_limit

    (tmp_path / "config.json").write_text('{"model_type": "xlm-roberta", "max_position_embeddings": 8194}')
    assert model_input_limit(str(tmp_path)) == 8192
    config = EmbeddingConfig(backend="bge-m3", model=str(tmp_path))
    assert config.effective_window_tokens == 6144 and config.model_dump()["window_tokens"] == 6144
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 1000000000000000019884624838656}')
    model_input_limit.cache_clear()
    assert model_input_limit(str(tmp_path)) == 8192  # the "no limit" sentinel is not a limit
    assert EmbeddingConfig(model=str(tmp_path / "absent")).effective_window_tokens is None


def test_embedding_without_a_window_uses_the_embedders_own(minilm):
    text = " ".join(f"Sentence number {i} talks about topic {i % 7} in the archive." for i in range(60))
    np.testing.assert_array_equal(
        embed_long_texts(minilm, [text], window_tokens=None), embed_long_texts(minilm, [text], window_tokens=192)
    )


def test_texts_embedded_in_any_grouping_of_whole_batches_get_bitwise_the_same_vectors(minilm):
    """What lets the Ray engine write the embedded engine's vectors: an actor given consecutive whole
    model batches of one slice keeps their order and cuts them into the same batches, so every text
    is padded alike and its vector is bitwise the one a single call computes."""
    from hopgraph.index.cluster import actor_batches
    from hopgraph.models import model_batches

    rng = np.random.default_rng(5)
    words = ["harbor", "survey", "ferry", "board", "vessel", "Sorvik", "a", "the"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 40)))) for _ in range(150)]
    texts += texts[:10]  # repeated texts, and many ties in length
    batch_size = minilm.inner.batch_size
    whole = minilm.encode(texts)
    for size in (1, 20, 64, 1000):
        groups = actor_batches(texts, batch_size, size)
        assert sorted(np.concatenate(groups).tolist()) == list(range(len(texts)))
        for group in groups:
            part = [texts[i] for i in group]
            [batches] = model_batches(part, batch_size)  # one slice
            assert [i for batch in batches for i in batch] == list(range(len(part)))  # order kept
            assert np.array_equal(minilm.encode(part), whole[group])
