"""An update takes the rows of unchanged texts from the version it edits: real model, real files."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from hopgraph.config import load_config
from hopgraph.documents import Document
from hopgraph.index import context, versions
from hopgraph.index.chunking import searchable
from hopgraph.index.pipeline import build_index
from hopgraph.index.reuse import (
    CHUNK_ROWS,
    CUE_UNIT_ROWS,
    CUE_UNIT_TOKENS,
    KEYWORD_VECTOR_ROWS,
    SENTENCE_ROWS,
    PreviousVersion,
)
from hopgraph.store import IndexStore, version_dir
from tests.conftest import SAMPLE_SETTINGS

# A sentence longer than the embedding window (192 tokens), so it is embedded as averaged windows.
LONG = Document(
    id="ferry-timetable",
    title="Ferry timetable",
    text="The ferry from Sorvik calls at " + ", ".join(f"pier {i} on the island of Tem" for i in range(60)) + ".",
)


@pytest.fixture(scope="module")
def updated(tmp_path_factory, sample_documents):
    """An index of five sample documents (CUE graph at α=0 too), then one update: document 1 out,
    documents 5 and 6 and one with a long sentence in; and the final corpus rebuilt with the same
    (warm) caches. Embedding calls of 8 texts make the long sentence share a call with old texts."""
    work = tmp_path_factory.mktemp("reuse")
    config = load_config(
        None, {**SAMPLE_SETTINGS, "embedding.cache": str(work / "cache.sqlite"), "extraction.cue_alpha": 0.0}
    )
    asked: dict[str, list[list[str]]] = {"build": [], "update": [], "rebuild": []}  # texts spaCy's names were asked for
    phase = ["build"]
    names_of = context.BuildContext.entity_names

    def spy(self, texts, phrases=False):
        asked[phase[0]].append(list(texts))
        return names_of(self, texts, phrases)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(context, "EMBED_SLICE", 8)
        patch.setattr(context.BuildContext, "entity_names", spy)
        build_index(sample_documents[:5], work / "index", config, progress=False)
        phase[0] = "update"
        versions.submit_update(work / "index", [*sample_documents[5:7], LONG], [sample_documents[1].id])
        [job] = versions.run_pending(work / "index")
        phase[0] = "rebuild"
        final = [d for i, d in enumerate(sample_documents[:5]) if i != 1] + [*sample_documents[5:7], LONG]
        build_index(final, work / "rebuilt", config, progress=False)
    return {"work": work, "config": config, "live": version_dir(work / "index", job["id"]), "asked": asked}


def test_an_update_takes_unchanged_rows_from_the_edited_version(updated):
    stages = IndexStore(updated["live"]).read_manifest()["stages"]
    taken = {name: record.get("taken_from_previous", 0) for name, record in stages.items()}
    for name in ("embed_units", "embed_sentences", "keywords", "entities", "cue_graph"):
        assert taken[name] > 0, f"stage {name} took nothing from the edited version"
    # What it did not take (texts of the added documents) it computed: fewer rows taken than stored.
    assert taken["embed_sentences"] < len(IndexStore(updated["live"]).read_table("sentences")["text"])


def test_an_update_finds_cue_units_and_names_only_for_chunks_the_edited_version_lacks(updated):
    """Sentence units and their spaCy names are a function of the chunk's text: an update reads
    those of unchanged chunks from the edited version, not from the caches (~4 s at 100k chunks)."""
    live = IndexStore(updated["live"])
    units = live.read_table("cue_units", ["text", "chunk"])
    chunks = live.read_table("chunks", ["text"])["text"]
    before = set(IndexStore(updated["work"] / "index").read_table("chunks", ["text"])["text"])
    new_units = [t for t, c in zip(units["text"], units["chunk"]) if chunks[c] not in before]
    cue_call = updated["asked"]["update"][-1]  # the CUE graph is the last stage asking for names
    assert 0 < len(new_units) < len(units["text"])
    assert cue_call == new_units
    assert len(updated["asked"]["rebuild"][-1]) == len(units["text"])  # a rebuild asks for every unit


def test_the_updated_index_is_bitwise_a_rebuild_with_the_same_caches(updated):
    compared, differ = IndexStore(updated["live"]).differences(IndexStore(updated["work"] / "rebuilt"), tolerance=0.0)
    assert compared >= 20 and differ == []


def test_an_appended_document_is_cut_alone_and_the_index_is_bitwise_a_rebuild(updated, tmp_path, monkeypatch):
    """An insert keeps the edited version's chunks, sub-chunks and sentences of the documents before
    it and re-cuts the token stream from the last chunk they decide alone: only the stream's last
    documents are tokenised and split again, and the result is a rebuild's."""
    index = tmp_path / "index"
    shutil.copytree(updated["work"] / "index", index)
    added = Document(id="lighthouse", title="Lighthouse", text="The lighthouse at Sorvik was lit in 1874. It works.")
    final = [*versions.read_documents(updated["live"]), added]
    analysed: list[int] = []
    analyse = context.TextAnalyser.analyse

    def spy(self, texts, encoding):
        analysed.append(len(texts))
        return analyse(self, texts, encoding)

    monkeypatch.setattr(context.TextAnalyser, "analyse", spy)
    versions.submit_update(index, [added], [])
    [job] = versions.run_pending(index)
    live = IndexStore(version_dir(index, job["id"]))
    assert analysed == [2]  # the inserted document and the one before it in the stream
    stages = live.read_manifest()["stages"]
    assert stages["chunks"]["taken_from_previous"] > 0
    # Most keywords keep their sentences: their vectors are taken, not summed again, and the concept
    # graph is patched where keywords' chunks or vectors changed.
    assert stages["keyword_vectors"]["taken_from_previous"] > len(live.read_table("keywords")["keyword"]) // 2
    assert stages["concept_graph"]["taken_from_previous"] > len(live.read_table("keywords")["keyword"]) // 2
    build_index(final, tmp_path / "rebuilt", updated["config"], progress=False)
    assert analysed[-1] == len(final)  # a build analyses every document
    compared, differ = live.differences(IndexStore(tmp_path / "rebuilt"), tolerance=0.0)
    assert compared >= 20 and differ == []
    for name in ("chunks", "units", "sentences"):  # kept rows read back from Parquet take the same types
        schemas = [pq.read_schema(root / "tables" / f"{name}.parquet") for root in (live.root, tmp_path / "rebuilt")]
        assert schemas[0] == schemas[1], name


