"""Garbage collection of an index directory's update versions and job records: what a server that
runs for months deletes after each job so that neither the disk nor the queue grows without bound."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from hopgraph.config import ServeConfig
from hopgraph.index.jobs import PAYLOAD, RUN_LOCK, UNFINISHED, job_lock, job_path, list_jobs
from hopgraph.store import JOB_ID, JOBS, REPLICAS, VERSIONS, heartbeat_versions, live_version

KEEP_JOB_RECORDS: int = ServeConfig.model_fields["keep_jobs"].default  # finished records kept (collect_garbage)
# Failed jobs whose documents stay on disk (to look at, or to submit again), newest first. Each may hold
# an insert's whole body (10 MB); kept for every one of KEEP_JOB_RECORDS records, that was up to ~10 GB.
KEEP_FAILED_PAYLOADS = 20
# A payload without a record (a submit killed between the two) or a temporary file of a killed
# write in INDEX/jobs/ is deleted once this old: nothing else ever would (up to an insert's 10 MB
# each), and no submit or write takes an hour.
STALE_SECONDS = 3600.0


def collect_garbage(
    root: str | Path,
    keep: int = 2,
    protect: Callable[[], Iterable[str]] | None = None,
    keep_jobs: int = KEEP_JOB_RECORDS,
    keep_failed_payloads: int = KEEP_FAILED_PAYLOADS,
) -> list[str]:
    """Delete version directories that are not live, not among the newest ``keep`` published
    ones, not used by an unfinished job and not named by ``protect()`` (versions readers still
    use, asked for under the job lock, so no job can publish in between; by default every version
    a serving process's heartbeat names, :func:`~hopgraph.store.heartbeat_versions`); returns
    their names. Readers still holding a removed version should reopen the index (``keep`` counts
    the live version: ``keep`` ≥ 2 spares the one live before it). Finished job records beyond the
    newest ``keep_jobs`` (≥ 1, so job numbers keep growing) are deleted too, unless their version
    is still on disk: every look at the queue reads every record, and a server runs for months. Of
    failed jobs, only the newest ``keep_failed_payloads`` keep their documents. Payloads without a
    record and temporary files in INDEX/jobs/ are deleted once :data:`STALE_SECONDS` old (left by
    a killed submit or write). A version that cannot be removed whole (a file a shared file system
    keeps while another machine has it open) is left with a RuntimeWarning and tried again next
    time; it stopped the whole collection, and a server's job loop retried it with a traceback at
    every pass, never pruning a record."""
    root = Path(root)
    folder = root / VERSIONS
    with job_lock(root, RUN_LOCK):
        jobs = list_jobs(root)
        done = [j["id"] for j in jobs if j["status"] == "done"]
        published = list(dict.fromkeys(j["version"] for j in jobs if j["status"] == "done" and j.get("version")))
        clock = root / JOBS / RUN_LOCK  # held now, so it exists: "now" by the storage's clock
        os.utime(clock)
        now = clock.stat().st_mtime
        in_use = protect() if protect is not None else heartbeat_versions(root, since=now - STALE_SECONDS)
        protected = {live_version(root), *(published[-keep:] if keep > 0 else []), *in_use}
        protected |= {
            name
            for j in jobs
            if j["status"] in UNFINISHED
            for name in (j["id"], j["base"], *(j.get("batch") or []))
            if name
        }
        removed = (
            sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in protected)
            if folder.is_dir()
            else []
        )
        for name in list(removed):
            problem = _remove_tree(folder / name)
            if problem:  # the rest is still collected; this version is tried again next time
                removed.remove(name)
                warnings.warn(
                    f"could not remove old index version {name} ({problem}); it is tried again at the next collection",
                    RuntimeWarning,
                    stacklevel=2,
                )
        for job_id in done:  # their documents now live in the version's own table
            _drop_payload(root, job_id)
        failed = [j["id"] for j in jobs if j["status"] == "failed"]
        for job_id in failed[: max(0, len(failed) - keep_failed_payloads)]:  # the record stays, saying why
            _drop_payload(root, job_id)
        finished = [j for j in jobs if j["status"] not in UNFINISHED]
        for job in finished[: max(0, len(finished) - max(keep_jobs, 1))]:
            if not (job.get("version") and (folder / job["version"]).is_dir()):
                _drop_payload(root, job["id"])  # a failed job's
                job_path(root, job["id"]).unlink(missing_ok=True)
        _drop_stale(root / JOBS, now)
        _drop_stale(root / REPLICAS, now)  # a heartbeat write killed midway leaves its temporary file
    return removed


def _drop_payload(root: Path, job_id: str) -> None:
    for suffix in PAYLOAD:
        job_path(root, job_id, suffix).unlink(missing_ok=True)


def _drop_stale(folder: Path, now: float) -> None:
    """Delete payloads without a record and temporary files, once :data:`STALE_SECONDS` old by the
    clock of the storage that holds them (replicas' own clocks need not agree with it): ``now`` is
    the time the job lock, just touched, was given there."""
    if not folder.is_dir():
        return
    old = now - STALE_SECONDS
    for path in folder.iterdir():
        name = path.name
        job_id = name.split(".", 1)[0]
        payload = name.endswith(PAYLOAD) and JOB_ID.fullmatch(job_id)
        orphan = payload and not (folder / f"{job_id}.json").exists()
        if orphan or (name.startswith(".") and name.endswith(".tmp")):
            try:
                if path.stat().st_mtime < old:
                    path.unlink()
            except FileNotFoundError:  # renamed or deleted meanwhile
                continue


def _remove_tree(path: Path) -> str | None:
    """Remove ``path`` and all in it, going on past what cannot be removed; the first problem, or None."""
    problems: list[str] = []
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=lambda _, where, exc: problems.append(f"{where}: {exc}"))
    else:
        shutil.rmtree(path, onerror=lambda _, where, exc: problems.append(f"{where}: {exc[1]}"))
    return problems[0] if problems else None
