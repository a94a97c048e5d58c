"""The entity layer's build: noun phrases from spaCy's parse, and entity–entity co-occurrence edges."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from hopgraph import ner
from hopgraph.errors import HopgraphError
from hopgraph.index.entities import MAX_COOCCURRING, TITLE, synonym_edges, unit_entities
from hopgraph.kernels import cooccurrence_matrix
from hopgraph.ner import (
    MAX_PROCESSES,
    PARALLEL_FROM,
    PHRASE,
    PROCESS_CHUNK,
    cached_entity_names,
    entity_names,
    ner_processes,
)


def test_noun_phrases_name_things_and_leave_pronouns_and_lone_common_nouns_out():
    names = dict(
        entity_names(
            ["Ermengarde of Tours copied ancient manuscripts, and it was in the city that she met him."],
            phrases=True,
        )[0]
    )
    assert names["ermengarde of tours"] != PHRASE  # spaCy's own name, with its label
    assert names["ancient manuscripts"] == PHRASE  # two content words
    assert not {"it", "she", "him", "city", "ermengarde", "tours"} & set(names)  # pronouns, one common noun, parts
    assert "ancient manuscripts" not in dict(entity_names(["Ermengarde of Tours copied ancient manuscripts."])[0])


def test_names_with_and_without_phrases_are_cached_apart(tmp_path):
    cache = tmp_path / "entities.sqlite"
    text = ["Ermengarde of Tours copied ancient manuscripts."]
    plain = cached_entity_names(text, cache)
    with_phrases = cached_entity_names(text, cache, phrases=True)
    assert [n for n, _ in plain[0]] == ["ermengarde of tours"]
    assert ["ancient manuscripts", PHRASE] in with_phrases[0]  # pairs are lists, as JSON reads them
    assert cached_entity_names(text, cache) == plain  # the cached plain result is not the phrase one


def test_a_build_killed_while_finding_names_keeps_every_finished_slice(tmp_path):
    cache = tmp_path / "entities.sqlite"
    texts = ["Ada Lovelace met Charles Babbage.", "Sorvik lies on Lake Orrin.", "Bram Cole sailed to Tem."]
    calls: list[list[str]] = []

    def killed_on_the_second_slice(batch: list[str]) -> list[list[tuple[str, str]]]:
        calls.append(batch)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what Ctrl-C raises in the middle of spaCy's work
        return entity_names(batch)

    with pytest.raises(KeyboardInterrupt):
        cached_entity_names(texts, cache, compute=killed_on_the_second_slice, slice_size=2)
    calls.clear()
    again = cached_entity_names(
        texts, cache, compute=lambda batch: calls.append(batch) or entity_names(batch), slice_size=2
    )
    assert calls == [texts[2:]]  # the first slice's names came from the cache
    assert again == cached_entity_names(texts, cache) and [n for n, _ in again[0]][:1] == ["ada lovelace"]


def test_entities_said_in_one_sentence_are_linked_once_per_sentence():
    crowd = [(f"person {i}", "PERSON") for i in range(MAX_COOCCURRING + 1)]
    table = unit_entities(
        sentence_units=[0, 0, 1, 1],
        sentence_names=[
            [("ada", "PERSON"), ("bram", "PERSON"), ("1874", "DATE")],
            [("ada", "PERSON"), ("bram", "PERSON")],
            [("bram", "PERSON"), ("cole", "ORG")],
            crowd,  # a list sentence: no clique of edges
        ],
        unit_docs=[[0], [1]],
        titles=["Ada", ""],
    )
    ids = {name: i for i, name in enumerate(table.names)}
    assert table.labels[ids["ada"]] == TITLE and "1874" not in ids  # the title wins; dates name no thing
    co = cooccurrence_matrix(table.sentence_mentions.T.tocsr()).toarray()
    assert co[ids["ada"], ids["bram"]] == co[ids["bram"], ids["ada"]] == 2  # two sentences name both
    assert co[ids["bram"], ids["cole"]] == 1 and co[ids["ada"], ids["cole"]] == 0
    assert np.all(np.diag(co) == 0)
    assert co[ids["person 0"]].sum() == 0  # the crowded sentence links nobody
    assert table.mentions[1, ids["person 0"]] == 1  # but its names are still mentioned


def test_synonym_search_above_the_exact_limit_finds_the_exact_edges():
    """Above ``exact_limit`` names the search runs on FAISS inverted lists (51 lists, 16 probed
    here): near-duplicate names, what a synonym edge is for, are found as the exact search finds them."""
    rng = np.random.default_rng(0)
    names = rng.standard_normal((2000, 64)).astype(np.float32)
    twins = rng.choice(2000, 60, replace=False)
    names[twins[30:]] = names[twins[:30]] + 0.1 * rng.standard_normal((30, 64)).astype(np.float32)
    names /= np.linalg.norm(names, axis=1, keepdims=True)
    exact = synonym_edges(names, 0.9, 5, exact_limit=2000)
    approximate = synonym_edges(names, 0.9, 5, exact_limit=1999)
    assert exact.nnz == 60  # the 30 planted pairs, both ways
    assert ((exact > 0) != (approximate > 0)).nnz == 0  # the same edges...
    np.testing.assert_allclose(approximate.toarray(), exact.toarray(), atol=1e-5)  # ...up to float summation order


def test_a_text_longer_than_a_spacy_window_is_read_in_windows_and_its_names_merged():
    from hopgraph.ner import windows

    filler = "and then the committee met again " * 20  # ~660 characters without a name
    text = f"Ada Lovelace wrote to Charles Babbage. {filler}Later Ada Lovelace visited Paris in France."
    pieces = windows(text, 200)
    assert "".join(pieces) == text and len(pieces) > 3 and max(map(len, pieces)) <= 200
    assert all(piece.endswith(" ") for piece in pieces[:-1])  # never inside a word
    names = [name for name, _ in entity_names([text, "Paris"], window=200)[0]]
    assert names.count("ada lovelace") == 1 and {"charles babbage", "paris", "france"} <= set(names)
    assert entity_names([text], window=200)[0][:2] == entity_names([text])[0][:2]  # the same order of first names


def test_spacy_holds_a_bounded_number_of_characters_at_once_and_finds_the_same_names(monkeypatch):
    """Batches of 256 windows of a long text without sentence ends were parsed together: a 9 MB
    upload took an update worker to 20.8 GB (one window at a time: a few hundred MB)."""
    from hopgraph.ner import _batches

    pieces = [(0, "x" * 60), (0, "x" * 60), (1, "x" * 30), (2, "x" * 200), (3, "x" * 10)]
    assert [[len(p) for _, p in batch] for batch in _batches(pieces, chars=100, count=2)] == [
        [60],
        [60, 30],
        [200],  # longer than the bound: alone
        [10],
    ]
    filler = "and then the committee met again " * 20
    texts = [f"Ada Lovelace wrote to Charles Babbage. {filler}Later Ada Lovelace visited Paris.", "Paris in France."]
    together = entity_names(texts, window=200)
    monkeypatch.setattr(ner._batches, "__defaults__", (250, 256))  # one window per batch
    assert entity_names(texts, window=200) == together


def test_spacy_in_two_processes_finds_the_same_names_in_the_same_order(monkeypatch):
    texts = [
        f"In {1800 + i}, Ermengarde of Tours wrote to Charles Babbage in London about the {i}th engine."
        for i in range(PROCESS_CHUNK + 40)  # two tasks, so both processes work
    ]
    texts += ["", "no names here at all", "Ada Lovelace met Mary Somerville in Paris."]
    alone = entity_names(texts)
    assert entity_names(texts, processes=2) == alone
    assert "ermengarde of tours" in dict(alone[0]) and alone[-1][0][0] == "ada lovelace"
    # Texts read in windows, and noun phrases, in the worker processes too.
    monkeypatch.setattr(ner, "PROCESS_CHUNK", 4)
    long = [" ".join(texts[i : i + 8]) for i in range(0, 160, 10)]
    assert entity_names(long, phrases=True, window=400, processes=2) == entity_names(long, phrases=True, window=400)


def _names_in_two_processes(count: int) -> None:
    entity_names([f"Ada Lovelace met Charles Babbage in London in {1800 + i % 50}." for i in range(count)], processes=2)


def _workers(parent: psutil.Process, before: set[int], timeout: float = 60) -> list[psutil.Process]:
    """The two worker processes ``parent`` starts: children it did not have (``before``), never the
    other processes a test session runs (an LLM server, say)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = [child for child in parent.children() if child.pid not in before]
        if len(started) >= 2:
            return started
        time.sleep(0.05)
    raise AssertionError("no worker processes started")


