"""Responses are encoded by orjson, which writes NaN and Infinity as null: the finite check before
it must catch every non-finite number, wherever it sits."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hopgraph.serve.errors import APIError, all_finite, non_finite_at
from hopgraph.serve.service import FastJSON, finite, finite_response

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
        finite_response(bad)
    assert refused.value.status == 422 and refused.value.code == "non_finite_result" and where in refused.value.message


def test_finite_payloads_pass_and_encode_as_the_standard_library_does():
    assert all_finite(FINE) and finite(FINE) is FINE
    response = finite_response(FINE)
    assert isinstance(response, FastJSON) and response.media_type == "application/json"
    assert json.loads(response.body) == json.loads(json.dumps(FINE))


def test_a_full_update_queue_answers_429_without_the_index_folder(index_copy) -> None:
    from hopgraph.documents import Document
    from hopgraph.errors import QueueFullError
    from hopgraph.index import versions
    from hopgraph.serve.routes import queue_full

    with pytest.raises(QueueFullError) as raised:  # the real refusal of the job queue (a bound of 0 is always full)
        versions.submit_update(index_copy, [Document(id="d", text="Tem harbour.")], [], max_queued=0)
    assert str(index_copy) in str(raised.value)  # what the CLI shows: the folder named
    error = queue_full(raised.value, 2)
    body = json.dumps({"error": {"code": error.code, "message": error.message}})
    assert error.status == 429 and int(error.headers["Retry-After"]) >= 1 and "limit is 2" in error.message
    assert str(index_copy) not in body and str(index_copy.parent) not in body and "/" not in error.message
