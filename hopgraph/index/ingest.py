"""Reading a user's corpus: text, Markdown, PDF, DOCX, HTML and JSONL files, folders of them, and benchmark data.

Bad input is the normal case with real corpora, so one broken file or record never stops the run
and never costs the other files: it becomes an :class:`InputProblem` and reading goes on, and every
file left out is listed with its reason (an unsupported type, unreadable, empty, too large,
undecodable). Only a path named that does not exist, or a run that yields no document at all, is an
error. How each format becomes text is :mod:`hopgraph.index.formats`.

A file's document id is its path relative to a root: the root given (``--root``), else the folder
named, else, for a file named alone, its own folder. Paths are compared as absolute paths first and
then with symlinks resolved, so the same file has the same id however it is reached, and an edited
copy in another tree (``update --add wiki2/people/x.md --root wiki2``) gets the id of the original
(``people/x.md``) and replaces it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm import tqdm

from hopgraph.documents import (
    MAX_JSON_DEPTH,
    NAME_CONTROL,
    Document,
    canonical_document,
    id_problem,
    invalid_unicode_at,
    name_control,
    text_problem,
    too_deep_at,
    unicode_problem,
)
from hopgraph.errors import InputError, cut, listed
from hopgraph.index.datasets import HIPPORAG, KETRAG, detect_format, load_benchmark
from hopgraph.index.formats import DOCUMENT_SUFFIXES, MARKDOWN, READERS, Unreadable, decode, markdown_title

_MAX_LISTED = 20
_IDS_SHOWN = 10
_KINDS = ", ".join(DOCUMENT_SUFFIXES + (".jsonl",))


@dataclass
class InputProblem:
    """One file or record that could not be used, and why."""

    path: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        path = NAME_CONTROL.sub(lambda m: ascii(m.group())[1:-1], self.path)  # one line on stderr
        where = path if self.line is None else f"{path}:{self.line}"
        return f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "reason": self.reason}


@dataclass
class IngestResult:
    documents: list[Document]
    problems: list[InputProblem]

    def summary(self) -> dict[str, Any]:
        """What was read and what was skipped (why), for ``--json`` output and the server."""
        return {
            "documents": len(self.documents),
            "ids": [d.id for d in self.documents],
            "skipped": [problem.to_dict() for problem in self.problems],
        }

    def describe(self, *, verbose: bool = False) -> list[str]:
        """Summary lines for a person: the ids read (the first few, or all) and the count skipped."""
        ids = [d.id for d in self.documents]
        shown = ids if verbose else ids[:_IDS_SHOWN]
        more = f" … and {len(ids) - len(shown)} more (--verbose lists all)" if len(ids) > len(shown) else ""
        lines = [f"read {len(ids)} document{'s' * (len(ids) != 1)}: {', '.join(shown)}{more}"]
        if self.problems:
            count = len(self.problems)
            lines.append(f"skipped {count} input{'s' if count > 1 else ''} (each named above with its reason)")
        return lines


def read_corpus(
    paths: Sequence[str | Path],
    *,
    root: str | Path | None = None,
    known_ids: Mapping[str, str] | None = None,
    max_file_bytes: int = 200_000_000,
    default_metadata: dict[str, Any] | None = None,
    progress: bool = False,
) -> IngestResult:
    """Read every file, folder and benchmark in ``paths``; raise InputError if one of ``paths`` does
    not exist or nothing is usable.

    ``root``: ids are paths relative to it (a file outside it is skipped); by default each folder
    named is its own root and a file named alone is relative to its folder. ``known_ids`` maps a
    resolved source path to the id it was indexed under: without ``root``, a file read before keeps
    its id (an update of a file edited in place replaces it). ``progress`` shows one bar over the
    bytes of the whole corpus, with documents read and an estimate of the time left.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InputError("no input paths given")
    if root is not None and not Path(root).is_dir():
        raise InputError(f"root {root}: not a folder")
    # A path named by the caller that is not there is a typo to fix, not a file to skip among many:
    # refused before anything is read or built (files inside folders are still skipped one by one).
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise InputError(
            f"{missing[0]}: no such file or directory"
            if len(missing) == 1
            else f"no such files or directories: {listed(missing)}"
        )
    reader = _Reader(max_file_bytes, _base_metadata(default_metadata), dict(known_ids or {}) if root is None else {})
    for raw in paths:
        path = Path(raw)
        reader.plan(path, Path(root) if root is not None else path if path.is_dir() else _absolute(path).parent)
    reader.run(progress)
    if not reader.documents:
        named = "\n".join(f"  {problem}" for problem in reader.problems[:_MAX_LISTED])
        more = len(reader.problems) - _MAX_LISTED
        detail = (
            named + (f"\n  ... and {more} more" if more > 0 else "")
            if named
            else f"  no files of the kinds read ({_KINDS}) or benchmark data were found"
        )
        raise InputError(f"no document could be read from {', '.join(str(p) for p in paths)}:\n{detail}")
    return IngestResult(reader.documents, reader.problems)


