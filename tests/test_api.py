"""The public API: the README's example runs as written, and the API covers what the CLI does."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_readme_python_example_runs_as_written(tmp_path, monkeypatch):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(readme_example(), "README.md (Python API)", "exec"), namespace)  # its own asserts check the ACL
    index = namespace["index"]
    assert index.version  # the update made a new version and the returned Index reads it
    assert "memo-1" in {d.id for d in index.documents()}
    assert namespace["result"].evidence and all(p.path for p in namespace["result"].evidence)
    assert [j.status for j in index.jobs()] == ["done"]


def test_public_names():
    import hopgraph

    for name in hopgraph.__all__:
        assert getattr(hopgraph, name) is not None
    with pytest.raises(AttributeError):
        hopgraph.NotAThing  # noqa: B018


def test_open_and_query_existing_index(sample_index, tmp_path):
    from hopgraph import Index

    shutil.copytree(sample_index, tmp_path / "index")
    index = Index.open(tmp_path / "index", {"retrieval.method": "keyword"})
    assert index.config.retrieval.method == "keyword"
    assert "ppr" in index.methods and "kg" not in index.methods
    result = index.retrieve("Halvern Harbor Institute director", budget=200)
    assert result.method == "keyword" and result.evidence
    assert len(index.documents()) == len(set(d.id for d in index.documents())) > 0
    queued = index.update(delete=[index.documents()[0].id], wait=False)
    assert queued.status == "queued" and queued.delete


def test_reading_an_index_loads_no_build_llm_or_ner_code():
    """``import hopgraph.retrieve`` and opening an index for reading stay light (checked in a fresh interpreter)."""
    code = (
        "import sys, hopgraph.retrieve, hopgraph.retrieve.retriever, hopgraph.retrieve.methods, hopgraph.api; "
        "bad = [m for m in sys.modules if m.startswith(('hopgraph.index.pipeline', 'hopgraph.llm', 'spacy'))]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "", f"reader imports loaded: {out.stdout.strip()}"


@pytest.mark.parametrize("question", ["", "   ", "\n\t"])
def test_an_empty_question_is_refused(sample_index, question):
    from hopgraph import Index
    from hopgraph.errors import InputError

    with pytest.raises(InputError, match="the question is empty"):
        Index.open(sample_index).retrieve(question)


# ------------------------------------------------------------------------------------ inputs made in code
def memo(doc_id: str = "memo", text: str = "The Wren lighthouse board voted to close it in 2026.", **meta) -> object:
    from hopgraph import Document

    return Document(id=doc_id, text=text, metadata=meta)


def test_a_lone_string_acl_is_one_group_not_its_letters(tmp_path, sample_config):
    """Documents made in code skipped the metadata rules: acl "board" was stored as b, o, a, r, d, so
    a reader of group "d" read the board's document and the board did not."""
    from hopgraph import Document, Index

    public = Document(id="pub", text="The Wren lighthouse is open to visitors on Sundays.")
    index = Index.build([public, memo(acl="board")], tmp_path / "i", sample_config)
    assert {d.id: d.acl for d in index.documents()} == {"pub": None, "memo": ["board"]}
    question = "What did the board decide about the Wren lighthouse?"

    def read_by(groups) -> set[str]:
        return {d for piece in index.retrieve(question, groups=groups, budget=300).evidence for d in piece.doc_ids}

    assert "memo" in read_by({"board"}) and "memo" not in read_by({"d"}) and "memo" not in read_by({"r"})
    assert read_by("board") == read_by({"board"})  # a lone group, not the groups b, o, a, r, d
    assert index.update(delete="memo").documents()[0].id == "pub"  # a lone id, not its letters


@pytest.mark.parametrize(
    "documents,problem",
    [
        ([memo(doc_id="")], "'id' must be a non-empty string"),
        ([memo(text="   ")], "text is empty or only whitespace"),
        ([memo(text=None)], "'text' string"),
        ([memo(text="Binary\x00junk")], "control character"),
        ([memo(text="a lone \ud800 surrogate")], "'text' holds a lone surrogate"),
        ([memo(timestamp="yesterday")], "'timestamp' 'yesterday' is not an ISO-8601"),
        ([memo(timestamp=1700000000)], "'timestamp' must be an ISO-8601 string"),
        ([memo(acl=5)], "'acl' must be a list of strings"),
        ([memo(), memo(text="Another text under the same id.")], "document id 'memo' is given twice"),
        ([memo(), 5], "5 is not a str or PathLike or Document"),
        ([memo(), None], "None is not a str or PathLike or Document"),  # a None in the list slipped through
    ],
    ids=[
        "empty-id",
        "blank-text",
        "no-text",
        "control",
        "surrogate",
        "timestamp",
        "timestamp-number",
        "acl",
        "twice",
        "int",
        "none",
    ],
)
def test_documents_made_in_code_pass_the_rules_of_every_other_way_in(tmp_path, sample_config, documents, problem):
    from hopgraph import Index
    from hopgraph.errors import InputError

    with pytest.raises(InputError, match=re.escape(problem)):
        Index.build(documents, tmp_path / "i", sample_config)
    assert not (tmp_path / "i").exists()  # refused before anything is written


