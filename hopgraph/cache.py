"""On-disk caches so that no model work is paid twice: a re-run, a resumed run or another index
of the same texts reuses earlier results.

Keys are hashes of (model, text); values are stored in SQLite (WAL mode, safe across processes).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import inspect
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

# Texts per call of a model (and per slice an embedder sorts into batches, hopgraph.models.model_batches).
ENCODE_SLICE = 2048


# SQLite's names for the storage failing under it, as the OS errors they stand for: a full disk
# reads "database or disk is full" and a file-size limit "disk I/O error", not an OSError.
SQLITE_STORAGE_ERRORS = {"SQLITE_FULL": errno.ENOSPC, "SQLITE_READONLY": errno.EROFS, "SQLITE_IOERR": errno.EIO}


@contextlib.contextmanager
def storage_errors(path: Path) -> Iterator[None]:
    """SQLite's storage failures at ``path`` raised as the OSError they stand for (other errors as they are)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        name = getattr(exc, "sqlite_errorname", "")
        code = next((code for prefix, code in SQLITE_STORAGE_ERRORS.items() if name.startswith(prefix)), None)
        if name.startswith("SQLITE_CANTOPEN") and os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            code = errno.EROFS  # a new file (or a WAL's -shm) on a read-only file system
        if code is None:
            raise
        raise OSError(code, f"{os.strerror(code)} (SQLite: {exc})", str(path)) from exc


class TextKeyedCache:
    """Values keyed by (model, text) in one SQLite table; subclasses say how a value is stored."""

    TABLE = ""
    COLUMN = ""
    SQL_TYPE = ""

    def __init__(self, path: str | Path, model: str):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.model = model
        self.hits = 0  # texts answered from the cache by :meth:`get_or_compute`
        self.misses = 0  # distinct texts it computed
        with storage_errors(self.path):
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.execute("PRAGMA journal_mode=WAL")
            columns = f"key BLOB PRIMARY KEY, {self.COLUMN} {self.SQL_TYPE} NOT NULL"
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {self.TABLE} ({columns})")

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.model}\0{text}".encode()).digest()

    def encode(self, value: Any) -> Any:
        raise NotImplementedError

    def decode(self, stored: Any) -> Any:
        raise NotImplementedError

    def get_many(self, texts: Sequence[str]) -> list[Any]:
        """The stored value per text, None where there is none."""
        keys = [self._key(t) for t in texts]
        found: dict[bytes, Any] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            with storage_errors(self.path):
                rows = self._db.execute(
                    f"SELECT key, {self.COLUMN} FROM {self.TABLE} WHERE key IN ({','.join('?' * len(batch))})", batch
                ).fetchall()
            found.update((k, self.decode(v)) for k, v in rows)
        return [found.get(k) for k in keys]

    def put_many(self, texts: Sequence[str], values: Sequence[Any] | np.ndarray) -> None:
        self._put_encoded(texts, [self.encode(v) for v in values])

    def _put_encoded(self, texts: Sequence[str], encoded: Sequence[Any]) -> None:
        rows = [(self._key(t), e) for t, e in zip(texts, encoded)]
        with storage_errors(self.path), self._db:
            self._db.executemany(f"INSERT OR REPLACE INTO {self.TABLE} (key, {self.COLUMN}) VALUES (?, ?)", rows)

    def get_or_compute(
        self,
        texts: Sequence[str],
        compute: Callable[[list[str]], Sequence[Any]],
        slice_size: int | None = None,
        done: Callable[[int, int], None] | None = None,
    ) -> list[Any]:
        """The value per text: stored ones from the cache, the others computed (each distinct text
        once) and stored. With ``slice_size``, ``compute`` gets the missing texts that many at a time
        and each slice is stored once computed, so a run killed midway keeps what it computed; ``done``
        (texts computed, texts to compute) is told after each slice (a build's bar). A computed value
        is returned as it reads back from the cache, so a hit and a miss give equal values (JSON
        turns tuples into lists, for example)."""
        found = self.get_many(texts)
        missing = list(dict.fromkeys(t for t, f in zip(texts, found) if f is None))
        fresh: dict[str, Any] = {}
        step = slice_size or max(1, len(missing))
        for start in range(0, len(missing), step):
            part = missing[start : start + step]
            encoded = [self.encode(v) for v in compute(part)]
            if len(encoded) != len(part):
                raise ValueError(f"{self.path}: computed {len(encoded)} values for {len(part)} texts")
            self._put_encoded(part, encoded)
            fresh.update((t, self.decode(e)) for t, e in zip(part, encoded))
            if done is not None:
                done(start + len(part), len(missing))
        self.hits += len(texts) - sum(f is None for f in found)
        self.misses += len(missing)
        return [f if f is not None else fresh[t] for t, f in zip(texts, found)]

    def close(self) -> None:
        self._db.close()


