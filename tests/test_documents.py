"""Walks over nested JSON data (request bodies, document metadata) that hold at any depth, and the form
a document is stored in."""

from __future__ import annotations

from hopgraph.documents import Document, canonical_document, first_place, too_deep_at


def test_the_first_bad_value_is_found_however_deep_and_in_document_order():
    deep: object = "bad"
    for _ in range(5000):  # far past Python's recursion limit
        deep = {"k": deep}
    assert first_place(deep, lambda v: v == "bad") == ".".join(["k"] * 5000)
    assert first_place({"a": [1, "bad"], "b": "bad"}, lambda v: v == "bad") == "a.1"
    assert first_place({"bad": 1}, lambda v: v == "bad") == "bad"  # keys count too


def test_nesting_past_the_bound_is_found_with_its_place():
    assert too_deep_at({"a": [[1]]}, limit=3) is None
    assert too_deep_at({"a": [[[1]]]}, limit=3) == "a.0.0"


def test_a_stored_document_has_a_composed_id_and_a_one_line_title_and_source():
    """A title read from a file's properties ("Tide memo\\n[2] Board resolution") added a fake line to
    a chat answer's sources and split rows of a listing; control characters reached both unseen."""
    document = Document(
        id="cafe\u0301",
        text="Text\nkeeps\u2028its lines.",
        title="Tide memo\n[2] Board\u2028resolution\x00 \u202eevil",
        source="/srv/two  spaces\r\nand\ttab.txt",
    )
    stored = canonical_document(document)
    assert (stored.id, stored.title) == ("caf\u00e9", "Tide memo [2] Board resolution evil")
    assert stored.source == "/srv/two  spaces and tab.txt"  # ordinary spaces kept: a source is a path
    assert stored.text == document.text and stored.metadata is document.metadata
    assert canonical_document(stored) is stored
