"""The Ray engine where the cluster cannot do what is asked, on the real local two-node cluster
(tests/conftest.py `ray_cluster`, one CPU per node, no GPU): every case is one clear error or goes
on with what it has, never a wait without end or a Ray traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from hopgraph.config import HopgraphConfig
from hopgraph.errors import ClusterError, ConfigError
from tests.conftest import SHARED_DATA
from tests.index.test_cluster import configure
from tests.ports import dead_port

pytestmark = pytest.mark.slow  # a Ray cluster and model loads in worker processes


def engine_for(ray_cluster, tmp_path, **dotted):
    from hopgraph.index.cluster import RayEngine

    base = HopgraphConfig.model_validate({})
    settings = {"cluster__engine": "ray", "cluster__address": ray_cluster.address, "cluster__embed_batch_size": 16}
    return RayEngine(configure(base, tmp_path, "faults", **{**settings, **dotted}))


@pytest.mark.parametrize(
    "dotted,problem",
    [
        ({"cluster__gpus_per_actor": 1.0}, "its nodes have at most 1 CPUs and 0 GPUs"),
        ({"cluster__cpus_per_actor": 4.0}, "cluster.cpus_per_actor 4"),
    ],
    ids=["gpu-on-a-cpu-cluster", "more-cpus-than-a-node"],
)
def test_actors_no_node_can_hold_are_refused_at_once(ray_cluster, tmp_path, dotted, problem):
    """Ray kept such an actor pending for good: the build waited at 'embed_units' without a word."""
    engine = engine_for(ray_cluster, tmp_path, **dotted)
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="no node of the Ray cluster can hold an embedding actor") as refused:
            engine.embedder(engine.config.embedding).encode(["Sorvik"])  # the first text that needs the model
    finally:
        engine.close()
    assert problem in str(refused.value) and time.monotonic() - started < 30


def test_a_stage_goes_on_with_the_actors_that_started(ray_cluster, tmp_path):
    """Three actors of one CPU on two CPUs: the third can never start while the others live, and the
    next stage waited for it before its first batch, for good (two builds on one cluster did the same)."""
    engine = engine_for(ray_cluster, tmp_path, cluster__embed_actors=3)
    shapes: list[tuple[int, ...]] = []

    def two_stages() -> None:  # the second stage's first look at the pool waited for the third actor
        embedder = engine.embedder(engine.config.embedding)
        for stage in ("units", "sentences"):
            texts = [f"{stage} {i} about the analytical engine" for i in range(600)]  # > 4 model batches: 3 actors
            shapes.append(embedder.encode(texts).shape)

    worker = threading.Thread(target=two_stages, daemon=True)
    try:
        worker.start()
        worker.join(timeout=240)
        assert not worker.is_alive(), "the pool waited for an actor that cannot start"
        assert [shape[0] for shape in shapes] == [600, 600]
    finally:
        engine.close()


def test_an_actor_that_cannot_load_its_model_is_one_line(ray_cluster, tmp_path):
    """A model folder missing on a node ended the build in an 81-line ActorDiedError traceback."""
    engine = engine_for(ray_cluster, tmp_path, embedding__model=str(tmp_path / "no-such-model"))
    try:
        with pytest.raises(ClusterError) as failed:
            engine.embedder(engine.config.embedding).encode(["Sorvik"])
    finally:
        engine.close()
    message = str(failed.value)
    assert message.startswith("an embedding actor could not start: embedding.model ") and "\n" not in message
    assert "is not a local folder" in message


def test_a_driver_that_cannot_tell_the_embedding_window_is_refused_before_any_stage(tmp_path):
    """The model folder on the GPU nodes alone: the build ran its first stages, then the embedding
    stage ended in a ValueError traceback (and the stage keys recorded no window)."""
    from hopgraph.index.cluster import RayEngine

    missing = tmp_path / "bge-m3"
    config = configure(
        HopgraphConfig.model_validate({}),
        tmp_path,
        "nowhere",
        embedding__model=str(missing),
        embedding__window_tokens=None,
    )
    with pytest.raises(ConfigError, match=f"the model folder '{missing}' is not on this machine") as refused:
        RayEngine(config)
    assert "--embedding.window_tokens" in str(refused.value)
    missing.mkdir()
    with pytest.raises(ConfigError, match="declares no input limit"):
        RayEngine(config)


def test_an_address_where_nothing_listens_is_refused_at_once(tmp_path):
    """Ray's own connection attempts went on for 14 minutes before a traceback."""
    from hopgraph.index.cluster import RayEngine

    config = configure(
        HopgraphConfig.model_validate({}), tmp_path, "nowhere", cluster__address=f"127.0.0.1:{dead_port()}"
    )
    started = time.monotonic()
    with pytest.raises(ConfigError, match="cannot reach the Ray cluster at '127.0.0.1:"):
        RayEngine(config)
    assert time.monotonic() - started < 15


CLUSTER_OF_ITS_OWN = """
import os, sys, time
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
cluster.wait_for_nodes()
print(cluster.address, flush=True)
time.sleep(600)
"""


