"""Forbidden documents must not change what other readers retrieve.

Default mode: nothing computed from a forbidden piece's text (keyword vectors, KG entity vectors
and names) may rank or label pieces for a reader who cannot read it. The test swaps the codeword of
a restricted document for another one: a reader who may not read it must get identical results
whichever codeword is there, even when asking for it by name (else results confirm a guess).

Isolation mode (access.isolation): a groupless reader's results equal, piece for piece, those of an
index built from the unrestricted documents alone.
"""

from __future__ import annotations

import shutil

import pytest

from hopgraph.documents import Document
from hopgraph.errors import ConfigError, IndexFormatError
from hopgraph.index.llm_stages import write_kg
from hopgraph.index.pipeline import build_index
from hopgraph.index.versions import live_version, read_job, run_job, submit_update
from hopgraph.retrieve.filters import MetadataFilter
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.retrieve.partitioned import PartitionedRetriever
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

# Two codewords that sort to the same place in the vocabulary, so keyword numbers do not move.
CODEWORDS = ("ZZVELLUMTIDE", "ZZQUILLBRACK")
GUEST = MetadataFilter(groups=frozenset())
BOARD = MetadataFilter(groups=frozenset({"board"}))


def secrets(codeword: str) -> list[Document]:
    return [
        Document(
            id="secret-board",
            title="Board succession",
            metadata={"acl": ["board"]},
            text="The board plans to replace its chair Priya Anand with the hydrologist Tomas Wrenfield in 2026 "
            f"under the plan {codeword}. "
            "Lake Orrin monitoring moves to Castel Brun and the tide gauges of the Halvern Harbor Institute are sold.",
        ),
        Document(
            id="secret-ops",
            title="Vessel incident",
            metadata={"acl": ["operations"]},
            text="The research vessel Long Reach ran aground near the island of Tem during a survey. Jonah Brekke "
            "led the rescue with a Sorvik ferry.",
        ),
    ]


def questions(codeword: str) -> list[str]:
    return [
        f"What is {codeword}?",
        f"Who replaces the chair under the plan {codeword}?",
        f"{codeword} tide gauges Halvern Harbor Institute",
        "Who founded the Halvern Harbor Institute?",
        "Where did the Long Reach run aground?",
        "What does the Water Board monitor in Lake Orrin?",
    ]


def signature(result) -> list[tuple]:
    return [(e.kind, e.index, e.chunk, round(e.score, 6), e.path, e.text, tuple(e.doc_ids)) for e in result.evidence]


@pytest.fixture(scope="module")
def swapped(tmp_path_factory, sample_documents, sample_config):
    """Default-mode indexes of the same corpus, differing only in the restricted codeword."""
    root = tmp_path_factory.mktemp("noninterference")
    paths = {}
    for codeword in CODEWORDS:
        paths[codeword] = root / codeword
        build_index([*sample_documents, *secrets(codeword)], paths[codeword], sample_config, progress=False)
    return paths


@pytest.mark.parametrize("method", LLM_FREE)
def test_default_mode_results_do_not_depend_on_forbidden_text(swapped, method):
    first, second = (Retriever(swapped[c]) for c in CODEWORDS)
    for question in questions(CODEWORDS[0]):
        seen = first.retrieve(question, method=method, budget=400, metadata_filter=GUEST)
        other = second.retrieve(question, method=method, budget=400, metadata_filter=GUEST)
        assert signature(seen) == signature(other), (
            f"{method}: {question!r} retrieves differently when the forbidden codeword changes"
        )
        shown = " ".join(e.path + " " + e.text for e in seen.evidence).lower()
        assert CODEWORDS[0].lower() not in shown and "wrenfield" not in shown


@pytest.fixture(scope="module")
def stamped(tmp_path_factory, sample_documents, sample_config):
    """Indexes that differ only in the timestamp of a restricted document."""
    root = tmp_path_factory.mktemp("stamped")
    paths = {}
    for stamp in ("2019-05-05", "2031-01-01"):
        secret, other = secrets(CODEWORDS[0])
        secret.metadata["timestamp"] = stamp
        paths[stamp] = root / stamp
        build_index([*sample_documents, secret, other], paths[stamp], sample_config, progress=False)
    return list(paths.values())


def test_freshness_ranks_only_the_documents_a_reader_may_read(stamped):
    """ppr's freshness ranked every document's timestamp: a reader's scores told how many distinct
    timestamps forbidden documents hold, and that a restricted one was added, and when."""
    fresh_only = {"ppr.meta_weight": 100, **{f"ppr.{w}_weight": 0 for w in ("text", "graph", "path", "entity")}}
    first, second = (Retriever(path) for path in stamped)
    for question in questions(CODEWORDS[0])[3:]:
        seen, other = (
            r.retrieve(question, method="ppr", budget=400, metadata_filter=GUEST, overrides=fresh_only)
            for r in (first, second)
        )
        assert signature(seen) == signature(other), question


