"""The index schema (hopgraph/artifacts.py) describes what a build really writes."""

from __future__ import annotations

import numpy as np
import pytest

from hopgraph.artifacts import FOLDERS, SCHEMA, markdown
from hopgraph.index.graphs import cosine_width
from hopgraph.store import IndexStore


@pytest.fixture(scope="module")
def cue_index(tmp_path_factory, sample_documents, sample_config):
    """The sample corpus with every LLM-free stage and the CUE graph at α = 0 (sentence units, no LLM)."""
    from hopgraph.index.pipeline import build_index

    out = tmp_path_factory.mktemp("schema") / "index"
    build_index(
        sample_documents,
        out,
        sample_config.model_copy(update={"extraction": sample_config.extraction.model_copy(update={"cue_alpha": 0.0})}),
        progress=False,
    )
    return out


def test_every_stored_file_is_declared_with_its_kind(cue_index):
    stored = {(p.parent.name, p.stem) for p in cue_index.glob("*/*") if p.parent.name in {"tables", "arrays", "graphs"}}
    declared = {(FOLDERS[a.kind][0], a.name) for a in SCHEMA.values()}
    assert stored and stored <= declared, stored - declared
    llm_stages = {"kg_extract"}
    assert {(FOLDERS[a.kind][0], a.name) for a in SCHEMA.values() if a.stage not in llm_stages} == stored


def test_shapes_follow_the_schema(cue_index):
    store = IndexStore(cue_index)
    tables = {
        a.name: store.read_table(a.name) for a in SCHEMA.values() if a.kind == "table" and store.has("tables", a.name)
    }
    rows = {
        "D": "documents",
        "C": "chunks",
        "U": "units",
        "S": "sentences",
        "K": "keywords",
        "Q": "cue_units",
        "N": "cue_entities",
        "G": "entities",
    }
    size = {letter: len(next(iter(tables[name].values()))) for letter, name in rows.items()}
    size["d"] = store.read_array("unit_vectors").shape[1]
    size["w"] = cosine_width(store.read_manifest()["config"]["graph"]["knn_k"], size["C"])
    size["h"] = max(0, min((store.read_manifest()["config"]["graph"]["knn_k"] + 1) // 2, size["C"] - 1))
    size["E"] = int(store.read_array("entity_vectors").any(axis=1).sum())  # the embedded names
    size["k"] = max(0, min(store.read_manifest()["config"]["graph"]["synonym_k"], size["E"] - 1))
    for a in SCHEMA.values():
        if a.kind == "table" or a.stage == "kg_extract":
            continue
        value = store.read_array(a.name) if a.kind == "array" else store.read_graph(a.name)
        expected = tuple(int(letter) if letter.isdigit() else size[letter] for letter in a.shape.split(" × "))
        assert value.shape == expected, (a.name, value.shape, a.shape)
        if a.kind == "array" and a.name.endswith("_vectors") and len(value):
            norms = np.linalg.norm(value, axis=1)
            assert value.dtype == np.float32 and np.all(np.isclose(norms, 1, atol=1e-4) | (norms == 0)), a.name


def test_undeclared_artifacts_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not declared"):
        IndexStore(tmp_path).write_array("scratch_vectors", np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="not declared"):
        IndexStore(tmp_path).write_table("unit_vectors", {"a": [1]})  # declared, but as an array


def test_markdown_lists_every_artifact():
    text = markdown()
    assert all(f"`{name}`" in text for name in SCHEMA)
