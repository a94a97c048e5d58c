"""The command line as a user runs it: real processes, real files, real models."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
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
    # A script's empty group list ("$GROUPS") is a reader of no group: it read as no --groups at all,
    # the owner's view, restricted documents included.
    for empty in ("", ","):
        nobody = json.loads(hopgraph("query", str(cli_index), question, "--json", "--groups", empty).stdout)
        assert "budget-2025" not in {d for ev in nobody["evidence"] for d in ev["doc_ids"]}, empty


def test_query_names_a_group_no_acl_names_and_an_empty_scope(cli_index):
    """A misspelt group reads nothing restricted: the owner's command line says so (bm25: no model to load)."""
    question, bm25 = "What budget did the water board approve?", ("--retrieval.method", "bm25")
    typo = hopgraph("query", str(cli_index), question, "--groups", "board,bord", *bm25)
    assert "no document's acl names the group 'bord'" in typo.stderr and "'board'" not in typo.stderr
    nothing = hopgraph("query", str(cli_index), question, "--where", '{"title": "nope"}', *bm25)
    assert "0 pieces" in nothing.stdout and "no document matches --where" in nothing.stdout
    assert "raise --retrieval.budget" not in nothing.stdout  # the budget is not what is wrong
    scripted = hopgraph("query", str(cli_index), question, "--json", "--groups", "", *bm25)
    assert json.loads(scripted.stdout)["evidence"] and "note:" not in scripted.stderr  # unrestricted ones are


def test_inspect_reports_counts_stages_and_core_chunks(cli_index):
    out = hopgraph("inspect", str(cli_index)).stdout
    assert "counts:" in out and "documents=7" in out and "concept_graph" in out and "central concepts:" in out
    summary = json.loads(hopgraph("inspect", str(cli_index), "--json", "--top", "3").stdout)
    assert summary["counts"]["documents"] == 7 and summary["stages"]["concept_graph"]["done"]
    assert len(summary["central_concepts"]) == len(summary["core_chunks"]) == 3
    assert f"  chunk {summary['core_chunks'][0]['chunk']}: " in out and summary["central_concepts"][0] in out


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
    # ... and how it would be (it said "[not built]" alone)
    assert "[not built: built with --extraction.kg all" in lines["kg"] and "kg_extract" in lines["kg"]
    assert "[not built: built with --extraction.cue_alpha" in lines["cue"]


