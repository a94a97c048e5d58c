"""What the server holds: the live index version, and the update jobs that make the next one.

A request takes one :class:`Snapshot` at its start and uses it to the end, so a version switch
never mixes two versions in one answer. Update jobs run in a child process (``python -m
hopgraph.serve.worker``): model work there never competes with request handling for the
interpreter lock, and a job that dies takes nothing of the server with it. The child builds the
next version beside the live one; the server loads it completely before switching to it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgraph.config import HopgraphConfig
from hopgraph.index import versions
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.retrieve.methods import LLM_FREE
from hopgraph.retrieve.retriever import Retriever


def available_methods(index: LoadedIndex) -> list[str]:
    """Methods the index has the parts for."""
    stages = index.manifest.get("stages", {})
    methods = list(LLM_FREE)
    if stages.get("kg_extract", {}).get("done"):
        methods += ["kg", "hybrid", "ket", "g2cons"]
    if stages.get("cue_graph", {}).get("done"):
        methods.append("cue")
    return methods


def warm(index: LoadedIndex) -> None:
    """Read every stored part now: a snapshot never opens files later (they may be collected)."""
    root = index.store.root
    for path in sorted((root / "tables").glob("*.parquet")):
        index.table(path.stem)
    for path in sorted((root / "arrays").glob("*.npy")):
        index.array(path.stem)
    for path in sorted((root / "graphs").glob("*.npz")):
        index.graph(path.stem)
    for name in ("documents", "chunks", "units", "keywords", "keyword_lookup", "sentence_runs", "keyword_units"):
        getattr(index, name)


@dataclass(frozen=True)
class Snapshot:
    version: str
    index: LoadedIndex
    retriever: Retriever
    methods: tuple[str, ...]
    doc_ids: frozenset[str]


class IndexHolder:
    """The live snapshot, replaced whole when a job has published a new version."""

    def __init__(self, root: Path, config: HopgraphConfig):
        self.root, self.config = root, config
        self._lock = threading.Lock()
        self._snapshot = self._open()

    def _open(self) -> Snapshot:
        index = LoadedIndex(self.root)
        warm(index)
        retriever = Retriever(index, index.config.retrieval.model_copy(update={"method": self.config.retrieval.method}),
                              device=self.config.embedding.device)
        methods = tuple(available_methods(index))
        for method in methods:  # first queries pay one-time costs (lazy graphs, reranker) now
            retriever.retrieve("warm up", method=method, budget=200)
        return Snapshot(index.version, index, retriever, methods, frozenset(index.documents["id"]))

    @property
    def current(self) -> Snapshot:
        return self._snapshot

    def refresh(self) -> bool:
        """Switch to the live version on disk if it changed; True if it did."""
        with self._lock:
            if versions.live_root(self.root) == self._snapshot.index.store.root:
                return False
            self._snapshot = self._open()
            return True


class JobRunner:
    """Starts the worker child when jobs are queued and refreshes the holder when it ends."""

    def __init__(self, root: Path, holder: IndexHolder, config: HopgraphConfig):
        self.root, self.holder, self.config = root, holder, config
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._child: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._loop, name="hopgraph-jobs", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._wake.set()  # jobs left by a previous server run are resumed at once

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        with self._lock:
            if self._child and self._child.poll() is None:
                self._child.terminate()  # the job resumes from its finished stages next time
                self._child.wait(timeout=30)

    def submit(self, add: list[Any], delete: list[str]) -> dict[str, Any]:
        job = versions.submit_update(self.root, add, delete)
        self._wake.set()
        return job

    def job(self, job_id: str) -> dict[str, Any]:
        """The job record; InputError for an id that is not one (ids are checked against a pattern)."""
        return versions.read_job(self.root, job_id)

    def queue_depth(self) -> int:
        return sum(1 for job in versions.list_jobs(self.root) if job["status"] in versions.UNFINISHED)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=5)
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.queue_depth():
                self._run_child()
            try:
                self.holder.refresh()
            except Exception as exc:  # keep serving the old snapshot; the next pass tries again
                print(f"hopgraph serve: cannot load the new index version: {exc}", file=sys.stderr, flush=True)

    def _run_child(self) -> None:
        llm = json.dumps(self.config.llm.model_dump())
        command = [sys.executable, "-m", "hopgraph.serve.worker", str(self.root), "--llm", llm, "--nice", str(self.config.serve.job_niceness)]
        with self._lock:
            self._child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        started = time.monotonic()
        code = self._child.wait()
        if code != 0:
            print(f"hopgraph serve: update worker exited with {code} after {time.monotonic() - started:.1f} s "
                  "(the job record says why; it resumes on the next submit or restart)", file=sys.stderr, flush=True)
            time.sleep(1)
