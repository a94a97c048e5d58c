"""Request logs: one JSON line per request, written by a background thread.

A line says who asked (the token's user name, never the token), which endpoint (the bounded
label of the metrics, so ids in paths stay out), the HTTP method, the retrieval method, status,
latency, the index version read and the ids of the pieces returned, never their text or the
question. With ``serve.trace`` a retrieval's line also carries its trace: the seeds the method
started from and, per piece used, its graph path, chunk and documents.

The request thread only builds a small dict and puts it on a queue; encoding and writing happen
on the listener's thread (``logging.handlers.QueueListener``), off the hot path.
"""

from __future__ import annotations

import logging
import queue
import sys
import time
from logging.handlers import QueueHandler, QueueListener
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


class _Enqueue(QueueHandler):
    """Puts the record as it is: formatting (JSON encoding) is left to the listener's thread."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class _JsonLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + "Z", **record.msg}  # type: ignore[dict-item]
        return orjson.dumps(entry, option=orjson.OPT_SERIALIZE_NUMPY).decode()


class RequestLog:
    """The request log of one server process: :meth:`write` enqueues, a thread writes lines."""

    def __init__(self, target: str):
        if target == "-":
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
        else:
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(_JsonLine())
        self._handler = handler
        self._queue: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        # A logger of its own, not in logging's registry: no propagation to the root logger, and
        # several servers in one process each keep their own lines.
        self._logger = logging.Logger("hopgraph.requests", logging.INFO)
        self._logger.addHandler(_Enqueue(self._queue))
        self._listener = QueueListener(self._queue, handler)
        self._listener.start()

    @classmethod
    def open(cls, target: str) -> RequestLog | None:
        """The log ``serve.request_log`` names, or None when it is empty (no request log)."""
        return cls(target) if target else None

    def write(self, entry: dict[str, Any]) -> None:
        """Queue one line (the dict must hold no text of documents or questions, and no token)."""
        self._logger.info(entry)

    def close(self) -> None:
        """Write what is queued, then stop the thread and close the file."""
        self._listener.stop()
        self._handler.close()


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
    if "trace" in state:
        line["trace"] = state["trace"]
    return line
