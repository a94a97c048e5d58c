"""Versioned indexes and crash-safe incremental updates (insert, replace and delete documents).

An update builds a whole new version of the index over the final corpus with the same pipeline
and settings as the live version, then switches a pointer. That is cheap because the expensive
work is cached by content (vectors by (model, text), LLM completions by request, tokens, sentences
and spaCy entities per text: :mod:`hopgraph.index.analysis`), so only new texts cost model or
analysis time, and because the rows of unchanged texts, and the pieces of the unchanged leading
documents, are taken from the version it edits (:mod:`hopgraph.index.reuse`) as a rebuild would
compute them; the graph stages (vocabulary, KNN graph, concept graph, PageRank) are global
quantities that are cheap kernels and are recomputed or patched exactly. Results therefore equal
a rebuild of the same corpus (but for the approximate cosine search above
``graph.exact_knn_limit``), and a killed job resumes through the pipeline's own stage records.

Layout inside an index directory ``INDEX`` (whose own files, written by ``hopgraph index``, are
version ""):

    INDEX/CURRENT                       "versions/<job id>": the live version (absent: the root)
    INDEX/versions/<job id>/            a complete index built by an update job
    INDEX/jobs/                         job records and what each job adds and deletes
                                        (:mod:`hopgraph.index.jobs`); jobs/.lock is held while a job
                                        runs, so jobs run one at a time, in order
    INDEX/cache/                        vector / completion caches when the index was built without

Every file is written atomically and CURRENT only ever names a complete version, so readers open
either the old version or the new one, never a mix. Jobs queued together are coalesced into one
*batch*: one build of the corpus they produce together, published as the version named after the
batch's last job. A batch's members and its ``base`` (the version it edits) are recorded in every
member's record when it first starts, so a resumed batch recomputes exactly the same corpus, and
jobs queued while it runs form the next batch.

Cost trade-off of ``chunking.pack_documents`` (default true): consecutive documents are cut as
one token stream, so appending documents re-cuts only the stream's last chunks (and tokenises
only its last documents again), but deleting or replacing one shifts every chunk after it in its
stream, and those chunks' texts are new to the vector cache (re-embedded). With
pack_documents=false every document has its own chunks and a delete costs almost nothing.
"""

from __future__ import annotations

import itertools
import json
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hopgraph.config import (
    LLM_CONNECTION_FIELDS,
    ClusterConfig,
    HopgraphConfig,
    LLMConfig,
    validate_config,
)
from hopgraph.deadline import time_limit
from hopgraph.documents import Document, canonical_document, canonical_id
from hopgraph.errors import (
    HopgraphError,
    IndexFormatError,
    InputError,
    QueueFullError,
    UnknownDocumentError,
    storage_state,
)
from hopgraph.files import Stamp, atomic_write, file_stamp
from hopgraph.index.jobs import (
    RUN_LOCK,
    UNFINISHED,
    job_documents,
    job_ids,
    job_lock,
    list_jobs,
    next_sequence,
    now,
    read_job,
    write_job,
    write_new_job,
)
from hopgraph.index.pipeline import build_index
from hopgraph.store import (
    CURRENT,
    VERSIONS,
    IndexStore,
    job_sequence,
    live_root,
    live_version,
    version_dir,
)


def read_documents(index_dir: str | Path) -> list[Document]:
    """The corpus of a built index, in index order, from its documents table."""
    table = IndexStore(index_dir).read_table("documents")
    return [
        Document(id=i, text=t, title=ti, source=s, metadata=json.loads(m))
        for i, t, ti, s, m in zip(table["id"], table["text"], table["title"], table["source"], table["metadata"])
    ]


def rebuild_config(
    root: str | Path, stored: dict[str, Any], llm: LLMConfig | None = None, cluster: ClusterConfig | None = None
) -> HopgraphConfig:
    """The stored build config with caches switched on (only new texts may cost model time) and,
    when given, the caller's LLM connection settings (the stored base_url may be stale) and engine."""
    config = validate_config(stored, source=f"{root}: stored index config")
    cache = Path(root).resolve() / "cache"
    embedding = config.embedding.model_copy(
        update={"cache": config.embedding.cache or str(cache / "embeddings.sqlite")}
    )
    llm_config = config.llm.model_copy(update={f: getattr(llm, f) for f in LLM_CONNECTION_FIELDS} if llm else {})
    if not llm_config.cache:
        llm_config = llm_config.model_copy(update={"cache": str(cache / "llm.sqlite")})
    return config.model_copy(update={"embedding": embedding, "llm": llm_config, "cluster": cluster or ClusterConfig()})


