"""Fixtures shared by the index tests: a small built index, copied afresh for each test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hopgraph.index.pipeline import build_index


@pytest.fixture(scope="module")
def built(tmp_path_factory, sample_documents, sample_config):
    """An index of the first five sample documents with its own (then warm) vector cache."""
    work = tmp_path_factory.mktemp("versions")
    config = sample_config.model_copy(
        update={"embedding": sample_config.embedding.model_copy(update={"cache": str(work / "cache.sqlite")})}
    )
    build_index(sample_documents[:5], work / "base", config, progress=False)
    return work


@pytest.fixture()
def index(built, tmp_path) -> Path:
    shutil.copytree(built / "base", tmp_path / "index")
    return tmp_path / "index"