def kg_results(codeword: str, chunks: dict[str, list]) -> tuple[list[dict], list[int]]:
    """Extraction results for one public and one restricted chunk, standing in for the LLM's: the
    restricted chunk describes a public entity with the codeword and spells its name its own way
    (more often than the public chunk does)."""
    public = next(
        c
        for c, (text, docs) in enumerate(zip(chunks["text"], chunks["docs"]))
        if "Halvern Harbor Institute" in text and chunks["acl"][c] is None
    )
    secret = next(c for c, text in enumerate(chunks["text"]) if codeword in text)
    halvern, shouted = "Halvern Harbor Institute", "HALVERN HARBOR INSTITUTE"
    results = [
        {
            "entities": [
                {"name": halvern, "type": "organisation", "description": "A research institute on Lake Orrin."},
                {"name": "Lake Orrin", "type": "place", "description": "A lake with tide gauges."},
            ],
            "relations": [
                {"source": halvern, "target": "Lake Orrin", "description": "studies the lake", "strength": 7}
            ],
        },
        {
            "entities": [
                {
                    "name": shouted,
                    "type": "organisation",
                    "description": f"Sells its tide gauges under the secret plan {codeword}.",
                },
                {"name": codeword, "type": "plan", "description": f"{codeword} is the board's secret succession plan."},
            ],
            "relations": [
                {"source": shouted, "target": codeword, "description": f"carries out {codeword}", "strength": 9},
                {"source": shouted, "target": "Tomas Wrenfield", "description": "will be chaired by", "strength": 8},
            ],
        },
    ]
    return results, [public, secret]


def test_default_mode_kg_scores_and_names_entities_from_readable_mentions(swapped, sample_config, tmp_path):
    """The KG built from fixed extraction results (the stand-in model cannot be made to extract a
    codeword reliably); the rest is the real pipeline and method."""
    retrievers = []
    for codeword in CODEWORDS:
        path = tmp_path / codeword
        shutil.copytree(swapped[codeword], path)
        store = IndexStore(path)
        results, core = kg_results(codeword, store.read_table("chunks"))
        write_kg(store, sample_config, results, core, "fixed")
        manifest = store.read_manifest()
        manifest["stages"]["kg_extract"] = {"done": True, "seconds": 0.0}
        store.write_manifest(manifest)
        retrievers.append(Retriever(path))
    for question in questions(CODEWORDS[0])[:3]:
        seen = retrievers[0].retrieve(question, method="kg", budget=400, metadata_filter=GUEST)
        other = retrievers[1].retrieve(question, method="kg", budget=400, metadata_filter=GUEST)
        assert signature(seen) == signature(other), (
            f"kg: {question!r} ranks differently when the forbidden codeword changes"
        )
        entities = [e.text for e in seen.evidence if e.kind == "entity"]
        assert any(
            t.startswith("Halvern Harbor Institute: ") for t in entities
        )  # the public spelling, not the restricted one
        shown = " ".join(e.path + " " + e.text for e in seen.evidence)
        assert CODEWORDS[0].lower() not in shown.lower() and "HALVERN HARBOR" not in shown and "Wrenfield" not in shown
    # A reader of the board's documents sees the restricted mention's name and the codeword entity.
    board = retrievers[0].retrieve(questions(CODEWORDS[0])[0], method="kg", budget=400, metadata_filter=BOARD)
    assert CODEWORDS[0] in " ".join(e.text for e in board.evidence)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory, sample_documents, sample_config):
    """An isolated index of sample + restricted documents, and an index of the public documents alone."""
    root = tmp_path_factory.mktemp("isolation")
    documents = [*sample_documents, *secrets(CODEWORDS[0])]
    config = sample_config.model_copy(update={"access": sample_config.access.model_copy(update={"isolation": True})})
    manifest = build_index(documents, root / "full", config, progress=False)
    build_index([d for d in documents if d.acl is None], root / "public", sample_config, progress=False)
    return root, manifest, config


def test_isolation_builds_one_sub_index_per_acl(isolated):
    root, manifest, _ = isolated
    acls = [p["acl"] for p in manifest["partitions"]]
    assert acls[0] is None and ["board"] in acls and ["operations"] in acls and ["board", "operations"] in acls
    assert manifest["complete"] and sum(p["documents"] for p in manifest["partitions"]) == len(
        IndexStore(root / "full").read_table("documents")["id"]
    )
    with pytest.raises(IndexFormatError, match="isolation"):
        LoadedIndex(root / "full")
    assert isinstance(Retriever(root / "full"), PartitionedRetriever)


