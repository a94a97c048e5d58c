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
