"""The LLM knowledge-graph stage: core selection, entity resolution, tables, and the stage itself.

Resolution uses the real MiniLM embedder; the end-to-end tests run the kg_extract stage on a copy
of the session's sample index against the real stand-in LLM (two chunks, short outputs).
"""

from __future__ import annotations

import math
import re
import shutil

import numpy as np
import pytest

from hopgraph.config import EmbeddingConfig, ExtractionConfig
from hopgraph.index import kg
from hopgraph.index.pipeline import STAGES, build_index
from hopgraph.models import load_embedder
from hopgraph.store import IndexStore


@pytest.fixture(scope="module")
def embedder():
    return load_embedder(EmbeddingConfig(cache=""))


# ------------------------------------------------------------------ core selection
KNN_RANK = np.array([0.05, 0.30, 0.02, 0.20, 0.08, 0.01, 0.12, 0.07, 0.10, 0.05])
CONCEPT_RANK = np.array([0.40, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.24])


def test_all_selects_every_chunk():
    assert kg.select_core(ExtractionConfig(kg="all", core_fraction=0.1), KNN_RANK, CONCEPT_RANK).tolist() == list(
        range(10)
    )


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5, 0.8, 1.0])
def test_pagerank_and_concept_cores_are_the_top_ranked_chunks(fraction):
    size = math.ceil(fraction * 10)
    for method, rank in (("pagerank", KNN_RANK), ("concept", CONCEPT_RANK)):
        core = kg.select_core(ExtractionConfig(kg=method, core_fraction=fraction), KNN_RANK, CONCEPT_RANK)
        assert len(core) == size and core.tolist() == sorted(core.tolist())
        # every chosen chunk ranks at least as high as every chunk left out
        left_out = np.setdiff1d(np.arange(10), core)
        assert len(left_out) == 0 or rank[core].min() >= rank[left_out].max()
    assert kg.select_core(ExtractionConfig(kg="pagerank", core_fraction=0.3), KNN_RANK, CONCEPT_RANK).tolist() == [
        1,
        3,
        6,
    ]
    assert kg.select_core(ExtractionConfig(kg="concept", core_fraction=0.3), KNN_RANK, CONCEPT_RANK).tolist() == [
        0,
        8,
        9,
    ]


def test_pagerank_ties_go_to_the_earlier_chunk():
    core = kg.select_core(ExtractionConfig(kg="pagerank", core_fraction=0.5), np.full(6, 1 / 6), CONCEPT_RANK[:6])
    assert core.tolist() == [0, 1, 2]


def test_random_core_has_the_right_size_and_is_reproducible_by_seed():
    n = 50
    rank = np.linspace(1, 0, n)  # a random core must ignore the ranks
    pick = lambda seed: kg.select_core(ExtractionConfig(kg="random", core_fraction=0.3, seed=seed), rank, rank).tolist()  # noqa: E731
    first = pick(7)
    assert len(first) == 15 == len(set(first)) and first == sorted(first) and all(0 <= c < n for c in first)
    assert pick(7) == first
    assert pick(8) != first
    assert first != list(range(15))


# ------------------------------------------------------------------ names and resolution
@pytest.mark.parametrize(
    "name, key",
    [
        ("The Halvern Harbor Institute", "halvern harbor institute"),
        ("  Halvern-Harbor   INSTITUTE. ", "halvern harbor institute"),
        ("the Sorvik Water Board", "sorvik water board"),
        ("Theodore Vale", "theodore vale"),  # only the article "the" is dropped
        ("The", "the"),  # a name that is only an article stays
        ("O'Neill & Sons", "o neill sons"),
        ("Halvern Harbor Institute's", "halvern harbor institute"),  # one rule with the CUE entity nodes
        ("An Orrin gauge", "orrin gauge"),
    ],
)
def test_one_entity_name_rule(name, key):
    from hopgraph.text import normalise_entity

    assert normalise_entity(name) == key


NAMES = [
    "The Halvern Harbor Institute",
    "Halvern Harbor Institute",
    "Halvern Harbour Institute",
    "Sorvik Water Board",
    "Sorvik Waterboard",
    "Castel Brun",
    "Castel-Brun Winery",
    "Mara Quell",
]


