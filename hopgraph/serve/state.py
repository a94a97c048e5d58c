"""What the server holds: the live index version, and the update jobs that make the next one.

A request takes one :class:`Snapshot` at its start and uses it to the end, so a version switch
never mixes two versions in one answer. Update jobs run in a child process (``python -m
hopgraph.serve.worker``): model work there never competes with request handling for the
interpreter lock, and a job that dies takes nothing of the server with it. The child builds the
next version beside the live one; the server loads it completely before switching to it.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import secrets
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hopgraph.config import HopgraphConfig, validate_config
from hopgraph.errors import IndexFormatError, storage_state
from hopgraph.index import garbage, jobs, versions
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import available_methods
from hopgraph.retrieve.partitioned import PartitionedIndex, open_index
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore, job_sequence, version_dir


def warm(index: LoadedIndex | PartitionedIndex) -> None:
    """Read every stored part now: a snapshot never opens files later (they may be collected)."""
    if isinstance(index, PartitionedIndex):
        _ = index.documents
        for partition in index.partitions:
            warm(partition.index)
        return
    root = index.store.root
    for path in sorted((root / "tables").glob("*.parquet")):
        index.table(path.stem)
    for path in sorted((root / "arrays").glob("*.npy")):
        touch(index.array(path.stem))
    for path in sorted((root / "graphs").glob("*.npz")):
        index.graph(path.stem)
    for name in ("documents", "chunks", "units", "keywords", "keyword_lookup", "sentence_runs", "keyword_units"):
        getattr(index, name)


def touch(array: np.ndarray) -> None:
    """Read one byte of every page of a memory-mapped array: its file is read at load, and the pages
    stay in the page cache that every process mapping the same file shares."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    int(flat[:: mmap.PAGESIZE].sum())


def open_snapshot(path: Path, version: str, config: HopgraphConfig) -> Snapshot:
    """The index at ``path`` loaded whole and warmed, as a server serves it: every stored part read,
    and one question asked of each method it offers (first queries pay one-time costs now)."""
    index = open_index(path)
    if version:
        index.version = version  # a version's directory opened on its own reads as a root index
    warm(index)
    retriever = Retriever.configured(index, config)
    methods = tuple(available_methods(index))
    for method in methods:
        retriever.retrieve("warm up", method=method, budget=200)
    return Snapshot(index.version, index, retriever, methods, frozenset(index.documents["id"]))