def test_a_killed_ner_worker_fails_the_call_instead_of_hanging_it():
    """spaCy's own n_process hung for ever here: the other worker held the dead one's pipe open."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            _names_in_two_processes(40_000)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            outcome.append(exc)

    here = psutil.Process()
    before = {child.pid for child in here.children()}
    thread = threading.Thread(target=run)
    thread.start()
    _workers(here, before)[0].kill()  # as the out-of-memory killer would
    thread.join(120)
    assert not thread.is_alive(), "the call hung after its worker was killed"
    assert isinstance(outcome[0], HopgraphError) and "ended early" in str(outcome[0])


def test_ner_workers_leave_when_the_build_that_started_them_is_killed():
    context = multiprocessing.get_context("spawn")
    build = context.Process(target=_names_in_two_processes, args=(40_000,))
    build.start()
    alive: list[psutil.Process] = []
    try:
        workers = _workers(psutil.Process(build.pid), set(), timeout=120)
        os.kill(build.pid, signal.SIGKILL)  # no handler, no cleanup: the server stops its worker so
        _, alive = psutil.wait_procs(workers, timeout=20)
        assert alive == [], "workers outlived the build that started them"
    finally:
        build.join(10)
        for worker in alive:  # a failed run leaves no orphans behind
            worker.kill()


def test_spacy_runs_in_several_processes_only_where_there_are_enough_texts(monkeypatch):
    monkeypatch.setattr(ner, "usable_cores", lambda: 32)  # a large machine, here
    assert ner_processes(0, PARALLEL_FROM - 1) == 1  # starting processes would cost more than it saves
    assert ner_processes(0, PARALLEL_FROM) == MAX_PROCESSES  # one per core, bounded
    assert ner_processes(3, 100_000) == 3
    assert ner_processes(1, 100_000) == 1


def _processes_in_a_daemon(answer) -> None:
    answer.put(ner_processes(0, 100_000))


def test_a_daemonic_process_runs_spacy_in_itself():
    """A pool's worker may not start processes: spaCy's own would fail there with an AssertionError."""
    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    worker = context.Process(target=_processes_in_a_daemon, args=(answer,), daemon=True)
    worker.start()
    try:
        assert answer.get(timeout=120) == 1
    finally:
        worker.join(30)


def test_a_build_running_spacy_in_two_processes_equals_the_one_running_it_here(
    tmp_path, sample_documents, sample_index, monkeypatch
):
    """The processes are forked from a build that already holds the embedding model (and its threads)."""
    from hopgraph.config import load_config
    from hopgraph.index import context
    from hopgraph.index.pipeline import build_index
    from hopgraph.store import IndexStore
    from tests.conftest import SAMPLE_SETTINGS

    monkeypatch.setattr(ner, "PARALLEL_FROM", 1)  # the sample has too few sentences to start processes
    monkeypatch.setattr(ner, "PROCESS_CHUNK", 4)  # and to fill two tasks
    forked = []  # the process counts the build asked for (a spy: the real function decides)
    monkeypatch.setattr(context, "ner_processes", lambda *args: forked.append(ner.ner_processes(*args)) or forked[-1])
    cache = tmp_path / "cache" / "vectors.sqlite"  # a fresh entity cache beside it: spaCy runs again
    config = load_config(None, {**SAMPLE_SETTINGS, "cluster.ner_processes": 2, "embedding.cache": str(cache)})
    build_index(sample_documents, tmp_path / "index", config, progress=False)
    assert forked == [2] and IndexStore(tmp_path / "index").read_manifest()["counts"]["entities"] > 0
    compared, differ = IndexStore(sample_index).differences(IndexStore(tmp_path / "index"), tolerance=1e-6)
    assert differ == [] and compared >= 15


TASCH = "Mirela Tasch met Ermengarde of Tours at Lake Orrin in 1974. Anton Vell sailed with Ermengarde of Tours."


@pytest.mark.parametrize(
    "edit", ["append", "replace the last", "append after a new noun-phrase rule", "append to an index of rule p1"]
)
def test_an_update_at_the_end_keeps_the_entity_table_and_names_only_its_own_sentences(
    edit, tmp_path, sample_documents, monkeypatch
):
    """An insert at the end (or a new text for the last document) keeps the entities its kept
    sentences name, numbered as before, and asks spaCy (its cache) only for the re-cut sentences:
    reading every sentence's names back cost ~0.8 s at 100k chunks. A name said before that titles
    the new document becomes a title entity there, as in a rebuild, which the update equals bitwise."""
    from hopgraph.config import load_config
    from hopgraph.documents import Document
    from hopgraph.index import context, versions
    from hopgraph.index.pipeline import build_index
    from hopgraph.store import IndexStore, version_dir
    from tests.conftest import SAMPLE_SETTINGS

    config = load_config(None, {**SAMPLE_SETTINGS, "embedding.cache": str(tmp_path / "cache.sqlite")})
    build_index(sample_documents[:5], tmp_path / "index", config, progress=False)
    before = IndexStore(tmp_path / "index").read_table("entities")
    assert before["label"][before["name"].index("mirela tasch")] == "PERSON"  # named in a kept sentence
    last = sample_documents[4]
    if edit.startswith("append"):
        added, final = Document(id="tasch", title="Mirela Tasch", text=TASCH), None
    else:
        added = Document(id=last.id, title=last.title, text=TASCH, source=last.source, metadata=last.metadata)
        final = [*sample_documents[:4], added]
    manifest = IndexStore(tmp_path / "index").read_manifest()
    if edit.endswith("rule"):  # names found by another rule are not kept: every sentence is asked again
        manifest["text_models"] = {**manifest["text_models"], "phrases": "another noun-phrase rule"}
    elif edit.endswith("p1"):  # made before manifests recorded the rule, when p1 was the only one
        assert manifest["text_models"]["phrases"].endswith(":phrases-p1")
        del manifest["text_models"]["phrases"]
    IndexStore(tmp_path / "index").write_manifest(manifest)
    asked: list[list[str]] = []
    names_of = context.BuildContext.entity_names

    def spy(self, texts, phrases=False):
        asked.append(list(texts))
        return names_of(self, texts, phrases)

    monkeypatch.setattr(context.BuildContext, "entity_names", spy)
    versions.submit_update(tmp_path / "index", [added], [])
    [job] = versions.run_pending(tmp_path / "index")
    live = IndexStore(version_dir(tmp_path / "index", job["id"]))
    sentences = live.read_table("sentences", ["text"])["text"]
    if edit.endswith("rule"):
        assert asked[0] == sentences
    else:  # the entity stage's call: the re-cut sentences only
        assert 2 <= len(asked[0]) < len(sentences) and asked[0] == sentences[-len(asked[0]) :]
    after = live.read_table("entities")
    assert "ermengarde of tours" in after["name"]
    if edit.startswith("append"):
        assert after["label"][after["name"].index("mirela tasch")] == TITLE
        assert after["display"][after["name"].index("mirela tasch")] == "Mirela Tasch"
    build_index(final or [*sample_documents[:5], added], tmp_path / "rebuilt", config, progress=False)
    compared, differ = live.differences(IndexStore(tmp_path / "rebuilt"), tolerance=0.0)
    assert compared >= 15 and differ == []
