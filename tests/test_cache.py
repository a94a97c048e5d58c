import numpy as np

from hopgraph.cache import CachedEmbedder, VectorCache
from hopgraph.config import EmbeddingConfig
from hopgraph.models import embed_long_texts, load_embedder


def test_cached_embedder_embeds_each_text_once(tmp_path):
    config = EmbeddingConfig(cache=str(tmp_path / "vectors.sqlite"))
    first = load_embedder(config, cached=True).inner  # under the prompt wrapper (no prompts here)
    texts = ["The river Aster flows south.", "Sorvik lies on Lake Orrin.", "The river Aster flows south."]
    vectors = first.encode(texts)
    assert isinstance(first, CachedEmbedder) and first.misses == 2 and first.hits == 0  # two distinct texts computed
    again = CachedEmbedder(first.inner, VectorCache(config.cache, "sentence-transformers:" + config.model))
    assert np.allclose(again.encode(texts), vectors) and again.hits == 3 and again.misses == 0
    assert np.array_equal(vectors[0], vectors[2])  # a repeated text is embedded once
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)


def test_long_texts_are_windowed_not_truncated(tmp_path):
    embedder = load_embedder(EmbeddingConfig(cache=""))
    head = "Mirela Tasch led the sediment laboratory at the University of Castel Brun. " * 8
    tail = "Freshwater mussels are monitored at the Sorvik campus on Lake Orrin. " * 8
    whole = embed_long_texts(embedder, [head + tail], window_tokens=64)[0]
    only_head = embed_long_texts(embedder, [head], window_tokens=64)[0]
    only_tail = embed_long_texts(embedder, [tail], window_tokens=64)[0]
    # The tail influences the vector (truncation would make it identical to the head's).
    assert whole @ only_tail > only_head @ only_tail + 0.05
    assert abs(np.linalg.norm(whole) - 1) < 1e-4