def test_rows_kept_in_place_match_by_position_and_other_texts_by_lookup(updated):
    """After the cut, the kept leading rows match by position without a lookup; texts that are not
    this version's rows in order (here reversed) are all looked up, and each finds a row of its text."""
    live = IndexStore(updated["live"])
    previous = PreviousVersion(live, updated["config"])
    kept = previous.cut(versions.read_documents(updated["live"]), updated["config"].chunking)
    assert kept is not None and kept.resume.chunks > 0
    texts = searchable(live.read_table("chunks", ["heading", "text"]))
    assert previous.in_place(CHUNK_ROWS, texts) == kept.resume.chunks
    np.testing.assert_array_equal(previous.rows(CHUNK_ROWS, texts), np.arange(len(texts)))
    backwards = texts[::-1]
    assert previous.in_place(CHUNK_ROWS, backwards) == 0
    rows = previous.rows(CHUNK_ROWS, backwards)
    assert (rows >= 0).all() and [texts[r] for r in rows] == backwards


def test_rows_are_taken_only_under_the_same_vector_settings(updated):
    base = IndexStore(updated["work"] / "index")
    texts = base.read_table("sentences")["text"][:3] + ["A sentence no version holds."]
    dim = base.read_array("sentence_vectors").shape[1]
    asked: list[list[str]] = []

    def compute(rest: list[str]) -> np.ndarray:
        asked.append(rest)
        return np.full((len(rest), dim), 7.0, np.float32)

    same = PreviousVersion(base, updated["config"]).take(SENTENCE_ROWS, texts, compute)
    assert asked == [texts[3:]]
    np.testing.assert_array_equal(same[:3], base.read_array("sentence_vectors")[:3])
    other = updated["config"].model_copy(
        update={"embedding": updated["config"].embedding.model_copy(update={"window_tokens": 64})}
    )
    asked.clear()
    assert (PreviousVersion(base, other).take(SENTENCE_ROWS, texts, compute) == 7.0).all()
    assert asked == [texts]
    asked.clear()
    PreviousVersion(None).take(SENTENCE_ROWS, texts, compute)  # a first build has nothing to take
    assert asked == [texts]
    # Another vector cache: the update computes through it, so a rebuild from it finds every vector.
    moved = updated["config"].model_copy(
        update={"embedding": updated["config"].embedding.model_copy(update={"cache": str(base.root / "moved.sqlite")})}
    )
    asked.clear()
    PreviousVersion(base, moved).take(SENTENCE_ROWS, texts, compute)
    assert asked == [texts]


