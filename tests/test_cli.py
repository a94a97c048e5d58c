"""The command line as a user runs it: real processes, real files, real models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, SAMPLE_SETTINGS

QUESTION = "Who founded the laboratory that the first director of the Halvern Harbor Institute had previously led?"
SMALL = [arg for key, value in SAMPLE_SETTINGS.items() for arg in (f"--{key}", str(value))]


def hopgraph(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "hopgraph.cli", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "index"
    done = hopgraph("index", str(SAMPLE), "--out", str(out), "-q", *SMALL)
    assert "indexed 7 documents" in done.stdout
    return out


@pytest.mark.slow
def test_query_prints_evidence_with_provenance(cli_index):
    plain = hopgraph("query", str(cli_index), QUESTION, "--retrieval.budget", "600")
    assert "Anton Vell" in plain.stdout and "path:" in plain.stdout and "source:" in plain.stdout
    result = json.loads(hopgraph("query", str(cli_index), QUESTION, "--json", "--retrieval.method", "concept").stdout)
    assert result["method"] == "concept" and result["tokens"] <= result["budget"] == 12000
    assert all(ev["doc_ids"] and ev["path"] for ev in result["evidence"])


@pytest.mark.slow
def test_query_groups_hide_restricted_documents(cli_index):
    question = "What budget did the water board approve for the Sorvik campus in 2025?"
    outsider = json.loads(hopgraph("query", str(cli_index), question, "--json", "--groups", "operations").stdout)
    assert "budget-2025" not in {d for ev in outsider["evidence"] for d in ev["doc_ids"]}
    board = json.loads(hopgraph("query", str(cli_index), question, "--json", "--groups", "board").stdout)
    assert "budget-2025" in {d for ev in board["evidence"] for d in ev["doc_ids"]}


def test_inspect_reports_counts_stages_and_core_chunks(cli_index):
    out = hopgraph("inspect", str(cli_index)).stdout
    assert "counts:" in out and "documents=7" in out and "concept_graph" in out and "central concepts:" in out


@pytest.mark.slow
def test_killed_index_run_resumes_where_it_stopped(tmp_path):
    out = tmp_path / "index"
    process = subprocess.Popen(
        [sys.executable, "-m", "hopgraph.cli", "index", str(SAMPLE), "--out", str(out), "-q", *SMALL],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    manifest = out / "manifest.json"
    deadline = time.time() + 120
    finished: dict = {}
    while time.time() < deadline and process.poll() is None:
        if manifest.exists():
            try:
                finished = json.loads(manifest.read_text())["stages"]
            except (json.JSONDecodeError, KeyError):
                finished = {}
            if "chunks" in finished:
                break
        time.sleep(0.02)
    if process.poll() is not None:
        pytest.skip("the build finished before it could be killed")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert "concept_graph" not in json.loads(manifest.read_text())["stages"]
    hopgraph("index", str(SAMPLE), "--out", str(out), "-q", *SMALL)
    after = json.loads(manifest.read_text())
    assert after["complete"] and all(after["stages"][name] == record for name, record in finished.items())
    assert "Anton Vell" in hopgraph("query", str(out), QUESTION, "--retrieval.budget", "600").stdout


@pytest.mark.slow
def test_bad_files_are_named_and_the_rest_indexed(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_text(
        "The Orla mill was built in 1881 by Tessa Brun on the river Venn.", encoding="utf-8"
    )
    (corpus / "empty.txt").write_text("", encoding="utf-8")
    (corpus / "latin1.txt").write_bytes("Caf\xe9 on the quay".encode("latin-1"))
    (corpus / "broken.jsonl").write_text('{"text": "fine record", "id": "a"}\n{not json\n', encoding="utf-8")
    done = hopgraph("index", str(corpus), "--out", str(tmp_path / "index"), "-q", *SMALL)
    for name in ("empty.txt", "broken.jsonl:2"):
        assert name in done.stderr, done.stderr
    assert "latin1.txt" not in done.stderr  # decoded, not dropped
    assert "skipped 2 inputs" in done.stdout and "indexed 3 documents" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["query", "/nonexistent/index", "q"], "/nonexistent/index"),
        (["index", "/nonexistent/corpus", "--out", "/tmp/never"], "/nonexistent/corpus"),
        (["index", str(SAMPLE), "--out", "/tmp/never", "--chunking.size", "x"], "chunking.size"),
    ],
)
def test_errors_are_short_and_name_the_problem(args, message):
    out = hopgraph(*args, check=False)
    assert out.returncode != 0 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_out_of_range_setting_is_refused(cli_index):
    out = hopgraph("query", str(cli_index), "q", "--retrieval.budget", "5", check=False)
    assert out.returncode != 0 and "retrieval.budget" in out.stderr and "Traceback" not in out.stderr


def test_help_documents_every_setting():
    text = hopgraph("index", "--help-all").stdout
    for option in (
        "--chunking.size",
        "--chunking.splits",
        "--embedding.model",
        "--keywords.max_df",
        "--graph.theta_sem",
        "--graph.exact_knn_limit",
    ):
        assert option in text
    query_help = hopgraph("query", "--help-all").stdout
    assert "--retrieval.ppr.text_weight" in query_help and "--retrieval.sentence_mix" in query_help


def test_methods_lists_the_registry_and_what_an_index_offers(sample_index):
    from click.testing import CliRunner

    from hopgraph.cli import main

    out = CliRunner().invoke(main, ["methods", str(sample_index)])
    assert out.exit_code == 0, out.output
    lines = {line.split()[0]: line for line in out.output.splitlines()}
    assert "[offered]" in lines["bm25"] and "[offered]" in lines["ppr"]
    assert "[not built]" in lines["kg"] and "kg_extract" in lines["kg"] and "[not built]" in lines["cue"]
