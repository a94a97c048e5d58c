"""Filters that say what they do: unknown fields refused with the filterable ones, document columns
(id, title, source) filterable, range and set operators with sensible comparison (ISO dates with time
zones, numbers), mixed kinds refused, and the same answers over real HTTP as in the library."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from hopgraph.index.catalog import list_documents
from hopgraph.retrieve.filters import MetadataFilter, check_where, reader_filter
from hopgraph.retrieve.loaded import LoadedIndex
from tests.serve.support import LiveServer, auth


@pytest.fixture(scope="module")
def index(sample_index):
    return LoadedIndex(sample_index)


# Files without a timestamp of their own have their modification time (this checkout's, after 2025).
EARLY = {"gte": "2024-01-01", "lt": "2025-06-01"}


def selected(index: LoadedIndex, where: dict, **reader) -> set[str]:
    flt = reader_filter(index, where, max_keys=16, max_values=256, **reader)
    return {doc for doc, keep in zip(index.documents["id"], flt.document_mask(index)) if keep}


def test_an_unknown_field_is_refused_with_the_filterable_ones(index):
    with pytest.raises(ValueError, match="unknown filter field 'timestmap'") as caught:
        selected(index, {"timestmap": {"gte": "2024-01-01"}})
    for name in ("id", "title", "source", "timestamp", "acl"):
        assert name in str(caught.value)


def test_document_columns_are_filterable(index):
    assert selected(index, {"id": "press-2023"}) == {"press-2023"}
    assert selected(index, {"title": "Vessel maintenance memo"}) == {"memo-2024-03"}
    source = index.documents["source"][index.documents["id"].index("budget-2025")]
    assert selected(index, {"source": source}) == {"memo-2024-03", "budget-2025", "press-2023"}


def test_an_id_filter_names_documents_in_the_spelling_ids_are_stored_in(index):
    """Ids are stored composed (NFC): a decomposed "e" + U+0301 in a filter is the same "é" (and an
    index built before stores its ids as they came: both sides are compared composed)."""
    where = {"id": {"in": ["cafe\u0301.md", "press-2023"], "ne": "cre\u0300me"}, "title": "cafe\u0301"}
    flt = reader_filter(index, where, max_keys=16, max_values=256)
    assert flt.where["id"] == {"in": ["caf\u00e9.md", "press-2023"], "ne": "cr\u00e8me"}
    assert flt.where["title"] == "caf\u00e9"  # titles too (a title is often a file's name)


def test_an_id_stored_decomposed_is_found_by_either_spelling():
    """An index built before ids were stored composed holds them as they came."""
    stored = SimpleNamespace(documents={"id": ["cafe\u0301.md", "tea.md"], "title": ["", ""], "metadata": [{}, {}]})
    for spelled in ("caf\u00e9.md", "cafe\u0301.md"):
        flt = reader_filter(stored, {"id": spelled}, max_keys=16, max_values=256)
        assert list(flt.matching_mask(stored)) == [True, False], spelled


def test_a_list_field_matches_by_its_items(index):
    """``{"acl": "board"}`` matched nothing: a document's list never equalled a filter's value."""
    assert selected(index, {"acl": "board"}) == {"memo-2024-03", "budget-2025"}
    assert selected(index, {"acl": {"in": ["operations"]}}) == {"memo-2024-03"}
    assert "budget-2025" not in selected(index, {"acl": {"ne": "board"}})
    assert "memo-2024-03" in selected(index, {"acl": {"ne": "nobody"}})


def test_ranges_compare_iso_times_with_their_time_zones(index):
    assert selected(index, {"timestamp": EARLY}) == {"memo-2024-03", "budget-2025"}
    assert selected(index, {"timestamp": {"gte": "2024-01-01", "lt": "2025-01-01"}}) == {"memo-2024-03"}
    # 10:00 at +01:00 is the memo's own 09:00Z: "lt" excludes it, "lte" keeps it.
    assert "memo-2024-03" not in selected(index, {"timestamp": {"lt": "2024-03-02T10:00:00+01:00"}})
    assert "memo-2024-03" in selected(index, {"timestamp": {"lte": "2024-03-02T10:00:00+01:00"}})


def test_a_file_is_filtered_by_the_timestamp_documents_lists(index, sample_index):
    """A file with no timestamp of its own is listed with its modification time: ``timestamp`` filters
    on that same value, not only on a ``timestamp`` field some documents carry."""
    listed = {row["id"]: row["timestamp"] for row in list_documents(sample_index)["documents"]}
    assert (
        listed["sorvik.txt"]
        and "timestamp" not in index.documents["metadata"][index.documents["id"].index("sorvik.txt")]
    )
    assert "sorvik.txt" in selected(index, {"timestamp": {"gte": listed["sorvik.txt"]}})
    assert "sorvik.txt" not in selected(index, {"timestamp": {"lt": listed["sorvik.txt"]}})


def test_ranges_compare_numbers_as_numbers(index):
    assert selected(index, {"line": {"gt": 1, "lte": 10}}) == {"budget-2025", "press-2023"}


def test_set_operators(index):
    assert selected(index, {"id": {"in": ["press-2023", "budget-2025", "nowhere"]}}) == {"press-2023", "budget-2025"}
    everyone = set(index.documents["id"])
    assert selected(index, {"id": {"ne": "press-2023"}}) == everyone - {"press-2023"}


@pytest.mark.parametrize(
    "where,problem",
    [
        ({"line": {"gt": 1, "lt": "3"}}, "mix numbers and strings"),
        ({"timestamp": {"gte": 2024}}, "holds strings; compare it with a string"),
        ({"line": {"gte": "2"}}, "holds numbers; compare it with a number"),
        ({"id": {"between": [1, 2]}}, "unknown operator 'between'"),
        ({"id": {"in": "press-2023"}}, "'in' takes a list"),
        ({"id": {}}, "empty operator object"),
        ({"id": {"gte": True}}, "numbers or strings"),
        ({"timestamp": {"gte": "yesterday"}}, "ISO-8601 dates or times .* not 'yesterday'"),
        ({"timestamp": {"lt": "2024-13-45"}}, "ISO-8601 dates or times .* not '2024-13-45'"),
    ],
)
def test_malformed_or_mismatched_conditions_are_refused(index, where, problem):
    with pytest.raises(ValueError, match=problem):
        selected(index, where)


def test_operator_values_count_towards_the_bound():
    with pytest.raises(ValueError, match="at most 256"):
        check_where({"a": {"in": list(range(200))}, "b": {"in": list(range(56)), "ne": 1}}, 16, 256)
    check_where({"a": {"in": list(range(200))}, "b": {"in": list(range(55)), "ne": 1}}, 16, 256)


def test_fields_of_forbidden_documents_are_never_named(index):
    # A reader who may read no document learns no metadata key, only the document columns.
    with pytest.raises(ValueError, match="filterable fields: id, source, title$"):
        selected(index, {"timestamp": "x"}, groups=frozenset({"nobody"}), allow_unrestricted=False)
    # The key exists among the readable documents: accepted, and the ACL still applies.
    assert selected(index, {"timestamp": {"gte": "2024", "lt": "2025-06"}}, groups=frozenset({"board"})) == {
        "memo-2024-03",
        "budget-2025",
    }
    # Naming a forbidden document's id never opens it.
    assert not MetadataFilter(groups=frozenset(), where={"id": "budget-2025"}).document_mask(index).any()


def test_the_server_applies_the_same_filter(sample_index, sample_config):
    with (
        LiveServer(sample_index, sample_config) as live,
        httpx.Client(base_url=live.url, timeout=60) as client,
    ):
        wrong = client.post(
            "/v1/retrieve", json={"query": "tide gauges", "where": {"titel": "x"}}, headers=auth("admin")
        )
        assert wrong.status_code == 422, wrong.text
        error = wrong.json()["error"]
        assert error["code"] == "invalid_filter" and "filterable fields: acl, id, line" in error["message"]
        ranged = client.post(
            "/v1/retrieve",
            json={"query": "Sorvik budget and vessel", "method": "text", "where": {"timestamp": EARLY}},
            headers=auth("admin"),
        )
        assert ranged.status_code == 200, ranged.text
        cited = {d for ev in ranged.json()["evidence"] for d in ev["doc_ids"]}
        assert cited and cited <= {"memo-2024-03", "budget-2025"}


def test_the_python_api_applies_the_same_filter(sample_index):
    from hopgraph.api import Index
    from hopgraph.errors import ConfigError

    index = Index.open(sample_index)
    with pytest.raises(ConfigError, match="unknown filter field 'titel'; filterable fields: acl, id, line"):
        index.retrieve("tide gauges", where={"titel": "x"})
    result = index.retrieve("Sorvik budget", method="text", where={"id": {"in": ["budget-2025"]}})
    assert {d for ev in result.evidence for d in ev.doc_ids} == {"budget-2025"}


def test_a_filter_keeps_the_pieces_a_matching_document_shares_with_others(index, sample_index):
    """Chunks pack several documents (chunking.pack_documents), and a piece was kept only where every
    one of its documents matched ``where``: asking for press-2023, which shares its chunks, found no
    evidence at all. A piece is kept where one of its documents matches (and the reader may read
    them all: the ACL still needs every one)."""
    from hopgraph.retrieve.retriever import Retriever

    press = index.documents["id"].index("press-2023")
    shared = [docs for docs in index.chunks["docs"] if press in docs and len(docs) > 1]
    assert shared  # the case at hand: press-2023 shares a chunk with another document
    retriever = Retriever(sample_index)
    for method in ("text", "ppr"):
        result = retriever.retrieve(
            "When were the new tide gauges installed?",
            method=method,
            budget=400,
            metadata_filter=MetadataFilter(where={"id": "press-2023"}),
        )
        assert result.evidence, method
        assert all("press-2023" in ev.doc_ids for ev in result.evidence), method
    other = index.documents["id"][next(d for d in shared[0] if d != press)]
    acl = MetadataFilter(groups=frozenset(), where={"id": "press-2023"})
    readable = acl.readable_mask(index)
    assert acl.piece_scopes(index, shared)[0].tolist() == [all(readable[d] for d in docs) for docs in shared], other