def test_resolve_merges_equal_names_then_near_duplicates_by_embedding(embedder):
    keys = kg.distinct_keys(NAMES)
    assert keys[:2] == ["halvern harbor institute", "halvern harbour institute"] and len(keys) == 7
    # By name only: the article and case do not make another entity; spelling variants do.
    assert kg.resolve(NAMES, None, 0.92).tolist() == [0, 0, 1, 2, 3, 4, 5, 6]
    # With MiniLM vectors at the default threshold: "Harbour"/"Harbor" and "Waterboard"/"Water Board"
    # merge (cosine ≈ 0.95), "Castel Brun" and "Castel-Brun Winery" (≈ 0.65) and unrelated names stay apart.
    vectors = embedder.encode(keys)
    assert kg.resolve(NAMES, vectors, ExtractionConfig().resolve_threshold).tolist() == [0, 0, 0, 1, 1, 2, 3, 4]
    assert kg.resolve(NAMES, vectors, 1.0).tolist() == [0, 0, 1, 2, 3, 4, 5, 6]
    assert kg.resolve([], None, 0.92).tolist() == []


def test_build_tables_keeps_provenance_and_makes_entities_of_relation_ends(embedder):
    results = [
        {
            "entities": [
                {"name": "The Halvern Harbor Institute", "type": "organisation", "description": "Studies tides."},
                {"name": "Mara Quell", "type": "person", "description": "Founder."},
            ],
            "relations": [
                {
                    "source": "Mara Quell",
                    "target": "Halvern Harbor Institute",
                    "description": "founded it",
                    "strength": 9,
                }
            ],
        },
        None,  # a fallback chunk contributes nothing
        {
            "entities": [{"name": "Halvern Harbour Institute", "type": "institute", "description": "In Brisk City."}],
            "relations": [
                {
                    "source": "Halvern Harbour Institute",
                    "target": "Brisk City",
                    "description": "located in",
                    "strength": 6,
                }
            ],
        },
    ]
    tables = kg.build_tables(results, [0, 3, 5], 6, "smollm2-135m", embedder.encode, 0.92)
    entities, mentions, relations = tables["entities"], tables["mentions"], tables["relations"]
    # Halvern (three spellings) is one entity, named by its most frequent spelling; Brisk City exists
    # only as a relation end and still becomes an entity (type unknown: "thing").
    assert entities == {
        "name": ["Halvern Harbour Institute", "Mara Quell", "Brisk City"],
        "type": ["organisation", "person", "thing"],
    }
    assert mentions == {
        "entity": [0, 1, 0],
        "chunk": [0, 0, 5],
        "description": ["Studies tides.", "Founder.", "In Brisk City."],
    }
    assert relations["source"] == [1, 0] and relations["target"] == [0, 2]
    assert relations["description"] == ["founded it", "located in"] and relations["strength"] == [9, 6]
    assert relations["chunk"] == [0, 5] and relations["model"] == ["smollm2-135m"] * 2
    assert relations["confidence"] == [0.9, 0.6]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", t) for t in relations["extracted_at"])
    graph = tables["entity_chunks"]
    assert graph.shape == (3, 6) and set(graph.data.tolist()) == {1.0}
    assert graph.toarray().astype(int).tolist() == [[1, 0, 0, 0, 0, 1], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]]
    assert kg.entity_texts(entities["name"], mentions) == [
        "Halvern Harbour Institute: Studies tides. In Brisk City.",
        "Mara Quell: Founder.",
        "Brisk City",
    ]


def test_build_tables_drops_empty_names_and_relations_of_a_thing_to_itself(embedder):
    results = [
        {
            "entities": [
                {"name": "...", "type": "thing", "description": "punctuation only"},
                {"name": "Mara Quell", "type": "person", "description": "Founder."},
            ],
            "relations": [
                {"source": "Mara Quell", "target": "mara quell", "description": "is herself", "strength": 5},
                {"source": "Mara Quell", "target": " ", "description": "to nothing", "strength": 5},
                {"source": "Mara Quell", "target": "Brisk City", "description": "lives in", "strength": 7},
            ],
        }
    ]
    tables = kg.build_tables(results, [0], 1, "m", embedder.encode, 0.92)
    assert tables["entities"]["name"] == ["Mara Quell", "Brisk City"]
    assert tables["relations"]["description"] == ["lives in"] and tables["relations"]["source"] == [0]


def test_build_tables_of_nothing_is_empty(embedder):
    tables = kg.build_tables([None, {"entities": [], "relations": []}], [0, 1], 4, "m", embedder.encode, 0.92)
    assert tables["entities"] == {"name": [], "type": []} and tables["relations"]["source"] == []
    assert tables["entity_chunks"].shape == (0, 4) and tables["mentions"]["entity"] == []


