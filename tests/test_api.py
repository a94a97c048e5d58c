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
