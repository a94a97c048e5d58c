import subprocess
import sys

import numpy as np
import pytest

from hopgraph.cache import CachedEmbedder, VectorCache
from hopgraph.config import EmbeddingConfig
from hopgraph.models import embed_long_texts, load_embedder
from tests.conftest import file_size_limit


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


def test_a_second_analysis_of_the_same_texts_comes_from_the_cache(tmp_path):
    from hopgraph.index.analysis import TextAnalyser
    from hopgraph.index.chunking import analyse_texts

    texts = ["Sorvik lies on Lake Orrin. Its mill closed in 1931.", "The Aster Bridge was rebuilt in 1958."]
    analysed: list[str] = []

    def counting(batch, encoding):  # the real analysis, recording which texts it was given
        analysed.extend(batch)
        return analyse_texts(batch, encoding)

    first = TextAnalyser(tmp_path / "analysis.sqlite", counting)
    results = first.analyse([*texts, texts[0]], "cl100k_base")
    spans = first.sentence_spans(texts)
    assert analysed == texts and (first.misses, first.hits) == (4, 0)  # each distinct text analysed once
    assert results == analyse_texts([*texts, texts[0]], "cl100k_base")
    assert spans[0] == [(0, 26), (27, 51)]
    again = TextAnalyser(tmp_path / "analysis.sqlite", counting)  # another build reading the same file
    assert again.analyse(texts, "cl100k_base") == results[:2] and again.sentence_spans(texts) == spans
    assert analysed == texts and (again.misses, again.hits) == (0, 4)
    new = again.analyse([texts[1], "A new text."], "cl100k_base")[1]
    assert new == analyse_texts(["A new text."], "cl100k_base")[0]
    assert analysed == [*texts, "A new text."] and again.misses == 1


def test_an_analysis_stopped_midway_keeps_the_slices_it_finished(tmp_path):
    """The chunks stage analysed the whole corpus in one call and stored nothing before its end: a
    build killed (or a cluster lost) near the end of it lost all of it, and its bar stood still."""
    from hopgraph.index.analysis import TextAnalyser
    from hopgraph.index.chunking import analyse_texts

    texts = [f"Note {i} on the Orrin ferry. It sails at {i} o'clock." for i in range(5)]
    calls: list[list[str]] = []

    def stops_at_the_third_slice(batch, encoding):  # the real analysis; a Ctrl-C on the third slice
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(list(batch))
        return analyse_texts(batch, encoding)

    told: list[tuple[int, int]] = []
    first = TextAnalyser(
        tmp_path / "analysis.sqlite", stops_at_the_third_slice, slice_size=2, done=lambda *at: told.append(at)
    )
    with pytest.raises(KeyboardInterrupt):
        first.analyse(texts, "cl100k_base")
    assert told == [(2, 5), (4, 5)]
    calls.clear()
    again = TextAnalyser(tmp_path / "analysis.sqlite", stops_at_the_third_slice, slice_size=2)
    assert again.analyse(texts, "cl100k_base") == analyse_texts(texts, "cl100k_base")
    assert calls == [texts[4:]]  # only the text of the slice that was stopped


def test_a_one_window_text_has_the_same_vector_whatever_shares_its_call(tmp_path):
    """An update takes the vectors of unchanged texts from the version it edits, where other texts
    shared their embedding call: a one-window text's vector must not depend on a long text beside it."""
    embedder = load_embedder(EmbeddingConfig(cache=str(tmp_path / "vectors.sqlite")), cached=True)
    short = [f"Sorvik lies on Lake Orrin, note {i}." for i in range(40)]
    long_text = "Freshwater mussels are monitored at the Sorvik campus on Lake Orrin. " * 12
    alone = embed_long_texts(embedder, short, window_tokens=64)
    beside_a_long_text = embed_long_texts(embedder, [*short, long_text], window_tokens=64)
    assert np.array_equal(beside_a_long_text[: len(short)], alone)  # bitwise: both from the cache
    np.testing.assert_allclose(np.linalg.norm(beside_a_long_text[-1]), 1, atol=1e-6)


def test_an_interrupted_embedding_keeps_every_finished_batch(tmp_path):
    """Vectors were cached per slice of up to 2,048 texts: a Ctrl-C 25 s into a slice lost all of it.
    Each model batch is now stored as it is done. The interruption is injected in the model's call
    (a Ctrl-C cannot be timed to land between two given batches otherwise)."""
    config = EmbeddingConfig(cache=str(tmp_path / "vectors.sqlite"), batch_size=4)
    cached = load_embedder(config, cached=True).inner
    texts = [f"Ferry number {n} leaves Sorvik at {n} o'clock." for n in range(12)]
    clean = cached.inner.encode(texts)  # not through the cache
    model, calls = cached.inner.model, []
    real = model.encode

    def stopped_at_the_third_batch(part, **kw):
        calls.append(len(part))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(part, **kw)

    model.encode = stopped_at_the_third_batch
    try:
        cached.encode(texts)
    except KeyboardInterrupt:
        pass
    finally:
        model.encode = real
    kept = VectorCache(config.cache, "sentence-transformers:" + config.model).get_many(texts)
    assert sum(v is not None for v in kept) == 8  # two batches of four
    assert all(np.array_equal(v, c) for v, c in zip(kept, clean) if v is not None)  # the vectors a whole run gives


STORE_PAST_LIMIT = {
    "vectors": "from hopgraph.cache import VectorCache; import numpy as np; "
    "VectorCache(PATH, 'm').put_many(['t'], [np.ones(100_000)])",
    "completions": "from hopgraph.llm.client import CompletionCache; from hopgraph.llm.types import Completion; "
    "CompletionCache(PATH).put('k', Completion(text='x' * 100_000, prompt_tokens=1, completion_tokens=1))",
}


@pytest.mark.parametrize("cache", sorted(STORE_PAST_LIMIT))
def test_a_cache_on_storage_that_refuses_a_write_raises_the_os_error_it_stands_for(tmp_path, cache):
    """SQLite's "disk I/O error" (or "database or disk is full") was no OSError, so a command ended
    in a traceback instead of its one line naming the storage's state (hopgraph.errors.storage_state)."""
    path = tmp_path / f"{cache}.sqlite"
    code = STORE_PAST_LIMIT[cache].replace("PATH", repr(str(path)))
    probe = f"""
try:
    {code}
except OSError as exc:
    from hopgraph.errors import storage_state
    print(storage_state(exc), exc.filename)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, preexec_fn=file_size_limit(60_000)
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.split() == ["failing", "(an", "I/O", "error)", str(path)], done.stdout
