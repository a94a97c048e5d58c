"""Shared fixtures: the bundled sample corpus indexed once per test session (real models, real files)."""

from __future__ import annotations

import resource
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "sample"
SHARED_DATA = REPO.parent / "shared" / "data"


def file_size_limit(limit: int) -> Callable[[], None]:
    """A subprocess ``preexec_fn``: storage that refuses to grow a file past ``limit`` bytes, as a full
    disk refuses (the write fails with EFBIG instead of a signal killing the process), no disk filled."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    return apply


# Small chunks so the tiny sample still yields several chunks, sub-chunks and graph edges.
SAMPLE_SETTINGS = {
    "chunking.size": 96,
    "chunking.overlap": 8,
    "chunking.splits": 1,
    "graph.theta_co": 2,
    "graph.theta_sem": 0.3,
    "keywords.max_df": 0.5,
}


def pytest_collection_modifyitems(config, items):
    """Tests that start the LLM stand-in are slow (minutes on 2 cores): marked so, whatever their file,
    so `pytest -m "not slow"` is the quick loop and CI still runs everything."""
    for item in items:
        if "llm_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def sample_documents():
    from hopgraph.index.ingest import read_corpus

    return read_corpus([SAMPLE]).documents


@pytest.fixture(scope="session")
def sample_config():
    from hopgraph.config import load_config

    return load_config(None, SAMPLE_SETTINGS)


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory, sample_documents, sample_config):
    from hopgraph.index.pipeline import build_index

    out = tmp_path_factory.mktemp("sample") / "index"
    build_index(sample_documents, out, sample_config, progress=False)
    return out


@pytest.fixture(scope="session")
def llm_server():
    """A real OpenAI-compatible server (llama.cpp + SmolLM2-135M from PyPI wheels) on 127.0.0.1."""
    from hopgraph.llm.standin import StandinServer

    with StandinServer("smollm2-135m", context=4096, parallel=2) as server:
        yield server


@pytest.fixture()
def llm_config(llm_server, tmp_path):
    """LLM settings for the stand-in with a fresh completion cache per test; short outputs keep tests fast."""
    from hopgraph.config import LLMConfig

    return LLMConfig(
        base_url=llm_server.base_url,
        model="smollm2-135m",
        cache=str(tmp_path / "llm.sqlite"),
        max_tokens=160,
        context_tokens=4096,
        retries=1,
        timeout=300,  # one attempt: a slow answer is not retried, and 2 shared cores can take minutes
    )


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster of two nodes (one CPU and a small object store each), for the session.

    Builds join it by address and leave it when they finish; ``ray_cluster.address`` is what
    ``--cluster.address`` takes."""
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": 150 * 2**20, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, object_store_memory=150 * 2**20)
    cluster.wait_for_nodes()
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()
