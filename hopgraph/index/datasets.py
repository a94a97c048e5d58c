"""Benchmark loaders: turn the published multi-hop QA formats into Documents and Questions.

Four formats are read, recognised by their content keys rather than file names alone:
KET-RAG (folder with ``document.txt`` + ``qa-pairs.json``), HippoRAG (``NAME.json`` +
``NAME_corpus.json``), IRCoT jsonl (``question_text`` + ``contexts``) and official MuSiQue
(``paragraphs`` + ``question_decomposition``/``answerable``). Titled paragraphs get an id hashed
from title and text, so the same passage has the same id in every format and every run.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopgraph.documents import MAX_JSON_DEPTH, Document, invalid_unicode_at, text_problem, too_deep_at
from hopgraph.errors import InputError, cut, listed

KETRAG, HIPPORAG, IRCOT, MUSIQUE = "ketrag", "hipporag", "ircot", "musique"
_CORPUS_SUFFIX = "_corpus.json"

# (where, record): "where" is "file:line" for jsonl and "file record N" for json, for messages.
_Record = tuple[str, dict[str, Any]]


@dataclass
class Question:
    id: str
    text: str
    answers: list[str]  # gold answer first, then aliases
    supporting_ids: list[str] | None = None  # ids of supporting passages where the data marks them


@dataclass
class Benchmark:
    name: str
    documents: list[Document]
    questions: list[Question]
    skipped: list[str] = field(default_factory=list)  # passages left out, with why (as `hopgraph index` leaves them)


def paragraph_id(title: str, text: str) -> str:
    """Short stable id of a titled paragraph, so supporting ids match the corpus across runs."""
    return hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]


def detect_format(path: str | Path) -> str | None:
    """Name of the benchmark format at ``path``, or None when it is not one (never raises)."""
    path = Path(path)
    try:
        if path.is_dir():
            if (path / "document.txt").is_file() and (path / "qa-pairs.json").is_file():
                return KETRAG
            return HIPPORAG if len(_corpus_files(path)) == 1 else None
        if path.name == "document.txt" and (path.parent / "qa-pairs.json").is_file():
            return KETRAG
        if path.suffix.lower() == ".jsonl":
            first = _first_jsonl_object(path)
            return _record_format(first) if first is not None else None
        if path.suffix.lower() != ".json":
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # Python's JSON parser gives up near a thousand levels
        return None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None
    first = data[0]
    if "question" in first and _sibling_corpus(path).is_file():
        return HIPPORAG
    if "text" in first and "question" not in first:
        return HIPPORAG  # a corpus file: its questions file, if any, is found by name
    if {"id", "question", "answer"} <= first.keys() and (path.parent / "document.txt").is_file():
        return KETRAG
    return _record_format(first)


def load_benchmark(path: str | Path, *, limit: int | None = None) -> Benchmark:
    """Read a benchmark; ``limit`` keeps the first N questions over the whole corpus (same index as the
    full set); 0 reads the passages alone, without reading a questions file of their own."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if limit is not None and limit < 0:
        raise InputError(f"limit must be 0 or more, not {limit}")
    kind = detect_format(path)
    if kind is None:
        if path.is_file() and path.suffix.lower() in (".json", ".jsonl"):
            _read_records(path)  # raises the precise reason when the JSON itself is broken
        raise InputError(
            f"{path}: not a recognised benchmark (expected a KET-RAG folder with document.txt and "
            "qa-pairs.json, HippoRAG NAME.json + NAME_corpus.json, IRCoT jsonl with question_text "
            "and contexts, or MuSiQue json/jsonl with paragraphs)"
        )
    loaders: dict[str, Callable[[Path, int | None], Benchmark]] = {
        KETRAG: _load_ketrag,
        HIPPORAG: _load_hipporag,
        IRCOT: _load_ircot,
        MUSIQUE: _load_musique,
    }
    return _checked(loaders[kind](path, limit))


