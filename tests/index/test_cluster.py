"""The Ray engine on a real local Ray cluster of two nodes (tests/conftest.py `ray_cluster`), with
real models and the llama.cpp stand-in as two replicas: the same index as the embedded engine,
workers and drivers killed mid-run, a request too long for the model's context, Ray absent."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hopgraph.config import HopgraphConfig, LLMConfig
from hopgraph.index.datasets import load_benchmark
from hopgraph.index.pipeline import build_index
from hopgraph.llm.standin import StandinServer
from hopgraph.models import load_embedder
from hopgraph.store import IndexStore
from tests.conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.slow  # a Ray cluster and model loads in worker processes: tens of seconds per test
MUSIQUE = SHARED_DATA / "musique" / "ketrag_500"
# Short chunks of a MuSiQue slice: ~1,100 texts to embed, enough for many small batches.
SLICE_SETTINGS = {"chunking.size": 150, "chunking.overlap": 0, "cluster.embed_batch_size": 16}


def configure(base: HopgraphConfig, work: Path, name: str, **dotted) -> HopgraphConfig:
    """``base`` with its own caches under ``work`` (named ``name``) and dotted overrides."""
    data = base.model_dump()
    data["embedding"]["cache"] = str(work / f"{name}-vectors.sqlite")
    data["llm"]["cache"] = str(work / f"{name}-llm.sqlite")
    for key, value in dotted.items():
        section, field = key.split("__")
        data[section][field] = value
    return HopgraphConfig.model_validate(data)


def on_cluster(ray_cluster, work: Path, name: str, **dotted) -> HopgraphConfig:
    """The default settings on the test's Ray cluster (caches of its own under ``work``)."""
    ray = {"cluster__engine": "ray", "cluster__address": ray_cluster.address}
    return configure(HopgraphConfig.model_validate({}), work, name, **ray, **dotted)


def assert_same_index(expected: Path, actual: Path) -> None:
    """Every artifact of one is in the other: tables and graphs identical, vectors within 1e-6."""
    compared, differ = IndexStore(expected).differences(IndexStore(actual), tolerance=1e-6)
    assert differ == [] and compared >= 15


def cache_rows(path: Path, table: str) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path, timeout=30) as db:
        try:
            return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0


@pytest.fixture(scope="module")
def musique_slice():
    return load_benchmark(MUSIQUE).documents[:150]


@pytest.fixture(scope="module")
def replicas():
    """Two stand-in replicas, one request at a time each (greedy output then does not depend on batching)."""
    with (
        StandinServer("smollm2-135m", context=2048, parallel=1) as first,
        StandinServer("smollm2-135m", context=2048, parallel=1) as second,
    ):
        yield [first, second]


def llm_settings(replicas, **update) -> dict:
    settings = LLMConfig(
        base_url=replicas[0].base_url, model="smollm2-135m", max_tokens=128, context_tokens=2048, retries=1, timeout=300
    ).model_dump()
    return {**settings, **update}


def test_ray_build_equals_the_embedded_build_with_llm_extraction_over_two_replicas(
    ray_cluster, replicas, sample_documents, sample_config, tmp_path
):
    base = sample_config.model_copy(
        update={
            "llm": LLMConfig.model_validate(llm_settings(replicas)),
            "extraction": sample_config.extraction.model_copy(update={"kg": "pagerank", "core_fraction": 0.5}),
        }
    )
    local = configure(base, tmp_path, "local")
    build_index(sample_documents, tmp_path / "local", local, progress=False)
    ray = configure(
        base,
        tmp_path,
        "ray",
        cluster__engine="ray",
        cluster__address=ray_cluster.address,
        cluster__llm_endpoints=[r.base_url for r in replicas],
        cluster__embed_batch_size=8,
    )
    manifest = build_index(sample_documents, tmp_path / "ray", ray, progress=False)
    assert_same_index(tmp_path / "local", tmp_path / "ray")
    # Nothing came from the other build's caches: the cluster embedded every text and made every call.
    llm = manifest["stages"]["kg_extract"]["llm"]
    assert llm["new_calls"] == llm["calls"] > 0 and manifest["stages"]["embed_units"]["embedded_cached"] == 0
    # The calls' seconds add up to at most the stage's wall time (summed running averages made
    # them several times the stage's).
    assert 0 < llm["seconds"] <= manifest["stages"]["kg_extract"]["seconds"]
    assert manifest["stages"]["embed_units"]["worker_seconds"] > 0
    # Both replicas answered (round-robin), and each stage says what the cluster spent on it.
    local_rows = cache_rows(tmp_path / "local-llm.sqlite", "completions")
    assert cache_rows(tmp_path / "ray-llm.sqlite", "completions") == local_rows > 0