def test_nothing_is_taken_from_a_version_built_by_older_row_rules(updated, tmp_path):
    """An index built before the rows' rules were recorded (``row_rules``) may hold rows made by
    an older rule: an update computes them instead of carrying them forward."""
    older = tmp_path / "older"
    shutil.copytree(updated["work"] / "index", older, ignore=shutil.ignore_patterns("versions", "jobs", "CURRENT"))
    store = IndexStore(older)
    manifest = store.read_manifest()
    del manifest["row_rules"]
    store.write_manifest(manifest)
    texts = store.read_table("sentences")["text"][:3]
    asked: list[list[str]] = []
    PreviousVersion(store, updated["config"]).take(
        SENTENCE_ROWS, texts, lambda rest: asked.append(rest) or np.zeros((len(rest), 4), np.float32)
    )
    assert asked == [texts]


def test_an_empty_stored_array_is_not_taken_from(updated, tmp_path):
    """A version whose CUE graph had no units stored a (0, 0) array: the update computes its units."""
    empty = tmp_path / "empty"
    shutil.copytree(updated["work"] / "index", empty, ignore=shutil.ignore_patterns("versions", "jobs", "CURRENT"))
    store = IndexStore(empty)
    store.write_table("cue_units", {"text": [], "tokens": [], "docs": [], "chunk": [], "source": []})
    store.write_array("cue_unit_vectors", np.zeros((0, 0), np.float32))
    vectors = PreviousVersion(store, updated["config"]).take(
        CUE_UNIT_ROWS, ["A unit."], lambda rest: np.ones((len(rest), 4), np.float32)
    )
    assert vectors.shape == (1, 4) and (vectors == 1).all()


def test_taken_rows_are_the_stored_rows_wherever_they_sit(updated, tmp_path):
    """Rows kept in place are copied as one slice and the rest gathered: a row at its own index
    after a moved one, a row to compute (-1) and a stored all-zero row (nothing was embedded, so it
    is computed) each still get their own value."""
    copy = tmp_path / "copy"
    shutil.copytree(updated["work"] / "index", copy, ignore=shutil.ignore_patterns("versions", "jobs", "CURRENT"))
    store = IndexStore(copy)
    vectors = store.read_array("sentence_vectors")
    vectors[5] = 0.0
    store.write_array("sentence_vectors", vectors)
    texts = [f"sentence {i}" for i in range(8)]
    asked: list[list[str]] = []

    def compute(rest: list[str]) -> np.ndarray:
        asked.append(rest)
        return np.full((len(rest), vectors.shape[1]), 7.0, np.float32)

    rows = [0, 1, 7, 3, -1, 5, 6, 2]  # in place, in place, moved, own index, compute, all-zero, own index, moved
    taken = PreviousVersion(store, updated["config"]).take(SENTENCE_ROWS, texts, compute, rows=rows)
    expected = vectors[[0, 1, 7, 3, 0, 5, 6, 2]]
    expected[[4, 5]] = 7.0
    assert taken.tobytes() == expected.tobytes() and asked == [["sentence 4", "sentence 5"]]


