"""The ppr path says how a piece was reached: a keyword of the question, a keyword near it, or a
keyword shared with a piece that holds the question's terms (piece → shared term → piece)."""

import re

import pytest

from hopgraph.config import load_config
from hopgraph.documents import Document
from hopgraph.index.pipeline import build_index
from hopgraph.retrieve.retriever import Retriever

FILLER = ["Tidal charts list the harbour depths every spring.", "The bakery opens at six and sells rye bread."]
DOCS = [
    Document(id="first", text="Zorblat Quimby keeps the Frenhaus ledger in the north tower."),
    Document(id="second", text="The Frenhaus ledger records every glimmerdon shipment since 1890."),
    *[Document(id=f"filler-{i}", text=FILLER[i % 2] + f" Entry {i}.") for i in range(8)],
]


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    out = tmp_path_factory.mktemp("paths") / "index"
    settings = {"chunking.size": 40, "chunking.overlap": 0, "chunking.pack_documents": False}
    build_index(DOCS, out, load_config(None, settings), progress=False)
    return Retriever(out)


def test_paths_name_where_the_keyword_came_from(retriever):
    settings = {"ppr.seed_keywords": 1, "ppr.entity_weight": 0}
    result = retriever.retrieve("Who is Zorblat Quimby?", method="ppr", budget=400, overrides=settings)
    paths = {e.doc_ids[0]: e.path for e in result.evidence}
    assert re.fullmatch(r"ppr via keyword:(zorblat|quimby) \(in the query\)", paths["first"])
    first_unit = next(e.index for e in result.evidence if e.doc_ids == ["first"])
    assert paths["second"] in {
        f"ppr via unit {first_unit} → shared keyword:frenhaus",
        f"ppr via unit {first_unit} → shared keyword:ledger",
    }