def test_a_cluster_lost_mid_build_is_one_line_that_says_what_is_kept(tmp_path):
    """Ray's own error was a 40-line ActorUnavailableError traceback. The cluster here is a process
    group of its own, killed whole while the build embeds."""
    cluster = subprocess.Popen(
        [sys.executable, "-c", CLUSTER_OF_ITS_OWN], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    log = tmp_path / "build.log"
    try:
        address = cluster.stdout.readline().strip()  # type: ignore[union-attr]
        assert address, "the cluster did not start"
        corpus = SHARED_DATA / "musique" / "ketrag_500"
        command = [sys.executable, "-m", "hopgraph.cli", "index", str(corpus), "-o", str(tmp_path / "index")]
        command += ["--engine", "ray", "--cluster.address", address, "--embedding.cache", str(tmp_path / "v.sqlite")]
        with log.open("w") as out:
            build = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 300
            while "stage 4/" not in log.read_text() and build.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)  # the first stage that embeds on the cluster's actors
            os.killpg(cluster.pid, signal.SIGKILL)
            status = build.wait(timeout=300)
    finally:
        if cluster.poll() is None:
            os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait()
    output = log.read_text()
    assert status == 2, output[-3000:]  # hopgraph's exit status for an error
    assert "Traceback" not in output
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"error: the Ray cluster at '{address}' failed in stage embed_"), last
    assert last.endswith("are kept: run the same command again once the cluster is back")


def test_a_task_whose_own_code_fails_is_that_error_not_a_lost_cluster(ray_cluster, tmp_path):
    """Ray Data wraps it twice (RayTaskError, UserCodeException); it was said as "the cluster failed …
    run the same command again once the cluster is back", which would fail alike."""
    from hopgraph.errors import InputError

    def refuses(texts: list[str]) -> list[str]:  # defined here: Ray ships it by value
        raise InputError(f"text {texts[0]!r}: not what this task reads")

    engine = engine_for(ray_cluster, tmp_path)
    try:
        with pytest.raises(Exception) as raised:
            engine.map_texts(["odd"] * 4, refuses, 2)
        engine.stage = "entities"
        failure = engine.failure(raised.value)
        assert isinstance(failure, InputError) and str(failure) == "text 'odd': not what this task reads"
        assert engine.failure(ValueError("not Ray's")) is None
        batch = engine.config.cluster.ner_batch_size
        assert engine.task_slice(batch) == 4 * 2 * batch  # every CPU of the two nodes busy
    finally:
        engine.close()


def test_a_cluster_with_gcs_fault_tolerance_is_given_its_own_wait(monkeypatch):
    from hopgraph.index.cluster import LOST_SECONDS, lost_seconds

    assert lost_seconds() == LOST_SECONDS
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "300")  # Ray waits that long for its GCS
    assert lost_seconds() == 295
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "not a number")
    assert lost_seconds() == LOST_SECONDS


def test_a_generation_vllm_failed_on_the_cluster_is_refused_not_an_empty_answer():
    """With should_continue_on_error, Ray passes a failed row on past the postprocess as the engine's
    own fields: it was read as an empty completion (or a KeyError where a whole block failed), which
    the LLM cache kept for good. vLLM needs a GPU, so the row goes through Ray's own wrapper here."""
    from ray.llm._internal.batch.stages.base import wrap_postprocess

    from hopgraph.index.cluster_llm import _from_generation, _generated

    postprocess = wrap_postprocess(_from_generation, "__data", include_error_column=True)
    failed = {"position": 3, "prompt": "…", "generated_text": None, "num_input_tokens": 9000}
    failed["__inference_error__"] = "prompt is longer than max_model_len 8192"
    answered = {"position": 4, "generated_text": "Paris", "num_input_tokens": 12, "num_generated_tokens": 2}
    refused = _generated(postprocess({"__data": failed}), seconds=0.0)
    assert refused.refused.startswith("prompt is longer") and refused.text == "" and refused.prompt_tokens == 9000
    ok = _generated(postprocess({"__data": answered}), seconds=0.0)
    assert (ok.text, ok.prompt_tokens, ok.completion_tokens, ok.refused) == ("Paris", 12, 2, "")


def test_a_server_error_on_the_cluster_is_asked_again_not_the_end_of_the_stage(ray_cluster, tmp_path):
    """Ray's HTTP processor retries 408, 429, 502, 503 and 504 only: one 500 from an endpoint ended the
    stage (as the embedded client retries it). The failure is scripted: a real HTTP server that
    fails the first request it is sent."""
    import json

    from hopgraph.config import LLMConfig
    from hopgraph.llm.types import ChatRequest
    from tests.llm.support import ScriptedServer

    def reply(body, n):
        return (
            (500, json.dumps({"error": {"message": "worker crashed", "code": 500}}), 0) if n == 0 else (200, "Paris", 0)
        )

    engine = engine_for(ray_cluster, tmp_path)
    try:
        with ScriptedServer(reply) as server:
            llm = engine.llm(LLMConfig(base_url=server.base_url, model="scripted", retries=1, timeout=30))
            [done] = llm.complete([ChatRequest(messages=(("user", "Capital of France?"),))])
            assert done.text == "Paris" and not done.refused and len(server.bodies) == 2
    finally:
        engine.close()
