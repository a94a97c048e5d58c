"""Update job records on disk: what is read on every look at the queue, kept small.

    INDEX/jobs/<job id>.json            the record (status queued|running|done|failed, timings, counts)
    INDEX/jobs/<job id>.ids.json        every id the job adds and deletes
    INDEX/jobs/<job id>.documents.jsonl the documents it adds
    INDEX/jobs/.lock, .submit.lock      flocks: a job runs, a job is being submitted
    INDEX/jobs/.leader, leader.json     the server replica that runs jobs (hopgraph/serve/replicas.py)

A server reads every record each time it looks at the queue (every ``serve.refresh_seconds``, on
each submit and upload), and keeps up to ``serve.keep_jobs`` of them. A record therefore names
only the first of its ids (``add_first``, ``delete_first``: :data:`LISTED_IDS`, at most
:data:`LISTED_CHARS` characters) with their counts; the whole lists live beside it, read only to
compose a build or check a submission, and go with the documents when a job's payload is
collected. One record of 1,000 long ids used to hold them all (6.1 MB, pretty-printed and
escaped), and with a thousand such records kept an idle server spent most of a core re-reading
them. Records of older code hold the whole lists as ``add`` and ``delete`` and are read as such;
the new keys are new names so that older code, meeting a new record (replicas upgraded one at a
time), fails on it instead of building a corpus from the first 20 ids.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hopgraph.documents import Document
from hopgraph.errors import IndexFormatError, InputError
from hopgraph.files import Stamp, atomic_write, exclusive_lock, held_elsewhere, stat_stamp
from hopgraph.store import CURRENT, JOB_ID, JOBS, VERSIONS, IndexStore, job_sequence

UNFINISHED = ("queued", "running")
RUN_LOCK = ".lock"  # INDEX/jobs/.lock: held by the process that runs the jobs (or collects old versions)
LISTED_IDS = 20  # ids a record names of those its job adds (and of those it deletes)...
LISTED_CHARS = 1000  # ...and their characters in all (at least one id is named)
IDS, DOCUMENTS = ".ids.json", ".documents.jsonl"  # the payload beside a record
PAYLOAD = (DOCUMENTS, IDS)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def job_path(root: Path, job_id: str, suffix: str = ".json") -> Path:
    """INDEX/jobs/<job id><suffix>: the record (.json), or a payload (:data:`IDS`, :data:`DOCUMENTS`)."""
    return root / JOBS / f"{job_id}{suffix}"


def listed(ids: Sequence[str]) -> list[str]:
    """The first ids a record names (see the module docstring)."""
    shown: list[str] = []
    chars = 0
    for i in ids[:LISTED_IDS]:
        chars += len(i)
        if shown and chars > LISTED_CHARS:
            break
        shown.append(i)
    return shown


def login_name() -> str:
    """This process's user, as the system names it ("" where it has no name, as in some containers)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no password entry for the uid
        return ""


def write_new_job(
    root: Path, job_id: str, add: Sequence[Document], delete: Sequence[str], by: str | None = None
) -> dict[str, Any]:
    """Queue a job: its documents, its whole id lists, then its record (so a record always has its
    payload; a killed submit leaves a payload without a record, collected once stale). ``by``: who
    asked for it (a server's token user; None: this process's login, as for `hopgraph update`), so
    an operator can tell who deleted or replaced a document."""
    lines = "".join(json.dumps(asdict(d), ensure_ascii=False, default=str) + "\n" for d in add)
    atomic_write(job_path(root, job_id, DOCUMENTS), lambda tmp: tmp.write_text(lines, encoding="utf-8"))
    add_ids = [d.id for d in add]
    text = json.dumps({"add": add_ids, "delete": list(delete)}, ensure_ascii=False)
    atomic_write(job_path(root, job_id, IDS), lambda tmp: tmp.write_text(text, encoding="utf-8"))
    record = {
        "id": job_id,
        "kind": "update",
        "status": "queued",
        "created": now(),
        "submitted_by": by if by is not None else login_name(),
        "started": None,
        "finished": None,
        "add_first": listed(add_ids),
        "add_count": len(add_ids),
        "delete_first": listed(delete),
        "delete_count": len(delete),
        "base": None,
        "batch": None,
        "attempts": 0,  # runs that started and did not end by a shutdown (serve.job_attempts bounds them)
        "interrupted": 0,  # runs ended by a shutdown of the server running them (never counted as attempts)
        "run": None,  # the run that recorded the last attempt (see forgive_interrupted)
        "version": None,
        "error": None,
    }
    write_job(root, record)
    return record


