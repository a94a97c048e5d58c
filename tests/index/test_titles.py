"""Titles take part in retrieval: a passage that never repeats its subject is found by its title."""

import pytest

from hopgraph.config import load_config
from hopgraph.documents import Document
from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.retriever import Retriever
from hopgraph.store import IndexStore

PEOPLE = {
    "Omar Haddad": "He was born in 1921 in a harbour town and later studied rocks and minerals abroad.",
    "Ermengarde Vell": "She was born in 1874 and spent her life painting the northern coast in winter.",
    "Tomas Reyes": "He was born in 1990 and leads a small team that writes billing software.",
    "Anton Kestrel": "He was born in 1802 and built bridges over three rivers of his province.",
    "Clio Marsh": "She was born in 1957 and acted in a dozen films before turning to farming.",
    "Boso Ardent": "He was born in 1033 and held a march on the frontier for twenty years.",
}


@pytest.fixture(scope="module")
def titled_index(tmp_path_factory):
    docs = [Document(id=name.split()[1].lower(), title=name, text=text) for name, text in PEOPLE.items()]
    out = tmp_path_factory.mktemp("titles") / "index"
    build_index(
        docs,
        out,
        load_config(None, {"chunking.size": 150, "chunking.overlap": 0, "chunking.pack_documents": False}),
        progress=False,
    )
    return out


def test_the_title_is_stored_as_the_heading_not_as_shown_text(titled_index):
    units = IndexStore(titled_index).read_table("units")
    assert sorted(units["heading"]) == sorted(PEOPLE)
    assert sorted(units["text"]) == sorted(PEOPLE.values())


@pytest.mark.parametrize("method", ["text", "bm25", "ppr"])
def test_a_question_naming_the_subject_finds_the_passage_by_its_title(titled_index, method):
    retriever = Retriever(titled_index)
    for name in PEOPLE:
        result = retriever.retrieve(f"In which year was {name} born?", method=method, budget=60)
        assert result.evidence[0].doc_ids == [name.split()[1].lower()], (method, name)
        assert name not in result.evidence[0].text  # the heading is searched, not shown
