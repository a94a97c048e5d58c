import hashlib
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


@pytest.mark.parametrize(
    "array",
    [
        np.random.default_rng(0).standard_normal((300, 7)).astype(np.float32),
        np.arange(12, dtype=np.int64).reshape(3, 4).T,  # not C-contiguous: written as its C copy
        np.array([True, False, True]),
        np.linspace(0, 1, 5, dtype=np.float16),
        np.zeros((0, 0), np.float32),
        np.zeros(0, np.int64),
    ],
    ids=["float32", "transposed", "bool", "float16", "empty-2d", "empty-1d"],
)
def test_an_array_is_hashed_as_written_and_reads_back(tmp_path, array):
    """The hash is taken from memory while the file is written, not read back from it: it must still
    be the SHA-256 of the file's bytes, and the file what np.load reads as the array."""
    store = IndexStore(tmp_path / "idx")
    store.write_array("unit_vectors", array)
    path = tmp_path / "idx" / "arrays" / "unit_vectors.npy"
    recorded = store.take_written()["arrays/unit_vectors.npy"]
    assert recorded == {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    back = np.load(path, allow_pickle=False)
    assert back.dtype == array.dtype and back.shape == array.shape and np.array_equal(back, array)
    assert store.damaged({"arrays/unit_vectors.npy": recorded}) is None


def test_an_array_of_python_objects_is_refused(tmp_path):
    with pytest.raises(ValueError, match="numbers"):
        IndexStore(tmp_path / "idx").write_array("unit_vectors", np.array(["a", None], dtype=object))
    assert not list((tmp_path / "idx").rglob("*.npy*")), "nothing is left behind"


def test_differences_at_tolerance_zero_are_bits(tmp_path):
    """Tolerance 0 asks for the same bits: -0.0 against 0.0 differs there, not within 1e-6."""
    one, other = IndexStore(tmp_path / "one"), IndexStore(tmp_path / "other")
    one.write_array("unit_vectors", np.array([[0.0, 1.0]], np.float32))
    other.write_array("unit_vectors", np.array([[-0.0, 1.0]], np.float32))
    assert one.differences(other, tolerance=1e-6) == (1, [])
    assert one.differences(other, tolerance=0.0) == (1, ["unit_vectors: bits differ"])


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


def test_a_file_or_an_unreadable_current_is_a_clear_error(tmp_path):
    from hopgraph.store import live_root, live_version

    a_file = tmp_path / "afile"
    a_file.write_text("not an index\n")
    with pytest.raises(IndexFormatError, match=r"afile: is a file, not an index directory"):
        live_root(a_file)
    store = IndexStore(tmp_path / "idx")
    store.write_manifest({"complete": True, "stages": {}})
    (tmp_path / "idx" / "CURRENT").write_bytes(b"versions/\xff\xfe")
    with pytest.raises(IndexFormatError, match=r"idx/CURRENT: not text \(byte 9 is not UTF-8\).*newest complete"):
        live_version(tmp_path / "idx")
    (tmp_path / "idx" / "CURRENT").write_text("nonsense\n")
    with pytest.raises(IndexFormatError, match=r"CURRENT: does not name a version directory \('nonsense'"):
        live_root(tmp_path / "idx")


def test_an_unreadable_manifest_is_told_apart(tmp_path):
    from hopgraph.store import CorruptManifestError

    store = IndexStore(tmp_path / "idx")
    store.write_manifest({"complete": True, "stages": {}})
    store.manifest_path.write_text("")
    with pytest.raises(CorruptManifestError, match="corrupt manifest"):
        store.read_manifest()
    store.manifest_path.write_text("[1]")
    with pytest.raises(CorruptManifestError, match="not a hopgraph manifest"):
        store.read_manifest()


def test_a_damaged_update_version_is_not_sent_to_a_command_that_never_built_it(sample_index, tmp_path):
    """A truncated file in the root index: rerun its `hopgraph index`. In a version an update job
    built (versions/<job id>), no command rebuilds it, so the advice is another version or a rebuild."""
    import shutil

    import pytest

    from hopgraph.errors import IndexFormatError
    from hopgraph.store import VERSIONS, IndexStore

    root = tmp_path / "index"
    shutil.copytree(sample_index, root)
    version = root / VERSIONS / "j000001-abcdef"
    shutil.copytree(sample_index, version)
    for where in (root, version):
        with open(where / "arrays" / "unit_vectors.npy", "r+b") as handle:
            handle.truncate(100)
    with pytest.raises(IndexFormatError, match="run the `hopgraph index` command that built"):
        IndexStore(root).require_complete()
    with pytest.raises(IndexFormatError, match="an earlier complete version under versions/") as failure:
        IndexStore(version).require_complete()
    assert "`hopgraph index` command" not in str(failure.value) and "--overwrite" in str(failure.value)
