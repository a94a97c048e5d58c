"""The documents people have, through the command line: a folder of PDF, DOCX, HTML, Markdown and
Latin-1 files indexed with what was skipped named, an edited copy replacing its original by id, and
the live documents listed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hopgraph.index.catalog import file_ids, namesakes
from tests.index.test_ingest_formats import HTML, pdf_bytes, write_docx
from tests.test_cli import SMALL


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "hopgraph.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.slow
def test_index_replace_by_id_and_list_documents(tmp_path: Path) -> None:
    wiki = tmp_path / "wiki"
    (wiki / "people").mkdir(parents=True)
    (wiki / "reports").mkdir()
    (wiki / "people" / "tomas-reyes.md").write_text("# Tomas Reyes\nTomas leads the harbour team.\n", encoding="utf-8")
    (wiki / "reports" / "q3.pdf").write_bytes(pdf_bytes(["Crane hours rose in July.", "Omar Haddad signed it."], "Q3"))
    write_docx(wiki / "handbook.docx")
    (wiki / "safety.html").write_bytes(HTML.encode("cp1252"))
    (wiki / "cafe.txt").write_bytes("Caf\u00e9 Vell opens at six on the quay.\n".encode("latin-1"))
    (wiki / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    copy = tmp_path / "wiki2" / "people" / "tomas-reyes.md"
    copy.parent.mkdir(parents=True)
    copy.write_text("# Tomas Reyes\nTomas is now the port director.\n", encoding="utf-8")

    built = run(tmp_path, "index", "./wiki/", "--out", "idx", "-q", "--json", *SMALL)
    summary = json.loads(built.stdout)
    ids = ["cafe.txt", "handbook.docx", "people/tomas-reyes.md", "reports/q3.pdf", "safety.html"]
    assert summary["ids"] == ids and summary["documents"] == 5 and summary["counts"]["documents"] == 5
    (png,) = summary["skipped"]
    assert Path(png["path"]).name == "logo.png" and png["reason"].startswith("unsupported file type '.png'")
    assert "skipped: wiki/logo.png: unsupported file type" in built.stderr

    # The same file read again for an update keeps its id, and a namesake elsewhere is pointed out.
    assert file_ids(tmp_path / "idx")[str((wiki / "reports" / "q3.pdf").resolve())] == "reports/q3.pdf"
    assert namesakes(tmp_path / "idx", ["tomas-reyes.md"]) == [("tomas-reyes.md", "people/tomas-reyes.md")]

    updated = run(tmp_path, "update", "idx", "--add", str(copy), "--root", "wiki2", "-q")
    assert "read 1 document: people/tomas-reyes.md" in updated.stdout
    assert "+1 added, -0 deleted, 1 replaced" in updated.stdout and "documents=5" in updated.stdout

    listing = json.loads(run(tmp_path, "documents", "idx", "--json").stdout)
    rows = {row["id"]: row for row in listing["documents"]}
    assert sorted(rows) == ids and listing["version"] != "root"
    assert rows["people/tomas-reyes.md"]["source"] == str(copy.resolve())
    assert rows["reports/q3.pdf"]["title"] == "Q3" and rows["handbook.docx"]["title"] == "Onboarding handbook"
    assert rows["cafe.txt"]["acl"] is None and rows["cafe.txt"]["timestamp"][:2] == "20"
    plain = run(tmp_path, "documents", "idx").stdout.splitlines()
    assert plain[0] == f"5 documents in version {listing['version']}"
    assert any(line.startswith("safety.html\tSite safety \u2013 wiki\t") for line in plain[1:])
