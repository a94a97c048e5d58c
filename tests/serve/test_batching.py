"""Dynamic batching of query embeddings: concurrent questions share one model call, get the
vectors they would get alone, fail only by their own fault, and an idle question waits no longer than the window."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from hopgraph.config import EmbeddingConfig
from hopgraph.models import load_embedder
from hopgraph.serve.batching import BatcherClosed, QueryBatcher
from tests.serve.support import LiveServer, auth

QUESTIONS = [
    "Who founded the Halvern Harbor Institute?",
    "Who is the mayor of Sorvik?",
    "What budget did the water board approve for the Sorvik campus in 2025?",
    "Which laboratory did the first director lead before?",
    "Where does Lake Orrin monitoring move?",
    "Who led the rescue of the research vessel?",
    "What is sold with the tide gauges?",
    "When was the campus opened?",
]


@pytest.fixture(scope="module")
def embedder():
    return load_embedder(EmbeddingConfig(cache=""))


def embed_together(batcher: QueryBatcher, questions: list[str], encode) -> list[np.ndarray]:
    with ThreadPoolExecutor(len(questions)) as pool:
        return list(pool.map(lambda q: batcher.embed(q, encode, timeout=60), questions))


def test_batched_vectors_equal_the_vectors_embedded_alone(embedder):
    batcher = QueryBatcher(wait_ms=2000, max_batch=len(QUESTIONS))  # the batch closes when all have arrived
    try:
        started = time.monotonic()
        together = embed_together(batcher, QUESTIONS, embedder.encode_queries)
        assert time.monotonic() - started < 30
    finally:
        batcher.close()
    assert batcher.batches == [len(QUESTIONS)]  # one model call for all of them
    for question, vector in zip(QUESTIONS, together):
        alone = embedder.encode_queries([question])[0]
        np.testing.assert_allclose(vector, alone, atol=1e-5)


def test_a_batch_runs_in_groups_of_like_length_and_answers_in_the_callers_order(embedder):
    passes: list[list[str]] = []

    def recorded(texts):  # the real model, with each forward pass's questions written down
        passes.append(list(texts))
        return embedder.encode_queries(texts)

    batcher = QueryBatcher(wait_ms=2000, max_batch=len(QUESTIONS), group=3)
    try:
        together = embed_together(batcher, QUESTIONS, recorded)
    finally:
        batcher.close()
    assert batcher.batches == [len(QUESTIONS)]
    assert [len(p) for p in passes] == [3, 3, 2]
    lengths = [len(q) for p in passes for q in p]
    assert lengths == sorted(lengths)  # shortest first: each pass pads to a like length
    for question, vector in zip(QUESTIONS, together):
        np.testing.assert_allclose(vector, embedder.encode_queries([question])[0], atol=1e-5)


def test_a_question_the_model_refuses_fails_alone_not_the_questions_batched_with_it(embedder):
    """A lone surrogate makes the tokenizer fail the whole call: every request of the batch, other
    readers' included, failed with it (500s under load, caused by one reader)."""
    bad = "Who is the mayor of Sorvik\ud800?"
    batcher = QueryBatcher(wait_ms=2000, max_batch=4)
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(batcher.embed, q, embedder.encode_queries, 60) for q in [*QUESTIONS[:3], bad]]
            outcomes = [f.exception(timeout=60) or f.result() for f in futures]
    finally:
        batcher.close()
    assert batcher.batches == [4]
    assert isinstance(outcomes[3], Exception)
    for question, vector in zip(QUESTIONS[:3], outcomes[:3]):
        np.testing.assert_allclose(vector, embedder.encode_queries([question])[0], atol=1e-5)


def test_a_failed_batch_fails_every_waiting_request_and_the_next_batch_works(embedder):
    calls: list[int] = []

    def broken(texts):  # a model call that fails (a fault the real model cannot be made to raise on demand)
        calls.append(len(texts))
        raise RuntimeError("embedding model crashed")

    batcher = QueryBatcher(wait_ms=2000, max_batch=5)
    try:
        with ThreadPoolExecutor(5) as pool:
            futures = [pool.submit(batcher.embed, q, broken, 60) for q in QUESTIONS[:5]]
            errors = [f.exception(timeout=60) for f in futures]
        assert calls == [5, 1, 1]  # the batch, then questions alone until two of them failed too
        assert all(isinstance(e, RuntimeError) and "crashed" in str(e) for e in errors)
        vector = batcher.embed(QUESTIONS[0], embedder.encode_queries, timeout=60)
        np.testing.assert_allclose(vector, embedder.encode_queries([QUESTIONS[0]])[0], atol=1e-5)
    finally:
        batcher.close()