def test_a_mean_is_taken_only_where_its_rows_and_their_vectors_are_the_same(updated):
    """A keyword's vector is kept where its sentences are the same rows with bitwise the same
    vectors: not where it gained a sentence, where one of its sentences' vectors changed, or for a
    keyword the edited version lacks."""
    store = IndexStore(updated["work"] / "index")
    before = store.read_graph("postings_sentences").tocsc()
    vocabulary = list(store.read_table("keywords")["keyword"])
    last = np.array([before[:, k].indices.max(initial=-1) for k in range(len(vocabulary))])
    moved = int(last.argmax())  # its last sentence's vector changes below: the latest row of all
    gained, swapped = (int(k) for k in np.flatnonzero((last >= 0) & (last < last[moved]))[:2])
    postings = before.tolil()
    postings[int(np.flatnonzero(before[:, gained].toarray().ravel() == 0)[0]), gained] = 1.0
    # ``swapped`` keeps its number of sentences, but one of them is another row
    postings[int(before[:, swapped].indices[0]), swapped] = 0.0
    postings[int(np.flatnonzero(before[: last[moved], swapped].toarray().ravel() == 0)[0]), swapped] = 1.0
    postings = sp.hstack([postings.tocsr(), sp.csr_matrix((before.shape[0], 1))]).tocsr()  # + "nowhere"
    vectors = np.array(store.read_array("sentence_vectors"))
    changed = int(before[:, moved].indices.max())  # this sentence's vector changes, and none before it
    assert vectors[changed].any()
    vectors[changed] *= 0.5
    rows = PreviousVersion(store, updated["config"]).unchanged_means(
        KEYWORD_VECTOR_ROWS, [*vocabulary, "nowhere"], postings, "postings_sentences", "sentence_vectors", vectors
    )
    expected = [k if k not in (gained, swapped) and last[k] < changed else -1 for k in range(len(vocabulary))]
    assert rows.tolist() == [*expected, -1]
    assert rows[moved] == -1 and 0 < (rows >= 0).sum() < len(vocabulary)


def test_no_mean_is_taken_from_vectors_of_another_width(updated):
    """A version whose sentence vectors another model made (another width) offers no keyword vector:
    the stage makes them all again instead of failing to fit the new rows beside the old."""
    store = IndexStore(updated["work"] / "index")
    postings, vectors = store.read_graph("postings_sentences"), store.read_array("sentence_vectors")
    vocabulary = store.read_table("keywords")["keyword"]
    previous = PreviousVersion(store, updated["config"])
    means = ("postings_sentences", "sentence_vectors")
    assert previous.unchanged_means(KEYWORD_VECTOR_ROWS, vocabulary, postings, *means, vectors) is not None
    wider = np.hstack([vectors, vectors])
    assert previous.unchanged_means(KEYWORD_VECTOR_ROWS, vocabulary, postings, *means, wider) is None


def test_a_table_column_is_taken_by_text_too(updated):
    base = IndexStore(updated["work"] / "index")
    units = base.read_table("cue_units", ["text", "tokens"])
    texts = [units["text"][0], "A unit no version holds.", units["text"][1]]
    asked: list[list[str]] = []

    def count(rest: list[str]) -> list[int]:
        asked.append(rest)
        return [-1] * len(rest)

    taken = PreviousVersion(base, updated["config"]).take(CUE_UNIT_TOKENS, texts, count)
    assert taken.tolist() == [units["tokens"][0], -1, units["tokens"][1]] and asked == [texts[1:2]]


def test_same_rows_match_a_repeated_text_row_by_row_and_only_on_equal_vectors(updated, tmp_path):
    """Chunks whose rows an update may keep: a text the edited version holds twice matches its two
    rows in order (not its first row twice, which made every repeat and its neighbours be searched
    again); a row whose vector differs, or a third copy, matches none."""
    copy = tmp_path / "copy"
    shutil.copytree(updated["work"] / "index", copy, ignore=shutil.ignore_patterns("versions", "jobs", "CURRENT"))
    store = IndexStore(copy)
    chunks, vectors = store.read_table("chunks"), store.read_array("chunk_vectors")
    for column in chunks:  # rows 0 and 1: one text twice, one vector twice
        chunks[column][1] = chunks[column][0]
    vectors[1] = vectors[0]
    store.write_table("chunks", chunks)
    store.write_array("chunk_vectors", vectors)
    keys = searchable(chunks)
    asked = np.stack([vectors[0], vectors[0], vectors[2] * 0.5, vectors[0], vectors[3]])
    rows = PreviousVersion(store, updated["config"]).same_rows(
        CHUNK_ROWS, [keys[0]] * 2 + keys[2:3] + keys[:1] + keys[3:4], asked
    )
    assert rows.tolist() == [0, 1, -1, -1, 3]


