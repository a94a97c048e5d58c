import json
import subprocess
import sys

import numpy as np
import pytest

from hopgraph.errors import IndexFormatError, InputError
from hopgraph.index.pipeline import STAGES, build_index
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.store import IndexStore
from tests.conftest import SAMPLE


def test_index_holds_every_granularity_and_graph(sample_index):
    index = LoadedIndex(sample_index)
    m = index.manifest
    assert m["complete"] and set(m["stages"]) == {stage.name for stage in STAGES if not stage.llm}
    counts = m["counts"]
    assert counts["documents"] == 7 and counts["chunks"] >= 5 and counts["units"] >= 2 * counts["chunks"] - 7
    assert counts["sentences"] >= 20 and counts["keywords"] > 100
    dim = index.array("unit_vectors").shape[1]
    for name, rows in [
        ("unit_vectors", counts["units"]),
        ("chunk_vectors", counts["chunks"]),
        ("sentence_vectors", counts["sentences"]),
        ("keyword_vectors", counts["keywords"]),
    ]:
        vectors = index.array(name)
        assert vectors.shape == (rows, dim)
        norms = np.linalg.norm(vectors, axis=1)
        assert np.allclose(norms[norms > 0], 1, atol=1e-3)
    knn = index.graph("knn")
    assert knn.shape == (counts["chunks"],) * 2 and (knn != knn.T).nnz == 0 and knn.nnz > 0
    assert index.graph("concepts").nnz > 0
    assert np.isclose(index.array("chunk_rank_knn").sum(), 1)
    # ACLs travel from documents to chunks
    restricted = [acl for acl in index.chunks["acl"] if acl]
    assert ["board"] in restricted


def test_interrupted_build_resumes_from_last_stage(tmp_path, sample_documents, sample_config):
    out = tmp_path / "idx"
    build_index(sample_documents, out, sample_config, progress=False, stop_after="embed_units")
    store = IndexStore(out)
    with pytest.raises(IndexFormatError, match="did not finish"):
        LoadedIndex(out)
    first = store.read_manifest()["stages"]
    assert set(first) == {"documents", "chunks", "keywords", "embed_units"}
    vectors_before = store.read_array("unit_vectors")
    manifest = build_index(sample_documents, out, sample_config, progress=False)
    assert manifest["complete"]
    # finished stages were not redone: their records (and outputs) are unchanged
    assert all(manifest["stages"][name] == first[name] for name in first)
    assert np.array_equal(store.read_array("unit_vectors"), vectors_before)
    # A stage run again (its file damaged) counts its embedded tokens once: they were added again.
    tokens = manifest["counts"]["embedding_tokens"]
    vectors = out / "arrays" / "unit_vectors.npy"
    whole = vectors.read_bytes()
    vectors.write_bytes(whole[:-4])
    again = build_index(sample_documents, out, sample_config, progress=False)
    assert vectors.read_bytes() == whole  # the stage ran again
    assert again["counts"]["embedding_tokens"] == tokens


def test_one_build_at_a_time_writes_an_index_and_a_dead_builder_blocks_nothing(
    tmp_path, sample_documents, sample_config
):
    """Two `hopgraph index` runs into one --out wrote each other's arrays: one failed with a traceback,
    the other reported the damaged index as built. A second build is now refused at once, naming the
    first; readers are told to wait, not to run the build again; a killed builder's lock is gone."""
    out = tmp_path / "idx"
    build_index(sample_documents, out, sample_config, progress=False, stop_after="chunks")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_BUILD_LOCK, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=rf"another process \(pid {holder.pid}\) is building this index now"):
            build_index(sample_documents, out, sample_config, progress=False)
        with pytest.raises(IndexFormatError, match=rf"being built now by another process \(pid {holder.pid}\)"):
            LoadedIndex(out)
        command = [sys.executable, "-m", "hopgraph.cli", "index", str(SAMPLE), "--out", str(out), "-q"]
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)  # refused before reading
        assert second.returncode == 2 and f"another process (pid {holder.pid}) is building" in second.stderr
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(IndexFormatError, match="run the same `hopgraph index` command again"):
        LoadedIndex(out)
    assert build_index(sample_documents, out, sample_config, progress=False)["complete"]