def test_an_update_of_a_file_read_before_replaces_it_and_nothing_is_run_unasked(tmp_path, sample_config):
    """Without ``root`` the API gave an edited file a new id beside the old one (the CLI replaced it),
    and ``update(wait=False)`` with nothing to add ran every queued job at once."""
    from hopgraph import Index

    shutil.copytree(REPO / "examples" / "sample", tmp_path / "docs")
    index = Index.build(str(tmp_path / "docs"), tmp_path / "i", sample_config)  # a lone path, not its letters
    before = {d.id for d in index.documents()}
    edited = next(p for p in (tmp_path / "docs").iterdir() if p.suffix == ".txt")
    edited.write_text(edited.read_text(encoding="utf-8") + "\nThe harbour reopened in 2031.\n", encoding="utf-8")
    queued = index.update(add=[edited], wait=False)
    assert index.update(wait=False) is index and [j.status for j in index.jobs()] == ["queued"]
    updated = index.update()
    assert [j.status for j in updated.jobs()] == ["done"] and queued.added == 1
    documents = {d.id: d.text for d in updated.documents()}
    assert set(documents) == before and "reopened in 2031" in documents[edited.name]


def test_open_overrides_nested_or_dotted_change_only_their_leaves_and_refuse_build_settings(tmp_path, sample_config):
    """A nested override replaced its whole section with defaults (the index's budget 777 became 12000),
    and build settings were accepted and then silently not used."""
    from hopgraph import Index
    from hopgraph.errors import ConfigError

    config = sample_config.model_copy(update={"retrieval": sample_config.retrieval.model_copy(update={"budget": 777})})
    Index.build([memo()], tmp_path / "i", config)
    for overrides in ({"retrieval": {"method": "bm25"}}, {"retrieval.method": "bm25"}):
        opened = Index.open(tmp_path / "i", overrides)
        assert (opened.config.retrieval.method, opened.config.retrieval.budget) == ("bm25", 777)
    with pytest.raises(ConfigError, match=r"chunking\.size.* are build settings"):
        Index.open(tmp_path / "i", {"chunking": {"size": 4000}})
    with pytest.raises(ConfigError, match="budget"):
        opened.retrieve("Who voted to close the lighthouse?", budget=0)  # was read as "the default budget"


def test_a_question_that_is_not_unicode_text_is_refused_with_one_line(sample_index):
    """A command line's undecodable byte (argv's b"\\xff" is the lone surrogate U+DCFF) reached the
    tokenizer and ended in a traceback."""
    from click.testing import CliRunner

    from hopgraph import Index
    from hopgraph.cli import main
    from hopgraph.errors import InputError

    with pytest.raises(InputError, match="lone surrogate U\\+DCFF at character 4"):
        Index.open(sample_index).retrieve("who \udcff led")
    refused = CliRunner().invoke(main, ["query", str(sample_index), "who \udcff led"])
    assert refused.exit_code == 2 and "give it as UTF-8 text" in refused.output and "Traceback" not in refused.output


def test_a_reader_whose_version_was_collected_is_told_to_open_the_index_again(tmp_path, sample_config):
    """It was told "missing array keyword_vectors (partial index?)", as if the index were damaged."""
    from hopgraph import Document, Index
    from hopgraph.errors import IndexFormatError

    index = Index.build([memo()], tmp_path / "i", sample_config)
    old = index.update(add=[Document(id="pier", text="The Sorvik pier was rebuilt in stone in 1911.")])
    index = old.update(add=[Document(id="ferry", text="The Sorvik ferry crosses Lake Orrin twice a day.")], keep=0)
    assert not (tmp_path / "i" / "versions" / old.version).exists()  # collected: keep=0 spares only the live one
    with pytest.raises(IndexFormatError, match="this index version was removed while it was open") as told:
        for method in old.methods:  # whichever part each method loads lazily
            old.retrieve("Who rebuilt the Sorvik pier?", method=method, budget=200)
    assert "open the index again" in str(told.value) and "partial index" not in str(told.value)
    assert index.retrieve("Who rebuilt the Sorvik pier?", budget=200).evidence  # the new one reads fine


def test_a_reader_of_an_index_rebuilt_in_place_is_told_to_open_it_again(tmp_path, sample_config):
    """Parts load on first use: after `overwrite=True` rebuilt the folder with another corpus, an open
    reader mixed the old index's arrays with the new one's tables (an IndexError in bm25, or another
    corpus's text). Running the same build again changes nothing and disturbs no reader."""
    from hopgraph import Document, Index
    from hopgraph.errors import IndexFormatError

    first = [memo(), Document(id="pier", text="The Sorvik pier was rebuilt in stone in 1911.")]
    opened = Index.build(first, tmp_path / "i", sample_config)
    question = "Who rebuilt the Sorvik pier?"
    opened.retrieve(question, method="text", budget=200)
    Index.build(first, tmp_path / "i", sample_config)  # the same build again: nothing to do
    assert opened.retrieve(question, method="bm25", budget=200).evidence
    other = [Document(id=f"d{n}", text=f"Ferry {n} crosses Lake Orrin at {n} o'clock.") for n in range(12)]
    Index.build(other, tmp_path / "i", sample_config, overwrite=True)
    with pytest.raises(IndexFormatError, match="rebuilt while it was open.*open it again"):
        for method in opened.methods:  # whichever part a method loads first
            opened.retrieve(question, method=method, budget=200)
    assert {d.id for d in Index.open(tmp_path / "i").documents()} == {f"d{n}" for n in range(12)}


def test_documents_made_in_code_keep_what_loaded_before_the_checks():
    """Tuples of groups, datetime timestamps and integer ids loaded before the rules were applied to
    documents made in code, and still do, as the JSON records they stand for."""
    from datetime import datetime

    from hopgraph import Document
    from hopgraph.index.ingest import checked_document

    made = checked_document(
        Document(id=5, text="The Sorvik pier.", metadata={"acl": ("board", "legal"), "timestamp": datetime(2024, 3, 1)})
    )
    assert (made.id, made.acl, made.metadata["timestamp"]) == ("5", ["board", "legal"], "2024-03-01T00:00:00")
