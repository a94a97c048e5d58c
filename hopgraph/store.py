"""The index directory: columnar tables, vectors, CSR graphs and a manifest.

Layout (all files written atomically: temporary file, fsync, rename)::

    INDEX/manifest.json          format version, build config, models, counts, stage records
    INDEX/tables/NAME.parquet    documents, chunks, units (sub-chunks), sentences, keywords
    INDEX/arrays/NAME.npy        vectors and per-node scores
    INDEX/graphs/NAME.npz        sparse CSR matrices

The manifest is rewritten after every finished stage, so a killed run knows where to resume.
Each stage record lists the files the stage wrote with their size and SHA-256 (``files``): opening
an index compares the sizes (a stat per file, so opening stays fast), and ``hopgraph index``
compares the hashes of a finished stage before it skips it, so a damaged file is named in one
line when read and rebuilt by the stage that wrote it when the build is run again.
Tables are keyed by stable string ids (documents) and carry document indices on every row, which
is what later incremental insert/delete works from.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from hopgraph.artifacts import SCHEMA, Kind
from hopgraph.errors import IndexFormatError, InputError, cut
from hopgraph.files import atomic_write, exclusive_lock, held_elsewhere
from hopgraph.version import __version__

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BUILD_LOCK = ".build.lock"  # held by the process building the directory (IndexStore.building)


def _pid(handle: Any) -> str:
    """ " (pid N)" from a build lock file's text (its holder's pid), or "" when it holds none yet."""
    handle.seek(0)
    text = handle.read().strip()
    return f" (pid {text})" if text.isdigit() else ""


class CorruptManifestError(IndexFormatError):
    """The manifest is there but unreadable (empty, cut short, not JSON, not hopgraph's): the directory
    was an index, so `hopgraph index --overwrite` may rebuild it."""


class IndexStore:
    """Reads and writes one index directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        # Files written through this store since the last take_written(): relative path → size and hash.
        self.written: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- manifest
    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> dict[str, Any]:
        if not self.root.exists():
            raise IndexFormatError(f"{self.root}: no such index directory (build one with `hopgraph index`)")
        if not self.exists():
            raise IndexFormatError(f"{self.root}: not a hopgraph index (no {MANIFEST})")
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptManifestError(f"{self.manifest_path}: corrupt manifest ({exc})") from None
        if not isinstance(manifest, dict) or "format_version" not in manifest:
            raise CorruptManifestError(f"{self.manifest_path}: not a hopgraph manifest")
        version = manifest["format_version"]
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise IndexFormatError(
                f"{self.root}: index format {version} is newer than this hopgraph reads ({FORMAT_VERSION}); "
                "upgrade hopgraph"
            )
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest = {
            **manifest,
            "format_version": FORMAT_VERSION,
            "hopgraph_version": __version__,
            "updated": time.time(),
        }
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
        atomic_write(self.manifest_path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    # ---------------------------------------------------------------- one build at a time
    @contextlib.contextmanager
    def building(self, patience: float = 2.0) -> Iterator[None]:
        """Hold the directory's build lock while a build writes it: two builds into one directory
        wrote each other's arrays, one failed with a traceback, and the other reported the damaged
        index as built. It is tried for ``patience`` seconds: a reader's look (:meth:`builder`)
        holds it shared for an instant, and a killed build's forked workers until they notice,
        within a second, that it is gone."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / BUILD_LOCK
        with contextlib.ExitStack() as stack:
            try:
                handle = stack.enter_context(exclusive_lock(path, patience))
            except BlockingIOError:
                raise InputError(self._busy(self.builder() or "")) from None
            handle.truncate(0)
            handle.write(str(os.getpid()))
            handle.flush()
            try:
                yield
            finally:
                if not self.exists():  # refused before it wrote anything: leave no lock file behind
                    path.unlink(missing_ok=True)

    def _busy(self, holder: str) -> str:
        return (
            f"{self.root}: another process{holder} is building this index now; wait for it to end, or "
            "choose another --out"
        )

    def refuse_if_building(self) -> None:
        """InputError where another process is building this directory now: a build asks before it
        reads its corpus, which can take minutes (:meth:`building` asks again)."""
        holder = self.builder()
        if holder is not None:
            raise InputError(self._busy(holder))

    def builder(self) -> str | None:
        """ " (pid N)" (or "") when another process is building this directory now, else None."""
        path = self.root / BUILD_LOCK
        if not held_elsewhere(path):
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                return _pid(handle)
        except OSError:
            return ""

    def require_complete(self) -> dict[str, Any]:
        """The manifest of an index whose build finished and whose files have their recorded sizes;
        a clear error otherwise."""
        manifest = self.read_manifest()
        if not manifest.get("complete"):
            done = [name for name, rec in manifest.get("stages", {}).items() if rec.get("done")]
            builder = self.builder()
            if builder is not None:
                raise IndexFormatError(
                    f"{self.root}: this index is being built now by another process{builder} (done: "
                    f"{', '.join(done) or 'nothing'}); wait for it to end"
                )
            raise IndexFormatError(
                f"{self.root}: index build did not finish (done: {', '.join(done) or 'nothing'}); "
                "run the same `hopgraph index` command again to resume"
            )
        problem = self.first_damage(manifest, hashes=False)
        if problem:
            # A version under versions/ was built by an update job, which no command reruns.
            fix = (
                f"write into {self.root.parent.parent / CURRENT} an earlier complete version under "
                f"{VERSIONS}/, or rebuild the index from the documents (`hopgraph index ... --overwrite`)"
                if self.root.parent.name == VERSIONS
                else f"run the `hopgraph index` command that built {self.root} again to rebuild that stage"
            )
            raise IndexFormatError(f"{problem}; {fix}")
        return manifest

    def finished_stages(self) -> dict[str, dict[str, Any]]:
        """Records of the stages finished so far (none where there is no index yet)."""
        if not self.exists():
            return {}
        return {name: rec for name, rec in self.read_manifest().get("stages", {}).items() if rec.get("done")}

    # ---------------------------------------------------------------- checksums
    def _record(self, path: Path, sha256: str | None = None) -> None:
        """Note a written file's size and SHA-256 (read back from the file unless the writer hashed it)."""
        self.written[path.relative_to(self.root).as_posix()] = {
            "bytes": path.stat().st_size,
            "sha256": sha256 or _sha256(path),
        }

    def take_written(self) -> dict[str, dict[str, Any]]:
        """The files written since the last call (for the stage record), and start a new list."""
        written, self.written = self.written, {}
        return written

    def damaged(self, files: dict[str, dict[str, Any]], hashes: bool = True) -> str | None:
        """The first of ``files`` that is missing or differs from its record (size; with ``hashes``
        also SHA-256), as "PATH: what is wrong"; None when all are intact."""
        for relative, expected in files.items():
            path = self.root / relative
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return f"{path}: missing"
            if size != expected["bytes"]:
                return f"{path}: {size} bytes where the index recorded {expected['bytes']} (truncated or damaged)"
            if hashes and _sha256(path) != expected["sha256"]:
                return f"{path}: contents differ from the recorded SHA-256 (damaged)"
        return None

    def first_damage(self, manifest: dict[str, Any], hashes: bool, partitions: bool = False) -> str | None:
        """The first file a stage of ``manifest`` recorded that is missing or differs (sizes; with
        ``hashes`` also SHA-256), as "PATH: what is wrong (written by stage NAME)"; None when all are
        intact. With ``partitions``, an isolated index's partitions (``access.isolation``, indexes of
        their own whose files the top manifest's stage records do not list) are looked at too."""
        for name, record in manifest.get("stages", {}).items():
            problem = self.damaged(record.get("files", {}), hashes=hashes)
            if problem:
                return f"{problem} (written by stage {name})"
        for part in manifest.get("partitions", []) if partitions else ():
            inner = IndexStore(self.root / PARTITIONS / part["name"])
            try:
                problem = inner.first_damage(inner.read_manifest(), hashes, partitions=True)
            except IndexFormatError as exc:
                problem = str(exc)
            if problem:
                return problem
        return None

    def start_hash_check(self, manifest: dict[str, Any]) -> Future[str | None]:
        """:meth:`first_damage` by hash, partitions included, in a thread beside the caller's work.
        Opening an index compares sizes only: a flipped byte is found by its hash, before an update
        copies the damaged rows into a new version and records fresh hashes of them."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopgraph-hash-check")
        try:
            return pool.submit(self.first_damage, manifest, True, True)
        finally:
            pool.shutdown(wait=False)  # the check runs on; the pool only goes when it ends

    # ---------------------------------------------------------------- files
    def _file(self, kind: str, name: str, suffix: str) -> Path:
        return self.root / kind / f"{name}{suffix}"

    @staticmethod
    def _declared(name: str, kind: Kind) -> None:
        """Only artifacts of the schema (hopgraph/artifacts.py) are written: the schema stays complete."""
        declared = SCHEMA.get(name)
        if declared is None or declared.kind != kind:
            raise ValueError(f"index artifact {name!r} ({kind}) is not declared in hopgraph/artifacts.py")

    def write_table(self, name: str, columns: dict[str, Any] | pa.Table) -> None:
        self._declared(name, "table")
        table = columns if isinstance(columns, pa.Table) else pa.table(columns)
        atomic_write(self._file("tables", name, ".parquet"), lambda tmp: pq.write_table(table, tmp))
        self._record(self._file("tables", name, ".parquet"))

    def read_table(self, name: str, columns: Sequence[str] | None = None) -> dict[str, list]:
        """The table's columns (only ``columns``, those of them it has, where given) as lists."""
        return self.read_arrow(name, columns).to_pydict()

    def read_arrow(self, name: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The table (only ``columns``, those of them it has, where given) as Arrow columns: no
        Python object per cell, for tables passed on whole or in slices."""
        path = self._file("tables", name, ".parquet")
        try:
            if columns is not None:
                present = set(self.table_columns(name))
                columns = [c for c in columns if c in present]
            return pq.read_table(path, columns=columns)
        except FileNotFoundError:
            raise self._missing("table", name) from None
        except (pa.ArrowInvalid, OSError) as exc:
            raise IndexFormatError(f"{path}: corrupt table ({exc})") from None

    def table_columns(self, name: str) -> list[str]:
        """The column names of a table (its schema alone is read)."""
        path = self._file("tables", name, ".parquet")
        try:
            return list(pq.read_schema(path).names)
        except FileNotFoundError:
            raise self._missing("table", name) from None
        except (pa.ArrowInvalid, OSError) as exc:
            raise IndexFormatError(f"{path}: corrupt table ({exc})") from None

    def write_array(self, name: str, array: np.ndarray) -> None:
        """Write ``array`` as .npy and record its size and SHA-256. The bytes are hashed from memory
        in a thread while they are written (hashlib lets go of the GIL), not read back afterwards: an
        update writes ~900 MB of arrays at 100k chunks, and hashing them after writing added ~1 s."""
        self._declared(name, "array")
        path = self._file("arrays", name, ".npy")
        array = np.ascontiguousarray(array)
        if array.dtype.hasobject:
            raise ValueError(f"index array {name!r} must hold numbers, not Python objects")
        header = _npy_header(array)
        digest = hashlib.sha256(header)
        # A plain thread, not an executor: executors refuse new work once the interpreter starts
        # shutting down, while a build in a non-daemon thread may still be writing.
        hashing = threading.Thread(
            target=digest.update, args=(array.reshape(-1).view(np.uint8).data,), name="hopgraph-hash"
        )
        hashing.start()
        try:
            atomic_write(path, lambda tmp: _write_npy(tmp, header, array))
        finally:
            hashing.join()
        self._record(path, digest.hexdigest())

    def _missing(self, kind: str, name: str) -> IndexFormatError:
        """A file of this index is not there: the whole version gone (collected while a reader held
        it open, which then read a lazily loaded part), or one file (a partial index)."""
        if not self.root.exists():
            return self.removed()
        return IndexFormatError(f"{self.root}: missing {kind} {name} (partial index?)")

    def removed(self) -> IndexFormatError:
        """What a reader is told when its version's folder is gone."""
        return IndexFormatError(
            f"{self.root}: this index version was removed while it was open (collected after an update, or "
            "rebuilt); open the index again"
        )

    def read_array(self, name: str, mmap: bool = False) -> np.ndarray:
        path = self._file("arrays", name, ".npy")
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except FileNotFoundError:
            raise self._missing("array", name) from None
        except (ValueError, OSError, EOFError) as exc:
            raise IndexFormatError(f"{path}: corrupt array ({exc})") from None

    def write_graph(self, name: str, matrix: sp.spmatrix) -> None:
        self._declared(name, "graph")
        csr = sp.csr_matrix(matrix)
        atomic_write(self._file("graphs", name, ".npz"), lambda tmp: _save_npz(tmp, csr))
        self._record(self._file("graphs", name, ".npz"))

    def read_graph(self, name: str) -> sp.csr_matrix:
        path = self._file("graphs", name, ".npz")
        try:
            return sp.load_npz(path).tocsr()
        except FileNotFoundError:
            raise self._missing("graph", name) from None
        except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise IndexFormatError(f"{path}: corrupt graph ({exc})") from None

    def drop_unrecorded(self, manifest: dict[str, Any]) -> list[str]:
        """Remove the files of ``tables/``, ``arrays/`` and ``graphs/`` that no stage of ``manifest``
        recorded (-> their paths), once a build is complete: an earlier build's parts that this one
        has not (`--overwrite` from an index with a CUE graph kept it, and `Index.retrieve` used it
        over the new corpus), and the temporary files of a write that was killed (gigabytes, copied
        with every copy of the index). The build lock is held, so no write of another is under way.
        A manifest with a stage record that lists no files (an index of an earlier hopgraph, whose
        records did not) says nothing of what is stale: only temporary files are removed then."""
        records = manifest.get("stages", {}).values()
        known = all("files" in record for record in records)
        recorded = {path for record in records for path in record.get("files", {})}
        dropped = []
        for kind in ("tables", "arrays", "graphs"):
            folder = self.root / kind
            for path in sorted(folder.iterdir()) if folder.is_dir() else ():
                stale = f"{kind}/{path.name}" not in recorded if known else path.name.endswith(".tmp")
                if path.is_file() and stale:
                    path.unlink()
                    dropped.append(f"{kind}/{path.name}")
        return dropped

    def has(self, kind: str, name: str) -> bool:
        suffix = {"tables": ".parquet", "arrays": ".npy", "graphs": ".npz"}[kind]
        return self._file(kind, name, suffix).is_file()

    def differences(self, other: IndexStore, tolerance: float = 1e-6) -> tuple[int, list[str]]:
        """(artifacts compared, those that differ): tables and graphs must be identical (columns that
        record when a row was made aside), float arrays within ``tolerance`` (vectors computed in
        other batches differ by float rounding); ``tolerance`` 0 asks for the same bits (-0.0 is
        not 0.0, and a NaN must be the same NaN)."""
        compared, differ = 0, []
        for name, artifact in SCHEMA.items():
            kind = f"{artifact.kind}s"
            if not (self.has(kind, name) or other.has(kind, name)):
                continue
            compared += 1
            if self.has(kind, name) != other.has(kind, name):
                differ.append(f"{name}: only in {self.root if self.has(kind, name) else other.root}")
            elif artifact.kind == "table":
                mine, theirs = self.read_table(name), other.read_table(name)
                if {k: v for k, v in mine.items() if k not in WHEN} != {
                    k: v for k, v in theirs.items() if k not in WHEN
                }:
                    differ.append(f"{name}: rows differ")
            elif artifact.kind == "graph":
                x, y = self.read_graph(name), other.read_graph(name)
                if x.shape != y.shape or (x != y).nnz:
                    differ.append(f"{name}: edges differ")
            else:
                a, b = self.read_array(name), other.read_array(name)
                if a.shape != b.shape:
                    differ.append(f"{name}: shape {a.shape} vs {b.shape}")
                elif tolerance == 0 and (a.dtype != b.dtype or a.tobytes() != b.tobytes()):
                    differ.append(f"{name}: bits differ")
                elif a.dtype.kind == "f" and a.size and float(np.abs(a - b).max()) > tolerance:
                    differ.append(f"{name}: largest difference {float(np.abs(a - b).max()):.2e} > {tolerance:g}")
                elif a.dtype.kind != "f" and not np.array_equal(a, b):
                    differ.append(f"{name}: values differ")
        return compared, differ


WHEN = frozenset({"extracted_at"})  # table columns that say when a row was made, not what it holds


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _save_npz(tmp: Path, csr: sp.csr_matrix) -> None:
    with open(tmp, "wb") as handle:  # a file object keeps scipy from appending ".npz"
        sp.save_npz(handle, csr, compressed=False)


def _npy_header(array: np.ndarray) -> bytes:
    """The .npy header of a C-contiguous ``array`` (format 1.0, which np.load reads)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    return header.getvalue()


def _write_npy(tmp: Path, header: bytes, array: np.ndarray) -> None:
    """The .npy file of a C-contiguous numeric ``array``: ``header``, then its bytes (what np.save writes)."""
    with open(tmp, "wb") as handle:
        handle.write(header)
        # Not array.tofile: on a full disk it raises an OSError without errno ("62592 requested and
        # 12256 written"), which then reads as a bug instead of the disk's state.
        handle.write(array.reshape(-1).view(np.uint8).data)


# ------------------------------------------------------------------------------------ versions
# An index directory holds its root index and, after updates, complete versions beside it
# (INDEX/versions/<job id>); INDEX/CURRENT names the live one. Readers need only this much, so it
# lives here rather than with the update jobs (hopgraph/index/versions.py) that write versions.
CURRENT, VERSIONS, JOBS = "CURRENT", "versions", "jobs"
PARTITIONS = "partitions"  # INDEX/partitions/<name>: the sub-indexes of an index built with access.isolation
REPLICAS = "replicas"  # INDEX/replicas/<id>.json: one heartbeat per serving process (hopgraph.serve.replicas)


def read_heartbeats(root: str | Path, since: float | None = None) -> list[dict[str, Any]]:
    """The heartbeat records of the serving processes (dead ones too, until a server's leader
    removes them); with ``since``, only those written then or later by the storage's clock."""
    found = []
    for path in sorted((Path(root) / REPLICAS).glob("*.json")):
        try:
            if since is None or path.stat().st_mtime >= since:
                found.append(json.loads(path.read_text(encoding="utf-8")))
        except (FileNotFoundError, ValueError):
            continue  # gone meanwhile, or being written: the next look sees it
    return found


def heartbeat_versions(root: str | Path, since: float) -> set[str]:
    """Versions named by the heartbeats written at ``since`` or later: what serving processes read.
    A collection outside a server (``hopgraph update``) cannot tell a live heartbeat from a dead
    one in one look, so it spares every recent one; a serving process rewrites its own every
    ``serve.refresh_seconds`` (at most 600 s), and a dead one's is removed by a server's leader, or
    stops counting once older than that."""
    named: set[str] = set()
    for beat in read_heartbeats(root, since):
        versions = beat.get("versions") if isinstance(beat, dict) else None
        named |= {str(v) for v in versions} if isinstance(versions, list) else set()
    return named


# Update job ids: "j" + a sequence number of at least six digits + "-" + six hex digits; a version is
# named after the job that built it. Past job 999,999 the number simply grows a digit (to 18: an id
# of hundreds of digits is a file name too long for the file system; \d would take any script's digits).
JOB_ID = re.compile(r"j[0-9]{6,18}-[0-9a-f]{6}")


def job_sequence(job_id: str) -> int:
    """A job id's sequence number: ids sort by it, not as text ("j1000000-…" comes after "j999999-…")."""
    return int(job_id[1 : job_id.index("-")])


def version_dir(root: str | Path, version: str) -> Path:
    """Directory of ``version`` ("" = the root index itself)."""
    return Path(root) / VERSIONS / version if version else Path(root)


# Not "delete it": without CURRENT the root (the first build) is served, silently older than the last update.
CURRENT_FIX = (
    f"it should hold '{VERSIONS}/<job id>', the live version: write there the newest complete version under "
    f"{VERSIONS}/ (its manifest.json says complete)"
)


def live_version(root: str | Path) -> str:
    """Name of the live version ("" when CURRENT is absent and the root itself is live)."""
    path = Path(root) / CURRENT
    if Path(root).exists() and not Path(root).is_dir():
        raise IndexFormatError(f"{root}: is a file, not an index directory (build one with `hopgraph index`)")
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError as exc:
        raise IndexFormatError(f"{path}: not text (byte {exc.start} is not UTF-8); {CURRENT_FIX}") from None
    except OSError as exc:  # a directory named CURRENT, no permission, ...
        raise IndexFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    name = text.removeprefix(f"{VERSIONS}/")
    if not text.startswith(f"{VERSIONS}/") or not JOB_ID.fullmatch(name):
        raise IndexFormatError(f"{path}: does not name a version directory ({cut(text)!r}); {CURRENT_FIX}")
    return name


def live_root(root: str | Path) -> Path:
    """The directory readers should open: the root, or the complete version CURRENT names."""
    version = live_version(root)
    path = version_dir(root, version)
    if version and not (IndexStore(path).exists() and IndexStore(path).read_manifest().get("complete")):
        raise IndexFormatError(
            f"{Path(root) / CURRENT} names {VERSIONS}/{version}, which is missing or incomplete; "
            f"restore that directory, or {CURRENT_FIX}"
        )
    return path