class VectorCache(TextKeyedCache):
    """Embedding vectors keyed by (model, text)."""

    TABLE, COLUMN, SQL_TYPE = "vectors", "vector", "BLOB"

    def encode(self, value: np.ndarray) -> bytes:
        return np.ascontiguousarray(value, dtype=np.float32).tobytes()

    def decode(self, stored: bytes) -> np.ndarray:
        return np.frombuffer(stored, dtype=np.float32)


class IntArrayCache(TextKeyedCache):
    """Integer arrays keyed by (model, text): per-text analyses such as token offsets or sentence spans."""

    TABLE, COLUMN, SQL_TYPE = "int_arrays", "value", "BLOB"

    def encode(self, value: Sequence[int] | np.ndarray) -> bytes:
        return np.ascontiguousarray(value, dtype=np.int64).tobytes()

    def decode(self, stored: bytes) -> np.ndarray:
        return np.frombuffer(stored, dtype=np.int64)


class JsonCache(TextKeyedCache):
    """JSON values keyed by (model, text): per-text results of a model that are not vectors
    (e.g. spaCy entities), so a rebuild repeats model work only for texts it has not seen."""

    TABLE, COLUMN, SQL_TYPE = "results", "value", "TEXT"

    def encode(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    def decode(self, stored: str) -> Any:
        # orjson reads what json wrote, about 3x as fast: an update reads every sentence's and unit's
        # cached entities back (~195k values at 100k chunks).
        return orjson.loads(stored)


class CachedEmbedder:
    """Wraps an embedder: texts seen before come from the cache, the rest are embedded and stored."""

    SLICE = ENCODE_SLICE

    def __init__(self, embedder, cache: VectorCache):
        self.inner = embedder
        self.cache = cache
        self.name = embedder.name
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        cached = self.cache.get_many(texts)
        missing = [i for i, v in enumerate(cached) if v is None]
        # All cached: the width is the vectors', so an embedder computed elsewhere (a Ray actor) is never asked.
        width = len(cached[0]) if texts and not missing else self.dim
        out = np.zeros((len(texts), width), dtype=np.float32)
        for i, v in enumerate(cached):
            if v is not None:
                out[i] = v
        # A text repeated in one call is embedded once, so its copies get bitwise the same vector,
        # as they would from the cache (embedded apart, batch padding makes them differ by ~1e-7,
        # and a rebuild would then break score ties differently from an incremental update).
        unique = list(dict.fromkeys(texts[i] for i in missing))
        fresh_vectors: dict[str, np.ndarray] = {}
        for part, fresh in self._fresh(unique, progress):
            fresh_vectors.update(zip(part, fresh))
        for i in missing:
            out[i] = fresh_vectors[texts[i]]
        self.hits += len(texts) - len(missing)
        self.misses += len(unique)  # texts the model computed (a text repeated in the call, once)
        return out

    def _fresh(self, texts: list[str], progress: bool) -> Iterator[tuple[list[str], np.ndarray]]:
        """(texts, vectors) as they are computed, each part stored in the cache as it is done: an
        interrupted run keeps all but the batch in flight. An embedder that computes in batches
        elsewhere (a Ray actor pool) yields each batch as it arrives; any other is called in slices,
        and one whose ``encode`` takes ``on_batch`` has each model batch of a slice stored at once
        (a slice is ~40 s of model time on 2 cores, all of it lost to a Ctrl-C before)."""
        stream = getattr(self.inner, "encode_batches", None)
        if stream is not None:
            for positions, vectors in stream(texts, progress=progress):
                part = [texts[p] for p in positions]
                self.cache.put_many(part, vectors)
                yield part, vectors
            return
        batched = "on_batch" in inspect.signature(self.inner.encode).parameters
        for start in range(0, len(texts), self.SLICE):
            part = texts[start : start + self.SLICE]
            if not batched:
                vectors = self.inner.encode(part, progress=progress)
                self.cache.put_many(part, vectors)
                yield part, vectors
                continue

            def store(positions: list[int], vectors: np.ndarray, part: list[str] = part) -> None:
                self.cache.put_many([part[p] for p in positions], vectors)

            yield part, self.inner.encode(part, progress=progress, on_batch=store)
