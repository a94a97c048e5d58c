"""The LLM-free entity layer: stored artifacts, the second hop through a first-hop passage's entity,
access control, and indexes built before the layer existed (real spaCy and embedder)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hopgraph.artifacts import (
    ENTITIES,
    ENTITY_MENTIONS,
    ENTITY_SENTENCES,
    ENTITY_SYNONYM_INDICES,
    ENTITY_SYNONYM_SCORES,
    ENTITY_SYNONYMS,
    ENTITY_VECTORS,
)
from hopgraph.documents import Document
from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.entities import entity_layer, readable_entities, walk_adjacency
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

GUEST = MetadataFilter(groups=frozenset())
# The bridge: the question names Aldric Venmoor; only his page names his mother, whose page says when she died.
BRIDGE_QUESTION = "When did the mother of Aldric Venmoor die?"
CORPUS = [
    Document(
        id="venmoor",
        title="Aldric Venmoor",
        text="Aldric Venmoor was a cartographer who mapped the northern coast. His mother was Ysolde Marrin, and he "
        "drew his first chart at the age of nine.",
    ),
    Document(
        id="marrin",
        title="Ysolde Marrin",
        text="Ysolde Marrin was a weaver known for her tapestries of sea birds. She passed away in 1874 in a "
        "small village by the river.",
    ),
    Document(
        id="quellstad",
        title="Quellstad",
        text="Quellstad is a port town with a lighthouse and a fish market. Its harbour freezes in hard winters.",
    ),
    Document(
        id="cartography",
        title="Coastal cartography",
        text="Coastal maps record the shore, shoals and harbours. Early surveys used chains and compasses, and "
        "many mothers of sailors sewed the sails.",
    ),
    Document(
        id="sealed",
        title="Sealed record",
        metadata={"acl": ["board"]},
        text="The sealed record says that Aldric Venmoor owed money to Corvin Halbrecht, a banker in Quellstad.",
    ),
]
SETTINGS = {"chunking.size": 48, "chunking.overlap": 0, "chunking.splits": 0}


@pytest.fixture(scope="module")
def entity_index(tmp_path_factory):
    from hopgraph.config import load_config

    out = tmp_path_factory.mktemp("entities") / "index"
    build_index(CORPUS, out, load_config(None, SETTINGS), progress=False)
    return out


def unit_of(index: LoadedIndex, words: str) -> int:
    """The sub-chunk holding ``words`` (documents may share a sub-chunk, so they are told by text)."""
    return next(u for u, text in enumerate(index.units["text"]) if words in text)


def test_entity_artifacts_are_built_and_checksummed(entity_index):
    store = IndexStore(entity_index)
    record = store.read_manifest()["stages"]["entities"]
    assert set(record["files"]) == {
        f"tables/{ENTITIES}.parquet",
        f"graphs/{ENTITY_MENTIONS}.npz",
        f"arrays/{ENTITY_VECTORS}.npy",
        f"graphs/{ENTITY_SYNONYMS}.npz",
        f"graphs/{ENTITY_SENTENCES}.npz",
        f"arrays/{ENTITY_SYNONYM_SCORES}.npy",
        f"arrays/{ENTITY_SYNONYM_INDICES}.npy",
    }
    assert all(len(f["sha256"]) == 64 for f in record["files"].values()) and store.damaged(record["files"]) is None
    index = LoadedIndex(entity_index)
    layer = entity_layer(index)
    assert layer is not None
    names = set(layer.names)
    assert {"aldric venmoor", "ysolde marrin", "quellstad", "coastal cartography"} <= names  # titles and spaCy names
    assert layer.mentions.shape == (len(index.units["text"]), len(layer.names))
    assert index.array(ENTITY_VECTORS).shape == (len(layer.names), index.array("unit_vectors").shape[1])
    marrin = layer.lookup["ysolde marrin"]
    mentioned_by = set(layer.mentions[:, marrin].nonzero()[0].tolist())
    assert {
        unit_of(index, "mother was Ysolde"),
        unit_of(index, "passed away"),
    } <= mentioned_by  # spaCy in one, title of the other


def test_a_bridge_entity_named_only_by_the_first_hop_passage_is_followed(entity_index):
    index = LoadedIndex(entity_index)
    assert "marrin" not in BRIDGE_QUESTION.lower()
    result = Retriever(index).retrieve(BRIDGE_QUESTION, method="ppr", budget=10_000, metadata_filter=GUEST)
    paths = {e.index: e.path for e in result.evidence}
    second = unit_of(index, "passed away")
    assert paths[second] == f"ppr via entity:Ysolde Marrin (from unit {unit_of(index, 'mother was Ysolde')})"
    assert "bridge:Ysolde Marrin" in result.seeds and "entity:Aldric Venmoor" in result.seeds
    ranks = [e.index for e in result.evidence]
    assert ranks.index(second) <= 1  # right after (or before) the first-hop passage
    without = Retriever(index).retrieve(
        BRIDGE_QUESTION, method="ppr", budget=10_000, metadata_filter=GUEST, overrides={"ppr.entity_weight": 0}
    )
    assert [e.index for e in without.evidence].index(second) >= ranks.index(second)


def test_an_entity_named_only_in_a_forbidden_piece_gives_a_restricted_reader_nothing(entity_index):
    index = LoadedIndex(entity_index)
    layer = entity_layer(index)
    assert layer is not None and "corvin halbrecht" in layer.lookup  # the reader's question names it
    retriever = Retriever(index)
    question = "Who is Corvin Halbrecht, the banker?"
    guest = retriever.retrieve(question, method="ppr", budget=10_000, metadata_filter=GUEST)
    sealed = unit_of(index, "sealed record")
    assert sealed not in {e.index for e in guest.evidence}
    assert not any("halbrecht" in (e.path + " " + s).lower() for e in guest.evidence for s in guest.seeds)
    scope = retriever.scope(GUEST)
    assert readable_entities(layer, scope)[layer.lookup["corvin halbrecht"]] == 0
    board = retriever.retrieve(question, method="ppr", budget=10_000, metadata_filter=MetadataFilter(groups={"board"}))
    assert any(e.path == "ppr via entity:corvin halbrecht (named in the query)" for e in board.evidence)  # may read it


def test_a_forbidden_sentence_links_no_two_names_for_a_restricted_reader(entity_index):
    index = LoadedIndex(entity_index)
    layer = entity_layer(index)
    assert layer is not None
    venmoor, quellstad = layer.lookup["aldric venmoor"], layer.lookup["quellstad"]  # both readable elsewhere
    units = len(index.units["text"])
    everyone = walk_adjacency(layer, None, 1.0)
    assert everyone[units + venmoor, units + quellstad] == 1.0  # the sealed sentence names both
    guest = Retriever(index).scope(GUEST)
    assert guest.units[unit_of(index, "Quellstad is a port")] and not guest.units[unit_of(index, "sealed record")]
    for_guest = walk_adjacency(layer, guest.units[layer.sentence_units], 1.0)
    assert for_guest[units + venmoor, units + quellstad] == 0.0
    assert walk_adjacency(layer, None, 0.0)[units + venmoor, units + quellstad] == 0.0  # weight 0: no such edges
    result = Retriever(index).retrieve(
        "Aldric Venmoor",
        method="ppr",
        budget=10_000,
        metadata_filter=GUEST,
        overrides={"ppr.entity_cooccurrence_weight": 1},
    )
    assert unit_of(index, "sealed record") not in {e.index for e in result.evidence}


def test_an_index_built_before_the_entity_layer_serves_ppr_and_resumes(entity_index, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(entity_index, old)
    manifest = json.loads((old / "manifest.json").read_text())
    for name in manifest["stages"].pop("entities")["files"]:
        (old / name).unlink()
    manifest["stage_settings"].pop("entities")
    (old / "manifest.json").write_text(json.dumps(manifest))
    full = Retriever(LoadedIndex(entity_index)).retrieve(
        BRIDGE_QUESTION, method="ppr", budget=10_000, overrides={"ppr.entity_weight": 0}
    )
    served = Retriever(LoadedIndex(old)).retrieve(BRIDGE_QUESTION, method="ppr", budget=10_000)
    assert [(e.index, e.score) for e in served.evidence] == [(e.index, e.score) for e in full.evidence]
    from hopgraph.config import load_config

    resumed = build_index(CORPUS, old, load_config(None, SETTINGS), progress=False)  # the new stage simply runs
    assert resumed["stages"]["entities"]["done"]
    assert np.array_equal(
        IndexStore(old).read_graph(ENTITY_MENTIONS).toarray(),
        IndexStore(entity_index).read_graph(ENTITY_MENTIONS).toarray(),
    )


def test_an_entity_layer_without_sentence_mentions_ranks_without_cooccurrence_edges(entity_index, tmp_path):
    old = tmp_path / "old"  # an entity layer written before sentences were stored: no co-occurrence edges
    shutil.copytree(entity_index, old)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["stages"]["entities"]["files"].pop(f"graphs/{ENTITY_SENTENCES}.npz")
    (old / f"graphs/{ENTITY_SENTENCES}.npz").unlink()
    (old / "manifest.json").write_text(json.dumps(manifest))
    without = Retriever(LoadedIndex(entity_index)).retrieve(
        BRIDGE_QUESTION, method="ppr", budget=10_000, overrides={"ppr.entity_cooccurrence_weight": 0}
    )
    served = Retriever(LoadedIndex(old)).retrieve(BRIDGE_QUESTION, method="ppr", budget=10_000)
    assert [(e.index, e.score) for e in served.evidence] == [(e.index, e.score) for e in without.evidence]


def test_a_forbidden_title_never_names_an_entity_a_public_passage_names(tmp_path):
    """A title is registered before passages' names, so its spelling is the entity's written form:
    the guest's path showed the board-only title "The NIGHTJAR Project" for the public name."""
    from hopgraph.config import load_config

    public = "The Nightjar Project was reviewed by the Halvern Council. The Council praised the Nightjar Project."
    corpus = [
        Document(id="sec", title="The NIGHTJAR Project", metadata={"acl": ["board"]}, text="Victor Kade leads it."),
        Document(id="pub-1", title="Harbor notes", text=public),
        Document(id="pub-2", title="Ferry log", text="Engineers of the Nightjar Project took the ferry to Tem."),
    ]
    build_index(corpus, tmp_path / "index", load_config(None, SETTINGS), progress=False)
    retriever = Retriever(tmp_path / "index")
    question = "What did the Halvern Council think of the Nightjar Project?"
    guest = retriever.retrieve(question, method="ppr", budget=10_000, metadata_filter=GUEST)
    assert "ppr via entity:nightjar project (named in the query)" in {e.path for e in guest.evidence}
    assert not any("NIGHTJAR" in text for text in [*(e.path for e in guest.evidence), *guest.seeds])
    written = "ppr via entity:The NIGHTJAR Project (named in the query)"
    assert written in {e.path for e in retriever.retrieve(question, method="ppr", budget=10_000).evidence}
    # A reader of part of the corpus who may read the title's document is shown it as written too.
    board = MetadataFilter(groups=frozenset({"board"}), where={"id": {"in": ["sec", "pub-1"]}})
    assert written in {e.path for e in retriever.retrieve(question, method="ppr", metadata_filter=board).evidence}
