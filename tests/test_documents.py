"""Walks over nested JSON data (request bodies, document metadata) that hold at any depth."""

from __future__ import annotations

from hopgraph.documents import first_place, too_deep_at


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