def test_an_update_above_the_exact_knn_limit_patches_the_cosine_candidates(tmp_path, sample_documents):
    """Above ``graph.exact_knn_limit`` an update searches only its touched chunks again. On the
    sample the FAISS index probes every list, so the edited version's candidates are exact, and so
    must the patched ones be: the same as a rebuild's. (The sample is small: any change is more than
    the rows above which patching gives way to a fresh search, so that bound is lifted.) The lexical
    neighbours are patched too, at any size, and are a rebuild's."""
    from hopgraph.index import graphs

    settings = {**SAMPLE_SETTINGS, "chunking.size": 16, "chunking.overlap": 4, "graph.exact_knn_limit": 2}
    config = load_config(None, {**settings, "embedding.cache": str(tmp_path / "cache.sqlite")})
    lexical_patches: list[int] = []  # rows searched again per lexical patch
    patch_lexical = graphs.patched_lexical_candidates

    def spy(*args, **kwargs):
        patched = patch_lexical(*args, **kwargs)
        lexical_patches.append(-1 if patched is None else patched[2])
        return patched

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graphs, "PATCH_ROWS_PER_ROOT", 100.0)
        patch.setattr(graphs, "patched_lexical_candidates", spy)
        build_index(sample_documents[:5], tmp_path / "index", config, progress=False)
        versions.submit_update(tmp_path / "index", sample_documents[5:], [])
        [job] = versions.run_pending(tmp_path / "index")
    build_index(sample_documents, tmp_path / "rebuilt", config, progress=False)
    live, rebuilt = IndexStore(version_dir(tmp_path / "index", job["id"])), IndexStore(tmp_path / "rebuilt")
    chunks = len(live.read_table("chunks", ["tokens"])["tokens"])
    assert len(lexical_patches) == 1 and 0 < lexical_patches[0] < chunks / 2  # most lists kept
    # Rows kept by the cosine and the lexical patch together: each searched some rows again.
    assert 0 < live.read_manifest()["stages"]["knn_graph"]["taken_from_previous"] < 2 * chunks
    assert "taken_from_previous" not in rebuilt.read_manifest()["stages"]["knn_graph"]
    for name in ("knn_lexical_indices", "knn_lexical_counts"):
        assert np.array_equal(live.read_array(name), rebuilt.read_array(name))
    assert np.array_equal(live.read_array("knn_cosine_indices"), rebuilt.read_array("knn_cosine_indices"))
    assert np.allclose(live.read_array("knn_cosine_scores"), rebuilt.read_array("knn_cosine_scores"), atol=1e-6)
    assert (live.read_graph("knn") != rebuilt.read_graph("knn")).nnz == 0


def test_an_update_above_the_exact_synonym_limit_patches_the_synonym_candidates(tmp_path, sample_documents):
    """Above ``graph.exact_synonym_limit`` an update searches again only the names it touched, not
    every name through a new FAISS index. On the sample FAISS probes every list, so the edited
    version's candidates are exact and the patched ones must be a rebuild's. (Any change of the
    sample is more than the rows above which patching gives way to a fresh search: that bound is
    lifted.)"""
    from hopgraph.index import entities, graphs

    settings = {**SAMPLE_SETTINGS, "graph.exact_synonym_limit": 2, "graph.synonym_threshold": 0.5}
    config = load_config(None, {**settings, "embedding.cache": str(tmp_path / "cache.sqlite")})
    fresh_searches: list[int] = []
    real_search = entities.synonym_candidates

    def counted(vectors, k, exact_limit):  # the real search, counted
        fresh_searches.append(len(vectors))
        return real_search(vectors, k, exact_limit)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graphs, "PATCH_ROWS_PER_ROOT", 100.0)
        patch.setattr(entities, "synonym_candidates", counted)
        build_index(sample_documents[:5], tmp_path / "index", config, progress=False)
        versions.submit_update(tmp_path / "index", sample_documents[5:], [])
        [job] = versions.run_pending(tmp_path / "index")
    assert len(fresh_searches) == 1  # the first build's; the update patched
    build_index(sample_documents, tmp_path / "rebuilt", config, progress=False)
    live, rebuilt = IndexStore(version_dir(tmp_path / "index", job["id"])), IndexStore(tmp_path / "rebuilt")
    names = len(rebuilt.read_array("entity_synonym_indices"))
    assert names > 2 and rebuilt.read_array("entity_synonym_indices").shape[1] == 5
    assert np.array_equal(live.read_array("entity_synonym_indices"), rebuilt.read_array("entity_synonym_indices"))
    assert np.allclose(live.read_array("entity_synonym_scores"), rebuilt.read_array("entity_synonym_scores"), atol=1e-6)
    patched, fresh = live.read_graph("entity_synonyms"), rebuilt.read_graph("entity_synonyms")
    assert patched.nnz > 0 and ((patched != 0) != (fresh != 0)).nnz == 0  # the same edges...
    assert np.allclose(patched.toarray(), fresh.toarray(), atol=1e-6)  # ...weighed alike up to float rounding


