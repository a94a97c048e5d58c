"""Self-healing index files: every artifact's size and SHA-256 are in the manifest; a truncated file
is a one-line error naming it, and running `hopgraph index` again rebuilds the stage that wrote it
(a file of the right size but other bytes included)."""

from __future__ import annotations

import json
import shutil

import pytest

from hopgraph.errors import IndexFormatError
from hopgraph.store import IndexStore
from tests.conftest import SAMPLE
from tests.test_cli import SMALL, hopgraph


@pytest.fixture()
def index_copy(sample_index, tmp_path):
    target = tmp_path / "index"
    shutil.copytree(sample_index, target)
    return target


def test_every_artifact_is_recorded_with_its_size_and_hash(sample_index):
    manifest = IndexStore(sample_index).read_manifest()
    recorded = {path: stage for stage, rec in manifest["stages"].items() for path in rec["files"]}
    on_disk = {
        p.relative_to(sample_index).as_posix()
        for kind in ("tables", "arrays", "graphs")
        for p in (sample_index / kind).iterdir()
    }
    assert set(recorded) == on_disk
    assert recorded["graphs/knn.npz"] == "knn_graph" and recorded["tables/documents.parquet"] == "documents"
    assert IndexStore(sample_index).damaged(manifest["stages"]["knn_graph"]["files"]) is None


def test_a_truncated_file_is_one_line_naming_it_and_index_rebuilds_it(index_copy):
    knn = index_copy / "graphs" / "knn.npz"
    intact = knn.read_bytes()
    knn.write_bytes(intact[: len(intact) // 2])
    with pytest.raises(IndexFormatError, match=r"graphs/knn\.npz: \d+ bytes where the index recorded"):
        IndexStore(index_copy).require_complete()
    failed = hopgraph("inspect", str(index_copy), check=False)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1 and "knn.npz" in failed.stderr and "knn_graph" in failed.stderr

    rebuilt = hopgraph("index", str(SAMPLE), "--out", str(index_copy), "-q", *SMALL)
    assert "rebuilding stage knn_graph" in rebuilt.stderr
    assert knn.read_bytes() == intact  # the same graph, whole again
    assert "central concepts:" in hopgraph("inspect", str(index_copy)).stdout


def test_same_size_damage_is_found_by_the_hash_when_index_runs_again(index_copy, capsys):
    from hopgraph.config import load_config
    from hopgraph.index.ingest import read_corpus
    from hopgraph.index.pipeline import build_index
    from tests.conftest import SAMPLE_SETTINGS

    vectors = index_copy / "arrays" / "unit_vectors.npy"
    intact = vectors.read_bytes()
    vectors.write_bytes(intact[:-64] + bytes(64))  # same size, last values zeroed
    IndexStore(index_copy).require_complete()  # opening checks sizes only: still opens
    before = json.loads((index_copy / "manifest.json").read_text())["stages"]
    build_index(read_corpus([SAMPLE]).documents, index_copy, load_config(None, SAMPLE_SETTINGS), progress=False)
    after = json.loads((index_copy / "manifest.json").read_text())["stages"]
    writer = next(name for name, rec in before.items() if "arrays/unit_vectors.npy" in rec["files"])
    assert vectors.read_bytes() == intact
    assert f"rebuilding stage {writer}" in capsys.readouterr().err  # that stage ran again ...
    assert all(after[name] == before[name] for name in before if name != writer)  # ... and only that one