def cli(*args: object, env: dict[str, str] | None = None):
    """``hopgraph ARGS`` run in this process (the models and the sample index load once per session)."""
    from click.testing import CliRunner

    from hopgraph.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line_error(out, *expected: str) -> str:
    """The error line of a run that failed as a user error should: exit 2, one line, no traceback."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.exit_code == 2 and isinstance(out.exception, SystemExit), (out.exception, out.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert all(text in lines[0] for text in expected), lines[0]
    return lines[0]


@pytest.fixture()
def index_copy(sample_index, tmp_path) -> Path:
    target = tmp_path / "index"
    shutil.copytree(sample_index, target)
    return target


@pytest.mark.parametrize(
    "command", [["query", "q"], ["inspect"], ["methods"], ["serve"], ["documents"], ["update", "--resume"], ["jobs"]]
)
def test_a_file_or_a_garbage_current_is_a_one_line_error(command, index_copy, tmp_path):
    name, *rest = command
    (index_copy / "CURRENT").write_bytes(b"\xff\xfe garbage")
    out = cli(name, index_copy, *rest, env={"HOPGRAPH_TOKENS": ""})
    one_line_error(out, f"{index_copy / 'CURRENT'}: not text (byte 0 is not UTF-8)")
    assert out.stdout == ""  # nothing done before the index was found unreadable
    if name in ("query", "inspect", "methods", "serve"):  # the others take directories only (click says so)
        a_file = tmp_path / "afile"
        a_file.write_text("not an index\n", encoding="utf-8")
        one_line_error(cli(name, a_file, *rest), f"{a_file}: is a file, not an index directory")


def test_questions_file_not_utf8_names_the_file_line_and_offset(sample_index, tmp_path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("Who built the mill?\nCaf\xe9 owner?\n".encode("latin-1"))
    out = cli("query", sample_index, "--questions", latin)
    one_line_error(out, f"{latin}:2: not UTF-8 (byte 0xe9 at offset 23)")


def test_questions_without_a_question_field_are_refused_by_line(sample_index, tmp_path):
    questions = tmp_path / "q.jsonl"
    for bad, why in [('{"q": "bad"}', "no 'question' field (keys: q)"), ('{"question": 7}', "'question' is int")]:
        questions.write_text(f'{{"question": "Who built the mill?"}}\n\n{bad}\n', encoding="utf-8")
        out = cli("query", sample_index, "--questions", questions, "--json")
        one_line_error(out, f"{questions}:3: {why}")
        assert out.stdout == ""  # the whole file is checked before the first question is answered


@pytest.mark.parametrize("question", ["", "   "])
def test_an_empty_question_is_refused(question, sample_index, tmp_path):
    one_line_error(cli("query", sample_index, question), "QUESTION is empty")
    questions = tmp_path / "q.jsonl"
    questions.write_text(f"Who built the mill?\n{json.dumps({'question': question})}\n", encoding="utf-8")
    one_line_error(cli("query", sample_index, "--questions", questions), f"{questions}:2: 'question' is empty")


def test_overwrite_rebuilds_an_index_whose_manifest_is_corrupt(index_copy):
    (index_copy / "manifest.json").write_text("", encoding="utf-8")
    refused = cli("index", SAMPLE, "--out", index_copy, "-q", *SMALL)
    one_line_error(refused, "manifest.json: corrupt manifest", "pass --overwrite to rebuild the index")
    rebuilt = cli("index", SAMPLE, "--out", index_copy, "-q", "--overwrite", *SMALL)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads((index_copy / "manifest.json").read_text(encoding="utf-8"))["complete"]


def test_a_named_input_that_does_not_exist_is_refused_before_building(tmp_path):
    missing, out = tmp_path / "nosuch.txt", tmp_path / "index"
    refused = cli("index", SAMPLE / "sorvik.txt", missing, "--out", out, "-q", *SMALL)
    one_line_error(refused, f"{missing}: no such file or directory")
    assert not out.exists()


def test_serve_refuses_a_port_in_use_before_loading_the_index(sample_index):
    tokens = json.dumps([{"token": "admin-token-0123456789", "user": "a", "groups": [], "admin": True}])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "hopgraph.cli", "serve", str(sample_index), "--serve.port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOPGRAPH_TOKENS": tokens},
        )
    assert out.returncode == 2 and out.stdout == "", (out.stdout, out.stderr)  # no "loading", no "serving"
    assert out.stderr.strip().splitlines() == [
        f"error: cannot serve at 127.0.0.1:{port}: Address already in use; choose another --serve.port or "
        "--serve.host, or stop what listens there"
    ]


def test_a_tokens_file_others_may_write_is_one_warning_line_and_a_missing_one_is_named(sample_index, tmp_path):
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[tokens]]\ntoken = "admin-token-0123456789"\nuser = "a"\ngroups = []\n', encoding="utf-8")
    tokens.chmod(0o666)
    with socket.socket() as taken:  # the port is taken: serve stops right after reading the tokens
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for file in (tokens, tmp_path / "nope.toml"):
            out = subprocess.run(
                [sys.executable, "-m", "hopgraph.cli", "serve", str(sample_index), "--serve.port", port]
                + ["--serve.tokens_file", str(file)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            lines = out.stderr.strip().splitlines()
            if file == tokens:
                assert lines[0] == f"warning: tokens file {tokens} is writable by its group or by other users " + (
                    f"(mode -rw-rw-rw-); run `chmod go-w {tokens}`"
                )
                assert lines[1].startswith(f"warning: tokens file {tokens} holds tokens in clear and every user")
                assert lines[2].startswith("error: cannot serve at") and len(lines) == 3
            else:
                assert lines == [f"error: tokens file not found: {file}"]


def test_index_and_update_refuse_an_unknown_default_method(index_copy, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[retrieval]\nmethod = "nosuch"\n', encoding="utf-8")
    out = tmp_path / "new-index"
    refused = cli("index", SAMPLE, "--out", out, "-q", "--config", config, *SMALL)
    one_line_error(refused, f"{config}: unknown method 'nosuch'; choose one of text, bm25")
    assert not out.exists()
    refused = cli("update", index_copy, "--resume", "--config", config)
    one_line_error(refused, f"{config}: unknown method 'nosuch'")


def test_query_and_serve_refuse_a_default_method_the_index_lacks(sample_index, tmp_path):
    offered = "it offers text, bm25, knng, keyword, concept, ppr"
    config = tmp_path / "kg.toml"
    config.write_text('[retrieval]\nmethod = "kg"\n', encoding="utf-8")
    one_line_error(cli("query", sample_index, "q", "--config", config), "'kg' needs parts", "kg_extract", offered)
    served = cli("serve", sample_index, "--retrieval.method", "kg", env={"HOPGRAPH_TOKENS": ""})
    one_line_error(served, "'kg' needs parts", offered)
    unknown = cli("serve", sample_index, "--retrieval.method", "nosuch", env={"HOPGRAPH_TOKENS": ""})
    line = one_line_error(unknown, "unknown method 'nosuch' (retrieval.method);", f"{sample_index} offers text, bm25")
    assert line.startswith("error: unknown method")  # the index is not what is wrong
