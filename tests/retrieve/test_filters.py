"""The metadata filter: bounded in size, flat values only, and evaluated in one pass over the
documents per key (a set lookup per document, never a scan of the allowed values)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from hopgraph.retrieve.filters import MetadataFilter, check_where
from hopgraph.retrieve.loaded import LoadedIndex


@pytest.mark.parametrize(
    "where,problem",
    [
        ({f"k{i}": "v" for i in range(17)}, "17 keys; at most 16"),
        ({"a": list(range(200)), "b": list(range(57))}, "at most 256"),
        ({"a": {"$ne": 1}}, "unknown operator"),
        ({"a": [["x"]]}, "flat list"),
        ({"a": [{"b": 1}]}, "flat list"),
    ],
)
def test_oversized_or_nested_filters_are_refused(where, problem):
    with pytest.raises(ValueError, match=problem):
        check_where(where, 16, 256)


def test_flat_filters_within_the_bounds_pass():
    check_where({"lang": "en", "year": [2020, 2021, 2.5, True, None], "k": []}, 16, 256)


def naive_mask(flt: MetadataFilter, docs: dict) -> list[bool]:
    """The definition, written out: every key's document value is one of the allowed values."""
    out = []
    for acl, meta in zip(docs["acl"], docs["metadata"]):
        ok = flt.allow_unrestricted if acl is None else bool(flt.groups & set(acl)) if flt.groups is not None else True
        for key, allowed in flt.where.items():
            values = allowed if isinstance(allowed, list) else [allowed]
            ok = ok and any(meta.get(key) == v and type(meta.get(key)) is not list for v in values)
        out.append(ok)
    return out


def test_mask_matches_the_definition_on_a_real_index(sample_index):
    index = LoadedIndex(sample_index)
    docs = index.documents
    some_source = docs["metadata"][0]["source_path"]
    for flt in (
        MetadataFilter(where={"source_path": some_source}),
        MetadataFilter(where={"source_path": [some_source, "nowhere"], "line": [1, 2, 3]}),
        MetadataFilter(groups=frozenset({"legal"}), allow_unrestricted=False),
        MetadataFilter(groups=frozenset(), where={"acl": "legal"}),  # a list-valued key never equals a scalar
        MetadataFilter(where={"missing": None}),
    ):
        assert flt.document_mask(index).tolist() == naive_mask(flt, docs)


def test_a_large_value_list_costs_one_pass_over_the_documents():
    # A table shaped like LoadedIndex.documents, large enough to show the cost; building a real
    # index of 20,000 documents would take minutes.
    n = 20_000
    table = SimpleNamespace(
        documents={
            "id": [str(i) for i in range(n)],
            "acl": [None] * n,
            "metadata": [{"team": f"t{i}", "year": 2000 + i % 20} for i in range(n)],
        }
    )
    flt = MetadataFilter(
        groups=frozenset({"x"}), where={"team": [f"t{i}" for i in range(0, n, 2)], "year": [2000, 2002]}
    )
    started = time.perf_counter()
    mask = flt.document_mask(table)
    seconds = time.perf_counter() - started
    assert mask.sum() == n // 20 * 2  # even teams in years 2000 and 2002
    # One set lookup per document and key: ~20 ms here. Scanning the 10,000 allowed values for each
    # document (the old loop) takes ~100 million comparisons, several seconds.
    assert seconds < 1.0, seconds


def test_true_and_false_are_not_the_numbers_one_and_zero():
    """Set membership used Python's equality, where True == 1 == 1.0: {"eq": true} matched documents
    whose value is 1, and {"ne": false} left out those of 0 (range filters kept the kinds apart)."""
    from hopgraph.retrieve.filters import condition_mask

    values = [True, 1, 1.0, "1", 0, False, [True, "x"], [1]]
    assert condition_mask(values, True).tolist() == [True, False, False, False, False, False, True, False]
    assert condition_mask(values, {"eq": 1}).tolist() == [False, True, True, False, False, False, False, True]
    assert condition_mask(values, {"ne": False}).tolist() == [True, True, True, True, True, False, True, True]
    assert condition_mask(values, {"in": [0, "1"]}).tolist() == [False, False, False, True, True, False, False, False]
