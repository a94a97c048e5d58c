import pytest

from hopgraph.config import HopgraphConfig, leaf_fields, load_config
from hopgraph.errors import ConfigError


def test_defaults_are_the_papers_settings():
    cfg = HopgraphConfig()
    assert (cfg.chunking.size, cfg.chunking.effective_splits, cfg.retrieval.budget) == (1200, 3, 12000)
    assert (cfg.graph.knn_k, cfg.graph.theta_sem, cfg.graph.theta_co) == (2, 0.65, 3)
    assert HopgraphConfig.model_validate({"chunking": {"size": 150, "overlap": 0}}).chunking.effective_splits == 0


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "hopgraph.toml"
    path.write_text('[chunking]\nsize = 600\noverlap = 50\n[retrieval]\nmethod = "keyword"\n')
    cfg = load_config(path, {"chunking.size": 300, "retrieval.concept.depth": 1})
    assert cfg.chunking.size == 300 and cfg.chunking.overlap == 50
    assert cfg.retrieval.method == "keyword" and cfg.retrieval.concept.depth == 1


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"chunking.size": 100, "chunking.overlap": 60}, "overlap"),
        ({"retrieval.method": "No Such Method!"}, "retrieval.method"),
        ({"chunking.sise": 3}, "chunking.sise"),
        # Accepted, then every request, answer or upload failed (a timeout past what sockets, waits
        # and setrlimit take: OverflowError).
        ({"llm.timeout": 1e10}, "llm.timeout"),
        ({"serve.answer_timeout": 1e10}, "serve.answer_timeout"),
        ({"serve.job_seconds": 1e10}, "serve.job_seconds"),
        ({"serve.upload_memory_mb": 10**13}, "serve.upload_memory_mb"),
    ],
)
def test_bad_settings_name_the_key(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(None, overrides)


def test_bad_toml_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[chunking\nsize=")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config(path)


def test_every_leaf_has_a_description():
    leaves = leaf_fields()
    assert len(leaves) > 20
    assert all(info.description for name, info in leaves), [n for n, i in leaves if not i.description]


def test_example_settings_file_lists_every_default():
    from pathlib import Path

    from hopgraph.config import HopgraphConfig, example_toml, leaf_fields, load_config

    example = Path(__file__).resolve().parents[1] / "examples" / "hopgraph.toml"
    assert load_config(example) == HopgraphConfig()
    text = example.read_text(encoding="utf-8")
    assert all(f"{dotted.rsplit('.', 1)[1]} =" in text for dotted, _ in leaf_fields())
    # Regenerate with:
    # python -c "from hopgraph.config import example_toml; print(example_toml(), end='')" > examples/hopgraph.toml
    assert text == example_toml()


def test_cluster_endpoints_come_comma_separated_from_the_command_line_and_must_be_http_addresses():
    from hopgraph.config import load_config

    config = load_config(None, {"cluster.llm_endpoints": "http://gpu1:8000/v1, http://gpu2:8000/v1"})
    assert config.cluster.llm_endpoints == ["http://gpu1:8000/v1", "http://gpu2:8000/v1"]
    with pytest.raises(
        ConfigError, match=r"cluster.llm_endpoints: .*not an http\(s\) address with a host: 'gpu3:8000'"
    ):
        load_config(None, {"cluster.llm_endpoints": "http://gpu1:8000/v1,gpu3:8000"})


def test_proxy_addresses_come_comma_separated_and_must_be_addresses_or_networks():
    from hopgraph.config import load_config

    config = load_config(None, {"serve.forwarded_allow_ips": "10.0.0.5, 10.1.0.0/16,::1"})
    assert config.serve.forwarded_allow_ips == ["10.0.0.5", "10.1.0.0/16", "::1"]
    with pytest.raises(ConfigError, match=r"serve.forwarded_allow_ips: .*not an IP address or network: '\*'"):
        load_config(None, {"serve.forwarded_allow_ips": "*"})


def test_the_engine_is_not_part_of_any_stage_settings_key():
    from hopgraph.config import load_config
    from hopgraph.index.pipeline import stage_keys

    ray = {"cluster.engine": "ray", "cluster.address": "auto", "cluster.embed_actors": 16}
    assert stage_keys(load_config(None, ray)) == stage_keys(load_config())


def test_an_unknown_key_in_a_settings_file_names_the_setting_it_may_mean(tmp_path):
    """A typo in a TOML file said "Extra inputs are not permitted" and nothing else, where the same
    typo on the command line gets a suggestion."""
    from hopgraph.config import load_config

    path = tmp_path / "typo.toml"
    path.write_text("[chunking]\nsise = 150\n[retrieval.ppr]\ndampng = 0.5\nzzz = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    message = str(refused.value)
    assert "chunking.sise: Extra inputs are not permitted (did you mean chunking.size?)" in message
    assert "retrieval.ppr.dampng: Extra inputs are not permitted (did you mean retrieval.ppr.damping?)" in message
    assert "retrieval.ppr.zzz: Extra inputs are not permitted;" in message + ";"


def test_an_overlap_too_large_for_the_chunk_size_says_what_to_set():
    """The paper's ℓ=150 with the default overlap (100) said only that it was too large."""
    from hopgraph.config import load_config

    with pytest.raises(ConfigError, match=r"set chunking.overlap to 74 or less \(0: none\)"):
        load_config(None, {"chunking.size": 150})
