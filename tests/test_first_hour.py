"""The first hour with hopgraph on the 18-document example wiki, through the command line as
``scripts/first_hour.sh`` runs it: index the folder, replace one file by an edited copy given by
another path, list the documents, ask two-hop questions with the default (LLM-free) method, delete
one document.

What a user must see: the edited version served and the old one gone; 18 documents, then 17; for
each question the pieces that hold its supporting sentences (``examples/wiki-questions.jsonl``)
within the 10 shown; no shown piece cut inside a word; no message with a doubled word."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
WIKI = ROOT / "examples" / "wiki"
EDITED = ROOT / "examples" / "wiki-edited"
QUESTIONS = ROOT / "examples" / "wiki-questions.jsonl"
SHOWN = 10  # pieces `hopgraph query` prints
SEPARATOR = "\n\n"  # between documents cut as one stream (hopgraph.index.chunking.SEPARATOR)
DOUBLED = re.compile(r"\b(at|the|to|of|a|an|in|on|is|for|and|by|with|from|or|as)\s+\1\b", re.IGNORECASE)


def hopgraph(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "hopgraph.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    for stream in (out.stdout, out.stderr):
        doubled = DOUBLED.search(stream)
        context = stream[max(doubled.start() - 60, 0) :][:120] if doubled else ""
        assert doubled is None, f"doubled word in the output of {args[0]}: {context!r}"
    return out


def span_of(text: str, sentence: str) -> tuple[int, int]:
    """Where ``sentence`` lies in ``text``, line breaks counted as spaces."""
    found = re.search(r"\s+".join(map(re.escape, sentence.split())), text)
    assert found, f"{sentence!r} is not in the document"
    return found.span()


def place_in(piece: dict[str, Any], texts: dict[str, str]) -> tuple[str, int] | None:
    """(the documents a piece covers, joined as chunking joins them; the piece's offset there)."""
    joined = SEPARATOR.join(texts[d] for d in piece["doc_ids"])
    at = joined.find(piece["text"])
    return (joined, at) if at >= 0 else None


def covered(doc: str, span: tuple[int, int], pieces: Sequence[dict[str, Any]], texts: dict[str, str]) -> bool:
    """Whether the pieces' texts together hold all of ``span`` of document ``doc`` (but the spaces between them)."""
    intervals = []
    for piece in pieces:
        where = place_in(piece, texts) if doc in piece["doc_ids"] else None
        if where is None:
            continue
        base = sum(len(texts[d]) + len(SEPARATOR) for d in piece["doc_ids"][: piece["doc_ids"].index(doc)])
        intervals.append((where[1] - base, where[1] - base + len(piece["text"])))
    text, reached = texts[doc], span[0]
    for start, end in sorted(intervals):
        while reached < span[1] and text[reached].isspace():  # pieces are stripped: spaces between them count
            reached += 1
        if start <= reached < end:
            reached = end
    return reached >= span[1]


def cut_inside_words(pieces: Sequence[dict[str, Any]], texts: dict[str, str]) -> list[str]:
    """The pieces whose first or last character continues a word of their document."""
    cut = []
    for piece in pieces:
        where = place_in(piece, texts)
        assert where is not None, f"piece {piece['kind']} {piece['index']} is not text of {piece['doc_ids']}"
        joined, at = where
        end = at + len(piece["text"])
        if (at > 0 and joined[at - 1].isalnum() and joined[at].isalnum()) or (
            end < len(joined) and joined[end - 1].isalnum() and joined[end].isalnum()
        ):
            cut.append(
                f"{piece['doc_ids']}: {joined[max(at - 10, 0) : at]}|{piece['text'][:30]!r} … "
                f"{piece['text'][-30:]!r}|{joined[end : end + 10]}"
            )
    return cut


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scenario's steps, each through the CLI; what the assertions need from their output."""
    work = tmp_path_factory.mktemp("first_hour")
    index = str(work / "index")
    built = json.loads(hopgraph(ROOT, "index", str(WIKI), "--out", index, "-q", "--json").stdout)
    before = json.loads(hopgraph(ROOT, "documents", index, "--json").stdout)["documents"]
    replaced = hopgraph(
        ROOT, "update", index, "--add", str(EDITED / "people" / "tomas-reyes.md"), "--root", str(EDITED), "-q"
    )
    after_edit = json.loads(hopgraph(ROOT, "documents", index, "--json").stdout)["documents"]
    answers = hopgraph(ROOT, "query", index, "--questions", str(QUESTIONS), "--json").stdout.splitlines()
    about_tomas = json.loads(hopgraph(ROOT, "query", index, "Where does Tomas Reyes work?", "--json").stdout)
    hopgraph(ROOT, "update", index, "--delete", "policies/remote-work.md", "-q")
    after_delete = json.loads(hopgraph(ROOT, "documents", index, "--json").stdout)["documents"]
    texts = {str(path.relative_to(WIKI)): path.read_text(encoding="utf-8") for path in WIKI.rglob("*.md")}
    texts["people/tomas-reyes.md"] = (EDITED / "people" / "tomas-reyes.md").read_text(encoding="utf-8")
    return {
        "built": built,
        "before": before,
        "replaced": replaced.stdout,
        "after_edit": after_edit,
        "results": [json.loads(line) for line in answers],
        "questions": [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()],
        "about_tomas": about_tomas,
        "after_delete": after_delete,
        "texts": texts,
    }


@pytest.mark.slow  # eight CLI runs, each loading the embedding model: about a minute on 2 cores
def test_documents_listed_replaced_by_id_and_deleted(first_hour: dict[str, Any]) -> None:
    ids = sorted(first_hour["texts"])
    assert len(ids) == 18 and first_hour["built"]["documents"] == 18
    assert [row["id"] for row in first_hour["before"]] == ids
    assert "+1 added, -0 deleted, 1 replaced" in first_hour["replaced"]
    rows = {row["id"]: row for row in first_hour["after_edit"]}
    assert sorted(rows) == ids, "the edited copy must replace people/tomas-reyes.md, not be added beside it"
    assert rows["people/tomas-reyes.md"]["source"] == str((EDITED / "people" / "tomas-reyes.md").resolve())
    assert sorted(row["id"] for row in first_hour["after_delete"]) == [i for i in ids if i != "policies/remote-work.md"]


@pytest.mark.slow
def test_only_the_edited_version_is_served(first_hour: dict[str, Any]) -> None:
    texts, evidence = first_hour["texts"], first_hour["about_tomas"]["evidence"]
    doc = "people/tomas-reyes.md"
    pieces = [e for e in evidence if doc in e["doc_ids"]]
    assert pieces and all(place_in(e, texts) is not None for e in pieces), "a piece of the old version is served"
    assert covered(doc, span_of(texts[doc], "Since March 2025 he has worked from the Munich office"), pieces, texts)
    assert not any("Lisbon office and is usually" in " ".join(e["text"].split()) for e in pieces)


@pytest.mark.slow
def test_two_hop_answers_are_held_by_the_pieces_shown(first_hour: dict[str, Any]) -> None:
    texts = first_hour["texts"]
    assert [r["query"] for r in first_hour["results"]] == [q["question"] for q in first_hour["questions"]]
    for result, question in zip(first_hour["results"], first_hour["questions"]):
        shown = result["evidence"][:SHOWN]
        assert result["method"] == "ppr"
        for doc, sentence in question["support"]:
            span = span_of(texts[doc], sentence)
            assert covered(doc, span, shown, texts), (
                f"{question['question']}: {sentence!r} ({doc}) not in the top {SHOWN}"
            )


@pytest.mark.slow
def test_no_shown_piece_is_cut_inside_a_word(first_hour: dict[str, Any]) -> None:
    cut = [
        piece
        for result in first_hour["results"] + [first_hour["about_tomas"]]
        for piece in cut_inside_words(result["evidence"][:SHOWN], first_hour["texts"])
    ]
    assert not cut, "pieces cut inside a word:\n" + "\n".join(cut)
