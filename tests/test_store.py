import json

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.errors import IndexFormatError
from hopgraph.store import FORMAT_VERSION, IndexStore


def test_round_trip(tmp_path):
    store = IndexStore(tmp_path / "idx")
    store.write_table("documents", {"id": ["a", "b"], "acl": [["x"], None], "docs": [[0, 1], [2]]})
    store.write_array("unit_vectors", np.arange(6, dtype=np.float32).reshape(2, 3))
    graph = sp.random(5, 5, density=0.4, format="csr", random_state=0, dtype=np.float32)
    store.write_graph("knn", graph)
    store.write_manifest({"complete": True, "stages": {}})
    assert store.read_table("documents") == {"id": ["a", "b"], "acl": [["x"], None], "docs": [[0, 1], [2]]}
    # Only the columns asked for, those the table has (an older table may lack one).
    assert store.read_table("documents", ["docs", "heading"]) == {"docs": [[0, 1], [2]]}
    assert np.array_equal(store.read_array("unit_vectors"), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert (store.read_graph("knn") != graph).nnz == 0
    assert store.require_complete()["format_version"] == FORMAT_VERSION
    assert not list((tmp_path / "idx").rglob("*.tmp")), "temporary files must not be left behind"


def test_missing_partial_corrupt_and_newer(tmp_path):
    with pytest.raises(IndexFormatError, match="no such index"):
        IndexStore(tmp_path / "absent").read_manifest()
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexFormatError, match="not a hopgraph index"):
        IndexStore(tmp_path / "empty").read_manifest()
    store = IndexStore(tmp_path / "idx")
    store.write_manifest({"complete": False, "stages": {"documents": {"done": True}}})
    with pytest.raises(IndexFormatError, match="did not finish.*documents"):
        store.require_complete()
    with pytest.raises(IndexFormatError, match="missing table"):
        store.read_table("chunks")
    store.manifest_path.write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupt manifest"):
        store.read_manifest()
    store.manifest_path.write_text(json.dumps({"format_version": FORMAT_VERSION + 1}))
    with pytest.raises(IndexFormatError, match="newer"):
        store.read_manifest()
    (tmp_path / "idx" / "arrays").mkdir()
    (tmp_path / "idx" / "arrays" / "vec.npy").write_bytes(b"garbage")
    with pytest.raises(IndexFormatError, match="corrupt array"):
        store.read_array("vec")
