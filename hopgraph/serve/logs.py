"""Request logs: one JSON line per request, written by a background thread.

A line says who asked (the token's user name, never the token), which endpoint (the bounded
label of the metrics, so ids in paths stay out), the HTTP method, the retrieval method, status,
latency, the index version read and the ids of the pieces returned, never their text or the
question. With ``serve.trace`` a retrieval's line also carries its trace: the seeds the method
started from and, per piece used, its graph path, chunk and documents.

The request thread only builds a small dict and puts it on a queue; encoding and writing happen
on the log's own thread, off the hot path.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from hopgraph.retrieve.packing import RetrievalResult
from hopgraph.version import __version__


def piece_ids(result: RetrievalResult) -> list[str]:
    """``kind:row`` of every piece returned (what a log may name; the text stays out)."""
    return [f"{e.kind}:{e.index}" for e in result.evidence]


def trace_of(result: RetrievalResult) -> dict[str, Any]:
    """The seeds and, per piece used, how the graph reached it (path), its chunk and documents."""
    return {
        "seeds": list(result.seeds),
        "pieces": [
            {"piece": f"{e.kind}:{e.index}", "path": e.path, "chunk": e.chunk, "docs": list(e.doc_ids)}
            for e in result.evidence
        ],
    }


class RequestLog:
    """The request log of one server process: :meth:`write` enqueues, a thread of its own writes lines.

    Not a ``logging`` handler: logging set-up elsewhere (uvicorn's, for one) closes every handler
    it finds. A file is opened with O_APPEND and each line is one ``write``, so the lines of
    several server processes sharing one file never interleave, however long a line (a trace) is.
    A file moved away or deleted (logrotate's default: rename, then a fresh file) is noticed within
    ``reopen_seconds`` and the path opened again: a server that runs for months never writes on into
    a rotated file nobody reads, nor into a deleted one that fills the disk unseen. Where the path
    cannot be opened (its folder gone, a file this user may not write), lines go on to the old file.
    """

    def __init__(self, target: str, max_queued: int = 10_000, reopen_seconds: float = 1.0):
        self._fd: int | None = None
        self._path: Path | None = None
        self._reopen_seconds = reopen_seconds  # how often the path is compared with the file open (a stat each)
        self._looked = time.monotonic()
        self._reopen_failed = False  # said once on stderr, not per line
        self._write_failed = False  # likewise: a full disk fails every line until it has room again
        self.dropped = 0  # lines not logged: the queue was full (a stuck disk or stderr) or the write failed
        self._dropped_lock = threading.Lock()  # dropped is counted by request threads and the log's own
        self._reported = 0
        if target != "-":
            self._path = Path(target)
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = self._open_file(self._path)
        # Bounded: a log that cannot keep up (a stalled disk, a stderr nobody reads) drops lines, counted,
        # instead of holding every request's line in memory.
        self._queue: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue(max_queued)
        self._thread = threading.Thread(target=self._drain, name="hopgraph-request-log", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, target: str) -> RequestLog | None:
        """The log ``serve.request_log`` names, or None when it is empty (no request log)."""
        return cls(target) if target else None

    @staticmethod
    def _open_file(path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def _current_fd(self) -> int:
        """The file descriptor to write to: the log's path, opened again where the file there is no
        longer the one open (looked at every ``reopen_seconds``); the old one while that fails."""
        assert self._fd is not None and self._path is not None
        now = time.monotonic()
        if now - self._looked < self._reopen_seconds:
            return self._fd
        self._looked = now
        try:
            try:
                there, held = os.stat(self._path), os.fstat(self._fd)
                if (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino):
                    return self._fd
            except FileNotFoundError:
                pass
            fresh = self._open_file(self._path)
        except OSError as exc:
            if not self._reopen_failed:
                print(
                    f"hopgraph serve: cannot open the request log {self._path} again ({exc}); "
                    "writing on to the file open before",
                    file=sys.stderr,
                    flush=True,
                )
                self._reopen_failed = True
            return self._fd
        os.close(self._fd)
        self._fd, self._reopen_failed = fresh, False
        return self._fd

    def write(self, entry: dict[str, Any]) -> None:
        """Queue one line (the dict must hold no text of documents or questions, and no token); never blocks."""
        try:
            self._queue.put_nowait((time.time(), entry))
        except queue.Full:
            self._drop()

    def _drop(self) -> None:
        with self._dropped_lock:
            self.dropped += 1

    def close(self) -> None:
        """Write what is queued, then stop the thread and close the file."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=10)
        self._thread.join(timeout=10)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            stamp, entry = item
            dropped, reported = self.dropped, self._reported
            if dropped > reported:  # once the log keeps up again, it says how many lines it lost
                entry = {**entry, "dropped_before": dropped - reported}
                self._reported = dropped
            line = orjson.dumps(
                {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + "Z", **entry},
                option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE,
            )
            try:
                if self._fd is None:
                    sys.stderr.write(line.decode())
                    sys.stderr.flush()
                else:
                    os.write(self._current_fd(), line)
            except (OSError, ValueError) as exc:  # a full disk or a closed stderr must not stop the server
                # Counted (hopgraph_request_log_dropped_total, then dropped_before in the next line
                # written) and said once: a line on stderr per request filled the other disk too.
                self._reported = reported
                self._drop()
                if not self._write_failed:
                    print(
                        f"hopgraph serve: cannot write the request log ({exc}); lines are dropped and counted "
                        "until it can",
                        file=sys.stderr,
                        flush=True,
                    )
                self._write_failed = True
            else:
                self._write_failed = False


def entry(scope: dict[str, Any], endpoint: str, status: int, seconds: float) -> dict[str, Any]:
    """The log line of a finished request, from what the endpoints left in the request's state."""
    state = scope.get("state", {})
    line: dict[str, Any] = {
        "user": state.get("user"),
        "endpoint": endpoint,
        "http_method": scope.get("method", ""),
        "method": state.get("method"),
        "status": status,
        "ms": round(seconds * 1000, 3),
        "version": state.get("version"),
        "pieces": state.get("pieces", []),
        "server": __version__,
    }
    if "stream_error" in state:  # status is the 200 sent before the stream failed
        line["stream_error"] = state["stream_error"]
    if "trace" in state:
        line["trace"] = state["trace"]
    return line