def test_sentence_units_are_kept_only_from_the_same_text_models_and_never_for_llm_chunks(updated, tmp_path):
    from hopgraph.index.cue import kept_chunks

    copy = tmp_path / "copy"
    shutil.copytree(updated["work"] / "index", copy, ignore=shutil.ignore_patterns("versions", "jobs", "CURRENT"))
    store = IndexStore(copy)
    texts = store.read_table("chunks", ["text"])["text"]
    kept = kept_chunks(PreviousVersion(store, updated["config"]), [*texts, "A chunk no version holds."], np.array([1]))
    assert kept.tolist() == [0, -1, *range(2, len(texts)), -1]  # chunk 1 is chosen for the LLM now
    units = store.read_table("cue_units")
    units["source"] = ["llm" if c == 2 else s for c, s in zip(units["chunk"], units["source"])]  # chosen then
    store.write_table("cue_units", units)
    assert kept_chunks(PreviousVersion(store, updated["config"]), texts, np.zeros(0, np.int64))[2] == -1
    manifest = store.read_manifest()
    manifest["text_models"] = {**manifest["text_models"], "names": "another spaCy"}
    store.write_manifest(manifest)
    assert (kept_chunks(PreviousVersion(store, updated["config"]), texts, np.zeros(0, np.int64)) == -1).all()


def test_a_tfidf_index_update_counts_its_lexical_neighbours_afresh(tmp_path):
    """With tf-idf keywords an unchanged chunk's own keywords move with the corpus ("zebra" joins the
    vocabulary when it becomes distinctive): the update's lexical neighbours are a rebuild's."""
    texts = ["apple apple zebra", "banana banana zebra", "cherry cherry zebra", "delta delta"]
    added = ["zebra zebra zebra", "zebra omega"]
    documents = [Document(id=f"d{i}", title="", text=t) for i, t in enumerate(texts + added)]
    settings = {
        "keywords.method": "tfidf",
        "keywords.tfidf_top": 1,
        "keywords.max_df": 1.0,
        "chunking.pack_documents": False,
        "embedding.cache": str(tmp_path / "cache.sqlite"),
    }
    config = load_config(None, settings)
    build_index(documents[:4], tmp_path / "index", config, progress=False)
    versions.submit_update(tmp_path / "index", documents[4:], [])
    [job] = versions.run_pending(tmp_path / "index")
    build_index(documents, tmp_path / "rebuilt", config, progress=False)
    live, rebuilt = IndexStore(version_dir(tmp_path / "index", job["id"])), IndexStore(tmp_path / "rebuilt")
    assert "zebra" in live.read_table("keywords")["keyword"]
    np.testing.assert_array_equal(live.read_array("knn_lexical_indices"), rebuilt.read_array("knn_lexical_indices"))


def test_a_resumed_build_with_other_text_models_makes_what_they_decide_again(updated, tmp_path):
    """The CUE graph's sentence units and names, the entity layer's names and the cut came from the
    models the manifest names: resumed under others, those stages (and the stages reading them) run
    again rather than be recorded as made by today's."""
    from hopgraph.index.pipeline import start_manifest
    from hopgraph.index.reuse import text_models

    copy = tmp_path / "copy"
    shutil.copytree(updated["work"] / "rebuilt", copy)
    store = IndexStore(copy)
    manifest = store.read_manifest()
    same = start_manifest(store, updated["config"], manifest["corpus_fingerprint"], overwrite=False)
    assert "cue_graph" in same["stages"] and same["complete"] and same["text_models"] == text_models()
    manifest["text_models"] = {**manifest["text_models"], "names": "another spaCy"}
    store.write_manifest(manifest)
    resumed = start_manifest(store, updated["config"], manifest["corpus_fingerprint"], overwrite=False)
    assert not resumed["complete"] and resumed["text_models"] == text_models()
    assert {"cue_graph", "entities"}.isdisjoint(resumed["stages"]) and "knn_graph" in resumed["stages"]
    manifest["text_models"] = {**text_models(), "tokens": "another tiktoken"}
    store.write_manifest(manifest)
    resumed = start_manifest(store, updated["config"], manifest["corpus_fingerprint"], overwrite=False)
    assert list(resumed["stages"]) == ["documents"]  # every other stage reads the cut


