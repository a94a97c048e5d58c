"""The command line for a first hour: many questions for one model load, --config on query and
update, --where filters, inspect in pipeline order with word concepts, short help, `hopgraph init`,
and a resumed `index` that reports its own time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hopgraph.config import example_toml, load_config
from hopgraph.index.pipeline import STAGES
from tests.conftest import SAMPLE, file_size_limit
from tests.test_cli import SMALL, hopgraph

QUESTIONS = [
    "Who was the first director of the Halvern Harbor Institute?",
    "What budget did the water board approve for the Sorvik campus in 2025?",
]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cliux") / "index"
    hopgraph("index", str(SAMPLE), "--out", str(out), "-q", *SMALL)
    return out


@pytest.mark.slow  # loads the embedding model in a fresh process
def test_questions_from_a_file_in_one_run(index, tmp_path):
    questions = tmp_path / "questions.txt"
    questions.write_text(f"{QUESTIONS[0]}\n\n{json.dumps({'question': QUESTIONS[1], 'id': 'q2'})}\n", encoding="utf-8")
    out = hopgraph("query", str(index), "--questions", str(questions), "--json", "--retrieval.method", "text")
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["query"] for r in results] == QUESTIONS and all(r["evidence"] for r in results)
    text = hopgraph("query", str(index), "--questions", str(questions)).stdout
    assert text.count("=== ") == 2 and "path:" in text


def test_a_piece_is_shown_from_where_the_question_is_answered_and_none_is_explained(index):
    """A piece was cut to its first 400 characters, often of the document packed before the one it
    is about; a budget no piece fits printed "0 pieces" and nothing else."""
    from hopgraph.cli_output import excerpt

    before = "The ferry timetable changes in winter. " * 20
    text = before + "Mara Quill was the first director of the Halvern Harbor Institute. It opened in 1931."
    shown = excerpt(text, "Who was the first director of the Halvern Harbor Institute?")
    assert shown.startswith("…Mara Quill was the first director") and len(shown) <= 402
    assert excerpt(text, "anything", None) == text
    upper = before + "İSTANBUL office opened in 2020."  # matched as the question's words are tokenised
    assert excerpt(upper, "İstanbul?").startswith("…İSTANBUL office opened")
    empty = hopgraph("query", str(index), QUESTIONS[0], "--where", '{"id": "no-such-document"}').stdout
    assert "0 pieces" in empty and "no document matches --where" in empty  # not the budget's fault
    title = '{"title": "University of Castel Brun"}'  # its one chunk holds more than 50 tokens
    small = hopgraph(
        "query", str(index), QUESTIONS[0], "--where", title, "--retrieval.method", "text", "--retrieval.budget", "50"
    ).stdout
    assert "0 pieces" in small and "no piece fits a budget of 50 tokens and the filters given" in small
    whole = hopgraph("query", str(index), QUESTIONS[0], "--full", "--retrieval.method", "text").stdout
    assert "…" not in whole.split("\n[1]", 1)[1].split("\n[2]", 1)[0]


def test_an_answer_model_that_is_down_still_shows_the_evidence(index, tmp_path):
    """The error alone was printed: the retrieved evidence was thrown away (and --json printed nothing)."""
    down = ["--answer", "--llm.base_url", "http://127.0.0.1:9/v1", "--llm.retries", "0", "--llm.cache", ""]
    shown = hopgraph("query", str(index), QUESTIONS[0], *down, check=False)
    assert shown.returncode == 2 and "pieces" in shown.stdout and "[1]" in shown.stdout
    assert shown.stderr.startswith("error: LLM server http://127.0.0.1:9/v1 is down"), shown.stderr
    as_json = hopgraph("query", str(index), QUESTIONS[0], "--json", *down, check=False)
    payload = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and payload["answer"] is None and payload["evidence"]
    # Several questions: every one's evidence, the model asked once, the error at the end.
    asked = tmp_path / "questions.txt"
    asked.write_text("\n".join(QUESTIONS), encoding="utf-8")
    many = hopgraph("query", str(index), "--questions", str(asked), "--json", *down, check=False)
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert many.returncode == 2 and [r["query"] for r in lines] == QUESTIONS and all(r["evidence"] for r in lines)
    assert many.stderr.count("error:") == 1


def test_inspect_refuses_a_top_that_is_no_count(index):
    """--top -1 was taken as a Python slice: every concept but the last was listed."""
    refused = hopgraph("inspect", str(index), "--top", "-1", check=False)
    assert refused.returncode == 2 and "--top" in refused.stderr and "Traceback" not in refused.stderr


def test_query_without_a_question_off_a_terminal_says_what_to_give(index):
    out = hopgraph("query", str(index), check=False)
    assert out.returncode == 2 and "--questions FILE" in out.stderr


def test_small_mistakes_get_one_line_that_names_the_culprit(index, tmp_path):
    """A bad [serve] value named no file, "notaurl" was tried as an LLM address four times, a missing
    .gguf was called an unknown model after "serving" was printed, and `methods --help` showed INDEX
    as required."""
    bad = tmp_path / "serve.toml"
    bad.write_text('[serve]\nport = "eighty"\n', encoding="utf-8")
    served = hopgraph("serve", str(index), "--config", str(bad), check=False)
    assert served.returncode == 2 and f"{bad}: serve.port" in served.stderr, served.stderr
    for command in (
        ("query", str(index), "q", "--answer"),
        ("update", str(index), "--resume"),  # refused before any queued job runs (and fails on it)
        ("index", str(SAMPLE), "--out", str(tmp_path / "other"), "--extraction.kg", "all"),  # before any stage
    ):
        asked = hopgraph(*command, "--llm.base_url", "notaurl", check=False)
        assert asked.returncode == 2, asked.stderr
        assert "llm.base_url: not an http(s) address with a host: 'notaurl'" in asked.stderr, asked.stderr
    assert not (tmp_path / "other").exists()
    missing = hopgraph("llm-server", "--model", str(tmp_path / "none.gguf"), check=False)
    assert missing.returncode == 2 and "serving" not in missing.stdout
    assert f"no model file '{tmp_path / 'none.gguf'}'" in missing.stderr, missing.stderr
    assert "methods [OPTIONS] [INDEX]\n" in hopgraph("methods", "--help").stdout
    # JSON nested past Python's recursion limit was a RecursionError traceback.
    deep = "[" * 20_000 + "]" * 20_000
    (tmp_path / "deep.jsonl").write_text(f'{{"question": {deep}}}\n', encoding="utf-8")
    for options in (("--questions", str(tmp_path / "deep.jsonl")), ("--where", deep)):
        nested = hopgraph("query", str(index), *(["q"] if options[0] == "--where" else []), *options, check=False)
        assert nested.returncode == 2 and "nested too deeply" in nested.stderr, nested.stderr
        assert "Traceback" not in nested.stderr


@pytest.mark.slow  # loads the embedding model in a fresh process
def test_query_takes_a_config_file_over_the_index_settings(index, tmp_path):
    config = tmp_path / "query.toml"
    config.write_text('[retrieval]\nmethod = "concept"\nbudget = 300\n', encoding="utf-8")
    result = json.loads(hopgraph("query", str(index), QUESTIONS[0], "--json", "--config", str(config)).stdout)
    assert result["method"] == "concept" and result["budget"] == 300
    # An option still wins over the file.
    result = json.loads(
        hopgraph(
            "query", str(index), QUESTIONS[0], "--json", "--config", str(config), "--retrieval.budget", "400"
        ).stdout
    )
    assert result["budget"] == 400


@pytest.mark.slow  # loads the embedding model in a fresh process
def test_query_where_filters_with_operators_and_refuses_unknown_fields(index):
    where = json.dumps({"timestamp": {"gte": "2024-01-01", "lt": "2025-06-01"}})  # files: their mtime, later
    result = json.loads(hopgraph("query", str(index), QUESTIONS[1], "--json", "--where", where).stdout)
    cited = {d for ev in result["evidence"] for d in ev["doc_ids"]}
    assert cited and cited <= {"memo-2024-03", "budget-2025"}
    wrong = hopgraph("query", str(index), QUESTIONS[1], "--where", '{"titel": "x"}', check=False)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1 and "filterable fields: acl, id, line" in wrong.stderr


def test_update_takes_a_config_file(index, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    config = tmp_path / "update.toml"
    config.write_text('[llm]\nbase_url = "http://127.0.0.1:9/v1"\n[chunking]\nsize = 50\n', encoding="utf-8")
    out = hopgraph("update", str(copy), "--resume", "--config", str(config))
    assert "no pending jobs" in out.stdout


def test_cluster_settings_without_the_ray_engine_are_named_as_unused(index):
    """An operator who forgot --engine ray got a build on one machine and no hint."""
    again = hopgraph("index", str(SAMPLE), "--out", str(index), "-q", *SMALL, "--cluster.embed_actors", "16")
    assert "note: cluster.embed_actors apply to --engine ray only; this build runs in this process" in again.stderr
    assert "note:" not in hopgraph("index", str(SAMPLE), "--out", str(index), "-q", *SMALL).stderr
    # The local engine's own setting was named as one for --engine ray.
    local = hopgraph("index", str(SAMPLE), "--out", str(index), "-q", *SMALL, "--cluster.ner_processes", "2")
    assert "note:" not in local.stderr


def test_a_resumed_index_reports_its_own_time(index):
    out = hopgraph("index", str(SAMPLE), "--out", str(index), "-q", *SMALL).stdout
    assert f"0 stages run, {len(STAGES) - 2} finished earlier" in out  # the two LLM stages are not configured


def test_inspect_lists_stages_in_pipeline_order(index):
    line = next(x for x in hopgraph("inspect", str(index)).stdout.splitlines() if x.startswith("stages: "))
    shown = [part.split()[0] for part in line.removeprefix("stages: ").split(", ")]
    assert shown == [stage.name for stage in STAGES if stage.name in shown] and shown[0] == "documents"


def test_central_concepts_are_words_not_numbers(tmp_path):
    # Years and numbered minutes occur in every record, so they top the concept PageRank.
    corpus = tmp_path / "records"
    corpus.mkdir()
    for i, topic in enumerate(["harbor crane", "river ferry", "glacier survey", "forest fire", "bridge repair"]):
        (corpus / f"d{i}.txt").write_text(
            f"In 2021 the {topic} team filed report 00-{i} for 2021. The {topic} budget of 2011 and 2021 was "
            f"{i}00 units. Minutes 00 and 01 of the {topic} meeting in 2011 list the {topic} staff.\n",
            encoding="utf-8",
        )
    hopgraph(
        "index", str(corpus), "--out", str(tmp_path / "index"), "-q", "--chunking.size", "96", "--chunking.overlap", "8"
    )
    line = next(
        x
        for x in hopgraph("inspect", str(tmp_path / "index")).stdout.splitlines()
        if x.startswith("central concepts: ")
    )
    concepts = line.split(": ", 1)[1].split(", ")
    assert len(concepts) == 10 and all(len(c) >= 3 and any(ch.isalpha() for ch in c) for c in concepts), concepts


@pytest.mark.parametrize("command", ["index", "query", "eval", "update", "serve"])
def test_help_is_short_and_points_to_the_full_list(command):
    short = hopgraph(command, "--help").stdout
    assert len(short.splitlines()) < 60 and "Settings (" in short and "--help-all" in short
    assert "examples/hopgraph.toml" in short
    full = hopgraph(command, "--help-all").stdout
    assert len(full.splitlines()) > len(short.splitlines()) and "[default:" in full


def test_init_writes_the_commented_config(tmp_path):
    target = tmp_path / "hopgraph.toml"
    assert "wrote" in hopgraph("init", str(target)).stdout
    text = target.read_text(encoding="utf-8")
    assert text == example_toml() and text.startswith("#") and tomllib.loads(text)
    assert load_config(target).chunking.size == 1200
    again = hopgraph("init", str(target), check=False)
    assert again.returncode == 2 and "--force" in again.stderr
    hopgraph("init", str(target), "--force")


def test_storage_that_refuses_a_write_ends_a_build_with_one_line_and_the_next_run_resumes(tmp_path):
    """A file-size limit makes the storage refuse writes as a full disk does (no disk need fill): an
    array write then ended in a traceback, numpy's OSError carrying no errno to say what it was."""
    out = tmp_path / "index"
    build = ["index", str(SAMPLE), "--out", str(out), "-q", *SMALL]
    # A cache's (SQLite's own error), then an index array's (without caches: 250 kB of keyword vectors).
    for limit, cache, culprit in ((16_000, tmp_path / "cache" / "v.sqlite", tmp_path / "cache"), (200_000, "", out)):
        refused = subprocess.run(
            [sys.executable, "-m", "hopgraph.cli", *build, "--embedding.cache", str(cache)],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=file_size_limit(limit),
        )
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.startswith("error: the storage is "), refused.stderr
        assert f"(at {culprit}" in refused.stderr, refused.stderr
        assert refused.stderr.rstrip().endswith("run the same command again to resume"), refused.stderr
    assert "indexed 7 documents" in hopgraph(*build).stdout