def job_documents(root: Path, job_id: str) -> list[Document]:
    """The documents a job adds."""
    text = job_path(root, job_id, DOCUMENTS).read_text(encoding="utf-8")
    # One record a line, split at "\n" only: json.dumps escapes it, but not U+0085, U+2028 or U+2029,
    # which str.splitlines also breaks at (a text holding one made every update job fail).
    return [Document(**json.loads(line)) for line in text.split("\n") if line.strip()]


def first_ids(record: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The ids a record names of those its job adds and deletes (all of them in an older record)."""
    add = record.get("add_first", record.get("add", []))
    return list(add), list(record.get("delete_first", record.get("delete", [])))


def id_counts(record: Mapping[str, Any]) -> tuple[int, int]:
    """How many ids the job adds and deletes."""
    add, delete = first_ids(record)
    return int(record.get("add_count", len(add))), int(record.get("delete_count", len(delete)))


def next_sequence(root: Path) -> int:
    """The next job's number: one past the highest of every record's name, read or not (a damaged
    record, left out of :func:`list_jobs`, must not have its number given again)."""
    return 1 + max(map(job_sequence, _record_names(root)), default=0)


def _record_names(root: str | Path) -> list[str]:
    """The job ids that have a record file, oldest first (not the .ids.json beside each)."""
    return list(_record_entries(root))


def _record_entries(root: str | Path) -> dict[str, Stamp]:
    """Job id → its record file's stamp, oldest first: one pass over the folder (a server lists it
    every few seconds, with up to ``serve.keep_jobs`` records)."""
    found: dict[str, Stamp] = {}
    try:
        entries = os.scandir(os.path.join(root, JOBS))
    except (FileNotFoundError, NotADirectoryError):
        return found
    with entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".json") and JOB_ID.fullmatch(name[:-5]):
                try:
                    found[name[:-5]] = stat_stamp(entry.stat())
                except FileNotFoundError:  # pruned meanwhile
                    continue
    return {name: found[name] for name in sorted(found, key=lambda name: (job_sequence(name), name))}


def job_ids(root: Path, record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Every id a job adds and deletes (a record written before the lists moved beside it holds them)."""
    if "add_count" not in record:
        return list(record["add"]), list(record["delete"])
    path = job_path(root, record["id"], IDS)
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"{path}: missing, so job {record['id']} cannot be run; submit it again") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexFormatError(f"{path}: damaged ({exc}), so job {record['id']} cannot be run") from None
    return list(ids["add"]), list(ids["delete"])


def write_job(root: Path, record: dict[str, Any]) -> None:
    text = json.dumps(record, ensure_ascii=False, default=str)
    atomic_write(job_path(root, record["id"]), lambda tmp: tmp.write_text(text, encoding="utf-8"))


class _RecordTexts:
    """The text of each job record by its file's stamp. A server looks at the queue every
    ``serve.refresh_seconds`` and reads every record (up to ``serve.keep_jobs``, 1,000 by default)
    each time; records are rewritten only by atomic replacement (a new stamp), so a record whose
    stamp is unchanged is read from here: a stat instead of an open and a read. Per folder, holding
    only the records the last listing found."""

    def __init__(self) -> None:
        self.folders: dict[str, dict[str, tuple[Stamp, str]]] = {}
        self.lock = threading.Lock()

    def text(self, folder: str, name: str, stamp: Stamp | None = None) -> str:
        """The record file ``name`` in ``folder`` (FileNotFoundError where it is gone); ``stamp``
        where the caller has just looked at it (a listing's directory entry)."""
        path = os.path.join(folder, name)
        stamp = stamp or stat_stamp(os.stat(path))
        with self.lock:
            known = self.folders.get(folder, {}).get(name)
        if known is not None and known[0] == stamp:
            return known[1]
        with open(path, encoding="utf-8") as file:
            text = file.read()
            if stat_stamp(os.fstat(file.fileno())) != stamp:
                return text  # replaced (and this one read) since it was looked at: not kept
        with self.lock:
            self.folders.setdefault(folder, {})[name] = (stamp, text)
        return text

    def keep_only(self, folder: str, names: set[str]) -> None:
        with self.lock:
            held = self.folders.get(folder)
            if held is not None:
                for name in [n for n in held if n not in names]:
                    del held[name]


