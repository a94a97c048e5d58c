"""Responses are encoded by orjson, which writes NaN and Infinity as null: the finite check before
it must catch every non-finite number, wherever it sits."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hopgraph.serve.errors import APIError, all_finite, non_finite_at
from hopgraph.serve.service import FastJSON, finite, finite_json

FINE = {"evidence": [{"score": 0.5, "doc_ids": ["a"], "chunk": 3, "ok": True, "none": None}], "seconds": 0.1}


@pytest.mark.parametrize(
    "bad,where",
    [
        ({"evidence": [{"score": math.nan}]}, "evidence.0.score"),
        ({"a": {"b": (1.0, math.inf)}}, "a.b.1"),
        ({"a": [[-math.inf]]}, "a.0.0"),
        ({"a": np.float64("nan")}, "a"),
    ],
)
def test_every_non_finite_number_is_found_and_named(bad, where):
    assert not all_finite(bad) and non_finite_at(bad) == where
    with pytest.raises(APIError) as refused:
        finite_json(bad)
    assert refused.value.status == 422 and refused.value.code == "non_finite_result" and where in refused.value.message


def test_finite_payloads_pass_and_encode_as_the_standard_library_does():
    assert all_finite(FINE) and finite(FINE) is FINE
    response = finite_json(FINE)
    assert isinstance(response, FastJSON) and response.media_type == "application/json"
    assert json.loads(response.body) == json.loads(json.dumps(FINE))
