"""The request deadline really stops retrieval work: inside the CUE beam search and its reranker,
the PageRank iterations, concept BFS, ranking and packing (defect: one request ran 20+ minutes)."""

import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

from hopgraph.config import RetrievalConfig, validate_section
from hopgraph.deadline import check_deadline, deadline_after
from hopgraph.errors import ConfigError, DeadlineExceeded
from hopgraph.kernels import RandomWalk
from hopgraph.retrieve.methods import LLM_FREE
from tests.retrieve.test_cue import MAYOR, cue_index  # noqa: F401  (the CUE fixture: sample index + α=0 graph)

# What the server accepted before request limits: minutes of work on a few hundred documents.
HOSTILE_CUE = {"cue.top_k": 100, "cue.depth": 10, "cue.beam": 100, "cue.chunks": 1000}
# How far past its deadline work may run: one model call of rerank.batch_size passages, or one
# expansion batch, on a slow shared CPU.
OVERSHOOT = 6.0


def test_expensive_cue_search_stops_at_its_deadline(cue_index):  # noqa: F811
    cue_index.retrieve(MAYOR, method="text", budget=200)  # models loaded before the clock starts
    started = time.monotonic()
    # Scored from the index's vectors, this search takes about half a second on the sample corpus
    # (it took minutes when the fallback reranker embedded every state): a deadline well below that.
    with pytest.raises(DeadlineExceeded, match="deadline of 0.1 s"):
        cue_index.retrieve(MAYOR, method="cue", budget=32000, overrides=HOSTILE_CUE, deadline=0.1)
    assert time.monotonic() - started < 0.1 + OVERSHOOT


@pytest.mark.parametrize("method", [*LLM_FREE, "cue"])
def test_every_method_checks_the_deadline(cue_index, method):  # noqa: F811
    vector = cue_index.embed([MAYOR])[0]
    with deadline_after(0.001):
        time.sleep(0.01)
        with pytest.raises(DeadlineExceeded):
            cue_index.retrieve(MAYOR, method=method, budget=2000, vector=vector)
    assert cue_index.retrieve(MAYOR, method=method, budget=2000, vector=vector).evidence  # no deadline left behind


def test_pagerank_stops_between_iterations():
    rng = np.random.default_rng(0)
    walk = RandomWalk(sp.random(200, 200, density=0.05, random_state=rng, format="csr"))
    assert walk.run(tol=1e-12).sum() == pytest.approx(1.0)
    with deadline_after(0.001):
        time.sleep(0.01)
        with pytest.raises(DeadlineExceeded):
            walk.run(tol=1e-12)


def test_nested_deadline_never_extends_the_outer_one_and_ends_with_its_block():
    with deadline_after(0.001):
        with deadline_after(60):
            time.sleep(0.01)
            with pytest.raises(DeadlineExceeded, match="0.001 s"):
                check_deadline()
    with deadline_after(60):
        with deadline_after(0.001):
            time.sleep(0.01)
            with pytest.raises(DeadlineExceeded):
                check_deadline()
        check_deadline()  # the outer one still has time
    check_deadline()


def test_a_deadline_belongs_to_its_own_thread():
    seen: list[str] = []
    with deadline_after(0.001):
        time.sleep(0.01)

        def other() -> None:
            check_deadline()
            seen.append("ran")

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == ["ran"]


@pytest.mark.parametrize(
    "setting",
    [
        {"ppr": {"graph_weight": float("inf")}},
        {"ppr": {"text_weight": 1e308}},
        {"ppr": {"path_weight": float("nan")}},
        {"keyword": {"pool_factor": 1e12}},
        {"ppr": {"seed_keywords": 10**9}},
        {"concept": {"top_k": 10**9}},
    ],
)
def test_retrieval_settings_refuse_infinite_and_huge_values(setting):
    with pytest.raises(ConfigError, match="retrieval"):
        validate_section(RetrievalConfig, setting, "retrieval")