def _apply(ids: list[str], add: Sequence[str], delete: Sequence[str]) -> list[str]:
    """Document ids after an update: deleted and replaced ids leave, added ids are appended."""
    gone = set(delete) | set(add)
    return [i for i in ids if i not in gone] + list(add)


def _spellings(ids: Sequence[str], add: Sequence[str], delete: Sequence[str]) -> list[str]:
    """The ids of ``ids`` to delete: each of ``delete`` as given where the corpus holds it, else the
    ids that spell it in another Unicode form (:func:`canonical_id`: an index built before ids were
    normalised may hold "e" + U+0301), and the older spellings of each added id, which it replaces.
    An id the corpus holds in no form stays, to be reported."""
    present = set(ids)
    spelled: dict[str, list[str]] = {}
    for doc_id in ids:
        spelled.setdefault(canonical_id(doc_id), []).append(doc_id)
    named: list[str] = []
    for doc_id in delete:
        named += [doc_id] if doc_id in present else spelled.get(canonical_id(doc_id), [doc_id])
    named += [other for doc_id in add for other in spelled.get(doc_id, []) if other != doc_id]
    return list(dict.fromkeys(named))


def _check_deletes(known: Sequence[str], delete: Sequence[str], where: str) -> None:
    present = set(known)
    unknown = [d for d in delete if d not in present]
    if unknown:
        shown = ", ".join(map(repr, unknown[:20]))
        raise UnknownDocumentError(f"cannot delete unknown document id(s) {shown}: not in {where}")


# ------------------------------------------------------------------------------------ jobs
def _retry_after(jobs: Sequence[dict[str, Any]], default: float = 30.0) -> float:
    """Seconds until a queue slot is likely free: the duration of the last finished build."""
    seconds = [j["seconds"] for j in jobs if j["status"] == "done" and j.get("seconds")]
    return max(1.0, float(seconds[-1])) if seconds else default


def unfinished_count(jobs: Sequence[dict[str, Any]]) -> int:
    """Jobs queued or running (what the queue bound and the queue-depth gauge count)."""
    return sum(job["status"] in UNFINISHED for job in jobs)


def check_room(root: str | Path, max_queued: int | None, jobs: list[dict[str, Any]] | None = None) -> None:
    """QueueFullError (with when to try again) where ``max_queued`` jobs are queued or running: a
    submitter can ask before it does costly work, and :func:`submit_update` asks again."""
    if max_queued is None:
        return
    jobs = list_jobs(root) if jobs is None else jobs
    unfinished = unfinished_count(jobs)
    if unfinished >= max_queued:
        raise QueueFullError(
            f"{root}: {unfinished} update jobs are queued or running, the limit is {max_queued}; "
            "try again when one has finished",
            retry_after=_retry_after(jobs),
        )


def submit_update(
    root: str | Path,
    add: Sequence[Document],
    delete: Sequence[str],
    *,
    max_queued: int | None = None,
    by: str | None = None,
) -> dict[str, Any]:
    """Queue an update (an added id that exists replaces it) and return its record; does not run it.

    Deletes are checked against the corpus the queue will produce (the live version with every
    unfinished job applied), so nothing is accepted that cannot run. With ``max_queued``, a
    submission that would leave more unfinished jobs than that raises :class:`QueueFullError`.
    """
    root = Path(root)
    add = [canonical_document(d) for d in add]
    delete = list(dict.fromkeys(delete))  # as given: a delete names exactly the id it spells where one does
    add_ids = [d.id for d in add]
    if not add and not delete:
        raise InputError("nothing to update: give documents to add and/or document ids to delete")
    repeated = sorted(i for i, n in Counter(add_ids).items() if n > 1)
    if repeated:
        raise InputError(f"document id(s) added more than once: {', '.join(map(repr, repeated[:20]))}")
    added = set(add_ids)
    both = [i for i in delete if canonical_id(i) in added]
    if both:  # the delete would be lost: the document is added back
        raise InputError(
            f"document id(s) both added and deleted: {', '.join(map(repr, both[:20]))}; an added id replaces "
            "the document of that id already, so leave it out of the deletes (or out of the added files)"
        )
    IndexStore(live_root(root)).require_complete()
    with job_lock(root, ".submit.lock"):
        jobs = list_jobs(root)  # before the live version: a job finishing now is then counted twice, never lost
        check_room(root, max_queued, jobs)
        ids = IndexStore(live_root(root)).read_table("documents", ["id"])["id"]
        for job in jobs:
            if job["status"] in UNFINISHED:
                ids = _apply(ids, *job_ids(root, job))
        delete = _spellings(ids, add_ids, delete)
        _check_deletes(ids, delete, f"{root} (live version {live_version(root) or 'root'} and queued jobs)")
        if not _apply(ids, add_ids, delete):
            raise InputError("the update would leave the index without documents")
        return write_new_job(root, f"j{next_sequence(root):06d}-{secrets.token_hex(3)}", add, delete, by)


