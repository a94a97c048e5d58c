"""Reading a user's corpus: text, Markdown and JSONL files, folders of them, and benchmark data.

Bad input is the normal case with real corpora, so one broken file or record never stops the run
and never costs the other files: it becomes an :class:`InputProblem` and reading goes on. Only a
run that yields no document at all is an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hopgraph.documents import Document, text_problem
from hopgraph.errors import InputError
from hopgraph.index.datasets import HIPPORAG, KETRAG, detect_format, load_benchmark

TEXT_SUFFIXES = (".txt", ".md")
_BINARY_PROBE = 8192
_MARKDOWN_HEADING = re.compile(r"^ {0,3}#[ \t]+(.*\S)[ \t]*$", re.MULTILINE)
_MAX_LISTED = 20


@dataclass
class InputProblem:
    """One file or record that could not be used, and why."""

    path: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.reason}"


@dataclass
class IngestResult:
    documents: list[Document]
    problems: list[InputProblem]


def read_corpus(
    paths: Sequence[str | Path], *, max_file_bytes: int = 200_000_000, default_metadata: dict[str, Any] | None = None
) -> IngestResult:
    """Read every file, folder and benchmark in ``paths``; raise InputError only if nothing is usable."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InputError("no input paths given")
    base = dict(default_metadata or {})
    try:
        normalise_metadata(base)
    except ValueError as error:
        raise InputError(f"default metadata: {error}") from None
    reader = _Reader(max_file_bytes, base)
    for raw in paths:
        reader.add_argument(Path(raw))
    if not reader.documents:
        listed = "\n".join(f"  {problem}" for problem in reader.problems[:_MAX_LISTED])
        more = len(reader.problems) - _MAX_LISTED
        detail = (
            listed + (f"\n  ... and {more} more" if more > 0 else "")
            if listed
            else "  no .txt, .md, .jsonl or benchmark files were found"
        )
        raise InputError(f"no document could be read from {', '.join(str(p) for p in paths)}:\n{detail}")
    return IngestResult(reader.documents, reader.problems)


def normalise_metadata(metadata: dict[str, Any]) -> None:
    """Normalise ``acl`` to a list of strings and validate ``timestamp``, in place.

    Both keys carry meaning downstream (access control, recency), so a wrong type is reported
    rather than silently misread (a bare string acl would otherwise be split into letters).
    """
    acl = metadata.get("acl")
    if acl is None:
        metadata.pop("acl", None)
    elif isinstance(acl, str):
        metadata["acl"] = [acl]
    elif not isinstance(acl, list) or not all(isinstance(group, str) for group in acl):
        raise ValueError("'acl' must be a list of strings or a single string")
    stamp = metadata.get("timestamp")
    if stamp is None:
        metadata.pop("timestamp", None)
    elif not isinstance(stamp, str):
        raise ValueError("'timestamp' must be an ISO-8601 string")
    else:
        try:
            datetime.fromisoformat(stamp)
        except ValueError:
            raise ValueError(f"'timestamp' {stamp!r} is not an ISO-8601 date/time") from None


def _markdown_title(text: str) -> str | None:
    match = _MARKDOWN_HEADING.search(text)
    return re.sub(r"[ \t]+#+$", "", match.group(1)).strip() if match else None


def _modified(path: Path) -> str:
    stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    return stamp.isoformat(timespec="seconds")


