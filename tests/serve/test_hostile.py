"""One hostile reader cannot freeze the server: per-request parameter bounds (422), a deadline that
stops the most expensive accepted request (504) while ordinary readers keep being answered, models
safe to share without a server-wide lock, and a prompt exit on SIGTERM. Real HTTP, real models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

from hopgraph.config import EmbeddingConfig
from hopgraph.llm.standin import free_port
from hopgraph.models import FairLock, load_embedder
from hopgraph.retrieve.rerank import BiEncoderReranker
from tests.serve.support import USERS, LiveServer, auth, refused

DEADLINE = 2.0
# One model call of rerank.batch_size passages, or one expansion batch, on a slow shared CPU:
# how long past its deadline a request may run, and how long it may hold up another reader.
OVERSHOOT = 10.0
MAYOR = "Who is the mayor of Sorvik, the town with a campus of the Halvern Harbor Institute?"
ORDINARY = [
    "Who was the first director of the Halvern Harbor Institute?",
    "What budget did the water board approve?",
    MAYOR,
]


def most_expensive(config) -> dict:
    """The costliest cue request the server accepts: every bounded setting at its limit, λ at max_budget."""
    limits = config.serve.request_limits
    return {
        "query": MAYOR,
        "method": "cue",
        "budget": config.serve.max_budget,
        "params": {
            "cue": {
                "top_k": limits.cue_top_k,
                "depth": limits.cue_depth,
                "beam": limits.cue_beam,
                "chunks": limits.cue_chunks,
            }
        },
    }


@pytest.fixture(scope="module")
def cue_index(tmp_path_factory, sample_documents, sample_config):
    """The sample corpus with a CUE graph at α=0 (sentence units, no LLM)."""
    from hopgraph.index.pipeline import build_index

    out = tmp_path_factory.mktemp("cue-serve") / "index"
    build_index(
        sample_documents,
        out,
        sample_config.model_copy(update={"extraction": sample_config.extraction.model_copy(update={"cue_alpha": 0.0})}),
        progress=False,
    )
    return out


@pytest.fixture(scope="module")
def config(serve_config):
    return serve_config.model_copy(
        update={"serve": serve_config.serve.model_copy(update={"request_deadline": DEADLINE})}
    )


@pytest.fixture(scope="module")
def server(cue_index, config):
    # The costliest accepted request must outlast the deadline. With the fallback reranker reading
    # stored vectors it takes a fraction of a second on the sample corpus, so here the fallback
    # reads every passage's text per query, as a cross-encoder does (no cross-encoder weights are
    # available to tests): an injected cost, the one way left to reach the deadline.
    patch = pytest.MonkeyPatch()
    patch.setattr(
        BiEncoderReranker, "score_embedded", lambda self, query, query_vector, texts, vectors: self.score(query, texts)
    )
    try:
        with LiveServer(cue_index, config) as live:
            yield live
    finally:
        patch.undo()


def test_most_expensive_request_is_cut_while_ordinary_readers_are_answered(server, config):
    hostile: dict = {}
    ordinary: list[tuple[float, int]] = []
    done = threading.Event()

    def attack() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            started = time.monotonic()
            response = client.post("/v1/retrieve", json=most_expensive(config), headers=auth("guest"))
            hostile.update(status=response.status_code, body=response.json(), seconds=time.monotonic() - started)
        done.set()

    def read(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while not done.is_set():
                started = time.monotonic()
                response = client.post(
                    "/v1/retrieve", json={"query": ORDINARY[n % 3], "method": "ppr", "budget": 2000}, headers=auth("bo")
                )
                ordinary.append((time.monotonic() - started, response.status_code))
                n += 1

    threads = [threading.Thread(target=attack)] + [threading.Thread(target=read, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert hostile["status"] == 504 and hostile["body"]["error"]["code"] == "deadline_exceeded", hostile
    assert f"{DEADLINE:g} s (serve.request_deadline)" in hostile["body"]["error"]["message"]
    assert hostile["seconds"] < DEADLINE + OVERSHOOT
    assert len(ordinary) >= 3 and {status for _, status in ordinary} == {200}
    assert max(seconds for seconds, _ in ordinary) < OVERSHOOT


@pytest.mark.parametrize(
    "params,field,limit",
    [
        ({"cue": {"depth": 10}}, "params.cue.depth", "serve.request_limits.cue_depth"),
        ({"cue": {"beam": 100}}, "params.cue.beam", "serve.request_limits.cue_beam"),
        (
            {"cue": {"beam": "100"}},
            "params.cue.beam",
            "serve.request_limits.cue_beam",
        ),  # the settings would read "100" as 100
        ({"cue": {"top_k": 11}}, "params.cue.top_k", "serve.request_limits.cue_top_k"),
        ({"cue": {"chunks": 1000}}, "params.cue.chunks", "serve.request_limits.cue_chunks"),
        ({"concept": {"depth": 6}}, "params.concept.depth", "serve.request_limits.concept_depth"),
        ({"ppr": {"seed_keywords": 5000}}, "params.ppr.seed_keywords", "serve.request_limits.ppr_seed_keywords"),
        ({"ppr": {"graph_weight": 1e308}}, "params.ppr.graph_weight", "serve.request_limits.weights"),
    ],
)
def test_parameters_over_the_server_limits_are_refused(server, params, field, limit):
    response = httpx.post(
        f"{server.url}/v1/retrieve",
        json={"query": MAYOR, "method": "cue", "params": params},
        headers=auth("guest"),
        timeout=60,
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "over_limit" and field in error["message"] and limit in error["message"]


def test_a_setting_that_shapes_a_kept_graph_is_the_servers_alone(server):
    """Each new ppr.entity_cooccurrence_weight a reader sent built one more walk over every passage
    and entity, kept until the next version: memory grew by a graph per request, without bound."""
    snap = server.app.state.holder.current
    own = snap.retriever.config.ppr.entity_cooccurrence_weight

    def ask(weight: float | bool) -> httpx.Response:
        params = {"ppr": {"entity_cooccurrence_weight": weight}}
        body = {"query": MAYOR, "method": "ppr", "params": params}
        return httpx.post(f"{server.url}/v1/retrieve", json=body, headers=auth("guest"), timeout=60)

    assert ask(own).status_code == 200  # the server's own value is no change
    walks = sorted(key for key in snap.index._memo if key[0] == "walk")
    for weight in (own / 2, own / 2 + 1e-6, True):  # the settings read true as 1.0
        response = ask(weight)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "over_limit" and "params.ppr.entity_cooccurrence_weight" in error["message"]
        assert f"fixes it at {own:g}" in error["message"]
    assert sorted(key for key in snap.index._memo if key[0] == "walk") == walks


@pytest.mark.parametrize("endpoint", ["/v1/retrieve", "/v1/chat/completions"])
def test_an_integer_past_any_float_is_refused_not_a_server_error(server, endpoint):
    """A 400-digit integer as a setting overflowed float() inside the limit check: 500 and a 10 kB
    traceback in the log per request, for any reader token."""
    huge = 10**400
    if endpoint == "/v1/retrieve":
        body = {"query": "harbor", "method": "ppr", "params": {"ppr": {"damping": huge}}}
    else:
        body = {"model": "hopgraph-ppr", "messages": [{"role": "user", "content": "harbor"}]}
        body["hopgraph"] = {"params": {"ppr": {"damping": huge}}}
    response = httpx.post(f"{server.url}{endpoint}", json=body, headers=auth("guest"), timeout=60)
    assert response.status_code == refused(endpoint), response.text
    assert "ppr.damping" in response.json()["error"]["message"]


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
def test_non_finite_numbers_are_refused(server, literal):
    body = '{"query": "harbor", "method": "ppr", "params": {"ppr": {"text_weight": LITERAL}}}'.replace(
        "LITERAL", literal
    )  # not JSON, but Python's json reads it
    response = httpx.post(
        f"{server.url}/v1/retrieve",
        content=body,
        headers={**auth("guest"), "Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 422 and "ppr.text_weight" in response.json()["error"]["message"]


def test_one_embedder_serves_many_threads_one_call_at_a_time(monkeypatch):
    """The server holds no lock around retrieval, so the shared model must serialise its own calls.
    A wrapper around the real model's encode (the real model still runs) counts overlapping calls."""
    embedder = load_embedder(EmbeddingConfig(cache="")).inner  # the shared model object under the prompt wrapper
    texts = [f"Report {i} on the Sorvik harbor and the institute's campus. " * (1 + i % 5) for i in range(12)]
    serial = embedder.encode(texts)
    real, inside, overlap = embedder.model.encode, [0], [0]
    guard = threading.Lock()

    def counting(*args, **kwargs):
        with guard:
            inside[0] += 1
            overlap[0] = max(overlap[0], inside[0])
        try:
            time.sleep(0.01)  # widen the window in which an unserialised second call would enter
            return real(*args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(embedder.model, "encode", counting)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(k, len(texts), 6):
                results[i] = embedder.encode([texts[i]])[0]
        except BaseException as exc:  # noqa: BLE001  (any failure of a concurrent call is the finding)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and overlap[0] == 1
    np.testing.assert_allclose(np.stack([results[i] for i in range(len(texts))]), serial, atol=1e-5)


@pytest.mark.slow
def test_sigterm_stops_the_server_within_seconds_during_an_expensive_request(cue_index, config, tmp_path):
    port = free_port()
    users = [{"token": USERS["guest"]["token"], "user": "guest", "groups": []}]
    env = {**os.environ, "HOPGRAPH_TOKENS": json.dumps(users)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hopgraph.cli",
            "serve",
            str(cue_index),
            "--serve.port",
            str(port),
            "--serve.request_deadline",
            "3",
            "--serve.rate_limit",
            "0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.3)
        request = threading.Thread(
            target=lambda: httpx.post(
                f"{url}/v1/retrieve", json=most_expensive(config), headers=auth("guest"), timeout=120
            ),
            daemon=True,
        )
        request.start()
        time.sleep(1.0)  # the search is under way
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
        assert time.monotonic() - stopped < 3 + OVERSHOOT
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_model_lock_is_granted_in_arrival_order():
    """A caller that takes the model call after call (a long rerank) cannot jump ahead of one
    already waiting: each waiter waits for at most the calls queued before it."""
    lock = FairLock()
    order: list[str] = []
    waiting = threading.Event()

    def one_call() -> None:
        waiting.set()
        with lock:
            order.append("reader")

    with lock:
        order.append("batch 1")
        reader = threading.Thread(target=one_call)
        reader.start()
        waiting.wait()
        time.sleep(0.2)  # the reader is now queued for the lock
    with lock:  # the long caller comes straight back for its next batch
        order.append("batch 2")
    reader.join()
    assert order == ["batch 1", "reader", "batch 2"]


def nested(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


@pytest.mark.parametrize(
    "path,body,user",
    [
        ("/v1/retrieve", '{"query": "harbor", "where": {"title": DEEP}}', "guest"),
        ("/v1/retrieve", '{"query": "harbor", "params": {"ppr": DEEP}}', "guest"),
        ("/v1/documents", '{"documents": [{"id": "deep", "text": "A note.", "metadata": {"tags": DEEP}}]}', "admin"),
        ("/v1/chat/completions", '{"model": "hopgraph-ppr", "messages": [], "tools": DEEP}', "guest"),
    ],
    ids=["where", "params", "metadata", "chat-extra-field"],
)
@pytest.mark.parametrize("levels", [40, 950])
def test_json_nested_deeper_than_the_bound_is_refused(server, path, body, user, levels):
    # 950 levels passed the JSON parser and broke the recursive walks after it: a 500 before the bound.
    response = httpx.post(
        f"{server.url}{path}",
        content=body.replace("DEEP", nested(levels)),
        headers={**auth(user), "Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == refused(path), response.text
    assert "nested more than 32 levels deep" in response.text