_RECORDS = _RecordTexts()


def read_job(root: str | Path, job_id: str) -> dict[str, Any]:
    """The record; InputError where there is none, IndexFormatError where it cannot be read."""
    if not JOB_ID.fullmatch(job_id):
        raise _no_job(root, job_id)
    return _read_record(root, job_id)


def _read_record(root: str | Path, job_id: str, stamp: Stamp | None = None) -> dict[str, Any]:
    folder = os.path.join(root, JOBS)
    try:
        record = json.loads(_RECORDS.text(folder, f"{job_id}.json", stamp))
    except FileNotFoundError:  # never submitted, or pruned (collect_garbage), even while being read
        raise _no_job(root, job_id) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        path = job_path(Path(root), job_id)
        raise IndexFormatError(f"{path}: damaged job record ({exc}); move it out of {path.parent}") from None
    if not isinstance(record, dict) or record.get("id") != job_id:
        path = job_path(Path(root), job_id)
        raise IndexFormatError(f"{path}: not the record of job {job_id}; move it out of {path.parent}")
    return record


def _no_job(root: str | Path, job_id: str) -> InputError:
    return InputError(f"{root}: no update job {job_id!r} (see `hopgraph jobs {root}`)")


def list_jobs(root: str | Path) -> list[dict[str, Any]]:
    """Every job record, oldest first (ids start with a sequence number); one pruned meanwhile
    (:func:`~hopgraph.index.garbage.collect_garbage`) is left out, and so is a damaged one, with a
    warning: it stopped every look at the queue (submits, job pages, the job loop, collection)."""
    records = []
    listed = _record_entries(root)
    _RECORDS.keep_only(os.path.join(root, JOBS), {f"{name}.json" for name in listed})
    for name, stamp in listed.items():
        try:
            records.append(_read_record(root, name, stamp))
        except InputError:  # pruned since the listing
            continue
        except IndexFormatError as exc:
            warnings.warn(f"{exc}; the queue goes on without it", RuntimeWarning, stacklevel=2)
    return records


@contextlib.contextmanager
def job_lock(root: Path, name: str, wait: bool = True) -> Iterator[None]:
    """An exclusive flock on INDEX/jobs/<name>; the kernel releases it when a holder dies.
    ``wait=False`` raises BlockingIOError at once when another process holds it."""
    IndexStore(root).read_manifest()  # a clear error, and no jobs/ folder, where ``root`` is no index
    whole = Path(root).resolve().parent.parent
    if Path(root).resolve().parent.name == VERSIONS and (whole / CURRENT).is_file():
        raise InputError(f"{root} is a version of the index {whole}, which never changes once complete; use {whole}")
    path = root / JOBS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path, None if wait else 0):
        yield


def jobs_running(root: Path) -> bool | None:
    """Whether a process runs jobs of ``root`` now (holds its job lock; None where that cannot be
    told): a record still "running" when none does was left by a run that was killed or
    interrupted, and resumes with the next. Reads only: an index may be mounted read-only."""
    return held_elsewhere(root / JOBS / RUN_LOCK)


def as_seen(root: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with each "running" one that no process runs now (:func:`jobs_running`) shown as
    "stopped": it resumes with the next run (``hopgraph update --resume``, or a server's start)."""
    if not any(job["status"] == "running" for job in records) or jobs_running(root) is not False:
        return records
    return [{**job, "status": "stopped"} if job["status"] == "running" else job for job in records]