class _Reader:
    """Collects documents and problems across all arguments, rejecting duplicate ids."""

    def __init__(self, max_file_bytes: int, base_metadata: dict[str, Any]) -> None:
        self.max_file_bytes = max_file_bytes
        self.base = base_metadata
        self.documents: list[Document] = []
        self.problems: list[InputProblem] = []
        self._first_source: dict[str, str] = {}
        self._visited: set[Path] = set()

    def problem(self, path: Path, line: int | None, reason: str) -> None:
        self.problems.append(InputProblem(str(path), line, reason))

    def add_argument(self, path: Path) -> None:
        if not path.exists():
            self.problem(path, None, "no such file or directory")
        elif path.is_dir():
            if detect_format(path) == KETRAG:
                self.add_benchmark(path)
            else:
                self.walk(path, path)
        else:
            self.add_file(path, path.name, named=True)

    def walk(self, folder: Path, root: Path) -> None:
        """Recurse in sorted order (deterministic ids and order), skipping hidden entries."""
        real = folder.resolve()
        if real in self._visited:  # a symlink loop, or the same folder named twice
            return
        self._visited.add(real)
        try:
            entries = sorted(folder.iterdir(), key=lambda entry: entry.name)
        except OSError as error:
            self.problem(folder, None, f"cannot list folder ({error.strerror or error})")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                if detect_format(entry) == KETRAG:
                    self.add_benchmark(entry)
                else:
                    self.walk(entry, root)
            elif entry.is_file():
                self.add_file(entry, entry.relative_to(root).as_posix(), named=False)

    def add_file(self, path: Path, name: str, *, named: bool) -> None:
        if not self.size_ok(path):
            return
        suffix = path.suffix.lower()
        kind = detect_format(path)
        if (
            kind == HIPPORAG
            and not named
            and not path.name.endswith("_corpus.json")
            and (path.parent / f"{path.stem}_corpus.json").is_file()
        ):
            return  # a HippoRAG questions file: its corpus file beside it is read on its own
        if kind is not None or (suffix == ".json" and (named or path.name.endswith("_corpus.json"))):
            self.add_benchmark(path)  # an unrecognised .json named here gets the loader's reason
        elif suffix in TEXT_SUFFIXES:
            self.add_text(path, name)
        elif suffix == ".jsonl":
            self.add_jsonl(path, name)
        elif named:
            self.problem(
                path,
                None,
                f"unsupported file type {suffix or '(none)'!r}: expected .txt, .md, .jsonl or benchmark data",
            )

    def size_ok(self, path: Path) -> bool:
        try:
            size = path.stat().st_size
        except OSError as error:
            self.problem(path, None, f"cannot be read ({error.strerror or error})")
            return False
        if size > self.max_file_bytes:
            self.problem(path, None, f"file is {size:,} bytes, over the {self.max_file_bytes:,}-byte limit")
            return False
        return True

    def add_benchmark(self, path: Path) -> None:
        if path.is_dir() and not all(self.size_ok(path / n) for n in ("document.txt", "qa-pairs.json")):
            return
        try:
            documents = load_benchmark(path).documents
        except InputError as error:
            self.problem(path, None, f"benchmark data could not be read: {error}")
            return
        for document in documents:
            source = str(Path(document.source).resolve()) if document.source else str(path.resolve())
            document.metadata = {**self.base, "source_path": source, **document.metadata}
            self.add_document(document, path, None)

    def read_text(self, path: Path) -> str | None:
        """The file as text, or None after reporting why it is not usable text."""
        try:
            data = path.read_bytes()
        except OSError as error:
            self.problem(path, None, f"cannot be read ({error.strerror or error})")
            return None
        if b"\0" in data[:_BINARY_PROBE]:
            self.problem(path, None, "binary file (NUL byte in the first 8 KiB)")
            return None
        bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
        try:
            text = data[bom:].decode("utf-8")
        except UnicodeDecodeError as error:
            offset = bom + error.start
            self.problem(path, data.count(b"\n", 0, offset) + 1, f"not valid UTF-8 at byte offset {offset}")
            return None
        if not text.strip():
            self.problem(path, None, "empty file")
            return None
        return text

    def add_text(self, path: Path, name: str) -> None:
        text = self.read_text(path)
        if text is None:
            return
        problem = text_problem(text)
        if problem:
            self.problem(path, None, problem)
            return
        title = (_markdown_title(text) if path.suffix.lower() == ".md" else None) or path.stem
        source = str(path.resolve())
        metadata = {**self.base, "source_path": source, "modified": _modified(path)}
        self.add_document(Document(id=name, text=text, title=title, source=source, metadata=metadata), path, None)

    def add_jsonl(self, path: Path, name: str) -> None:
        text = self.read_text(path)
        if text is None:
            return
        source = str(path.resolve())
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                self.problem(path, lineno, f"invalid JSON ({error.msg} at column {error.colno})")
                continue
            try:
                document = self.record_document(record, f"{name}:{lineno}", source, lineno)
            except ValueError as error:
                self.problem(path, lineno, str(error))
                continue
            self.add_document(document, path, lineno)

    def record_document(self, record: Any, default_id: str, source: str, lineno: int) -> Document:
        """One JSONL record as a Document; ValueError says what is wrong with it."""
        if not isinstance(record, dict):
            raise ValueError("record is not a JSON object")
        text = record.get("text")
        if not isinstance(text, str):
            raise ValueError("record has no non-empty 'text' string")
        problem = text_problem(text)
        if problem:
            raise ValueError(f"'text': {problem}")
        doc_id = record.get("id", default_id)
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
            raise ValueError("'id' must be a non-empty string or an integer")
        title = record.get("title") or ""
        if not isinstance(title, str):
            raise ValueError("'title' must be a string")
        nested = record.get("metadata") or {}
        if not isinstance(nested, dict):
            raise ValueError("'metadata' must be a JSON object")
        extra = {k: v for k, v in record.items() if k not in ("id", "text", "title", "metadata")}
        metadata = {**self.base, **nested, **extra, "source_path": source, "line": lineno}
        normalise_metadata(metadata)
        return Document(id=str(doc_id), text=text, title=title, source=source, metadata=metadata)

    def add_document(self, document: Document, path: Path, line: int | None) -> None:
        first = self._first_source.get(document.id)
        if first is not None:
            self.problem(path, line, f"duplicate document id {document.id!r} (first read from {first}); dropped")
            return
        self._first_source[document.id] = str(path)
        self.documents.append(document)