def _finish(root: Path, batch: list[dict[str, Any]], leader: str, seconds: float | None) -> list[dict[str, Any]]:
    """Record every member of a published batch as done with the batch's version."""
    manifest = IndexStore(version_dir(root, leader)).read_manifest()
    stages = manifest["stages"]
    for record in batch:
        record.update(
            status="done",
            finished=now(),
            version=leader,
            error=None,
            counts=manifest["counts"],
            stage_seconds={name: rec["seconds"] for name, rec in stages.items()},
            llm={name: rec["llm"] for name, rec in stages.items() if "llm" in rec},
        )
        if seconds is not None:
            record["seconds"] = round(seconds, 3)
        write_job(root, record)
    return batch


def _compose(root: Path, base: str, batch: list[dict[str, Any]]) -> list[Document]:
    """The corpus after applying every job of ``batch`` in order to version ``base``; records
    each job's own document counts."""
    base_docs = read_documents(version_dir(root, base))
    by_id = {d.id: d for d in base_docs}
    ids = [d.id for d in base_docs]
    for record in batch:
        add, delete = job_ids(root, record)
        _check_deletes(ids, delete, f"version {base or 'root'!r} with the jobs before {record['id']} applied")
        added = job_documents(root, record["id"])
        replaced = set(add) - set(delete)
        after = _apply(ids, add, delete)
        record["documents"] = {
            "before": len(ids),
            "added": len(added),
            "deleted": len(delete),
            "replaced": sum(i in replaced for i in ids),
            "after": len(after),
        }
        by_id.update((d.id, d) for d in added)  # an added document wins over the one it replaces
        ids = after
    return [by_id[i] for i in ids]


def _run(
    root: Path,
    batch: list[dict[str, Any]],
    llm: LLMConfig | None,
    progress: bool,
    stop_after: str | None = None,
    cluster: ClusterConfig | None = None,
    run: str | None = None,
    verify: Callable[[Path], None] | None = None,
    seconds: float = 0.0,
) -> list[dict[str, Any]]:
    """Run (or resume) one batch of jobs as one build; the caller holds the job lock. ``run`` names
    this attempt in the records, so one ended by a shutdown can be taken back (:func:`forgive_interrupted`).
    A build (with its check) past ``seconds`` (0 = no limit) fails as any build does."""
    leader, live = batch[-1]["id"], live_version(root)
    if live == leader:  # killed after switching CURRENT, before recording every member
        return _finish(root, batch, leader, None)
    started = time.perf_counter()
    building = False  # past the checks that fail every job alike: a failure from here on may be one job's
    try:
        base = batch[0]["base"]
        if base is None:
            base = live
        edited = _check_base(root, batch[0]["id"], base)  # its stamp before its manifest is read
        building = True
        for record in batch:
            record.update(
                status="running",
                started=now(),
                error=None,
                base=base,
                batch=[r["id"] for r in batch],
                attempts=record.get("attempts", 0) + 1,
                run=run,
            )
            write_job(root, record)
        manifest = IndexStore(version_dir(root, base)).require_complete()
        base_damage = IndexStore(version_dir(root, base)).start_hash_check(manifest)  # beside the build
        documents = _compose(root, base, batch)
        target = version_dir(root, leader)
        if target.exists() and not IndexStore(target).exists():
            shutil.rmtree(target)  # killed before its first manifest: only temporary files inside
        with time_limit(seconds, f"the build of update job {leader}", "serve.job_seconds"):
            if not build_index(
                documents,
                target,
                rebuild_config(root, manifest["config"], llm, cluster),
                progress=progress,
                stop_after=stop_after,
                previous=version_dir(root, base),
            )["complete"]:
                return batch  # stopped after ``stop_after`` on request: left exactly as a killed job leaves it
            if verify is not None:
                try:
                    verify(target)
                except Exception as exc:
                    why = f"version {leader} was built but cannot be served, so it is not live: {exc}"
                    raise IndexFormatError(why) from exc
        damage = base_damage.result()
        if damage:
            raise IndexFormatError(
                f"{damage}: the version this update edits ({base or 'root'}) is damaged, and the update would "
                "have copied its rows into a new version unseen; rebuild the index from the documents "
                "(`hopgraph index ... --overwrite`)"
            )
        _check_base(root, batch[0]["id"], base, edited)  # again: `hopgraph index --overwrite` ran meanwhile?
        atomic_write(root / CURRENT, lambda tmp: tmp.write_text(f"{VERSIONS}/{leader}\n", encoding="utf-8"))
    except Exception as exc:
        if storage_state(exc) is not None:
            # The machine's state, not the jobs' fault (a full disk): they are left as a killed run
            # leaves them, finished stages kept, for the next run to resume (they ended "failed").
            raise
        if building and len(batch) > 1:
            return _split(root, batch, leader, str(exc) or type(exc).__name__)
        _mark_failed(root, batch, str(exc) or type(exc).__name__)
        if isinstance(exc, HopgraphError):
            raise
        raise HopgraphError(f"update job {leader} failed: {exc}") from exc
    return _finish(root, batch, leader, time.perf_counter() - started)