def test_a_killed_embedding_actor_is_replaced_and_the_build_still_equals_the_embedded_one(
    ray_cluster, musique_slice, tmp_path
):
    import psutil

    base = HopgraphConfig.model_validate({})
    local = configure(base, tmp_path, "local", chunking__size=150, chunking__overlap=0)
    build_index(musique_slice, tmp_path / "local", local, progress=False)
    config = configure(
        local,
        tmp_path,
        "ray",
        cluster__engine="ray",
        cluster__address=ray_cluster.address,
        cluster__embed_batch_size=16,
    )
    killed: list[int] = []

    def kill_one_actor_after_its_first_batches() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            if cache_rows(tmp_path / "ray-vectors.sqlite", "vectors") >= 64:
                for process in psutil.process_iter(["cmdline"]):  # Ray titles an actor's process with its class
                    if "_EmbedActor" in " ".join(process.info["cmdline"] or []):
                        os.kill(process.pid, signal.SIGKILL)
                        killed.append(process.pid)
                        return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one_actor_after_its_first_batches)
    killer.start()
    manifest = build_index(musique_slice, tmp_path / "ray", config, progress=False)
    killer.join()
    assert killed, "no embedding actor was found to kill"
    assert manifest["complete"]
    assert_same_index(tmp_path / "local", tmp_path / "ray")


