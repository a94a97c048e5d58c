"""Versioned indexes and incremental updates: real files, real embedding model, real processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from hopgraph import ner
from hopgraph.config import ExtractionConfig
from hopgraph.documents import Document
from hopgraph.errors import HopgraphError, IndexFormatError, InputError, QueueFullError
from hopgraph.index import garbage, jobs, versions
from hopgraph.index.chunking import searchable
from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore, live_version

QUERIES = [
    "Who founded the laboratory that the first director of the Halvern Harbor Institute had previously led?",
    "Which ferry company links Sorvik with the island of Tem?",
    "Who chairs the water board that funds the Sorvik campus?",
    "When did the observatory on Tem island open and who designed its telescope?",
    "Which river flows through the city where the cartography fair is held?",
]
NEW_DOCUMENTS = [
    {
        "id": "tem-observatory",
        "title": "Tem Observatory",
        "text": "The Tem Observatory opened in 1994 on the highest hill of Tem island. "
        "Its main telescope was designed by the optician Ilse Marwick, who later taught at the University of "
        "Castel Brun. "
        "The observatory records the weather for the ferry company that links Sorvik with Tem.",
    },
    {
        "id": "lismore-point",
        "title": "Lismore Point",
        "text": "Lismore Point is a coastal town twinned with Sorvik. Its lighthouse, built "
        "in 1872, guided timber barges from the Sorvik mill across Lake Orrin. The town museum keeps the mill's "
        "ledgers.",
    },
    {
        "id": "aster-bridge",
        "title": "Aster Bridge",
        "text": "The Aster Bridge in Castel Brun was rebuilt in 1958 after a flood of the river Aster. "
        "The engineer Paul Dorsey, a graduate of the university's faculty of earth sciences, led the reconstruction.",
    },
]


def new_documents() -> list[Document]:
    return [Document(id=r["id"], text=r["text"], title=r["title"]) for r in NEW_DOCUMENTS]


def evidence(index_dir: Path, methods: tuple[str, ...] = LLM_FREE) -> dict[tuple[str, str], list]:
    """What each method retrieves for every query: piece kind, index, documents and text, in order."""
    retriever = Retriever(index_dir)
    vectors = retriever.embed(QUERIES)
    out = {}
    for method in methods:
        for query, vector in zip(QUERIES, vectors):
            result = retriever.retrieve(query, method=method, budget=400, vector=vector)
            out[method, query] = [(e.kind, e.index, e.doc_ids, e.text) for e in result.evidence]
    return out


def cache_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]


@pytest.fixture(scope="module")
def final_corpus(sample_documents) -> list[Document]:
    """What the update below leaves: documents 0, 2-4, then 5, 6 and the new ones appended."""
    return [d for i, d in enumerate(sample_documents[:5]) if i != 1] + list(sample_documents[5:]) + new_documents()


@pytest.fixture(scope="module")
def rebuild(tmp_path_factory, final_corpus, sample_config) -> dict:
    """Full rebuild of the final corpus with a cold vector cache (a different cache file)."""
    work = tmp_path_factory.mktemp("rebuild")
    config = sample_config.model_copy(
        update={"embedding": sample_config.embedding.model_copy(update={"cache": str(work / "cold.sqlite")})}
    )
    build_index(final_corpus, work / "index", config, progress=False)
    return {"dir": work / "index", "evidence": evidence(work / "index")}


def test_update_equals_full_rebuild_and_embeds_only_new_texts(built, index, sample_documents, rebuild):
    rows_before = cache_rows(built / "cache.sqlite")
    base = LoadedIndex(index)
    job = versions.submit_update(index, [*sample_documents[5:], *new_documents()], [sample_documents[1].id])
    assert job["status"] == "queued" and LoadedIndex(index).version == ""
    assert job["submitted_by"] == jobs.login_name()  # this process's user, where no server names one
    [done] = versions.run_pending(index)
    assert done["status"] == "done" and done["documents"] == {
        "before": 5,
        "added": 5,
        "deleted": 1,
        "replaced": 0,
        "after": 9,
    }
    live = LoadedIndex(index)
    assert live.version == job["id"] and (index / "CURRENT").read_text().strip() == f"versions/{job['id']}"
    expected = LoadedIndex(rebuild["dir"])
    assert live.documents["id"] == expected.documents["id"] and live.units["text"] == expected.units["text"]

    # Only texts the base version did not have were embedded (the model is the only costly step).
    def embedded(loaded: LoadedIndex) -> set[str]:  # sub-chunks with headings, sentences, entity names
        table = loaded.store.read_table("entities")
        vectors = loaded.array("entity_vectors")
        names = {name for name, v in zip(table["display"], vectors) if v.any()}
        return set(searchable(loaded.units)) | set(loaded.store.read_table("sentences")["text"]) | names

    new = embedded(live) - embedded(base)
    assert cache_rows(built / "cache.sqlite") - rows_before == len(new) > 0
    # Vectors agree with the cold rebuild up to batch-composition noise of the embedder...
    for name in ("unit_vectors", "sentence_vectors", "keyword_vectors"):
        assert np.abs(live.array(name) - expected.array(name)).max() < 1e-5
    for name in ("knn", "concepts", "postings_units"):
        assert (live.graph(name) != expected.graph(name)).nnz == 0
    # ...and every LLM-free method retrieves the same evidence in the same order.
    assert evidence(index) == rebuild["evidence"]


def test_interrupted_job_keeps_old_version_and_resumes_to_same_result(index, sample_documents, rebuild):
    job = versions.submit_update(index, [*sample_documents[5:], *new_documents()], [sample_documents[1].id])
    stopped = versions.run_job(index, job["id"], stop_after="embed_units")
    assert stopped["status"] == "running" and versions.read_job(index, job["id"])["status"] == "running"
    assert LoadedIndex(index).version == "" and len(LoadedIndex(index).documents["id"]) == 5  # old version served
    assert Retriever(index).retrieve(QUERIES[0], method="ppr").evidence
    with pytest.raises(InputError, match="submitted before"):  # jobs apply in order
        versions.run_job(index, versions.submit_update(index, [], ["press-2023"])["id"])
    first, second = versions.run_pending(index)
    assert (first["id"], first["status"], second["status"]) == (job["id"], "done", "done")
    assert LoadedIndex(index).version == second["id"] and "press-2023" not in LoadedIndex(index).documents["id"]
    assert evidence(versions.version_dir(index, job["id"])) == rebuild["evidence"]
    # Garbage collection keeps the live version and the one before it.
    assert garbage.collect_garbage(index, keep=1) == [job["id"]]
    assert LoadedIndex(index).version == second["id"]


def test_validation_and_replace_by_id(index, sample_documents):
    with pytest.raises(InputError, match="'no-such-doc'"):
        versions.submit_update(index, [], ["castel-brun.md", "no-such-doc"])
    with pytest.raises(InputError, match="nothing to update"):
        versions.submit_update(index, [], [])
    with pytest.raises(InputError, match="more than once"):
        versions.submit_update(index, [new_documents()[0]] * 2, [])
    with pytest.raises(InputError, match=r"both added and deleted: 'castel-brun.md'"):  # the delete was lost
        versions.submit_update(index, [Document(id="castel-brun.md", text="Moved.")], ["castel-brun.md"])
    with pytest.raises(InputError, match="without documents"):
        versions.submit_update(index, [], [d.id for d in sample_documents[:5]])
    assert versions.list_jobs(index) == []  # nothing refused was queued
    replacement = Document(
        id="castel-brun.md",
        title="University of Castel Brun",
        text="The University of Castel Brun moved to Lake Orrin in 2001.",
    )
    versions.submit_update(index, [replacement, new_documents()[0]], [])
    # What queued jobs add counts for the next submission: deleting it is valid before they ran.
    versions.submit_update(index, [], ["tem-observatory", "memo-2024-03"])
    first, second = versions.run_pending(index)
    assert first["documents"]["replaced"] == 1 and second["documents"]["after"] == 4
    live = LoadedIndex(index)
    assert live.documents["id"] == ["harbor-institute.md", "budget-2025", "press-2023", "castel-brun.md"]
    assert live.documents["text"][-1] == replacement.text


def test_live_pointer_to_missing_version_is_a_clear_error(index):
    (index / "CURRENT").write_text("versions/j000009-abcdef\n")
    with pytest.raises(IndexFormatError, match="missing or incomplete"):
        LoadedIndex(index)
    (index / "CURRENT").write_text("../elsewhere\n")
    with pytest.raises(IndexFormatError, match="does not name a version"):
        LoadedIndex(index)


def test_llm_extraction_update_equals_rebuild_with_the_cached_standin(
    tmp_path, sample_documents, sample_config, llm_config, final_corpus
):
    def configured(cache: str):
        return sample_config.model_copy(
            update={
                "embedding": sample_config.embedding.model_copy(update={"cache": str(tmp_path / cache)}),
                "extraction": ExtractionConfig(
                    kg="pagerank", core_fraction=0.2
                ),  # enough that some new chunks go to the LLM
                "llm": llm_config.model_copy(update={"max_tokens": 96, "parse_retries": 0}),
            }
        )

    build_index(sample_documents[:5], tmp_path / "index", configured("a.sqlite"), progress=False)
    versions.submit_update(tmp_path / "index", [*sample_documents[5:], *new_documents()], [sample_documents[1].id])
    [done] = versions.run_pending(tmp_path / "index")
    assert done["llm"]["kg_extract"]["calls"] > 0
    rebuilt = build_index(final_corpus, tmp_path / "rebuild", configured("b.sqlite"), progress=False)
    # The rebuild needs no completion the update did not already get: the same chunks went to the LLM...
    assert rebuilt["stages"]["kg_extract"]["llm"]["new_calls"] == 0
    assert rebuilt["counts"]["kg_entities"] == done["counts"]["kg_entities"] > 0
    # ...so the LLM methods retrieve the same evidence from both.
    assert evidence(tmp_path / "index", ("kg", "ket")) == evidence(tmp_path / "rebuild", ("kg", "ket"))


def test_submit_beyond_the_queue_bound_is_refused(index):
    first = versions.submit_update(index, [new_documents()[0]], [], max_queued=2)
    versions.submit_update(index, [], ["press-2023"], max_queued=2)
    with pytest.raises(QueueFullError, match="limit is 2") as refused:
        versions.submit_update(index, [new_documents()[1]], [], max_queued=2)
    assert refused.value.retry_after >= 1 and len(versions.list_jobs(index)) == 2  # nothing refused was queued
    with pytest.raises(QueueFullError, match="limit is 2"):  # what an upload asks before reading its files
        versions.check_room(index, 2)
    versions.check_room(index, 3)
    versions.run_pending(index)
    versions.check_room(index, 2)
    assert versions.read_job(index, first["id"])["status"] == "done"
    versions.submit_update(index, [new_documents()[1]], [], max_queued=2)  # room again once they ran


def test_queued_jobs_are_coalesced_into_one_build(index, sample_documents):
    """Two jobs queued together give one build and one version; each job records its own counts."""
    insert = versions.submit_update(index, new_documents()[:2], [])
    delete = versions.submit_update(index, [], ["tem-observatory", "press-2023"])
    first, second = versions.run_pending(index)
    assert (first["id"], second["id"]) == (insert["id"], delete["id"])
    assert first["status"] == second["status"] == "done" and first["version"] == second["version"] == delete["id"]
    assert first["documents"]["after"] == 7 and second["documents"] == {
        "before": 7,
        "added": 0,
        "deleted": 2,
        "replaced": 0,
        "after": 5,
    }
    assert sorted(p.name for p in (index / "versions").iterdir()) == [delete["id"]]
    expected = [d.id for d in sample_documents[:5] if d.id != "press-2023"] + ["lismore-point"]
    assert LoadedIndex(index).version == delete["id"] and LoadedIndex(index).documents["id"] == expected
    # Garbage collection counts published versions, not jobs: the live one stays with keep=1.
    assert garbage.collect_garbage(index, keep=1) == [] and LoadedIndex(index).version == delete["id"]


def test_a_failed_batch_runs_its_jobs_alone_so_one_bad_job_fails_no_other(index, sample_documents):
    """Three uploads queued together, one of which no server could serve (the check is the
    ``verify`` hook the server's worker uses, here refusing any version holding that document):
    the other two are published, the bad one fails with the reason, nothing of it goes live."""
    good, bad, later = (versions.submit_update(index, [doc], []) for doc in new_documents())

    def refuse_lismore(version: Path) -> None:
        if "lismore-point" in IndexStore(version).read_table("documents", ["id"])["id"]:
            raise IndexFormatError("a document of this version cannot be served")

    with pytest.raises(IndexFormatError, match="cannot be served"):
        versions.run_pending(index, verify=refuse_lismore)
    assert versions.read_job(index, good["id"])["status"] == "done"
    assert versions.read_job(index, good["id"])["version"] == good["id"]
    assert "its batch of 3 jobs failed" in versions.read_job(index, good["id"])["alone"]
    failed = versions.read_job(index, bad["id"])
    assert failed["status"] == "failed" and "cannot be served" in failed["error"]
    assert versions.read_job(index, later["id"])["status"] == "queued"  # after the failure: still waiting
    # The batch's build (named after its last job) is gone; the bad job's own stays to be looked at.
    assert sorted(p.name for p in (index / "versions").iterdir()) == [good["id"], bad["id"]]
    [done] = versions.run_pending(index, verify=refuse_lismore)
    assert (done["id"], done["version"], done["documents"]["added"]) == (later["id"], later["id"], 1)
    expected = [d.id for d in sample_documents[:5]] + ["tem-observatory", "aster-bridge"]
    assert LoadedIndex(index).documents["id"] == expected


def test_a_split_killed_midway_resumes_as_the_batch_and_splits_again(index, monkeypatch):
    """A process killed while it rewrites a failed batch's records as jobs to run alone: the batch
    must resume whole (and split again), not as a batch whose first member has already run alone
    and whose others then fail for editing a version that is no longer live. A kill between two
    record writes cannot be timed from outside, so the second split write raises (fault injection)."""
    good, bad, later = (versions.submit_update(index, [doc], []) for doc in new_documents())

    def refuse_lismore(version: Path) -> None:
        if "lismore-point" in IndexStore(version).read_table("documents", ["id"])["id"]:
            raise IndexFormatError("a document of this version cannot be served")

    write_job = versions.write_job
    split_writes = []

    def killed_midway(root: Path, record: dict) -> None:
        if record.get("alone"):
            split_writes.append(record["id"])
            if len(split_writes) == 2:
                raise KeyboardInterrupt  # not an Exception: nothing in the job code catches it
        write_job(root, record)

    monkeypatch.setattr(versions, "write_job", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        versions.run_pending(index, verify=refuse_lismore)
    monkeypatch.setattr(versions, "write_job", write_job)
    with pytest.raises(IndexFormatError, match="cannot be served"):
        versions.run_pending(index, verify=refuse_lismore)
    versions.run_pending(index, verify=refuse_lismore)
    statuses = {j["id"]: j["status"] for j in versions.list_jobs(index)}
    assert statuses == {good["id"]: "done", bad["id"]: "failed", later["id"]: "done"}
    assert "cannot be served" in versions.read_job(index, bad["id"])["error"]


def start_batch_and_kill(index: Path, monkeypatch) -> None:
    """Leave every queued job started as one batch, as a worker killed inside its build leaves them
    (the kill is raised from the build: it cannot be timed from outside)."""

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(versions, "build_index", killed)
    with pytest.raises(KeyboardInterrupt):
        versions.run_pending(index)
    monkeypatch.undo()


def test_a_failed_batch_does_not_use_up_its_jobs_own_attempts(index):
    """serve.job_attempts bounds a job's own tries: the batch's failed try is not one of them."""
    for document in new_documents():
        versions.submit_update(index, [document], [])

    def refuse_lismore(version: Path) -> None:
        if "lismore-point" in IndexStore(version).read_table("documents", ["id"])["id"]:
            raise IndexFormatError("a document of this version cannot be served")

    with pytest.raises(IndexFormatError):
        versions.run_pending(index, verify=refuse_lismore)
    attempts = {j["id"]: (j["status"], j["attempts"]) for j in versions.list_jobs(index)}
    assert sorted(attempts.values()) == [("done", 1), ("failed", 1), ("queued", 0)]


def test_jobs_apply_in_order_past_a_million_jobs(index, sample_documents):
    """Job ids were compared as text, where "j1000000-…" comes before "j999999-…": the older job, not
    finished, went unseen and the newer one ran first, on top of the version before both."""
    (index / jobs.JOBS).mkdir(exist_ok=True)
    (index / jobs.JOBS / "j999998-000000.json").write_text("{damaged")  # its number is taken all the same
    with pytest.warns(RuntimeWarning, match="damaged"):
        older = versions.submit_update(index, new_documents(), [])
        newer = versions.submit_update(index, [], [sample_documents[1].id])
        assert (older["id"][:8], newer["id"][:9]) == ("j999999-", "j1000000-")
        with pytest.raises(InputError, match=f"job {older['id']} was submitted before {newer['id']}"):
            versions.run_job(index, newer["id"])


def test_run_job_stopped_early_after_a_split_starts_no_later_member(index, monkeypatch):
    """Asking for the second job of a split batch with ``stop_after``: the first runs alone and stops
    half-built; the second must not start on the version the first is about to replace (it then
    failed for editing a version no longer live). The bad document's build error is injected."""
    tem, lismore, aster = new_documents()
    first, second, bad = (versions.submit_update(index, [doc], []) for doc in (tem, aster, lismore))
    start_batch_and_kill(index, monkeypatch)
    real_build = versions.build_index

    def lismore_breaks_the_build(documents, *args, **kwargs):
        if any(d.id == "lismore-point" for d in documents):
            raise ValueError("this document breaks the build")
        return real_build(documents, *args, **kwargs)

    monkeypatch.setattr(versions, "build_index", lismore_breaks_the_build)
    record = versions.run_job(index, second["id"], stop_after="embed_units")
    assert record["status"] == "queued"
    assert versions.read_job(index, first["id"])["status"] == "running"
    with pytest.raises(HopgraphError, match="breaks the build"):
        versions.run_pending(index)
    statuses = {j["id"]: j["status"] for j in versions.list_jobs(index)}
    assert statuses == {first["id"]: "done", second["id"]: "done", bad["id"]: "failed"}


def test_a_batch_that_kept_killing_the_worker_runs_again_one_job_at_a_time(index, monkeypatch):
    """The server gives up on a batch after serve.job_attempts worker deaths: a batch of several is
    queued again job by job, each with its attempts anew, so one document that kills the worker
    fails only its own job."""
    jobs = [versions.submit_update(index, [doc], []) for doc in new_documents()]
    start_batch_and_kill(index, monkeypatch)
    ended = versions.fail_unfinished(index, "the update worker exited with -9")
    assert [j["status"] for j in ended] == ["queued"] * 3
    assert all(j["attempts"] == 0 and "-9" in j["alone"] for j in versions.list_jobs(index))
    assert [j["id"] for j in versions.run_pending(index)] == [j["id"] for j in jobs]
    alone = versions.submit_update(index, [], ["tem-observatory"])
    start_batch_and_kill(index, monkeypatch)
    assert versions.fail_unfinished(index, "killed")[0]["status"] == "failed"  # a job alone fails
    assert versions.read_job(index, alone["id"])["status"] == "failed"


def test_old_finished_job_records_are_pruned(index):
    """A server runs for months and reads every record on each look at the queue: finished records
    beyond ``keep_jobs`` are deleted with their payloads, once their version is gone from disk."""
    first = versions.submit_update(index, [new_documents()[0]], [])
    second = versions.submit_update(index, [new_documents()[1]], [])
    versions.run_pending(index)  # one batch: both published as the second's version
    third = versions.submit_update(index, [], [new_documents()[0].id])
    versions.run_pending(index)
    assert garbage.collect_garbage(index, keep=1, keep_jobs=1) == [second["id"]]
    assert [j["id"] for j in versions.list_jobs(index)] == [third["id"]]
    assert sorted(p.name for p in (index / "jobs").glob("j*")) == [f"{third['id']}.json"]
    with pytest.raises(InputError, match="no update job"):
        versions.read_job(index, first["id"])
    fourth = versions.submit_update(index, [], [new_documents()[1].id])
    assert int(fourth["id"][1:7]) > int(third["id"][1:7])  # numbering goes on from the newest record


def test_a_record_pruned_while_it_is_read_is_no_job_not_a_crash(index, monkeypatch):
    """Pruning (collect_garbage) can delete a record between listing the folder and reading it.
    That window cannot be hit on purpose, so the read is made to find the file gone (a mock)."""
    job = versions.submit_update(index, [new_documents()[0]], [])
    record = jobs.job_path(index, job["id"])
    text = jobs._RECORDS.text

    def vanished(folder: str, name: str, stamp=None) -> str:
        if name == record.name:
            raise FileNotFoundError(name)
        return text(folder, name, stamp)

    monkeypatch.setattr(jobs._RECORDS, "text", vanished)
    with pytest.raises(InputError, match="no update job"):
        versions.read_job(index, job["id"])
    assert versions.list_jobs(index) == []


def test_killed_batch_resumes_as_the_same_batch(index):
    """A batch stopped mid-build resumes with exactly its own jobs; jobs queued meanwhile are the next build."""
    a = versions.submit_update(index, [new_documents()[0]], [])
    stopped = versions.run_job(index, a["id"], stop_after="embed_units")
    assert stopped["status"] == "running" and stopped["batch"] == [a["id"]]
    b = versions.submit_update(index, [new_documents()[1]], [])
    c = versions.submit_update(index, [], ["press-2023"])
    done = versions.run_pending(index, batches=1)
    assert [(j["id"], j["version"]) for j in done] == [(a["id"], a["id"])]
    assert versions.read_job(index, b["id"])["status"] == versions.read_job(index, c["id"])["status"] == "queued"
    assert [(j["id"], j["version"]) for j in versions.run_pending(index)] == [(b["id"], c["id"]), (c["id"], c["id"])]
    assert LoadedIndex(index).version == c["id"] and LoadedIndex(index).documents["id"][-2:] == [
        "tem-observatory",
        "lismore-point",
    ]
    assert "press-2023" not in LoadedIndex(index).documents["id"]


def test_an_attempt_ended_by_a_shutdown_is_taken_back_and_counted_apart(index):
    """Only the attempt the stopped run recorded is taken back, and never while another process holds
    the job lock (a shutdown does not wait for someone else's build)."""
    import threading

    job = versions.submit_update(index, [new_documents()[0]], [])
    assert (job["attempts"], job["interrupted"]) == (0, 0)
    stopped = versions.run_job(index, job["id"], stop_after="embed_units", run="first")
    assert (stopped["status"], stopped["attempts"], stopped["run"]) == ("running", 1, "first")
    assert versions.forgive_interrupted(index, "another") == []  # not the run that recorded the attempt
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:  # another process's build, as far as flock is concerned (its own open file)
        with versions.job_lock(index, ".lock"):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    held.wait(10)
    try:
        assert versions.forgive_interrupted(index, "first") == []  # at once, not after that build
    finally:
        release.set()
        holder.join()
    assert versions.read_job(index, job["id"])["attempts"] == 1
    # A stopped worker's forked helpers hold its lock until they notice it is gone: with patience, the
    # attempt is taken back once they let go (without it, every shutdown during spaCy's pool used one up).
    held.clear()
    release.clear()
    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()
    (forgiven,) = versions.forgive_interrupted(index, "first", patience=10)
    holder.join()
    record = versions.read_job(index, job["id"])
    assert forgiven["id"] == job["id"] and (record["attempts"], record["interrupted"], record["run"]) == (0, 1, None)
    assert versions.forgive_interrupted(index, "first") == []  # once only
    done = versions.run_pending(index, run="second")
    assert [(j["status"], j["attempts"], j["interrupted"]) for j in done] == [("done", 1, 1)]
    assert versions.forgive_interrupted(index, "second") == []  # a finished job keeps its attempt


def test_rebuilding_the_same_corpus_runs_spacy_on_no_text(tmp_path, sample_documents, sample_config, monkeypatch):
    """The CUE graph stage caches spaCy's entities per text: a second build repeats NER for nothing."""
    nlp = ner.ner_pipeline()
    texts_seen: list[int] = []

    class Counting:  # the real spaCy pipeline, counting the texts it is given
        def pipe(self, texts, **kwargs):
            texts = list(texts)
            texts_seen.append(len(texts))
            return nlp.pipe(texts, **kwargs)

    monkeypatch.setattr(ner, "ner_pipeline", lambda: Counting())
    config = sample_config.model_copy(
        update={
            "embedding": sample_config.embedding.model_copy(
                update={"cache": str(tmp_path / "cache" / "vectors.sqlite")}
            ),
            "extraction": ExtractionConfig(cue_alpha=0.0),
        }
    )
    first = build_index(sample_documents[:4], tmp_path / "a", config, progress=False)
    assert sum(texts_seen) == first["counts"]["cue_units"] > 0
    texts_seen.clear()
    second = build_index(sample_documents[:4], tmp_path / "b", config, progress=False)
    assert sum(texts_seen) == 0 and second["counts"]["cue_entities"] == first["counts"]["cue_entities"] > 0
    assert IndexStore(tmp_path / "a").read_table("cue_entities") == IndexStore(tmp_path / "b").read_table(
        "cue_entities"
    )
    build_index(sample_documents[:5], tmp_path / "c", config, progress=False)  # one more document: only its new units
    assert 0 < sum(texts_seen) < first["counts"]["cue_units"]


def test_an_update_of_the_root_ending_after_it_was_rebuilt_in_place_is_not_published(index):
    """The same with a job that edits the root: `--overwrite` rebuilds the root in place, CURRENT
    names nothing before and after, and only the root's manifest tells that it was rebuilt."""
    job = versions.submit_update(index, new_documents()[:1], [])

    def rebuilt(version: Path) -> None:  # the rebuild's last write, while the job's version is checked
        store = IndexStore(index)
        store.write_manifest(store.read_manifest())

    with pytest.raises(IndexFormatError, match="which was rebuilt while the job ran"):
        versions.run_pending(index, verify=rebuilt)
    assert live_version(index) == "" and versions.read_job(index, job["id"])["status"] == "failed"


def test_an_update_ending_after_the_index_was_rebuilt_is_not_published_over_it(index):
    """`hopgraph index --overwrite` makes its rebuilt root live (removes CURRENT) once its build ends;
    an update job that started from the version live before and ended later wrote CURRENT over it:
    the old corpus plus the update was served instead of the rebuild, without a word. The rebuild's
    reset is made here while the job's version is being checked (the server worker's hook)."""
    first = versions.submit_update(index, new_documents()[:1], [])
    [done] = versions.run_pending(index)
    assert live_version(index) == done["id"] == first["id"]
    second = versions.submit_update(index, new_documents()[1:2], [])
    with pytest.raises(IndexFormatError, match="is live now"):
        versions.run_pending(index, verify=lambda version: versions.reset_to_root(index))
    assert live_version(index) == ""  # the rebuilt root stays live
    failed = versions.read_job(index, second["id"])
    assert failed["status"] == "failed" and "submit the update again" in failed["error"]