def _job_states(listed: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Each job's (status, attempts, error): what a worker that records its outcome changes."""
    return {j["id"]: (j["status"], j.get("attempts", 0), j.get("error")) for j in listed}


def check_servable(path: Path) -> None:
    """Raise where a built version could not be served (with its own settings): the worker asks
    this before the version goes live, so one that no server can load is never published."""
    open_snapshot(path, path.name, validate_config(IndexStore(path).read_manifest()["config"], f"{path}/manifest.json"))


@dataclass(frozen=True)
class Snapshot:
    version: str
    index: LoadedIndex | PartitionedIndex
    retriever: Retriever
    methods: tuple[str, ...]
    doc_ids: frozenset[str]


class IndexHolder:
    """The live snapshot, replaced whole when a job has published a new version.

    Requests take the snapshot with ``with holder.snapshot() as snap:``; while any request holds
    a version it is counted here, and garbage collection spares it (:meth:`versions_in_use`).
    """

    def __init__(self, root: Path, config: HopgraphConfig):
        self.root, self.config = root, config
        self._lock = threading.Lock()  # one load at a time
        self._state = threading.Lock()  # the live snapshot and the reader counts, changed together
        self._readers: Counter[str] = Counter()
        self._loading: str | None = None  # the version being loaded: in use from before its files are read
        self._failed: tuple[str, float] | None = None  # a version that could not be loaded, and when (monotonic)
        self.retry_after = 3 * config.serve.refresh_seconds  # seconds before a version that failed is tried again
        self.switched = time.monotonic()  # when the live snapshot was last replaced (monotonic seconds)
        self._said_rebuilding = False  # whether the log has said that the root index is being rebuilt in place
        live = versions.live_root(root)  # a clear error where CURRENT names a missing or incomplete version
        self._snapshot = self._open("" if live == Path(root) else live.name)

    def _open(self, version: str) -> Snapshot:
        """Open exactly ``version`` ("" = the root index), not whatever CURRENT names by then."""
        # The server's retrieval settings: stored ones under its --config file and command line.
        return open_snapshot(version_dir(self.root, version), version, self.config)

    @property
    def current(self) -> Snapshot:
        """The live snapshot, not counted as in use: for a glance (health, metrics), not a request."""
        return self._snapshot

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """The live snapshot, counted as in use until the block ends (its version is not collected)."""
        with self._state:
            snap = self._snapshot
            self._readers[snap.version] += 1
        try:
            yield snap
        finally:
            with self._state:
                self._readers[snap.version] -= 1
                if self._readers[snap.version] <= 0:
                    del self._readers[snap.version]

    def versions_in_use(self) -> set[str]:
        """The live version, the one being loaded and every version a request still reads."""
        with self._state:
            loading = () if self._loading is None else (self._loading,)
            return {self._snapshot.version, *loading, *self._readers}

    def serves(self, version: str) -> bool:
        """Whether ``version`` is what this holder serves, as it is on disk now."""
        return version == self._snapshot.version and not (version == "" and self.rebuilt_in_place())

    def rebuilt_in_place(self) -> bool:
        """Whether the root index served here was rebuilt in place (`hopgraph index --overwrite` on
        it) and that build is complete: its files no longer belong to what was loaded, so parts loaded
        later (a new group set's scope) would fail; :meth:`refresh` then opens it again. While such a
        build runs (or was left unfinished) the loaded parts keep answering, and the log says so once."""
        snap = self._snapshot
        if snap.version:
            return False
        index = snap.index
        loaded = [index] if isinstance(index, LoadedIndex) else [part.index for part in index.partitions]
        try:
            for part in loaded:
                part.still_the_index_opened()
            return False
        except IndexFormatError:
            pass
        try:
            IndexStore(self.root).require_complete()
        except IndexFormatError as exc:
            if not self._said_rebuilding:
                self._said_rebuilding = True
                print(f"hopgraph serve: serving what was loaded until this completes: {exc}", file=sys.stderr)
            return False
        self._said_rebuilding = False
        return True

    def refresh(self, version: str | None = None, announce: Callable[[], None] | None = None) -> bool:
        """Switch to ``version`` (by default the live version on disk) if it is not served yet, or the
        root index again where it was rebuilt in place; True if it did.

        The version is recorded as in use before any of its files is read, and ``announce()`` is
        called then (a heartbeat names it to the process that collects old versions). A version that
        failed to load is tried again after ``retry_after`` seconds (storage may have caught up).
        """
        with self._lock:
            target = versions.live_version(self.root) if version is None else version
            if self.serves(target):
                return False
            if self._failed and self._failed[0] == target and time.monotonic() - self._failed[1] < self.retry_after:
                return False
            with self._state:
                self._loading = target
            try:
                if announce is not None:
                    announce()
                fresh = self._open(target)
            except Exception:
                self._failed = (target, time.monotonic())
                raise
            finally:
                with self._state:
                    self._loading = None
            self._failed = None
            with self._state:
                self._snapshot = fresh
            self.switched = time.monotonic()
            return True


MAX_WORKER_BUILDS = 100  # builds one worker process runs before a fresh one takes over (bounds what it holds)
LOOP_RETRY_MAX_SECONDS = 60.0  # the longest wait after a failed pass of the job loop (a full disk, say)
# The update worker's exit status once its jobs' records hold its failure; any other failing status
# (Python's 1 for a traceback: say, a full disk that stopped even the record) counts as a crash.
FAILURE_RECORDED = 4
# Its exit status when the storage refused a write (full, read-only): the jobs wait, unfinished and
# with that attempt taken back, until the storage takes writes again; no crash is counted.
STORAGE_REFUSED = 5
FORGIVE_PATIENCE = 5.0  # seconds a stopped worker's forked helpers may still hold the job lock (they poll every 1 s)


class JobRunner:
    """Starts the worker child when jobs are queued, switches the holder to what it published,
    then collects old versions.

    Only one process among all that serve an index directory runs this loop (the leader, see
    ``hopgraph.serve.replicas``); it looks at the queue on disk every ``serve.refresh_seconds``, so
    jobs submitted to another process are picked up within that time.

    The worker publishes a version per batch (all jobs queued when the batch starts), so the holder
    switches after every build, not after a queue that keeps growing; it then stays
    ``serve.worker_linger`` seconds for jobs that follow (at most ``MAX_WORKER_BUILDS`` builds),
    while this loop goes on switching and collecting. A job is reported 'publishing' until the
    holder serves its version. A worker that dies without recording an outcome (killed, out
    of memory) is restarted after a growing delay; after ``serve.job_attempts`` attempts its jobs
    end 'failed' with the reason. Every error in the loop is logged and the loop goes on.
    """

    def __init__(self, root: Path, holder: IndexHolder, config: HopgraphConfig, *, backoff: float = 1.0):
        self.root, self.holder, self.config = root, holder, config
        self.backoff = backoff
        self.idle_wait = config.serve.refresh_seconds  # seconds between looks at the queue when nobody wakes the loop
        # Versions garbage collection spares besides the live one and the newest kept: replaced by the
        # versions every serving process still uses when several serve this directory.
        self.protect: Callable[[], set[str]] = holder.versions_in_use
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._child: subprocess.Popen | None = None
        self._run = ""  # the name of the worker's run, recorded with the attempts it starts
        self._crashes = 0  # consecutive worker deaths (jobs also record the attempts that started)
        self._refusals = 0  # consecutive workers that met storage refusing their writes
        # Per build, the last 100 (a server runs for months): worker exit → switch.
        self.publish_seconds: deque[dict[str, float]] = deque(maxlen=100)
        self._thread = threading.Thread(target=self._loop, name="hopgraph-jobs", daemon=True)

    def _delay(self, tries: int) -> float:
        """Seconds to wait after the ``tries``-th failure in a row: doubling from ``backoff``."""
        return self.backoff * 2 ** (min(tries, 10) - 1)

    @property
    def running(self) -> bool:
        """Whether this process runs the job loop."""
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()
        self._wake.set()  # jobs left by a previous server run are resumed at once

    def stop(self) -> None:
        """End the worker, then the loop: once this returns, nothing here switches or collects any more
        (the leader lock may be released). A job the worker ran resumes on the next start, the
        attempt it was in taken back (counted as ``interrupted``, not against serve.job_attempts)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            if self._child and self._child.poll() is None:
                self._child.terminate()  # the job resumes from its finished stages next time
                try:
                    self._child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._child.kill()
                    self._child.wait()
                if self._child.returncode != 0:  # ended by this shutdown, not by the job
                    versions.forgive_interrupted(self.root, self._run, patience=FORGIVE_PATIENCE)
        if self._thread.is_alive():
            self._thread.join(timeout=30)  # at most one load or collection in progress

    def submit(self, add: list[Any], delete: list[str], by: str) -> dict[str, Any]:
        """Queue ``by``'s job; QueueFullError when serve.max_queued_jobs are unfinished."""
        job = versions.submit_update(self.root, add, delete, max_queued=self.config.serve.max_queued_jobs, by=by)
        self._wake.set()
        return job

    def job(self, job_id: str) -> dict[str, Any]:
        """The job record; 'done' only once the server answers from its version (before that,
        'publishing'). InputError for an id that is not one (ids are checked against a pattern)."""
        record = jobs.read_job(self.root, job_id)
        version, serving = record.get("version"), self.holder.current.version
        if record["status"] == "done" and version and (not serving or job_sequence(version) > job_sequence(serving)):
            record = {**record, "status": "publishing"}  # versions are named by job ids: ordered by number
        return record

    def check_room(self) -> None:
        """QueueFullError where serve.max_queued_jobs are unfinished (submit checks again)."""
        versions.check_room(self.root, self.config.serve.max_queued_jobs)

    def queue_depth(self) -> int:
        return versions.unfinished_count(jobs.list_jobs(self.root))

    def _loop(self) -> None:
        failures = 0  # passes in a row that failed: the wait before the next one grows with them
        while not self._stop.is_set():
            self._wake.wait(timeout=self.idle_wait)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._pass()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one failure; the next pass retries
                # A full disk fails every pass alike for hours: the traceback once, then one line each
                # time, at growing intervals (it started a worker and printed a traceback every second).
                failures += 1
                wait = min(LOOP_RETRY_MAX_SECONDS, 2.0 ** (failures - 1))
                detail = traceback.format_exc() if failures == 1 else f"{type(exc).__name__}: {exc}\n"
                print(
                    f"hopgraph serve: update job loop error ({failures} in a row; retrying in {wait:g} s):\n{detail}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
                self._stop.wait(wait)

    def _pass(self) -> None:
        """One round: run the worker if jobs wait, switch to what is live, collect old versions."""
        exited, serving = None, self.holder.current.version
        if self.queue_depth():
            exited = self._run_child()
            if self.queue_depth():
                self._wake.set()  # more batches (or a retry) follow without waiting
        self._switch_and_collect(exited, serving)

    def _switch_and_collect(self, exited: float | None = None, serving: str = "") -> None:
        """Serve the live version (recording exit → switch when a worker exited), then collect old versions."""
        if self._stop.is_set():
            return  # stopping: the leader lock may be released next, so no switch and no collection
        try:
            self.holder.refresh()  # unless the following thread (hopgraph.serve.replicas) switched already
            if exited is not None and self.holder.current.version != serving:  # 0: switched before the exit
                self.publish_seconds.append({"exit_to_switch": round(max(0.0, self.holder.switched - exited), 3)})
        except Exception as exc:  # keep serving the old snapshot; the next pass tries again
            print(f"hopgraph serve: cannot load the new index version: {exc}", file=sys.stderr, flush=True)
            return
        if self._stop.is_set():
            return
        removed = garbage.collect_garbage(
            self.root,
            keep=self.config.serve.keep_versions,
            protect=self.protect,
            keep_jobs=self.config.serve.keep_jobs,
        )
        if removed:
            print(f"hopgraph serve: removed old index versions {', '.join(removed)}", file=sys.stderr, flush=True)

    def worker_command(self) -> list[str]:
        """The update worker's command line (:mod:`hopgraph.serve.worker`)."""
        llm = json.dumps(self.config.llm.model_dump())
        return [
            sys.executable,
            "-P",  # the server's working folder (often /tmp or a shared one) shadows no module of the worker
            "-m",
            "hopgraph.serve.worker",
            str(self.root),
            "--llm",
            llm,
            "--nice",
            str(self.config.serve.job_niceness),
            "--batches",
            str(MAX_WORKER_BUILDS),
            "--linger",
            str(self.config.serve.worker_linger),
            "--poll",
            str(self.config.serve.refresh_seconds),
            "--parent",
            str(os.getpid()),
            "--job-seconds",
            str(self.config.serve.job_seconds),
        ]

    def _run_child(self) -> float:
        """Run the worker for one batch; returns when it exited (monotonic seconds)."""
        command = self.worker_command()
        before = _job_states(jobs.list_jobs(self.root))
        with self._lock:
            if self._stop.is_set():  # stopping: no new worker (the job resumes on the next start)
                return time.monotonic()
            self._run = secrets.token_hex(8)
            command += ["--run", self._run]
            self._child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        started = time.monotonic()
        collected = versions.live_version(self.root)
        while True:
            try:
                code = self._child.wait(timeout=self.idle_wait)
                break
            except subprocess.TimeoutExpired:  # still building, or lingering after publishing
                try:
                    live = versions.live_version(self.root)
                    if live != collected:  # the worker published: serve it, collect what it replaced
                        self._switch_and_collect()
                        collected = live
                except Exception as exc:  # noqa: BLE001 - never leave a running worker unwatched
                    print(f"hopgraph serve: cannot collect old index versions: {exc}", file=sys.stderr, flush=True)
        exited = time.monotonic()
        if self._stop.is_set():  # ended by stop(): a shutdown, not a crash to count against its jobs
            return exited
        if code == 0:
            self._crashes = self._refusals = 0
            return exited
        if code == STORAGE_REFUSED:
            try:
                versions.forgive_interrupted(self.root, self._run, patience=FORGIVE_PATIENCE)
            except OSError as exc:  # the same storage may refuse this process too: the attempt then stays counted
                if storage_state(exc) is None:
                    raise
            self._refusals += 1
            wait = min(LOOP_RETRY_MAX_SECONDS, self._delay(self._refusals))
            print(
                f"hopgraph serve: the storage refused the update worker's writes; its jobs wait (trying again in "
                f"{wait:g} s)",
                file=sys.stderr,
                flush=True,
            )
            self._stop.wait(wait)
            return exited
        listed = jobs.list_jobs(self.root)
        running = [j for j in listed if j["status"] == "running"]
        reason = f"the update worker exited with {code}" + (f" (killed by signal {-code})" if code < 0 else "")
        print(f"hopgraph serve: {reason} after {exited - started:.1f} s", file=sys.stderr, flush=True)
        after = _job_states(listed)
        recorded = any(after.get(job_id) != state for job_id, state in before.items())
        if code == FAILURE_RECORDED and recorded and not running:  # the worker recorded the jobs' failure itself
            self._crashes = 0
            return exited
        # A worker may die before it records its attempt: count deaths here too.
        self._crashes += 1
        attempts = max([self._crashes, *(j.get("attempts", 0) for j in running)])
        if attempts >= self.config.serve.job_attempts:
            # Counted until the failure is recorded: where it cannot be (a full disk), the loop's
            # growing wait applies and the next worker is still the last attempt, not a first.
            ended = versions.fail_unfinished(self.root, f"{reason}; gave up after {attempts} attempts")
            self._crashes = 0
            outcome = "run again one at a time" if any(j["status"] == "queued" for j in ended) else "failed"
            print(
                f"hopgraph serve: jobs {', '.join(j['id'] for j in ended)} {outcome} after {attempts} attempts",
                file=sys.stderr,
                flush=True,
            )
        else:
            self._stop.wait(self._delay(attempts))  # growing delay before the next attempt
        return exited
