import importlib.util

import pytest

from hopgraph.config import EmbeddingConfig, RerankConfig
from hopgraph.errors import ConfigError, DependencyError
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.rerank import make_reranker, reranker_for

EMBEDDING = EmbeddingConfig(cache="")


def test_fallback_is_labelled_and_ranks_the_relevant_passage_first():
    reranker = make_reranker(RerankConfig(), EMBEDDING)
    assert reranker.name == "bi-encoder cosine (offline:all-minilm-l6-v2)" and "cross-encoder" not in reranker.name
    passages = [
        "The tide at the harbour is measured by six gauges.",
        "The University of Castel Brun's sediment laboratory was established in 1949 by the geologist Anton Vell.",
        "Sorvik hosts an annual cartography fair. " * 60,  # longer than one embedding window
    ]
    scores = reranker.score("Who established the sediment laboratory of the University of Castel Brun?", passages)
    assert scores.shape == (3,) and scores.argmax() == 1
    assert reranker.score("anything", []).shape == (0,)


def test_cross_encoder_folder_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="not a local model folder"):
        make_reranker(RerankConfig(model=str(tmp_path / "bge-reranker-v2-m3")), EMBEDDING)


@pytest.mark.skipif(importlib.util.find_spec("FlagEmbedding") is not None, reason="FlagEmbedding is installed here")
def test_cross_encoder_without_flagembedding_is_a_dependency_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(DependencyError, match="FlagEmbedding"):
        make_reranker(RerankConfig(model=str(tmp_path)), EMBEDDING)


def test_reranker_is_loaded_once_per_index(sample_index):
    index = LoadedIndex(sample_index)
    assert reranker_for(index) is reranker_for(index)
    assert reranker_for(index).name.startswith("bi-encoder cosine")


def test_cross_encoder_max_length_fits_the_longest_pair_of_the_batch():
    """Before, every pair was cut at FlagEmbedding's fixed 512 tokens; now the batch's longest pair decides."""
    from transformers import AutoTokenizer

    from hopgraph.models import offline_minilm_path
    from hopgraph.retrieve.rerank import model_length_limit, pair_lengths, pair_max_length

    tokenizer = AutoTokenizer.from_pretrained(offline_minilm_path(), local_files_only=True)
    limit = model_length_limit(tokenizer)
    assert limit == tokenizer.model_max_length == 512
    short = ["The tide is measured by six gauges.", "Sorvik hosts a fair."]
    lengths = pair_lengths(tokenizer, "Who measures the tide?", short)
    assert lengths == [len(tokenizer("Who measures the tide?", t)["input_ids"]) for t in short]
    assert pair_max_length(lengths, limit) == -(-max(lengths) // 8) * 8 < 32  # short pieces, short padding
    long_piece = "Sorvik hosts an annual cartography fair. " * 200
    assert pair_max_length(pair_lengths(tokenizer, "Who?", [*short, long_piece]), limit) == 512  # capped
    assert pair_max_length([9000], 8192) == 8192 and pair_max_length([], 8192) == 8


def test_cross_encoder_limit_from_the_model_config_when_the_tokenizer_records_none():
    from types import SimpleNamespace

    from hopgraph.retrieve.rerank import DEFAULT_LENGTH_LIMIT, model_length_limit

    no_limit = SimpleNamespace(model_max_length=int(1e30))
    xlmr = SimpleNamespace(max_position_embeddings=8194, model_type="xlm-roberta")
    assert model_length_limit(no_limit, xlmr) == 8192  # bge-reranker-v2-m3
    assert model_length_limit(no_limit, None) == DEFAULT_LENGTH_LIMIT