# ------------------------------------------------------------------ the stage, end to end
LLM_FREE = [stage.name for stage in STAGES if not stage.llm]


def kg_config(sample_config, llm_config, **extraction):
    settings = {"kg": "pagerank", "core_fraction": 0.25, **extraction}
    return sample_config.model_copy(update={"extraction": ExtractionConfig(**settings), "llm": llm_config})


def test_kg_stage_adds_a_graph_and_a_rerun_makes_no_llm_calls(
    tmp_path, sample_index, sample_documents, sample_config, llm_config
):
    out = tmp_path / "index"
    shutil.copytree(sample_index, out)
    store = IndexStore(out)
    before = store.read_manifest()
    config = kg_config(sample_config, llm_config)
    n_chunks = before["counts"]["chunks"]
    assert math.ceil(0.25 * n_chunks) <= 3  # keeps the LLM work of this test small

    manifest = build_index(sample_documents, out, config, progress=False)

    # Only the LLM stage ran: the LLM-free stages' records (and so their outputs) are untouched.
    assert manifest["complete"] and manifest["models"]["llm"] == "smollm2-135m"
    assert set(manifest["stages"]) == set(LLM_FREE) | {"kg_extract"}
    assert all(manifest["stages"][name] == before["stages"][name] for name in LLM_FREE)
    counts = manifest["counts"]
    core = kg.select_core(config.extraction, store.read_array("chunk_rank_knn"), store.read_array("chunk_rank_concept"))
    assert counts["kg_chunks"] == len(core) == math.ceil(0.25 * n_chunks)
    llm = manifest["stages"]["kg_extract"]["llm"]
    assert llm["calls"] >= len(core) and llm["new_calls"] == llm["calls"] and llm["cached_calls"] == 0
    assert llm["prompt_tokens"] > 0 and llm["completion_tokens"] > 0 and llm["fallbacks"] == counts["kg_fallbacks"]

    # The tables agree with each other and with the chunk set that was sent.
    entities, mentions, relations = (store.read_table(f"kg_{name}") for name in ("entities", "mentions", "relations"))
    n_entities = len(entities["name"])
    assert n_entities == counts["kg_entities"] == len(entities["type"])
    assert len(relations["source"]) == counts["kg_relations"]
    graph = store.read_graph("kg_entity_chunks")
    assert graph.shape == (n_entities, n_chunks)
    if n_entities:
        assert (np.asarray(graph.sum(axis=1)).ravel() > 0).all()  # every entity is seen in some chunk
        assert set(graph.nonzero()[1].tolist()) <= set(core.tolist())  # ... and only in chunks sent to the LLM
    assert all(0 <= e < n_entities for e in mentions["entity"]) and set(mentions["chunk"]) <= set(core.tolist())
    for column in ("target", "description", "strength", "chunk", "model", "extracted_at", "confidence"):
        assert len(relations[column]) == len(relations["source"])
    assert all(0 <= e < n_entities for e in relations["source"] + relations["target"])
    assert set(relations["chunk"]) <= set(core.tolist()) and set(relations["model"]) <= {"smollm2-135m"}
    dim = store.read_array("chunk_vectors").shape[1]
    assert store.read_array("kg_entity_vectors").shape == (n_entities, dim)
    assert store.read_array("kg_relation_vectors").shape == (len(relations["source"]), dim)

    # The same command again: the stage is done, nothing runs (its record is unchanged).
    again = build_index(sample_documents, out, config, progress=False)
    assert again["stages"] == manifest["stages"]

    # Changing an extraction setting re-runs the LLM stage (and only it); restoring it re-runs it
    # again. The pagerank core does not depend on the seed, so both re-runs ask exactly the same
    # questions: every call is answered from the cache, none is paid.
    for seed in (1, 0):
        rerun = build_index(sample_documents, out, kg_config(sample_config, llm_config, seed=seed), progress=False)
        assert all(rerun["stages"][name] == before["stages"][name] for name in LLM_FREE)
        record = rerun["stages"]["kg_extract"]["llm"]
        assert record["new_calls"] == 0 and record["cached_calls"] == record["calls"] == llm["calls"]
        assert record["paid_prompt_tokens"] == record["paid_completion_tokens"] == 0
        assert (
            record["prompt_tokens"] == llm["prompt_tokens"] and record["completion_tokens"] == llm["completion_tokens"]
        )
        assert store.read_table("kg_entities") == entities
        assert store.read_table("kg_relations")["description"] == relations["description"]
