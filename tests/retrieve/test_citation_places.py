"""Citations name the page (PDF) or section (DOCX, HTML) a piece starts in: in `hopgraph query`'s
output, in the server's evidence JSON and in an answer's citations.

A real PDF of three pages and a real DOCX of two sections are indexed through the CLI, cut so that
pieces start on pages 2 and 3 and inside the second section. Places come from each piece's start
offset in its documents (the ``starts`` column of the piece tables); an index written before
pieces recorded it still answers, naming no place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest

from hopgraph.config import load_config
from hopgraph.retrieve.answer import read_answer
from hopgraph.retrieve.packing import Evidence, RetrievalResult
from hopgraph.serve.openai import sources
from hopgraph.store import IndexStore
from tests.index.test_ingest_formats import pdf_bytes
from tests.serve.support import LiveServer, auth

# Pages and sections of about 40 tokens, cut into 48-token pieces: the second piece starts a few
# words into page 2 (and into section "Tools"), the third a few more into page 3.
PAGES = [
    "Page one tells how the harbour cranes were serviced in July by the maintenance crew of the north "
    "quay, who replaced two cables and a brake pad on the oldest crane of the yard.",
    "Page two reports that Omar Haddad signed the inspection of the crane log after the service, and "
    "that he asked for a second check of the brake pads before the winter storms begin.",
    "Page three lists the costs of the service: cables, brake pads and forty hours of crew time, all "
    "paid from the maintenance budget of the north quay for the third quarter.",
]
SETTINGS = ["--chunking.size", "48", "--chunking.overlap", "0", "--chunking.splits", "0"]
SETTINGS += ["--chunking.pack_documents", "false", "--graph.theta_co", "1"]


def write_handbook(path: Path) -> None:
    document = docx.Document()
    document.core_properties.title = "Handbook"
    document.add_heading("Safety", level=1)
    document.add_paragraph(
        "Helmets and gloves are worn on every quay at all times, and visitors are escorted by a member of "
        "the harbour team from the gate to the office."
    )
    document.add_heading("Tools", level=1)
    document.add_paragraph(
        "The crane log is kept by Omar Haddad in the harbour office. Ask him before using the large crane, "
        "and write every hour of use in the log with your name and the load you lifted."
    )
    document.save(str(path))


def hopgraph(cwd: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "hopgraph.cli", *args], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("places")
    (root / "docs").mkdir()
    (root / "docs" / "crane-report.pdf").write_bytes(pdf_bytes(PAGES, "Crane report"))
    write_handbook(root / "docs" / "handbook.docx")
    (root / "docs" / "notes.md").write_text("# Notes\n\nThe north quay reopens on Monday.\n", encoding="utf-8")
    hopgraph(root, "index", "docs", "--out", "idx", "-q", *SETTINGS)
    return root


def without_starts(index: Path) -> None:
    """Drops ``starts`` from the piece tables, as an index written before it existed, keeping the
    manifest's file records."""
    store = IndexStore(index)
    for name in ("chunks", "units"):
        table = store.read_table(name)
        del table["starts"]
        store.write_table(name, table)
    manifest = store.read_manifest()
    manifest["stages"]["chunks"]["files"].update(store.take_written())
    store.write_manifest(manifest)


def places(evidence: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(doc, place) for e in evidence for doc, place in zip(e["doc_ids"], e["places"])}


EXPECTED = {("crane-report.pdf", "p. 2"), ("crane-report.pdf", "p. 3"), ("handbook.docx", "Tools")}
QUESTION = "Who keeps the crane log and signed the inspection?"


@pytest.mark.slow  # two CLI queries and a server, each loading the embedding model: ~40 s on 2 cores
def test_cli_server_and_answer_citations_name_page_and_section(built: Path, tmp_path: Path) -> None:
    index = built / "idx"
    ask = ("query", str(index), QUESTION, "--retrieval.method", "text", "--retrieval.budget", "2000")
    result = json.loads(hopgraph(tmp_path, *ask, "--json"))
    assert EXPECTED <= places(result["evidence"]) and ("notes.md", "") in places(result["evidence"])
    assert ("crane-report.pdf", "p. 1") in places(result["evidence"])
    shown = hopgraph(tmp_path, *ask)
    assert "source: Crane report (p. 3)" in shown and "source: Handbook (Tools)" in shown
    assert "source: Notes\n" in shown  # Markdown: no page or section to name

    config = load_config(None, {"retrieval.method": "text", "retrieval.budget": 2000})
    with LiveServer(index, config) as live:
        reply = httpx.post(f"{live.url}/v1/retrieve", json={"query": QUESTION}, headers=auth("admin"), timeout=60)
    assert reply.status_code == 200, reply.text
    assert EXPECTED <= places(reply.json()["evidence"])

    evidence = [Evidence(**e) for e in result["evidence"]]
    cited = read_answer("Omar Haddad [1] [2] [3]", RetrievalResult(QUESTION, "text", 2000, evidence), config.answer)
    assert [c["places"] for c in cited.citations] == [e.places for e in evidence[:3]]
    assert all(len(c["places"]) == len(c["doc_ids"]) for c in cited.citations)
    named = sources(cited)  # the source lines of the OpenAI-compatible answer
    for c in cited.citations:
        for title, place in zip(c["titles"], c["places"]):
            assert (f"{title} ({place})" if place else title) in named


def test_index_without_starts_cites_documents_only(built: Path, tmp_path: Path) -> None:
    """An index written before pieces recorded their offsets still answers; citations name no place."""
    subprocess.run(["cp", "-r", str(built / "idx"), str(tmp_path / "idx")], check=True)
    without_starts(tmp_path / "idx")
    ask = ("query", "idx", QUESTION, "--retrieval.method", "text", "--retrieval.budget", "2000", "--json")
    evidence = json.loads(hopgraph(tmp_path, *ask))["evidence"]
    assert evidence and all(e["places"] == [""] * len(e["doc_ids"]) for e in evidence)


def test_a_documents_own_pages_or_sections_field_names_no_place_and_its_index_loads(tmp_path, sample_config):
    # JSONL records may carry any metadata: "pages": 212 is a page count, not a reader's offsets.
    from hopgraph.documents import Document
    from hopgraph.index.pipeline import build_index
    from hopgraph.retrieve.loaded import LoadedIndex
    from hopgraph.retrieve.retriever import Retriever

    odd: list[Any] = [212, [3, 1], ["a"], [True], "intro"]
    documents = [
        Document(id=f"book-{n}", text=f"The Marmalade handbook {n} explains Seville oranges.", metadata=meta)
        for n, meta in enumerate([{"pages": value} for value in odd] + [{"sections": value} for value in odd])
    ]
    build_index(documents, tmp_path / "index", sample_config, progress=False)
    result = Retriever(LoadedIndex(tmp_path / "index"), sample_config.retrieval).retrieve(
        "Seville oranges", method="text"
    )
    assert result.evidence and all(place == "" for e in result.evidence for place in e.places)