def read_upload(
    name: str, data: bytes, *, default_metadata: dict[str, Any] | None = None, source: str | None = None
) -> IngestResult:
    """One uploaded file (its name and bytes) as documents, by the rules of :func:`read_corpus`.

    The id is the name as a relative path (no leading ``/``, ``.`` or ``..`` parts); a JSONL upload
    gives its records. Nothing usable raises :class:`InputError` naming the file and the reason.
    """
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p not in ("/", ".", "..")]
    if not parts:
        raise InputError(f"upload {name!r}: the file needs a name")
    doc_id = "/".join(parts)
    reader = _Reader(len(data), _base_metadata(default_metadata), {})
    stamp = datetime.now(tz=UTC).isoformat(timespec="seconds")
    reader.add_data(name, doc_id, data, source or doc_id, stamp)
    if not reader.documents:
        raise InputError(listed([str(p) for p in reader.problems]) or f"upload {cut(name)!r}: nothing to index")
    return IngestResult(reader.documents, reader.problems)


def document_id(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` as a POSIX path, or None when it is not under it.

    Absolute paths are compared first (a link inside the tree keeps its name there), then the
    resolved ones (a file reached through a linked folder has the id of its place in the tree).
    """
    for inner, outer in ((_absolute(path), _absolute(root)), (path.resolve(), root.resolve())):
        try:
            relative = inner.relative_to(outer)
        except ValueError:
            continue
        return relative.as_posix() if relative.parts else None
    return None


def _absolute(path: Path) -> Path:
    """The absolute, normalised path (``./``, ``..`` and trailing slashes gone), links not followed."""
    return Path(os.path.abspath(path))


def _base_metadata(default_metadata: dict[str, Any] | None) -> dict[str, Any]:
    base = dict(default_metadata or {})
    try:
        normalise_metadata(base)
    except ValueError as error:
        raise InputError(f"default metadata: {error}") from None
    return base


def checked_document(document: Document) -> Document:
    """``document`` as it is stored (:func:`canonical_document`, its metadata normalised into a
    copy), or ValueError saying what is wrong: the rules of every way in that takes a document as
    given, a JSONL record's or one made in code (the Python API) alike, so that a string where a
    list belongs is refused or read as meant, never misread (an ``acl`` of "board" as the groups
    b, o, a, r, d)."""
    text, doc_id, title, metadata = document.text, document.id, document.title, document.metadata
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)  # as a JSONL record's integer id
    place = invalid_unicode_at([doc_id, text, title, document.source, metadata])
    if place:
        head, _, rest = place.partition(".")
        field = {"0": "id", "1": "text", "2": "title", "3": "source"}.get(head) or f"metadata.{rest}".rstrip(".")
        raise ValueError(f"{cut(field)!r} holds a lone surrogate (not Unicode text)")
    if not isinstance(text, str):
        raise ValueError("record has no non-empty 'text' string")
    problem = text_problem(text)
    if problem:
        raise ValueError(f"'text': {problem}")
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError("'id' must be a non-empty string or an integer")
    problem = id_problem(doc_id)
    if problem:
        raise ValueError(f"'id' {problem}")
    if not isinstance(title, str) or not isinstance(document.source, str):
        raise ValueError("'title' and 'source' must be strings")
    if not isinstance(metadata, dict):
        raise ValueError("'metadata' must be a dict")
    metadata = dict(metadata)
    if isinstance(metadata.get("acl"), tuple):
        metadata["acl"] = list(metadata["acl"])
    if isinstance(metadata.get("timestamp"), (datetime, date)):  # made in code: stored as ISO 8601
        metadata["timestamp"] = metadata["timestamp"].isoformat()
    normalise_metadata(metadata)
    return canonical_document(dataclasses.replace(document, id=doc_id, metadata=metadata))


def normalise_metadata(metadata: dict[str, Any]) -> None:
    """Normalise ``acl`` to a list of strings and validate ``timestamp`` and ``modified``, in place.

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
    for key in ("timestamp", "modified"):  # "modified" stands in for a missing timestamp (timestamp_of)
        stamp = metadata.get(key)
        if stamp is None:
            metadata.pop(key, None)
        elif not isinstance(stamp, str):
            raise ValueError(f"'{key}' must be an ISO-8601 string")
        else:
            try:
                datetime.fromisoformat(stamp)
            except ValueError:
                raise ValueError(f"'{key}' {cut(stamp)!r} is not an ISO-8601 date/time") from None


def _no_constant(name: str) -> Any:
    """JSON's NaN and Infinity refused, as the server refuses them in an insert."""
    raise ValueError(f"{name}: numbers must be finite")


def _finite_float(literal: str) -> float:
    """A JSON number; one past a float's range (1e999, read as infinity) refused as NaN is."""
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{cut(literal)}: numbers must be finite")
    return value


def _name_problem(name: str) -> str | None:
    """Why a file's id (its relative path) cannot name a document, or None: an id must be text
    that a table stores and one line of a listing shows."""
    if unicode_problem(name):
        return "file name is not valid UTF-8 (rename the file to read it)"
    found = name_control(name)
    if found:
        return f"file name holds the control character {found} (rename the file to read it)"
    return None


def _source(path: Path) -> str:
    """Where a document was read from, as text a table can store: the bytes of a folder name that
    are not UTF-8 (a name from another system) as \\x escapes (they ended the build in a traceback)."""
    real = str(path.resolve())
    if unicode_problem(real):
        return os.fsencode(real).decode("utf-8", "backslashreplace")
    return real


def _read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` + 1 bytes of ``path``, or None when it is no longer a regular file (replaced
    since it was planned): opened without blocking, so a pipe is never waited on nor a device
    read without end, and a file that grows is not read past its limit."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as handle:
        return handle.read(limit + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _modified(path: Path) -> str:
    stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    return stamp.isoformat(timespec="seconds")


class _Reader:
    """Plans the files of every argument, then reads them, collecting documents and problems.

    Planning first lets one progress bar cover the whole corpus; duplicate ids and a file reached
    twice are reported, not read twice.
    """

    def __init__(self, max_file_bytes: int, base_metadata: dict[str, Any], known_ids: dict[str, str]) -> None:
        self.max_file_bytes = max_file_bytes
        self.base = base_metadata
        self.known_ids = known_ids
        self.documents: list[Document] = []
        self.problems: list[InputProblem] = []
        self._first_source: dict[str, str] = {}
        self._visited: dict[Path, str] = {}  # resolved folder -> how it was first reached
        self._links: list[tuple[Path, Path]] = []  # (link in a folder, root): read after every real entry
        self._files: dict[Path, str] = {}  # resolved file -> how it was first reached
        self._tasks: list[tuple[int, Callable[[], None]]] = []  # (bytes, read it)

    def problem(self, path: Path | str, line: int | None, reason: str) -> None:
        self.problems.append(InputProblem(str(path), line, reason))

    def plan(self, path: Path, root: Path) -> None:
        if not path.exists():
            self.problem(path, None, "no such file or directory")
        elif path.is_symlink() and path.is_dir():
            self._links.append((path, root))  # a linked folder named: read after the real ones too
        else:
            self.dispatch(path, root, named=True)

    def dispatch(self, path: Path, root: Path, *, named: bool) -> None:
        """Plan one path by its kind: a folder (a KET-RAG benchmark folder or one to walk), a file."""
        if path.is_dir():
            if detect_format(path) == KETRAG:
                self.plan_benchmark(path)
            else:
                self.walk(path, root)
        elif path.is_file():
            self.plan_file(path, root, named=named)
        elif not path.exists():
            self.problem(path, None, "a broken link")
        else:  # reading a pipe waits forever, a link to /dev/zero fills the memory
            self.problem(path, None, "not a regular file (a device or a pipe)")

    def run(self, progress: bool) -> None:
        # Links last: a file reached both ways keeps the id of where it really is.
        while self._links:
            self.dispatch(*self._links.pop(0), named=False)
        total = sum(size for size, _ in self._tasks)
        with tqdm(total=total, desc="read", unit="B", unit_scale=True, disable=not progress) as bar:
            for size, task in self._tasks:
                task()
                bar.update(size)
                bar.set_postfix(documents=len(self.documents), skipped=len(self.problems), refresh=False)

    def walk(self, folder: Path, root: Path) -> None:
        """Every entry under ``folder`` in sorted order (deterministic ids and order), depth first
        with a stack of its own (recursion ended a 600-deep tree in a RecursionError, every file
        lost); hidden entries are listed as skipped. Links inside are read once every real entry
        has been (:meth:`run`)."""
        stack: list[Iterator[Path]] = [iter([folder])]
        while stack:
            path = next(stack[-1], None)
            if path is None:
                stack.pop()
            elif path.is_dir() and detect_format(path) != KETRAG:
                stack.append(iter(self.entries(path, root)))
            else:
                self.dispatch(path, root, named=False)

    def entries(self, folder: Path, root: Path) -> list[Path]:
        """The entries of ``folder`` to plan: none the second time it is reached, no hidden one and
        no link (kept for :meth:`run`)."""
        real = folder.resolve()
        if real in self._visited:  # a symlink loop, or the same folder named twice
            self.problem(folder, None, f"the same folder as {self._visited[real]}, read once")
            return []
        self._visited[real] = str(folder)
        try:
            listed = sorted(folder.iterdir(), key=lambda entry: entry.name)
        except OSError as error:
            self.problem(folder, None, f"cannot list folder ({error.strerror or error})")
            return []
        kept = []
        for entry in listed:
            if entry.name.startswith("."):
                self.problem(entry, None, "hidden (its name starts with '.'; name it to read it)")
            elif entry.is_symlink():
                self._links.append((entry, root))
            else:
                kept.append(entry)
        return kept

    def plan_file(self, path: Path, root: Path, *, named: bool) -> None:
        size = self.size(path)
        if size is None:
            return
        real = path.resolve()
        if real in self._files:
            self.problem(path, None, f"the same file as {self._files[real]}, read once")
            return
        self._files[real] = str(path)
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
            self._tasks.append((size, lambda: self.add_benchmark(path)))  # an unrecognised .json gets the reason
            return
        if suffix not in DOCUMENT_SUFFIXES and suffix != ".jsonl":
            what = "not benchmark data" if suffix == ".json" else "expected"
            self.problem(path, None, f"unsupported file type {suffix or '(none)'!r} ({what}: {_KINDS})")
            return
        name = document_id(path, root)
        if name is None:
            self.problem(path, None, f"outside the root {root} (ids are paths relative to it)")
            return
        problem = _name_problem(name)
        if problem:
            self.problem(path, None, problem)
            return
        if suffix != ".jsonl":
            name = self.known_ids.get(_source(real), name)
        self._tasks.append((size, lambda: self.read_file(path, name)))

    def size(self, path: Path) -> int | None:
        try:
            size = path.stat().st_size
        except OSError as error:
            self.problem(path, None, f"cannot be read ({error.strerror or error})")
            return None
        if size > self.max_file_bytes:
            self.problem(path, None, f"file is {size:,} bytes, over the {self.max_file_bytes:,}-byte limit")
            return None
        return size

    def plan_benchmark(self, path: Path) -> None:
        """A KET-RAG folder: its document.txt and qa-pairs.json; anything else in it is listed as not read."""
        read = ("document.txt", "qa-pairs.json")
        try:
            others = sorted(e for e in path.iterdir() if e.name not in read and not e.name.startswith("."))
        except OSError:
            others = []  # reading document.txt says what is wrong with the folder
        for entry in others:
            self.problem(entry, None, f"not read: its folder is KET-RAG benchmark data ({', '.join(read)})")
        size = self.size(path / "document.txt")  # the passages: the questions are not read to index
        if size is not None:
            self._tasks.append((size, lambda: self.add_benchmark(path)))

    def add_benchmark(self, path: Path) -> None:
        try:  # the passages alone: a broken questions file beside them no longer loses the corpus
            bench = load_benchmark(path, limit=0)
        except InputError as error:
            self.problem(path, None, f"benchmark data could not be read: {error}")
            return
        for skipped in bench.skipped:  # passages no way in indexes (text_problem), left out by the loader
            self.problem(path, None, skipped)
        for document in bench.documents:
            source = _source(Path(document.source) if document.source else path)
            document.metadata = {**self.base, "source_path": source, **document.metadata}
            self.add_document(document, path, None)

    def read_file(self, path: Path, name: str) -> None:
        try:
            data = _read_regular(path, self.max_file_bytes)
            modified = _modified(path)
        except OSError as error:
            self.problem(path, None, f"cannot be read ({error.strerror or error})")
            return
        if data is None:
            self.problem(path, None, "not a regular file (a device or a pipe) when read")
            return
        if len(data) > self.max_file_bytes:
            self.problem(path, None, f"file grew past the {self.max_file_bytes:,}-byte limit while it was read")
            return
        self.add_data(path, name, data, _source(path), modified)

    def add_data(self, where: Path | str, name: str, data: bytes, source: str, modified: str) -> None:
        """The bytes of one file (read from disk or uploaded) as its document or JSONL records."""
        suffix = PurePosixPath(name).suffix.lower()
        if suffix not in DOCUMENT_SUFFIXES and suffix != ".jsonl":
            self.problem(where, None, f"unsupported file type {suffix or '(none)'!r} (expected: {_KINDS})")
            return
        if not data.strip():
            self.problem(where, None, "empty file")
            return
        metadata: dict[str, Any] = {}
        try:
            if suffix in READERS:
                extracted = READERS[suffix](data)
                text, title, metadata = extracted.text, extracted.title, extracted.metadata
            else:
                text, encoding = decode(data)
                title = (markdown_title(text) if suffix in MARKDOWN else None) or ""
                if encoding != "utf-8":
                    metadata["encoding"] = encoding
        except Unreadable as error:
            self.problem(where, None, str(error))
            return
        if suffix == ".jsonl":
            self.add_jsonl(where, name, text, source, metadata)
            return
        problem = "no text in it" if not text.strip() else text_problem(text)
        if problem:
            self.problem(where, None, problem)
            return
        stem = PurePosixPath(name).stem
        metadata = {**self.base, **metadata, "source_path": source, "modified": modified}
        self.add_document(Document(id=name, text=text, title=title or stem, source=source, metadata=metadata), where)

    def add_jsonl(self, where: Path | str, name: str, text: str, source: str, extra: dict[str, Any]) -> None:
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line, parse_constant=_no_constant, parse_float=_finite_float)
            except json.JSONDecodeError as error:
                self.problem(where, lineno, f"invalid JSON ({error.msg} at column {error.colno})")
                continue
            except ValueError as error:  # e.g. an integer past Python's 4,300-digit limit
                self.problem(where, lineno, f"unreadable JSON ({cut(str(error))})")
                continue
            except RecursionError:  # Python's parser gives up around a thousand levels
                self.problem(where, lineno, f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
                continue
            try:
                document = self.record_document(record, f"{name}:{lineno}", source, lineno)
            except ValueError as error:
                self.problem(where, lineno, str(error))
                continue
            document.metadata.update(extra)
            self.add_document(document, where, lineno)

    def record_document(self, record: Any, default_id: str, source: str, lineno: int) -> Document:
        """One JSONL record as a Document; ValueError says what is wrong with it."""
        if not isinstance(record, dict):
            raise ValueError("record is not a JSON object")
        place = too_deep_at(record)
        if place:
            raise ValueError(f"{cut(place)!r} is nested more than {MAX_JSON_DEPTH} levels deep")
        doc_id = record.get("id", default_id)
        nested = record.get("metadata") or {}
        if not isinstance(nested, dict):
            raise ValueError("'metadata' must be a JSON object")
        extra = {k: v for k, v in record.items() if k not in ("id", "text", "title", "metadata")}
        metadata = {**self.base, **nested, **extra, "source_path": source, "line": lineno}
        title = record.get("title") or ""
        # Types are checked there: the dataclass takes what the record holds, text included.
        return checked_document(Document(doc_id, record.get("text"), title, source, metadata))  # type: ignore[arg-type]

    def add_document(self, document: Document, where: Path | str, line: int | None = None) -> None:
        document = canonical_document(document)
        first = self._first_source.get(document.id)
        if first is not None:
            # A file's id is its path under the folder named: two folders may hold one name.
            hint = "" if line is not None else " (to keep both, give their common parent folder as --root)"
            self.problem(where, line, f"duplicate document id {document.id!r} (first read from {first}); dropped{hint}")
            return
        self._first_source[document.id] = str(where)
        self.documents.append(document)
