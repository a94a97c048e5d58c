"""An evaluation measures an index without changing it: its retrieval overrides apply to its own
run only, and its result file says which stage times are its own and what its peak memory covers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hopgraph.config import load_config
from hopgraph.errors import OtherIndexError
from hopgraph.evaluate.runner import build_config, evaluate, write_outputs
from hopgraph.index.ingest import read_corpus
from hopgraph.index.pipeline import build_index
from hopgraph.store import IndexStore
from tests.conftest import SAMPLE_SETTINGS

PARAGRAPHS = [
    (
        "Halvern Harbor Institute",
        "The Halvern Harbor Institute was founded in 1931. Its first director was Mara Quill.",
        True,
    ),
    ("Mara Quill", "Mara Quill had previously led the Tem Island Laboratory, founded by Anton Vell.", True),
    ("Sorvik", "Sorvik is a ferry town on the eastern shore of Lake Orrin with a small university campus.", False),
    ("Kestrel", "The research vessel Kestrel surveys invasive mussels in Lake Orrin every summer.", False),
]


def musique_file(path: Path) -> Path:
    record = {
        "id": "2hop__1",
        "question": "Who founded the laboratory that the first director of the Halvern Harbor Institute led?",
        "paragraphs": [
            {"idx": i, "title": t, "paragraph_text": p, "is_supporting": s} for i, (t, p, s) in enumerate(PARAGRAPHS)
        ],
        "question_decomposition": [],
        "answer": "Anton Vell",
        "answer_aliases": [],
        "answerable": True,
    }
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def test_eval_overrides_never_reach_the_index(tmp_path):
    data, index = musique_file(tmp_path / "musique.jsonl"), tmp_path / "index"
    first = evaluate(data, index, load_config(None, SAMPLE_SETTINGS), ["text"], progress=False)
    stored = json.loads((index / "manifest.json").read_text())["config"]
    assert stored["retrieval"]["ppr"]["damping"] == 0.5
    assert set(first["index"]["stages_seconds_this_run"]) >= {"documents", "chunks", "knn_graph"}
    assert first["index"]["stages_seconds_earlier_build"] == {}

    answering = {"llm.base_url": "http://127.0.0.1:9/v1", "llm.model": "evaluated-model", "embedding.device": "cpu"}
    override = load_config(
        None, {**SAMPLE_SETTINGS, "retrieval.ppr.damping": 0.6, "retrieval.budget": 300, **answering}
    )
    second = evaluate(data, index, override, ["ppr"], progress=False)
    manifest = IndexStore(index).read_manifest()
    assert manifest["config"]["retrieval"] == stored["retrieval"]  # the index's own settings, untouched
    assert (manifest["config"]["llm"], manifest["config"]["embedding"]) == (stored["llm"], stored["embedding"])
    # ... unless this run adds an LLM-built part: then it is built through this run's LLM.
    adding = load_config(None, {**SAMPLE_SETTINGS, **answering, "extraction.kg": "all"})
    assert build_config(index, adding).llm == adding.llm
    assert second["config"]["retrieval"]["ppr"]["damping"] == 0.6  # ... while this run used its own
    assert second["budget"] == 300
    # Nothing was rebuilt: every stage time is the earlier build's, and says so.
    assert second["index"]["stages_seconds_this_run"] == {}
    assert set(second["index"]["stages_seconds_earlier_build"]) == set(manifest["stages"])
    assert second["index"]["build_peak_memory_mb"] == round(manifest["peak_memory_mb"], 1)
    assert "retrieval" in second["peak_memory_covers"] and second["index"]["build_peak_memory_covers"]
    write_outputs(second, tmp_path / "result.json")
    table = (tmp_path / "result.md").read_text(encoding="utf-8")
    assert "Index stages run now: 0 (0.0 s); finished by an earlier build:" in table and "the build's" in table


def test_the_result_names_the_model_that_built_the_graph_apart_from_the_answer_model(tmp_path):
    """A complete index keeps its knowledge graph when a run names another --llm.model (it is not
    extracted again), yet the result file said "llm_model": the new model. Scripted extraction: the
    stand-in is too slow to extract on every test run, and only the model's name matters here."""
    from tests.llm.support import ScriptedServer

    kg = {"entities": [{"name": "Mara Quill", "type": "person", "description": "A director."}], "relations": []}
    data, index = musique_file(tmp_path / "musique.jsonl"), tmp_path / "index"
    with ScriptedServer(lambda body, n: (200, json.dumps(kg), 0)) as server:
        settings = {**SAMPLE_SETTINGS, "extraction.kg": "all", "llm.base_url": server.base_url, "llm.cache": ""}
        built = evaluate(data, index, load_config(None, {**settings, "llm.model": "extractor"}), ["kg"], progress=False)
        again = evaluate(data, index, load_config(None, {**settings, "llm.model": "other"}), ["kg"], progress=False)
    assert built["extraction_model"] == again["extraction_model"] == "extractor" and again["answer_model"] is None
    assert again["index"]["stages_seconds_this_run"] == {}  # nothing extracted again