def compare(full: Retriever, public: Retriever, reader: MetadataFilter) -> list[str]:
    differing = []
    for method in LLM_FREE:
        for question in questions(CODEWORDS[0]):
            if signature(full.retrieve(question, method=method, budget=400, metadata_filter=reader)) != signature(
                public.retrieve(question, method=method, budget=400, metadata_filter=reader)
            ):
                differing.append(f"{method}: {question}")
    return differing


def test_isolation_groupless_reader_sees_exactly_the_public_index(isolated):
    root, _, _ = isolated
    full, public = Retriever(root / "full"), Retriever(root / "public")
    assert compare(full, public, GUEST) == []
    # A board member also gets the board's partition: the codeword's document is found.
    board = full.retrieve(questions(CODEWORDS[0])[0], method="text", budget=400, metadata_filter=BOARD)
    assert "secret-board" in board.doc_ids and "secret-ops" not in board.doc_ids
    lexical = Retriever(root / "full")  # bm25 over the partitions loads no embedding model
    assert lexical.retrieve(questions(CODEWORDS[0])[0], method="bm25", budget=400, metadata_filter=BOARD).evidence
    assert lexical._embedder is None
    # A reader who may read no partition had any settings accepted (nothing checked them).
    nobody = MetadataFilter(groups=frozenset({"nobody"}), allow_unrestricted=False)
    assert full.retrieve("Who?", method="text", budget=100, metadata_filter=nobody).evidence == []
    with pytest.raises(ConfigError, match="ppr.damping"):
        full.retrieve("Who?", budget=100, metadata_filter=nobody, overrides={"ppr.damping": 7})
    with pytest.raises(ConfigError, match="method 'cue' needs parts this index lacks"):
        full.retrieve("Who?", method="cue", budget=100, metadata_filter=nobody)


def test_isolation_survives_an_update(isolated, tmp_path):
    root, _, _ = isolated
    path = tmp_path / "full"
    shutil.copytree(root / "full", path)
    added = Document(
        id="secret-legal",
        title="Settlement",
        metadata={"acl": ["legal"]},
        text="The settlement with the Sorvik ferry company is code-named QUARTZFERN and costs 2.4 million.",
    )
    job = submit_update(path, [added], ["secret-ops"])
    assert run_job(path, job["id"])["status"] == "done"
    updated = Retriever(path)
    assert isinstance(updated, PartitionedRetriever) and updated.index.version == job["id"]
    assert ["legal"] in [p.acl for p in updated.index.partitions] and ["operations"] not in [
        p.acl for p in updated.index.partitions
    ]
    assert compare(updated, Retriever(root / "public"), GUEST) == []


def test_an_update_of_an_isolated_index_hashes_its_partitions(isolated, tmp_path):
    """The update's hash check read the top manifest only, whose stage records list no files for
    an isolated index: a flipped byte in a partition's vectors was copied into the new version with
    fresh hashes. Each partition's files are hashed now, and the update fails, publishing nothing."""
    root, _, _ = isolated
    path = tmp_path / "full"
    shutil.copytree(root / "full", path)
    vectors = path / "partitions" / "public" / "arrays" / "unit_vectors.npy"
    data = bytearray(vectors.read_bytes())
    data[200:240] = b"\xff" * 40  # same size: only the hash tells
    vectors.write_bytes(bytes(data))
    job = submit_update(path, [], ["secret-ops"])
    with pytest.raises(IndexFormatError, match=r"public/arrays/unit_vectors\.npy: contents differ .* \(written by"):
        run_job(path, job["id"])
    assert read_job(path, job["id"])["status"] == "failed" and live_version(path) == ""


def test_isolated_index_is_served_over_http(isolated, tmp_path):
    """`hopgraph serve` opens an isolated index: a groupless reader gets the public index's evidence."""
    import httpx

    from tests.serve.support import USERS, LiveServer, auth

    root, _, config = isolated
    path = tmp_path / "full"
    shutil.copytree(root / "full", path)
    question = questions(CODEWORDS[0])[0]
    public = Retriever(root / "public").retrieve(question, method="ppr", budget=400, metadata_filter=GUEST)
    assert USERS["guest"]["groups"] == []
    with LiveServer(path, config) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        info = client.get("/v1/index", headers=auth("guest")).json()
        assert "ppr" in info["methods"] and "bm25" in info["methods"]
        body = {"query": question, "method": "ppr", "budget": 400}
        served = client.post("/v1/retrieve", json=body, headers=auth("guest")).json()
        assert [(e["text"], e["path"]) for e in served["evidence"]] == [(e.text, e.path) for e in public.evidence]
        board = client.post("/v1/retrieve", json={**body, "method": "text"}, headers=auth("bo")).json()
        assert "secret-board" in {d for e in board["evidence"] for d in e["doc_ids"]}