def run_cli(args: list[str], **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hopgraph.cli", *args], cwd=REPO, **popen)


def test_a_killed_driver_resumes_without_repeating_an_embedding_or_an_llm_call(
    ray_cluster, replicas, sample_documents, tmp_path
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for doc in sample_documents:  # the sample as plain files, so the command line reads it
        (corpus / f"{doc.id.replace('/', '_')}.txt").write_text(doc.text, encoding="utf-8")
    vectors, completions = tmp_path / "vectors.sqlite", tmp_path / "llm.sqlite"
    args = [
        "index",
        str(corpus),
        "--out",
        str(tmp_path / "index"),
        "-q",
        "--engine",
        "ray",
        "--cluster.address",
        ray_cluster.address,
        "--cluster.embed_batch_size",
        "4",
        "--cluster.llm_batch_size",
        "1",
        "--cluster.llm_endpoints",
        ",".join(r.base_url for r in replicas),
        "--chunking.size",
        "96",
        "--chunking.overlap",
        "8",
        "--embedding.cache",
        str(vectors),
        "--llm.cache",
        str(completions),
        "--llm.base_url",
        replicas[0].base_url,
        "--llm.model",
        "smollm2-135m",
        "--llm.max_tokens",
        "128",
        "--extraction.kg",
        "pagerank",
        "--extraction.core_fraction",
        "0.5",
    ]
    # First run: killed (SIGKILL, no cleanup) once some completions are stored, i.e. mid-extraction.
    first = run_cli(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 420
    while cache_rows(completions, "completions") < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.poll() is None, "the first run ended before it could be killed"
    first.send_signal(signal.SIGKILL)
    first.wait()
    vectors_before, completions_before = cache_rows(vectors, "vectors"), cache_rows(completions, "completions")
    assert vectors_before > 0 and completions_before >= 2
    stages = IndexStore(tmp_path / "index").read_manifest()["stages"]
    finished_before = {name for name, record in stages.items() if record.get("done")}
    assert "kg_extract" not in finished_before
    # Second run: finishes; it computes only what the first did not store.
    second = run_cli(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = second.communicate(timeout=540)
    assert second.returncode == 0, err[-2000:]
    stages = IndexStore(tmp_path / "index").read_manifest()["stages"]
    embedded = sum(record.get("embedded_new", 0) for name, record in stages.items() if name not in finished_before)
    assert embedded == cache_rows(vectors, "vectors") - vectors_before  # 0 texts embedded twice
    llm = stages["kg_extract"]["llm"]
    assert llm["cached_calls"] >= completions_before  # every stored completion was reused...
    assert llm["new_calls"] == cache_rows(completions, "completions") - completions_before  # ...none asked again
    assert "kg_extract: " in out and f"{llm['cached_calls']} cached" in out


def test_a_prompt_longer_than_the_model_context_is_a_counted_fallback(ray_cluster, tmp_path):
    from hopgraph.index.cluster import RayEngine
    from hopgraph.llm import open_llm
    from hopgraph.llm.extract import extract

    passages = ["Ada Lovelace wrote the first published program.", "harbour " * 1500]
    with StandinServer("smollm2-135m", context=512, parallel=1) as small:
        # llm.context_tokens says 4096, the server holds 512: the long passage is refused by the server.
        llm_config = LLMConfig(
            base_url=small.base_url,
            model="smollm2-135m",
            max_tokens=96,
            context_tokens=4096,
            retries=0,
            cache=str(tmp_path / "llm.sqlite"),
        )
        config = HopgraphConfig.model_validate({"cluster": {"engine": "ray", "address": ray_cluster.address}})
        engine = RayEngine(config)
        try:
            for backend in (None, engine.llm(llm_config)):  # the embedded engine, then the cluster
                results, usage = extract(open_llm(llm_config, backend=backend), "units", passages, llm_config)
                assert results[1] is None and usage.refused == 1 and usage.fallbacks >= 1
                assert usage.calls == usage.parse_failures + usage.refused + sum(r is not None for r in results)
        finally:
            engine.close()


def test_without_ray_the_engine_names_the_extra_to_install(sample_documents, tmp_path):
    # Fault injection (Ray is installed here): a module named `ray` that fails to import, first on the path.
    blocker = tmp_path / "blocker" / "ray"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), str(REPO)])}
    result = subprocess.run(
        [sys.executable, "-m", "hopgraph.cli", "index", str(REPO / "examples" / "sample"), "--out"]
        + [str(tmp_path / "index"), "--engine", "ray", "-q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "pip install 'hopgraph[cluster]'" in result.stderr and "--engine ray needs Ray" in result.stderr


def test_an_update_through_the_ray_engine_equals_one_through_the_embedded_engine(
    ray_cluster, sample_documents, sample_config, tmp_path
):
    from hopgraph.config import ClusterConfig
    from hopgraph.index import versions

    engines = {"local": None, "ray": ClusterConfig(engine="ray", address=ray_cluster.address)}
    live = {}
    for name, cluster in engines.items():  # each with caches of its own: the cluster embeds the new texts itself
        build_index(sample_documents[:5], tmp_path / name, configure(sample_config, tmp_path, name), progress=False)
        versions.submit_update(tmp_path / name, sample_documents[5:], [sample_documents[0].id])
        [job] = versions.run_pending(tmp_path / name, cluster=cluster)
        assert job["status"] == "done"
        live[name] = versions.version_dir(tmp_path / name, job["version"])
    assert_same_index(live["local"], live["ray"])
    stages = IndexStore(live["ray"]).read_manifest()["stages"]
    assert stages["embed_units"]["embedded_new"] > 0 and stages["embed_units"]["worker_seconds"] > 0


def free_cpus(ray, until: float | None = None, seconds: float = 3.0) -> list[float]:
    """The cluster's free CPUs read every quarter second for ``seconds``, or until they are ``until``."""
    readings: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (until is None or until not in readings):
        readings.append(ray.available_resources().get("CPU", 0.0))
        time.sleep(0.25)
    return readings


def test_the_actor_pool_grows_with_the_work_and_gives_its_cpus_back_when_closed(ray_cluster, tmp_path):
    """An update of a few texts loads the model on one actor, not on every CPU or GPU of the cluster."""
    import ray

    from hopgraph.index.cluster import RayEngine

    config = on_cluster(ray_cluster, tmp_path, "pool", cluster__embed_actors=2, cluster__embed_batch_size=16)
    engine = RayEngine(config)
    try:
        embedder = engine.embedder(config.embedding)
        assert embedder.encode(["Ada Lovelace", "Charles Babbage"]).shape == (2, embedder.dim)
        assert set(free_cpus(ray)) == {1.0}  # one actor for one batch; the other CPU stays free
        texts = [f"passage {i} about the analytical engine" for i in range(200)]
        assert embedder.encode(texts).shape == (200, embedder.dim)
        assert free_cpus(ray)[-1] == 0.0  # 13 batches: both actors
    finally:
        engine.close()  # it joined the cluster for itself, so it also left it
    ray.init(address=ray_cluster.address, log_to_driver=False)
    try:
        assert free_cpus(ray, until=2.0, seconds=20)[-1] == 2.0
    finally:
        ray.shutdown()


def test_a_build_stage_feeds_every_actor_of_the_pool(ray_cluster, tmp_path):
    """A stage's texts reached the pool 1,024 at a time, and a stage starts one actor per two batches:
    with batches of 600 texts one actor ever ran, however large the pool (a 16-GPU cluster used 2)."""
    from hopgraph.index.cluster import RayEngine
    from hopgraph.index.context import BuildContext

    config = on_cluster(ray_cluster, tmp_path, "feed", cluster__embed_actors=2, cluster__embed_batch_size=600)
    engine = RayEngine(config)
    try:
        ctx = BuildContext(IndexStore(tmp_path / "index"), config, [], progress=False, engine=engine)
        texts = [f"note {i} on the difference engine" for i in range(1300)]  # three batches
        assert ctx.embed(texts).shape[0] == 1300
        assert len(engine._starting) + len(engine._ready) == 2  # the second starts while the first works
    finally:
        engine.close()


def test_texts_all_in_the_vector_cache_start_no_embedding_actor(ray_cluster, tmp_path):
    """The actor pool started (each actor loading the model: BGE-M3 on a GPU) to learn the vectors'
    width, even where every text was in the cache: a resumed or repeated build paid for it."""
    from hopgraph.index.cluster import RayEngine

    config = on_cluster(ray_cluster, tmp_path, "cached")
    texts = ["Ada Lovelace", "Charles Babbage"]
    here = load_embedder(config.embedding, cached=True).encode(texts)  # the vectors, cached by this process
    engine = RayEngine(config)
    try:
        embedder = load_embedder(config.embedding, cached=True, model=engine.embedder(config.embedding))
        assert np.array_equal(embedder.encode(texts), here)
        assert not engine._starting and not engine._ready  # no actor was started
        assert embedder.encode([*texts, "Difference engine"]).shape == (3, here.shape[1])  # a new text starts one
        assert engine._ready
    finally:
        engine.close()


def test_named_entities_found_by_ray_tasks_equal_those_found_here(ray_cluster, tmp_path, musique_slice, monkeypatch):
    """spaCy runs in CPU tasks on the cluster's nodes (batches of cluster.ner_batch_size texts), not on the
    driver: the same names, in the same order, with and without noun phrases; its worker time is counted,
    and an embedding actor holding half the CPUs or less is not ended for it (its model stays loaded)."""
    import ray

    from hopgraph import ner
    from hopgraph.index.cluster import RayEngine

    config = configure(
        HopgraphConfig.model_validate({}),
        tmp_path,
        "ner",
        cluster__engine="ray",
        cluster__address=ray_cluster.address,
        cluster__embed_actors=1,
        cluster__ner_batch_size=7,
    )
    texts = [d.text for d in musique_slice[:40]] + [""]
    engine = RayEngine(config)
    try:
        embedder = engine.embedder(config.embedding)
        embedder.encode(["Ada Lovelace"])
        [actor] = engine.ready_actors(config.embedding, wait=True)
        engine.costs()
        monkeypatch.setattr(ner, "PARALLEL_FROM", 1)  # the driver reads fewer texts itself
        for phrases in (False, True):
            assert engine.entity_names(texts, phrases) == ner.entity_names(texts, phrases)
        assert engine.costs()["worker_seconds"] > 0
        assert list(engine.ready_actors(config.embedding, wait=False)) == [actor]  # one CPU of two: kept
        assert ray.get(actor.dimension.remote()) == embedder.dim
        assert engine.entity_names([]) == []
    finally:
        engine.close()