def test_an_index_eval_cannot_use_is_refused_with_what_eval_can_do(tmp_path):
    """The refusal said "pass --overwrite ... or choose another --out": eval has no --overwrite, and
    its --out is the result file."""
    data, index = musique_file(tmp_path / "musique.jsonl"), tmp_path / "index"
    build_index(read_corpus([data]).documents, index, load_config(None, SAMPLE_SETTINGS), progress=False)
    with pytest.raises(OtherIndexError) as refused:
        evaluate(data, index, load_config(None, SAMPLE_SETTINGS), ["text"], progress=False)
    message = str(refused.value)
    assert "a different corpus" in message and "--index" in message and "--overwrite" not in message


def test_every_method_is_checked_before_the_first_runs_and_an_empty_question_set_is_refused(tmp_path):
    """`--methods text,kg` ran all of text and then failed on kg (the index has no LLM graph), losing
    text's results; a dataset with no questions "succeeded" with a NaN Coverage, not valid JSON."""
    from click.testing import CliRunner

    from hopgraph.cli import main
    from hopgraph.errors import ConfigError, InputError

    data, index = musique_file(tmp_path / "musique.jsonl"), tmp_path / "index"
    settings = load_config(None, SAMPLE_SETTINGS)
    with pytest.raises(ConfigError, match=r"method 'kg' needs parts this index lacks \(stage kg_extract: built with "):
        evaluate(data, index, settings, ["text", "kg"], progress=False)
    (hipporag := tmp_path / "hr").mkdir()
    (hipporag / "mini_corpus.json").write_text(json.dumps([{"title": t, "text": p} for t, p, _ in PARAGRAPHS]))
    with pytest.raises(InputError, match="no questions to evaluate"):
        evaluate(hipporag / "mini_corpus.json", tmp_path / "hr_index", settings, ["text"], progress=False)
    for bad in (["--methods", ","], ["--limit", "0"]):
        refused = CliRunner().invoke(main, ["eval", str(data), "--index", str(index), *bad])
        assert refused.exit_code == 2 and ("no method given" in refused.output or "--limit" in refused.output)


def test_a_result_path_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    """`--out res.md` had its JSON overwritten by the table written beside it, and a path in a folder
    that cannot be made failed with a traceback after the whole run: either way the run was lost."""
    from click.testing import CliRunner

    from hopgraph.cli import main

    data, index = musique_file(tmp_path / "musique.jsonl"), tmp_path / "index"
    (tmp_path / "file").write_text("a file, not a folder")
    for out, said in ((tmp_path / "res.md", "would be overwritten by the .md"), (tmp_path / "file" / "r.json", "file")):
        refused = CliRunner().invoke(main, ["eval", str(data), "--index", str(index), "--out", str(out)])
        assert refused.exit_code == 2 and said in refused.output and "Traceback" not in refused.output
        assert not index.exists()  # refused before anything ran
    made = tmp_path / "results" / "new" / "r.json"  # a folder that is not there yet is made
    ran = CliRunner().invoke(main, ["eval", str(data), "--index", str(index), "--out", str(made), "--methods", "text"])
    assert ran.exit_code == 0 and made.is_file() and made.with_suffix(".md").is_file()