def load_questions(path: str | Path, *, limit: int | None = None) -> list[Question]:
    """Questions about a corpus of one's own (JSONL, or a JSON list): ``question``, ``answer`` (or
    ``answers``, a list, and ``answer_aliases``), optionally ``id`` (else the line number) and the
    ids of the documents that support the answer, as ``supporting_ids`` or as ``support`` pairs of
    [document id, sentence] (``examples/wiki-questions.jsonl``) or plain ids; support in another
    shape is refused (it was ignored, and recall reported as absent without a word)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    questions = []
    for index, (where, record) in enumerate(_read_records(path)[:limit]):  # (objects: _read_records checks)
        support = [_support_id(s, where) for s in _listed(record, "support", where)]
        support += [_support_id(s, where) for s in _listed(record, "supporting_ids", where)]
        questions.append(_question(record, where, ("id",), str(index + 1), list(dict.fromkeys(support)) or None))
    return questions


def _listed(record: dict[str, Any], key: str, where: str) -> list[Any]:
    value = record.get(key)
    if value is not None and not isinstance(value, list):
        raise InputError(f"{where}: {key!r} must be a list of document ids or [document id, sentence] pairs")
    return value or []


def _support_id(item: Any, where: str) -> str:
    """The document id of one ``support`` item: an id, or a [document id, sentence] pair."""
    if isinstance(item, list) and item:
        item = item[0]
    if not isinstance(item, str) or not item:
        raise InputError(
            f"{where}: support item {cut(json.dumps(item))} is neither a document id nor a [document id, sentence] pair"
        )
    return item


def _question(
    record: dict[str, Any], where: str, id_keys: tuple[str, ...], default_id: str, supporting: list[str] | None
) -> Question:
    """A question record as the HippoRAG-style files and one's own questions both spell it: an id
    (``default_id`` without one), ``question``, and ``answer``, ``answers`` or ``answer_aliases``."""
    return Question(
        id=_id_field(record, id_keys, where) if any(key in record for key in id_keys) else default_id,
        text=_field(record, "question", str, where),
        answers=_answer_list(record.get("answer"), record.get("answers"), record.get("answer_aliases")),
        supporting_ids=supporting,
    )


def check_questions(bench: Benchmark, path: str | Path) -> None:
    """Refuse (InputError, naming them) a benchmark without questions (a HippoRAG corpus file alone:
    no Coverage to report) and questions that cannot be scored: an empty one, an id given twice
    (results are kept per id), one without a gold answer (it could never be covered, so Coverage
    would be capped unseen). For evaluation only: indexing reads the passages alone."""
    if not bench.questions:
        raise InputError(
            f"{path}: no questions to evaluate (a HippoRAG NAME_corpus.json needs its questions, NAME.json, beside it)"
        )
    counts = Counter(q.id for q in bench.questions)
    for problem, ids in (
        ("empty question", [q.id for q in bench.questions if not q.text.strip()]),
        ("question id given more than once", sorted(i for i, n in counts.items() if n > 1)),
        ("question without a gold answer", [q.id for q in bench.questions if not any(a.strip() for a in q.answers)]),
    ):
        if ids:
            raise InputError(f"{path}: {len(ids)} {problem}(s): {listed([repr(cut(i)) for i in ids])}")


def _checked(bench: Benchmark) -> Benchmark:
    """Passages that no way in indexes (:func:`text_problem`) left out into ``skipped``, so eval
    indexes what `hopgraph index` does from the same file."""
    kept = []
    for document in bench.documents:
        reason = text_problem(document.text)
        if reason:
            bench.skipped.append(f"paragraph {document.id!r} ({cut(document.title)!r}): {reason}")
        else:
            kept.append(document)
    bench.documents = kept
    return bench


def _record_format(record: dict[str, Any]) -> str | None:
    if "question_text" in record and "contexts" in record:
        return IRCOT
    if "paragraphs" in record and ("question_decomposition" in record or "answerable" in record):
        return MUSIQUE
    return None


def _corpus_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*" + _CORPUS_SUFFIX) if p.is_file())


def _sibling_corpus(questions_path: Path) -> Path:
    return questions_path.with_name(questions_path.stem + _CORPUS_SUFFIX)


def _first_jsonl_object(path: Path) -> dict[str, Any] | None:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                value = json.loads(line)
                return value if isinstance(value, dict) else None
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not valid UTF-8 at byte offset {error.start}") from None
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({error.strerror or error})") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deep (a benchmark record has a few levels)") from None


def _read_records(path: Path) -> list[_Record]:
    """All records of a json list or jsonl file, each with where it came from."""
    if path.suffix.lower() == ".jsonl":
        records: list[tuple[str, Any]] = []
        for lineno, line in enumerate(_read_text(path).split("\n"), start=1):
            if line.strip():
                try:
                    records.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as error:
                    raise InputError(f"{path}:{lineno}: invalid JSON ({error.msg})") from None
                except RecursionError:
                    raise InputError(f"{path}:{lineno}: JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    else:
        data = _read_json(path)
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of records")
        records = [(f"{path} record {i}", value) for i, value in enumerate(data, start=1)]
    for where, value in records:
        if not isinstance(value, dict):
            raise InputError(f"{where}: record is not a JSON object")
        place = too_deep_at(value)
        if place:
            raise InputError(f"{where}: {cut(place)!r} is nested more than {MAX_JSON_DEPTH} levels deep")
        place = invalid_unicode_at(value)  # "\ud800" reads into a str that no file or hash can encode
        if place:
            raise InputError(f"{where}: {place[:80]!r} holds a lone surrogate (not Unicode text)")
    return records


def _field(record: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{where}: missing or invalid '{key}' (expected {kind.__name__})")
    return value


def _id_field(record: dict[str, Any], keys: tuple[str, ...], where: str) -> str:
    for key in keys:
        if isinstance(record.get(key), (str, int)) and not isinstance(record[key], bool):
            return str(record[key])
    raise InputError(f"{where}: missing question id ({' or '.join(repr(k) for k in keys)})")


def _answer_list(*values: Any) -> list[str]:
    """Flatten answers given as strings or lists into one de-duplicated list, order kept."""
    answers: list[str] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if item is not None and str(item) not in answers:
                answers.append(str(item))
    return answers


def _list(value: Any) -> list[Any]:
    """An optional list field, as a list (a malformed one as none: it only marks support or answers)."""
    return value if isinstance(value, list) else []


def _load_ketrag(path: Path, limit: int | None) -> Benchmark:
    folder = path if path.is_dir() else path.parent
    text_path, qa_path = folder / "document.txt", folder / "qa-pairs.json"
    documents = []
    for number, line in enumerate(_read_text(text_path).split("\n")):
        if line.strip():  # blank lines are skipped but still count, so ids follow physical lines
            documents.append(
                Document(id=f"p{number:05d}", text=line.strip(), source=str(text_path), metadata={"line": number})
            )
    records = _read_records(qa_path)[:limit] if limit != 0 else []  # 0: the passages alone, questions unread
    questions = [
        Question(
            id=_id_field(record, ("id",), where),
            text=_field(record, "question", str, where),
            answers=_answer_list(record.get("answer")),
        )
        for where, record in records
    ]
    return Benchmark(_named(folder.parent.name, folder.name), documents, questions)


def _titled(title: str, text: str, source: Path) -> Document:
    return Document(id=paragraph_id(title, text), text=text, title=title, source=str(source), metadata={"title": title})


def _named(folder: str, name: str) -> str:
    """ "FOLDER/NAME", or NAME for a file in the current folder (its parent's name is "")."""
    return f"{folder}/{name}" if folder else name


def _dataset_name(corpus_path: Path) -> str:
    """``NAME`` of ``NAME_corpus.json`` (HippoRAG's naming), else the file stem."""
    name = corpus_path.name
    return name[: -len(_CORPUS_SUFFIX)] if name.endswith(_CORPUS_SUFFIX) else corpus_path.stem


def _hipporag_paths(path: Path) -> tuple[Path, Path | None]:
    """(corpus file, questions file if any) for a HippoRAG folder, questions file or corpus file."""
    if path.is_dir():
        corpus_path = _corpus_files(path)[0]
    elif _sibling_corpus(path).is_file():
        return _sibling_corpus(path), path
    else:
        corpus_path = path
    if not corpus_path.name.endswith(_CORPUS_SUFFIX):
        return corpus_path, None  # recognised by content only: no questions file by name
    questions_path = corpus_path.with_name(_dataset_name(corpus_path) + ".json")
    return corpus_path, questions_path if questions_path.is_file() else None


def _load_hipporag(path: Path, limit: int | None) -> Benchmark:
    corpus_path, questions_path = _hipporag_paths(path)
    documents: dict[str, Document] = {}
    for where, record in _read_records(corpus_path):
        document = _titled(str(record.get("title") or ""), _field(record, "text", str, where), corpus_path)
        documents.setdefault(document.id, document)
    by_title: dict[str, list[str]] = {}
    loosely: dict[str, str] = {}
    for document in documents.values():
        by_title.setdefault(document.title, []).append(document.id)
        loosely.setdefault(_loose(document.title, document.text), document.id)
    questions, unmatched = [], []
    asked = _read_records(questions_path)[:limit] if questions_path and limit != 0 else []  # 0: unread
    for index, (where, record) in enumerate(asked):
        support = _hipporag_support(record, documents, by_title, loosely)
        question = _question(record, where, ("id", "_id"), str(index), support)
        unmatched += [f"question {question.id!r}" for i in support or () if i not in documents]
        questions.append(question)
    skipped = []
    if unmatched:  # in the recall denominator, never found: recall counts what the data marks
        skipped.append(
            f"{len(unmatched)} supporting paragraph(s) not in {corpus_path.name} (counted as not retrieved): "
            f"{listed(sorted(set(unmatched)))}"
        )
    return Benchmark(_dataset_name(corpus_path), list(documents.values()), questions, skipped)


def _loose(title: str, text: str) -> str:
    """A paragraph as its supporting mark and its corpus entry may both spell it: a question file's
    copy may differ from the corpus file's in white space alone."""
    return " ".join(title.split()) + "\n" + " ".join(text.split())


def _hipporag_support(
    record: dict[str, Any], documents: dict[str, Document], by_title: dict[str, list[str]], loosely: dict[str, str]
) -> list[str] | None:
    """Supporting ids from MuSiQue-style paragraph flags or HotpotQA-style (title, sentence) facts.
    A flagged paragraph the corpus lacks keeps its own id (no passage has it): it was left out,
    and recall over the rest of the question's passages read higher than it was."""
    found: list[str] = []
    for paragraph in _list(record.get("paragraphs")):
        if isinstance(paragraph, dict) and paragraph.get("is_supporting"):
            title, text = str(paragraph.get("title") or ""), str(paragraph.get("paragraph_text", ""))
            doc_id = paragraph_id(title, text)
            doc_id = doc_id if doc_id in documents else loosely.get(_loose(title, text), doc_id)
            if doc_id not in found:
                found.append(doc_id)
    for fact in _list(record.get("supporting_facts")):
        named = fact[0] if isinstance(fact, list) and fact else None
        ids = by_title.get(str(named)) or [f"title:{named}"]  # a title the corpus lacks counts as not retrieved
        found.extend(i for i in ids if i not in found)
    return found or None


def _load_paragraph_qa(
    path: Path,
    limit: int | None,
    paragraphs_key: str,
    id_key: str,
    text_key: str,
    answers_of: Callable[[dict[str, Any]], list[str]],
) -> Benchmark:
    """Shared reader for formats that ship each question with its own titled paragraphs.

    The corpus is every question's paragraphs even under ``limit``: a smaller corpus would make the
    first questions easier than they are in the full benchmark. It is ordered by paragraph id (a
    content hash), not by question: chunking packs consecutive documents, and in question order one
    1200-token chunk would hold a question's whole candidate set, gold paragraphs included.
    """
    documents: dict[str, Document] = {}
    questions = []
    for n, (where, record) in enumerate(_read_records(path)):
        supporting: list[str] = []
        marked = False
        for paragraph in _field(record, paragraphs_key, list, where):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("paragraph_text"), str):
                raise InputError(f"{where}: every entry of '{paragraphs_key}' needs a 'paragraph_text' string")
            document = _titled(str(paragraph.get("title") or ""), paragraph["paragraph_text"], path)
            documents.setdefault(document.id, document)
            marked = marked or "is_supporting" in paragraph
            if paragraph.get("is_supporting") and document.id not in supporting:
                supporting.append(document.id)
        if limit is None or n < limit:
            questions.append(
                Question(
                    _id_field(record, (id_key,), where),
                    _field(record, text_key, str, where),
                    answers_of(record),
                    supporting if marked else None,
                )
            )
    return Benchmark(_named(path.parent.name, path.stem), [documents[key] for key in sorted(documents)], questions)


def _load_ircot(path: Path, limit: int | None) -> Benchmark:
    def answers(record: dict[str, Any]) -> list[str]:
        objects = _list(record.get("answers_objects"))
        return _answer_list(*(o.get("spans") or [] for o in objects if isinstance(o, dict)))

    return _load_paragraph_qa(path, limit, "contexts", "question_id", "question_text", answers)


def _load_musique(path: Path, limit: int | None) -> Benchmark:
    def answers(record: dict[str, Any]) -> list[str]:
        return _answer_list(record.get("answer"), record.get("answer_aliases") or [])

    return _load_paragraph_qa(path, limit, "paragraphs", "id", "question", answers)