def _check_base(root: Path, job_id: str, base: str, stamp: Stamp | None = None) -> Stamp | None:
    """The stamp of the manifest of ``base``, the version the job edits; IndexFormatError where that
    is no longer the live version, or (given the ``stamp`` it had) was rebuilt. Only the job queue
    moves the live version, but `hopgraph index --overwrite` makes its rebuilt root live, or
    rebuilds the root in place (CURRENT names nothing before and after): a job ending after it
    published the old corpus plus the update over the rebuild."""
    live = live_version(root)
    if base != live:
        raise IndexFormatError(
            f"job {job_id} edits version {base or 'root'!r} but {live or 'root'!r} is live now "
            "(the live version was moved outside the job queue); submit the update again"
        )
    now = file_stamp(IndexStore(version_dir(root, base)).manifest_path)
    if stamp is not None and now != stamp:
        raise IndexFormatError(
            f"job {job_id} edits version {base or 'root'!r}, which was rebuilt while the job ran "
            "(`hopgraph index --overwrite`); submit the update again"
        )
    return now


def _split(
    root: Path, batch: list[dict[str, Any]], leader: str, reason: str, attempts: int | None = None
) -> list[dict[str, Any]]:
    """Queue each member of a failed batch to run alone, so one job's bad document fails that job
    and no other; returns nothing (no build published). The batch's unpublished version goes, and
    so does the attempt it counted on each member (``serve.job_attempts`` bounds a job's own tries),
    or all of them when ``attempts`` says how many to keep."""
    target = version_dir(root, leader)
    if live_version(root) != leader and target.exists():
        shutil.rmtree(target)
    for record in reversed(batch):  # the first last: killed midway, the batch resumes whole and splits again
        record.update(
            status="queued",
            base=None,
            batch=None,
            alone=f"its batch of {len(batch)} jobs failed, so it runs alone: {reason}",  # kept once done
            attempts=max(0, record.get("attempts", 0) - 1) if attempts is None else attempts,
            run=None,
            error=None,
        )
        write_job(root, record)
    return []


def _mark_failed(root: Path, batch: list[dict[str, Any]], reason: str) -> None:
    for record in batch:
        record.update(status="failed", finished=now(), error=reason)
        write_job(root, record)