def test_questions_that_cannot_be_scored_are_refused_and_bad_passages_left_out_as_index_leaves_them(tmp_path):
    """A question without a gold answer counted as a miss (Coverage capped unseen); an empty question
    and a repeated id were accepted; a passage `hopgraph index` skips (control characters) was indexed."""
    from hopgraph.errors import InputError
    from hopgraph.index.datasets import load_benchmark

    data = musique_file(tmp_path / "musique.jsonl")
    record = json.loads(data.read_text(encoding="utf-8"))
    noise = {"idx": 9, "title": "Noise", "paragraph_text": "Binary\x00junk", "is_supporting": False}
    record["paragraphs"].append(noise)
    data.write_text(json.dumps(record) + "\n", encoding="utf-8")
    bench = load_benchmark(data)
    assert sorted(d.title for d in bench.documents) == sorted(t for t, _, _ in PARAGRAPHS)
    assert len(bench.skipped) == 1 and "'Noise'" in bench.skipped[0] and "control character" in bench.skipped[0]
    settings = load_config(None, SAMPLE_SETTINGS)
    heard: list[tuple[str, bool]] = []  # each skipped passage, and whether the build had begun by then
    result = evaluate(
        data,
        tmp_path / "index",
        settings,
        ["text"],
        progress=False,
        skipped=lambda why: heard.append((why, (tmp_path / "index").exists())),
    )
    assert result["skipped_passages"] == bench.skipped
    assert heard == [(why, False) for why in bench.skipped]  # said before the work, not after a long run
    for change, problem in (
        ({"answer": "", "answer_aliases": []}, "1 question without a gold answer(s): '2hop__1'"),
        ({"question": "  "}, "1 empty question(s)"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({**record, **change}) + "\n", encoding="utf-8")
        with pytest.raises(InputError, match=re.escape(problem)):
            evaluate(bad, tmp_path / "bad_index", settings, ["text"], progress=False)
    twice = tmp_path / "twice.jsonl"
    twice.write_text((json.dumps(record) + "\n") * 2, encoding="utf-8")
    with pytest.raises(InputError, match="question id given more than once"):
        evaluate(twice, tmp_path / "twice_index", settings, ["text"], progress=False)


def test_questions_of_ones_own_about_ones_own_documents_are_evaluated(tmp_path):
    """`eval` read benchmark formats only: the wiki's own questions (examples/wiki-questions.jsonl,
    the obvious first thing to measure) were refused as "not a recognised benchmark"."""
    from hopgraph.errors import InputError
    from tests.conftest import REPO

    questions = REPO / "examples" / "wiki-questions.jsonl"
    config = load_config(None, {"retrieval.budget": 600})
    result = evaluate(
        questions, tmp_path / "index", config, ["bm25"], progress=False, corpus=[REPO / "examples" / "wiki"]
    )
    asked = len(questions.read_text(encoding="utf-8").splitlines())
    assert result["dataset"] == "wiki-questions" and result["n_questions"] == asked and result["skipped_passages"] == []
    [bm25] = result["results"]
    assert bm25["supporting_recall"] > 0 and bm25["coverage"] > 0  # the support pairs name the corpus's documents
    assert IndexStore(tmp_path / "index").read_manifest()["counts"]["documents"] == 18  # the corpus, as index reads it
    # A support id that names no document would score 0 recall unseen: refused, naming it.
    typo = tmp_path / "typo.jsonl"
    record = {"question": "Who leads Kestrel?", "answer": "Tomas Reyes", "support": [["projects/kestrl.md", "s"]]}
    typo.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"typo.jsonl: question 1 names support 'projects/kestrl.md', no document"):
        evaluate(typo, tmp_path / "index", config, ["bm25"], progress=False, corpus=[REPO / "examples" / "wiki"])


def test_a_questions_file_names_where_a_record_is_wrong(tmp_path):
    from hopgraph.errors import InputError
    from hopgraph.index.datasets import load_questions

    path = tmp_path / "questions.jsonl"
    path.write_text('{"question": "Q1?", "answer": "a", "support": [["doc.md", "s"]]}\n{"answer": "b"}\n')
    with pytest.raises(InputError, match=r"questions.jsonl:2: missing or invalid 'question'"):
        load_questions(path)
    [first] = load_questions(path, limit=1)
    assert (first.id, first.answers, first.supporting_ids) == ("1", ["a"], ["doc.md"])
    # Support in another shape was ignored, and recall reported as absent without a word.
    path.write_text('{"question": "Q?", "answer": "a", "support": ["doc.md", ["other.md", "s"]]}\n')
    assert load_questions(path)[0].supporting_ids == ["doc.md", "other.md"]  # plain ids are ids
    for bad, said in (('"support": "doc.md"', "'support' must be a list"), ('"support": [[3, "s"]]', "support item 3")):
        path.write_text(f'{{"question": "Q?", "answer": "a", {bad}}}\n')
        with pytest.raises(InputError, match=f"questions.jsonl:1: {said}"):
            load_questions(path)