def test_a_manifest_without_the_noun_phrase_rule_was_made_by_rule_p1(updated, tmp_path, monkeypatch):
    """A manifest written before text_models named the noun-phrase rule: under p1 its entity layer
    stands, under any later rule a resumed build makes it again."""
    from hopgraph import ner
    from hopgraph.index.pipeline import start_manifest

    copy = tmp_path / "copy"
    shutil.copytree(updated["work"] / "rebuilt", copy)
    store = IndexStore(copy)
    manifest = store.read_manifest()
    del manifest["text_models"]["phrases"]
    store.write_manifest(manifest)
    resumed = start_manifest(store, updated["config"], manifest["corpus_fingerprint"], overwrite=False)
    assert "entities" in resumed["stages"] and resumed["complete"]
    store.write_manifest(manifest)
    monkeypatch.setattr(ner, "PHRASE_RULE", "p2")
    resumed = start_manifest(store, updated["config"], manifest["corpus_fingerprint"], overwrite=False)
    assert "entities" not in resumed["stages"] and "cue_graph" in resumed["stages"] and not resumed["complete"]


def test_a_sentence_holding_a_word_the_insert_brings_into_the_vocabulary_is_counted_again(tmp_path):
    """A run of letters longer than a chunk is cut inside: no chunk holds it whole, so it is no
    keyword, but its sentence holds it. An inserted document that holds it whole makes it one, and
    the update's sentence postings must then be a rebuild's, not the earlier rows."""
    word = "vortigernhall" * 12  # one word of 60 tokens: a 64-token chunk holds it whole only where it starts one
    documents = [  # (the two spaces put the word where no chunk of its document starts)
        Document(id="long", title="", text=f"The ledger of  names {word} twice. Harbour bells rang at noon."),
        Document(id="other", title="", text="Tides rose over the Sorvik pier in the spring storms."),
        Document(id="new", title="", text=f"Only {word} appears here."),
    ]
    settings = {"chunking.size": 64, "chunking.overlap": 8, "chunking.pack_documents": False}
    config = load_config(None, {**settings, "embedding.cache": str(tmp_path / "cache.sqlite")})
    build_index(documents[:2], tmp_path / "index", config, progress=False)
    assert word not in IndexStore(tmp_path / "index").read_table("keywords")["keyword"]
    versions.submit_update(tmp_path / "index", documents[2:], [])
    [job] = versions.run_pending(tmp_path / "index")
    build_index(documents, tmp_path / "rebuilt", config, progress=False)
    live, rebuilt = IndexStore(version_dir(tmp_path / "index", job["id"])), IndexStore(tmp_path / "rebuilt")
    assert word in live.read_table("keywords")["keyword"]
    assert live.read_manifest()["stages"]["keywords"]["taken_from_previous"] > 0
    assert (live.read_graph("postings_sentences") != rebuilt.read_graph("postings_sentences")).nnz == 0


def test_rows_left_to_compute_never_read_as_invalid_values(updated, tmp_path):
    """Every update printed "warning: invalid value encountered in reduce": the taken rows went into
    an np.empty array whose rows left to compute were read by the all-zero test, and reused memory
    there could hold signalling NaNs. Here freed memory of such NaNs precedes each take (15 of 20
    takes warned before the fix); rows to compute now start as zeros."""
    import warnings

    copy = tmp_path / "copy"
    shutil.copytree(updated["work"] / "index", copy, ignore=shutil.ignore_patterns("versions", "jobs", "CURRENT"))
    store = IndexStore(copy)
    width = store.read_array("sentence_vectors").shape[1]
    texts = [f"sentence {i}" for i in range(8)]
    previous = PreviousVersion(store, updated["config"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(20):
            junk = np.full(8 * width, 0x7FA00000, dtype=np.uint32).view(np.float32)  # signalling NaNs
            del junk
            taken = previous.take(
                SENTENCE_ROWS,
                texts,
                lambda rest: np.ones((len(rest), width), np.float32),
                rows=[0, 1, 7, 3, -1, 5, 6, 2],
            )
            assert (taken[4] == 1.0).all()