def test_an_idle_question_waits_at_most_the_window():
    batcher = QueryBatcher(wait_ms=100, max_batch=32)

    def fast(texts):
        return np.ones((len(texts), 4), dtype=np.float32)

    try:
        batcher.embed("warm", fast)  # the thread starts on first use
        for _ in range(3):
            started = time.perf_counter()
            batcher.embed("alone", fast)
            elapsed = time.perf_counter() - started
            assert 0.09 <= elapsed < 0.5, elapsed
    finally:
        batcher.close()


def test_questions_of_two_models_never_share_a_call():
    seen: list[set[str]] = []
    gate = threading.Event()

    def model(tag: str):
        def encode(texts):
            gate.wait(10)
            seen.append({tag})
            return np.full((len(texts), 2), 1.0 if tag == "a" else 2.0, dtype=np.float32)

        return encode

    a, b = model("a"), model("b")
    batcher = QueryBatcher(wait_ms=300, max_batch=8)
    try:
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(batcher.embed, str(i), a if i % 2 else b, 30) for i in range(6)]
            time.sleep(0.1)
            gate.set()
            vectors = [f.result(30) for f in futures]
        assert [float(v[0]) for v in vectors] == [2.0, 1.0, 2.0, 1.0, 2.0, 1.0]
        assert sum(batcher.batches) == 6 and len(batcher.batches) >= 2
    finally:
        batcher.close()


def test_a_question_that_waits_too_long_times_out_and_a_closed_batcher_refuses():
    gate = threading.Event()

    def slow(texts):
        gate.wait(10)
        return np.zeros((len(texts), 2), dtype=np.float32)

    batcher = QueryBatcher(wait_ms=0, max_batch=1)
    try:
        first = threading.Thread(target=batcher.embed, args=("first", slow, 30))
        first.start()
        time.sleep(0.1)
        with pytest.raises(TimeoutError, match="no query vector within"):
            batcher.embed("second", slow, timeout=0.2)
        gate.set()
        first.join(10)
    finally:
        batcher.close()
    with pytest.raises(BatcherClosed):
        batcher.embed("late", slow)


def test_concurrent_requests_share_embedding_calls_and_get_the_results_of_one_at_a_time(acl_index, serve_config):
    config = serve_config.model_copy(
        update={"serve": serve_config.serve.model_copy(update={"batch_wait_ms": 300.0, "batch_max": 6})}
    )
    with LiveServer(acl_index, config) as server, httpx.Client(base_url=server.url, timeout=60) as client:

        def ask(question: str) -> dict:
            response = client.post(
                "/v1/retrieve", json={"query": question, "method": "ppr", "budget": 300}, headers=auth("ops")
            )
            assert response.status_code == 200, response.text
            return response.json()

        with ThreadPoolExecutor(6) as pool:
            together = list(pool.map(ask, QUESTIONS[:6]))
        assert max(server.app.state.service.batcher.batches) > 1
        for question, result in zip(QUESTIONS[:6], together):
            alone = ask(question)
            assert [(e["kind"], e["index"]) for e in result["evidence"]] == [
                (e["kind"], e["index"]) for e in alone["evidence"]
            ]
            np.testing.assert_allclose(
                [e["score"] for e in result["evidence"]], [e["score"] for e in alone["evidence"]], atol=1e-4
            )


def test_closing_during_the_wait_window_fails_the_waiting_question_and_stops_cleanly(monkeypatch):
    crashes: list = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)
    batcher = QueryBatcher(wait_ms=5000, max_batch=8)
    outcome: list = []

    def ask() -> None:
        try:
            batcher.embed("alone", lambda texts: np.zeros((len(texts), 2), dtype=np.float32), 30)
        except BatcherClosed as exc:
            outcome.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    time.sleep(0.2)  # the batching thread now waits in the window for more questions
    started = time.monotonic()
    batcher.close()
    asker.join(10)
    assert time.monotonic() - started < 3
    assert len(outcome) == 1 and not crashes
    assert batcher._thread is not None and not batcher._thread.is_alive()


def test_a_server_process_runs_one_torch_and_one_blas_thread(acl_index, serve_config):
    """Requests run on threads of their own: torch's and BLAS's default of one thread per core on
    top of them oversubscribes the cores (serve.compute_threads, 1 by default)."""
    import torch
    from threadpoolctl import threadpool_info

    with LiveServer(acl_index, serve_config):
        assert torch.get_num_threads() == 1
        assert [pool["num_threads"] for pool in threadpool_info()] == [1] * len(threadpool_info())
