"""Uploaded files are read in a child process with a time limit, never in the server's own.

PDF, DOCX and HTML readers are pure Python: a file that is slow to read holds the interpreter
lock of the process reading it, and every reader's request in that process waits (a 6 KB PDF
once took 53 s and moved retrieval p50 from 23 to 352 ms). The known ways to make a file slow
are refused by the readers' own bounds (:mod:`hopgraph.index.formats`); this bounds the ones not
known yet: the child is killed after ``serve.upload_seconds`` and the upload refused, may allocate
no more than ``serve.upload_memory_mb``, and the server only ever waits on a pipe.

The child is a fresh interpreter (``python -m hopgraph.serve.parsing``, ~0.15 s to start, as the
readers import their libraries only when a file needs them): it shares nothing with the server,
neither threads nor memory, and gives its documents back as JSON, never as pickles.

    # [[name, base64]] -> [[documents, problems, problem count]]
    python -m hopgraph.serve.parsing SECONDS MAX_CHARS MAX_DOCUMENTS MEMORY_MB < files.json
"""

from __future__ import annotations

import base64
import json
import math
import resource
import signal
import subprocess
import sys
from dataclasses import asdict

from hopgraph.config import ServeConfig
from hopgraph.documents import Document
from hopgraph.errors import SHOWN_PROBLEMS, InputError

# One file's documents, the first SHOWN_PROBLEMS of its problems (as messages), and how many it had.
Read = tuple[list[Document], list[str], int]


def _read(files: list[tuple[str, bytes]], max_chars: int, max_documents: int) -> list[list[object]]:
    """Each file's documents and problems; reading stops at the file whose text passes ``max_chars``
    in all (that file gets a problem instead), and after the first ``max_documents`` + 1 documents
    (the server refuses more than ``max_documents``), so the answer stays as small as a JSON insert:
    761,538 one-letter JSONL records (9.9 MB) came back whole and took the server ~2 GB to decode.
    Of a file's problems only the first SHOWN_PROBLEMS come back, with their count (100,000 empty
    records after a good one came back as 5.7 MB of messages, of which a refusal shows 20)."""
    from hopgraph.index.ingest import read_upload  # noqa: PLC0415  (the child's work, not the server's)

    out: list[list[object]] = []
    total, count = 0, 0
    for name, data in files:
        if count > max_documents:
            break
        try:
            result = read_upload(name, data)
        except InputError as exc:
            out.append([[], [str(exc)], 1])
            continue
        result.documents = result.documents[: max_documents + 1 - count]
        count += len(result.documents)
        total += sum(len(d.text) for d in result.documents)
        if total > max_chars:
            too_much = f"{name}: the upload's text passes {max_chars:,} characters (serve.max_body_bytes)"
            out.append([[], [f"{too_much}; index such files with `hopgraph update` instead"], 1])
            break
        shown = [str(p) for p in result.problems[:SHOWN_PROBLEMS]]
        out.append([[asdict(d) for d in result.documents], shown, len(result.problems)])
    return out


def read_files(files: list[tuple[str, bytes]], serve: ServeConfig) -> list[Read]:
    """Each uploaded file (name, bytes) read as ``hopgraph index`` reads it, in a child process, up
    to ``serve.max_documents`` + 1 documents in all; InputError where reading takes over
    ``serve.upload_seconds`` (the child is killed), more than ``serve.upload_memory_mb``, or fails."""
    payload = json.dumps([[name, base64.b64encode(data).decode("ascii")] for name, data in files])
    seconds = serve.upload_seconds
    limits = [math.ceil(seconds) + 1, serve.max_body_bytes, serve.max_documents, serve.upload_memory_mb]
    try:
        done = subprocess.run(  # -P: the server's working folder does not shadow a module
            [sys.executable, "-P", "-m", __name__, *map(str, limits)],
            input=payload.encode("ascii"),
            capture_output=True,
            timeout=seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            f"reading the upload took longer than {seconds:g} s (serve.upload_seconds), so it was stopped; "
            "index such files with `hopgraph update` instead"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
        raise InputError(f"the upload could not be read: {last[:500]}")
    return [
        ([Document(**fields) for fields in documents], problems, count)
        for documents, problems, count in json.loads(done.stdout)
    ]


def main() -> int:
    """Read, answer, and end after ``argv[1]`` seconds whatever happens: a server killed while it
    waits leaves no reader behind. At most ``argv[2]`` characters of text and ``argv[3]`` + 1
    documents come back, and at most ``argv[4]`` MiB are allocated (0: no limit; a MemoryError past
    it is the one line the server shows). ASCII JSON both ways, whatever the locale."""
    defaults = ServeConfig.model_fields
    signal.alarm(int(sys.argv[1]) if len(sys.argv) > 1 else 3600)
    max_chars = int(sys.argv[2]) if len(sys.argv) > 2 else defaults["max_body_bytes"].default
    max_documents = int(sys.argv[3]) if len(sys.argv) > 3 else defaults["max_documents"].default
    memory_mb = int(sys.argv[4]) if len(sys.argv) > 4 else defaults["upload_memory_mb"].default
    if memory_mb:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_mb << 20, memory_mb << 20))
    try:
        files = [(name, base64.b64decode(data)) for name, data in json.load(sys.stdin.buffer)]
        answer = json.dumps(_read(files, max_chars, max_documents), ensure_ascii=True, default=str).encode("ascii")
    except MemoryError:
        sys.stderr.write(
            f"reading it needs more than {memory_mb:,} MiB of memory (serve.upload_memory_mb); "
            "index such files with `hopgraph update` instead\n"
        )
        return 3
    sys.stdout.buffer.write(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
