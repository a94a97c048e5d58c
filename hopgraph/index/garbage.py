"""Garbage collection of an index directory's update versions and job records: what a server that
runs for months deletes after each job so that neither the disk nor the queue grows without bound."""

from __future__ import annotations

import shutil
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from hopgraph.config import ServeConfig
from hopgraph.index.versions import UNFINISHED, job_lock, job_path, list_jobs
from hopgraph.store import VERSIONS, live_version

KEEP_JOB_RECORDS: int = ServeConfig.model_fields["keep_jobs"].default  # finished records kept (collect_garbage)
# Failed jobs whose documents stay on disk (to look at, or to submit again), newest first. Each may hold
# an insert's whole body (10 MB); kept for every one of KEEP_JOB_RECORDS records, that was up to ~10 GB.
KEEP_FAILED_PAYLOADS = 20


def collect_garbage(
    root: str | Path,
    keep: int = 2,
    protect: Callable[[], Iterable[str]] = tuple,
    keep_jobs: int = KEEP_JOB_RECORDS,
    keep_failed_payloads: int = KEEP_FAILED_PAYLOADS,
) -> list[str]:
    """Delete version directories that are not live, not among the newest ``keep`` published ones,
    not used by an unfinished job and not named by ``protect()`` (versions readers still use,
    asked for under the job lock, so no job can publish in between); returns their names. Readers
    still holding a removed version should reopen the index (``keep`` ≥ 1 spares the previous live
    version). Finished job records beyond the newest ``keep_jobs`` (≥ 1, so job numbers keep
    growing) are deleted too, unless their version is still on disk: every look at the queue reads
    every record, and a server runs for months. Of failed jobs, only the newest
    ``keep_failed_payloads`` keep their documents. A version that cannot be removed whole (a file
    a shared file system keeps while another machine has it open) is left with a RuntimeWarning
    and tried again next time; it stopped the whole collection, and a server's job loop retried it
    with a traceback at every pass, never pruning a record."""
    root = Path(root)
    folder = root / VERSIONS
    with job_lock(root, ".lock"):
        jobs = list_jobs(root)
        done = [j["id"] for j in jobs if j["status"] == "done"]
        published = list(dict.fromkeys(j["version"] for j in jobs if j["status"] == "done" and j.get("version")))
        protected = {live_version(root), *(published[-keep:] if keep > 0 else []), *protect()}
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
            job_path(root, job_id, ".documents.jsonl").unlink(missing_ok=True)
        failed = [j["id"] for j in jobs if j["status"] == "failed"]
        for job_id in failed[: max(0, len(failed) - keep_failed_payloads)]:  # the record stays, saying why
            job_path(root, job_id, ".documents.jsonl").unlink(missing_ok=True)
        finished = [j for j in jobs if j["status"] not in UNFINISHED]
        for job in finished[: max(0, len(finished) - max(keep_jobs, 1))]:
            if not (job.get("version") and (folder / job["version"]).is_dir()):
                job_path(root, job["id"], ".documents.jsonl").unlink(missing_ok=True)  # a failed job's payload
                job_path(root, job["id"]).unlink(missing_ok=True)
    return removed


def _remove_tree(path: Path) -> str | None:
    """Remove ``path`` and all in it, going on past what cannot be removed; the first problem, or None."""
    problems: list[str] = []
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=lambda _, where, exc: problems.append(f"{where}: {exc}"))
    else:
        shutil.rmtree(path, onerror=lambda _, where, exc: problems.append(f"{where}: {exc[1]}"))
    return problems[0] if problems else None