HOLD_BUILD_LOCK = """
import sys, time
from hopgraph.store import IndexStore
with IndexStore(sys.argv[1]).building():
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_rebuild_keeps_no_part_of_the_index_it_replaced(tmp_path, sample_documents, sample_config):
    """`--overwrite` kept an earlier build's CUE graph, which `retrieve(method="cue")` then used over
    the new corpus; a killed write's temporary file stayed in the index for good."""
    from hopgraph.config import ExtractionConfig
    from hopgraph.errors import ConfigError
    from hopgraph.retrieve.retriever import Retriever

    out = tmp_path / "idx"
    with_cue = sample_config.model_copy(update={"extraction": ExtractionConfig(cue_alpha=0.0)})
    build_index(sample_documents[:3], out, with_cue, progress=False)
    assert IndexStore(out).has("tables", "cue_units")
    (out / "arrays" / ".unit_vectors.npy.k1ll3d.tmp").write_bytes(b"\0" * 1024)  # a write killed mid-way
    build_index(sample_documents[3:], out, sample_config, progress=False, overwrite=True)
    left = sorted(p.name for kind in ("tables", "arrays", "graphs") for p in (out / kind).iterdir())
    assert not [name for name in left if name.startswith(("cue_", "."))], left
    with pytest.raises(ConfigError, match="method 'cue' needs parts this index lacks"):
        Retriever(out).retrieve("Who leads the harbour team?", method="cue")
    # An index of an earlier hopgraph, whose stage records list no files: its files are all kept
    # (a rerun that completed it removed every one), a killed write's temporary file is not.
    store = IndexStore(out)
    manifest = store.read_manifest()
    for record in manifest["stages"].values():
        del record["files"]
    store.write_manifest(manifest)
    (out / "graphs" / ".knn.npz.k1ll3d.tmp").write_bytes(b"\0")
    kept = sorted(p.name for kind in ("tables", "arrays", "graphs") for p in (out / kind).iterdir())
    build_index(sample_documents[3:], out, sample_config, progress=False)
    assert sorted(p.name for kind in ("tables", "arrays", "graphs") for p in (out / kind).iterdir()) == [
        name for name in kept if not name.endswith(".tmp")
    ]
    assert Retriever(out).retrieve("Who leads the harbour team?", method="ppr").evidence


def test_other_corpus_or_settings_are_refused(tmp_path, sample_documents, sample_config):
    out = tmp_path / "idx"
    build_index(sample_documents[:3], out, sample_config, progress=False, stop_after="chunks")
    with pytest.raises(IndexFormatError, match="different corpus"):
        build_index(sample_documents, out, sample_config, progress=False)
    changed = sample_config.model_copy(update={"chunking": sample_config.chunking.model_copy(update={"size": 64})})
    with pytest.raises(IndexFormatError, match="--overwrite"):
        build_index(sample_documents[:3], out, changed, progress=False, stop_after="chunks")
    assert build_index(sample_documents[:3], out, changed, progress=False, overwrite=True, stop_after="chunks")[
        "stages"
    ]
    with pytest.raises(InputError):
        build_index([], tmp_path / "none", sample_config)


def test_stage_settings_keys_follow_declared_dependencies():
    """Invalidation is computed from the stage registry: a setting changes the key of the stages that
    read it and of those downstream, and of no other."""
    from hopgraph.config import load_config
    from hopgraph.index.pipeline import stage_keys

    base = stage_keys(load_config(None, {"extraction.kg": "all", "extraction.cue_alpha": 0.5}))

    def changed(overrides):
        keys = stage_keys(load_config(None, {"extraction.kg": "all", "extraction.cue_alpha": 0.5, **overrides}))
        return {name for name in base if keys[name] != base[name]}

    assert changed({"graph.theta_co": 5}) == {"concept_graph", "kg_extract"}  # kg's core set reads the concept ranks
    assert changed({"extraction.cue_metric": "cosine"}) == {"cue_graph"}
    assert changed({"extraction.kg": "pagerank"}) == {"kg_extract"}
    assert changed({"keywords.max_df": 0.2}) == {"knn_graph", "kg_extract"}
    assert changed({"chunking.size": 600}) == set(base) - {"documents"}
    assert changed({"embedding.query_prompt": "query: "}) == set()  # questions only: the index is unchanged
    assert changed({"llm.base_url": "http://elsewhere:8000/v1"}) == set()  # how to reach the model, not what it writes