def _next_batch(jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batch to run next: a started batch first (resumed exactly), then a job of a failed batch
    alone (see :func:`_split`), else every queued job up to the next of those."""
    unfinished = [j for j in jobs if j["status"] in UNFINISHED]
    if not unfinished:
        return []
    members = unfinished[0].get("batch")
    if members:
        return [j for j in unfinished if j["id"] in members]
    if unfinished[0]["status"] == "running" or unfinished[0].get("alone"):
        return unfinished[:1]  # (running without a batch: started before batches were recorded)
    queued = list(itertools.takewhile(lambda j: not j.get("alone"), unfinished))
    return [j for j in queued if not j.get("batch")]


def run_job(
    root: str | Path,
    job_id: str,
    *,
    llm: LLMConfig | None = None,
    progress: bool = False,
    stop_after: str | None = None,
    run: str | None = None,
) -> dict[str, Any]:
    """Run one job (with the batch it was started in, if any) to completion and return its record.
    ``run`` names this attempt in the records (see :func:`forgive_interrupted`).

    Refused while an older job is unfinished: jobs apply in submission order. ``stop_after`` (a
    pipeline stage) ends the run there with the job still 'running', as a killed job is left.
    """
    root = Path(root)
    with job_lock(root, RUN_LOCK):
        record = read_job(root, job_id)
        if record["status"] == "done":
            return record
        jobs = list_jobs(root)
        members, number = set(record.get("batch") or [job_id]), job_sequence(job_id)
        older = [
            j["id"]
            for j in jobs
            if job_sequence(j["id"]) < number and j["status"] in UNFINISHED and j["id"] not in members
        ]
        if older:
            raise InputError(
                f"job {older[0]} was submitted before {job_id} and has not finished; "
                f"run `hopgraph update {root} --resume`"
            )
        batch = [j for j in jobs if j["id"] in members] if record["status"] in UNFINISHED else [record]
        ran = _run(root, batch, llm, progress, stop_after, run=run)
        if not ran:  # the batch failed and was split: its members up to this one run alone, in order
            for member in (j["id"] for j in batch if job_sequence(j["id"]) <= number):
                ran = _run(root, [read_job(root, member)], llm, progress, stop_after, run=run)
                if ran[-1]["status"] != "done":  # stopped at ``stop_after``: the next must not start on
                    return read_job(root, job_id)  # the version this one is about to replace
        return next(r for r in ran if r["id"] == job_id)


def run_pending(
    root: str | Path,
    *,
    llm: LLMConfig | None = None,
    cluster: ClusterConfig | None = None,
    progress: bool = False,
    batches: int | None = None,
    run: str | None = None,
    verify: Callable[[Path], None] | None = None,
    seconds: float = 0.0,
) -> list[dict[str, Any]]:
    """Run every queued job, and every job left 'running' by a process that died, oldest first,
    as few builds as possible (at most ``batches`` builds when given); returns their records.
    ``run`` names these attempts in the records (see :func:`forgive_interrupted`). ``verify`` is
    given each built version before it goes live; where it raises, the batch fails and the live
    version stays (the server's worker loads it and asks it a question per method). A build that
    takes over ``seconds`` (0 = no limit; only on the main thread) fails likewise.

    Holding the lock proves that no live process is running any of them. A failed batch of several
    jobs is not the failure of each: its jobs run again one build each, and the first failure of a
    job alone is raised, the jobs after it staying queued.
    """
    root = Path(root)
    done: list[dict[str, Any]] = []
    with job_lock(root, RUN_LOCK):
        while batches is None or batches > 0:
            batch = _next_batch(list_jobs(root))
            if not batch:
                break
            ran = _run(root, batch, llm, progress, cluster=cluster, run=run, verify=verify, seconds=seconds)
            if ran:  # (nothing where the batch failed and its jobs were queued to run alone)
                done += ran
                batches = None if batches is None else batches - 1
    return done


def forgive_interrupted(root: str | Path, run: str, patience: float = 0.0) -> list[dict[str, Any]]:
    """Take back the attempt that ``run`` recorded on unfinished jobs, counting it in ``interrupted``
    instead; returns those jobs. For a run ended by a shutdown, not by a failure of its own: restarts
    and deploys must not use up a job's attempts. Call it once that run's process has ended. A job
    whose last attempt another run recorded is left as it is, and so is everything while another
    process holds the job lock past ``patience`` seconds (a shutdown must not hang on a long build
    elsewhere; that process's own run has taken the jobs over). Some patience is due after a worker
    is stopped: the processes it forked (spaCy's pool) share its lock until they notice, within a
    second, that it is gone."""
    root = Path(root)
    if not run:
        return []
    deadline = time.monotonic() + patience
    while True:
        try:
            with job_lock(root, RUN_LOCK, wait=False):
                forgiven = [j for j in list_jobs(root) if j["status"] in UNFINISHED and j.get("run") == run]
                for record in forgiven:
                    record.update(
                        attempts=max(0, record.get("attempts", 0) - 1),
                        interrupted=record.get("interrupted", 0) + 1,
                        run=None,
                    )
                    write_job(root, record)
            return forgiven
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return []
            time.sleep(0.1)


def fail_unfinished(root: str | Path, reason: str) -> list[dict[str, Any]]:
    """Give up on the next batch (the one a dead worker was running) for ``reason``; returns its
    records. A job alone is marked failed; a batch of several is queued to run again one job at a
    time, each with its attempts anew (one bad document that kills the worker fails only its job).

    Waits for the job lock, so it never touches a batch a live process is running."""
    root = Path(root)
    with job_lock(root, RUN_LOCK):
        batch = _next_batch(list_jobs(root))
        if len(batch) > 1:
            _split(root, batch, batch[-1]["id"], reason, attempts=0)
        else:
            _mark_failed(root, batch, reason)
    return batch


def reset_to_root(root: str | Path) -> bool:
    """Make the root index live again (after `hopgraph index --overwrite` rebuilt it); True if it was not."""
    path = Path(root) / CURRENT
    if not path.exists():
        return False
    path.unlink()
    return True