def test_changed_build_settings_refuse_and_name_the_stages(tmp_path, sample_documents, sample_config):
    import pytest

    from hopgraph.errors import IndexFormatError

    build_index(sample_documents[:3], tmp_path / "i", sample_config, progress=False)
    other = sample_config.model_copy(update={"graph": sample_config.graph.model_copy(update={"theta_co": 7})})
    with pytest.raises(IndexFormatError, match="other build settings \\(stages concept_graph\\)"):
        build_index(sample_documents[:3], tmp_path / "i", other, progress=False)


def test_a_stage_whose_settings_are_newer_than_the_index_is_rebuilt_not_refused(
    tmp_path, sample_documents, sample_config
):
    """An index built by a hopgraph without ``graph.entity_phrases`` (its manifest's config lacks the
    key, so the entities stage's key differs): the stage reruns at the setting's default; a value
    the user changed still refuses."""
    import pytest

    from hopgraph.errors import IndexFormatError
    from hopgraph.store import IndexStore

    out = tmp_path / "i"
    build_index(sample_documents[:3], out, sample_config, progress=False)
    store = IndexStore(out)
    manifest = store.read_manifest()
    del manifest["config"]["graph"]["entity_phrases"]  # as the older hopgraph wrote it
    manifest["stage_settings"]["entities"] = "written-before"
    before = dict(manifest["stages"]["entities"]["files"])
    manifest["stages"]["entities"]["files"].pop("graphs/entity_sentences.npz")  # that hopgraph did not write it
    (out / "graphs" / "entity_sentences.npz").unlink()
    store.manifest_path.write_text(json.dumps(manifest))
    rebuilt = build_index(sample_documents[:3], out, sample_config, progress=False)
    assert rebuilt["complete"] and rebuilt["stages"]["entities"]["files"] == before  # the stage ran again
    assert rebuilt["stage_settings"]["entities"] != "written-before"
    assert "entity_phrases" in rebuilt["config"]["graph"]
    phrases = sample_config.model_copy(
        update={"graph": sample_config.graph.model_copy(update={"entity_phrases": True})}
    )
    manifest = store.read_manifest()
    del manifest["config"]["graph"]["entity_phrases"]
    store.manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="other build settings \\(stages entities\\)"):
        build_index(sample_documents[:3], out, phrases, progress=False)  # not the default: the user's choice


def test_a_device_this_machine_cannot_use_is_refused_before_any_stage(tmp_path, sample_documents, sample_config):
    from hopgraph.errors import DependencyError
    from hopgraph.kernels.backend import cupy_available, torch_cuda_available

    if cupy_available() and torch_cuda_available():
        pytest.skip("this machine can use CUDA: nothing to refuse")
    config = sample_config.model_copy(
        update={"embedding": sample_config.embedding.model_copy(update={"device": "cuda"})}
    )
    with pytest.raises(DependencyError, match="device 'cuda' was requested"):
        build_index(sample_documents, tmp_path / "index", config, progress=False)
    assert not (tmp_path / "index" / "tables").exists()  # no stage ran
    # What it left holds nothing to keep: a build with other settings is not told to --overwrite it.
    other = sample_config.model_copy(update={"chunking": sample_config.chunking.model_copy(update={"size": 64})})
    assert build_index(sample_documents, tmp_path / "index", other, progress=False, stop_after="chunks")["stages"]


def test_stages_run_with_rare_collections_and_the_collector_is_restored(tmp_path, sample_documents, sample_config):
    """The cycle collector runs rarely while stages allocate their millions of rows (a speed matter,
    measured in insert_cost.json), and as before once the build ends, also when a stage fails."""
    import gc

    from hopgraph.index import pipeline

    before = gc.get_threshold()
    during = []
    chunks = pipeline.stage_chunks

    def record(ctx):
        during.append(gc.get_threshold())
        return chunks(ctx)

    stages = [s if s.name != "chunks" else pipeline.Stage(s.name, record, s.settings, s.reads) for s in STAGES]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "STAGES", stages)
        build_index(sample_documents, tmp_path / "idx", sample_config, progress=False, stop_after="chunks")
        assert during and during[0][0] > 10 * before[0] and gc.get_threshold() == before

        def fail(ctx):
            raise RuntimeError("a stage failed")

        patch.setattr(pipeline, "STAGES", [pipeline.Stage("documents", fail, ("access",))])
        with pytest.raises(RuntimeError):
            build_index(sample_documents, tmp_path / "other", sample_config, progress=False)
    assert gc.get_threshold() == before
    # Builds overlapping in threads: the first to end leaves the setting to the other.
    first, second = pipeline._rare_collections(), pipeline._rare_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == during[0][0]
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before
