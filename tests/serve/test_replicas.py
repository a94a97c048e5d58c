"""Several processes serving one index directory, over real HTTP on loopback: `hopgraph serve`
replicas (one leads the update jobs, every one follows the live version, a dead leader is replaced),
`serve.workers` processes on one port, heartbeats that garbage collection spares, and arrays
memory-mapped so that processes share their pages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
import numpy as np
import psutil
import pytest

from hopgraph.index import garbage, versions
from hopgraph.retrieve.loaded import LoadedIndex
from hopgraph.serve.replicas import Heartbeats, read_leader
from hopgraph.store import REPLICAS, read_heartbeats
from tests.serve.support import REFRESH, ServeProcess, auth, until

SWITCH_BOUND = 20.0  # seconds: REFRESH plus loading the small test index, with room for a busy 2-core machine


def insert(url: str, doc_id: str, text: str) -> dict[str, Any]:
    response = httpx.post(
        f"{url}/v1/documents",
        json={"documents": [{"id": doc_id, "title": doc_id, "text": text}]},
        headers=auth("admin"),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    return dict(response.json())


def job_done(url: str, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = httpx.get(f"{url}/v1/jobs/{job_id}", headers=auth("admin"), timeout=10).json()
        if record["status"] in ("done", "failed"):
            return dict(record)
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} did not end in {timeout} s")


def doc_ids(result: dict[str, Any]) -> set[str]:
    return {d for ev in result["evidence"] for d in ev["doc_ids"]}


@pytest.mark.slow
def test_two_replicas_one_leader_every_one_serves_new_versions_and_a_dead_leader_is_replaced(index_copy, tmp_path):
    first = ServeProcess(index_copy, tmp_path / "first.log").wait_ready()  # started first: takes the lead
    second = ServeProcess(index_copy, tmp_path / "second.log").wait_ready()
    try:
        assert read_leader(index_copy)["pid"] == first.pid
        beats = {b["pid"]: b for b in read_heartbeats(index_copy)}
        assert beats[first.pid]["leader"] and not beats[second.pid]["leader"]
        for replica in (first, second):  # any replica answers
            assert replica.retrieve("Sorvik ferry")["version"] == ""

        # An insert submitted to the follower is queued on disk, built once by the leader's worker,
        # and 'done' on the follower only once the follower answers from it.
        text = "The Wrenfield Lighthouse on Tem island was lit for the first time in 1911 by keeper Ada Quist."
        job = insert(second.url, "wrenfield-lighthouse", text)
        record = job_done(second.url, job["id"])
        assert record["status"] == "done" and record["version"] == job["id"]
        assert record["attempts"] == 1  # one worker ran it, once
        assert second.retrieve("Wrenfield Lighthouse keeper Ada Quist")["version"] == job["id"]
        published = (index_copy / versions.CURRENT).stat().st_mtime
        until(lambda: first.version() == job["id"], SWITCH_BOUND)
        to_both = time.time() - published
        assert to_both < SWITCH_BOUND
        for replica in (first, second):
            found = replica.retrieve("Wrenfield Lighthouse keeper Ada Quist")
            assert found["version"] == job["id"] and "wrenfield-lighthouse" in doc_ids(found)
        assert "runs the update jobs" not in second.log.read_text()  # the follower never ran a worker

        # The leader dies hard: the follower takes the lock within its refresh interval and runs the next job.
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        until(lambda: read_leader(index_copy)["pid"] == second.pid, SWITCH_BOUND)
        later = insert(
            second.url, "aster-bridge", "The Aster Bridge in Castel Brun was rebuilt in 1958 of grey granite."
        )
        after = job_done(second.url, later["id"])
        assert after["status"] == "done" and after["attempts"] == 1
        assert "aster-bridge" in doc_ids(second.retrieve("Aster Bridge Castel Brun granite"))
        print(f"published → both replicas serve it: {to_both:.2f} s (refresh_seconds {REFRESH})")
    finally:
        first.stop()
        second.stop()


@pytest.mark.slow
def test_two_worker_processes_answer_on_one_port_and_each_follows_new_versions(index_copy, tmp_path):
    tokens = tmp_path / "tokens.toml"
    visitor = "a-visitor-token-to-revoke-0123"
    tokens.write_text(f'[[tokens]]\ntoken = "{visitor}"\nuser = "visitor"\n', encoding="utf-8")
    tokens.chmod(0o600)
    server = ServeProcess(
        index_copy, tmp_path / "workers.log", "--serve.workers", "2", "--serve.tokens_file", str(tokens)
    )
    try:
        server.wait_ready()
        until(lambda: len(read_heartbeats(index_copy)) == 2, 120)  # both processes have loaded the index
        pids = {b["pid"] for b in read_heartbeats(index_copy)}
        children = {c.pid for c in psutil.Process(server.pid).children()}
        assert len(pids) == 2 and pids <= children
        assert read_leader(index_copy)["pid"] in pids  # exactly one of them runs the jobs

        for stopped in pids:  # with either one frozen, the other answers every new connection on the port
            os.kill(stopped, signal.SIGSTOP)
            try:
                for _ in range(5):
                    with httpx.Client(base_url=server.url, timeout=30) as client:
                        assert client.get("/healthz").status_code == 200
            finally:
                os.kill(stopped, signal.SIGCONT)

        # A token removed from the tokens file is refused by every process, without a restart.
        def visitor_status() -> set[int]:
            statuses = set()
            for _ in range(6):  # new connections: both processes are asked
                with httpx.Client(base_url=server.url, timeout=30) as client:
                    statuses.add(client.get("/v1/index", headers={"Authorization": f"Bearer {visitor}"}).status_code)
            return statuses

        assert visitor_status() == {200}
        tokens.write_text(f'[[tokens]]\ntoken = "{visitor}-renewed"\nuser = "visitor"\n', encoding="utf-8")
        until(lambda: visitor_status() == {401}, 15)
        # Each process switches to a new version on its own.
        job = insert(server.url, "tem-observatory", "The Tem Observatory opened in 1994 on the highest hill of Tem.")
        assert job_done(server.url, job["id"])["status"] == "done"
        until(lambda: all(b["versions"] == [job["id"]] for b in read_heartbeats(index_copy)), SWITCH_BOUND)
    finally:
        server.stop()
    assert read_heartbeats(index_copy) == []  # both processes shut down cleanly


def test_garbage_collection_spares_versions_another_replica_serves_until_its_heartbeat_stops(index_copy):
    for name in ("j000001-aaaaaa", "j000002-bbbbbb"):  # two versions that are no longer live
        (index_copy / versions.VERSIONS / name).mkdir(parents=True)
    other = Heartbeats(index_copy, {"id": "elsewhere-1-abc", "host": "elsewhere", "pid": 1})
    other.beat({"j000001-aaaaaa"}, leader=False)
    leader = Heartbeats(index_copy, {"id": "here-2-def", "host": "here", "pid": 2})
    timeout = 0.5

    removed = garbage.collect_garbage(index_copy, keep=1, protect=lambda: leader.protected(timeout))
    assert removed == ["j000002-bbbbbb"]  # the other replica still serves j000001

    time.sleep(timeout + 0.2)  # its heartbeat stops changing: that replica counts as gone
    removed = garbage.collect_garbage(index_copy, keep=1, protect=lambda: leader.protected(timeout))
    assert removed == ["j000001-aaaaaa"]
    assert not list((index_copy / REPLICAS).glob("*.json"))  # the dead replica's heartbeat is removed


def test_a_collection_outside_a_server_spares_every_version_a_heartbeat_names(index_copy):
    """`hopgraph update` and the Python API collected without asking the heartbeats: they removed
    a version a server was still serving (or a replica was still loading)."""
    for name in ("j000001-aaaaaa", "j000002-bbbbbb"):
        (index_copy / versions.VERSIONS / name).mkdir(parents=True)
    serving = Heartbeats(index_copy, {"id": "elsewhere-1-abc", "host": "elsewhere", "pid": 1})
    serving.beat({"j000001-aaaaaa"}, leader=False)
    assert garbage.collect_garbage(index_copy, keep=0) == ["j000002-bbbbbb"]  # no protect given: the heartbeats
    long_ago = time.time() - garbage.STALE_SECONDS - 60
    os.utime(serving.path, (long_ago, long_ago))  # killed an hour ago, and no leader ever removed its heartbeat
    assert garbage.collect_garbage(index_copy, keep=0) == ["j000001-aaaaaa"]


def test_a_heartbeat_that_keeps_changing_keeps_its_versions(index_copy):
    (index_copy / versions.VERSIONS / "j000001-aaaaaa").mkdir(parents=True)
    other = Heartbeats(index_copy, {"id": "elsewhere-1-abc", "host": "elsewhere", "pid": 1})
    leader = Heartbeats(index_copy, {"id": "here-2-def", "host": "here", "pid": 2})
    for _ in range(4):  # alive longer than the timeout, beating more often than it
        other.beat({"j000001-aaaaaa"}, leader=False)
        assert garbage.collect_garbage(index_copy, keep=1, protect=lambda: leader.protected(0.5)) == []
        time.sleep(0.2)


def test_stored_arrays_are_memory_mapped_read_only(acl_index):
    index = LoadedIndex(acl_index)
    vectors = index.array("chunk_vectors")
    assert isinstance(vectors.base, np.memmap) and not vectors.flags.writeable
    assert type(vectors) is np.ndarray  # a plain array to every consumer
    with pytest.raises(ValueError):
        vectors[0, 0] = 1.0


def test_the_leader_forgets_heartbeats_whose_files_are_gone(index_copy):
    leader = Heartbeats(index_copy, {"id": "here-2-def", "host": "here", "pid": 2})
    for n in range(5):  # processes that beat once and ended cleanly (each respawn has a new id)
        gone = Heartbeats(index_copy, {"id": f"worker-{n}-abc", "host": "here", "pid": 10 + n})
        gone.beat({"j000001-aaaaaa"}, leader=False)
        assert leader.protected(60) == {"j000001-aaaaaa"}
        gone.remove()
    alive = Heartbeats(index_copy, {"id": "alive-9-xyz", "host": "here", "pid": 9})
    alive.beat({"j000002-bbbbbb"}, leader=False)
    assert leader.protected(60) == {"j000002-bbbbbb"}
    assert set(leader._seen) == {alive.path.name}  # what it remembers stays bounded by the live processes


def test_a_reader_never_finds_the_leader_record_half_written(tmp_path):
    """Another process reads the record while leaders take and give up the lock in a tight loop: it always
    finds a whole record. Written in place (truncate, then write) it was once found empty, and a replica
    waiting for a new leader crashed on ``None``."""
    from hopgraph.serve.replicas import LeaderLock

    first = LeaderLock(tmp_path, {"id": "a", "host": "here", "pid": 1})
    assert first.try_acquire()
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from hopgraph.serve.replicas import read_leader\n"
            "end, missing, reads = time.monotonic() + 3, 0, 0\n"
            "while time.monotonic() < end:\n"
            f"    missing += read_leader({str(tmp_path)!r}) is None\n"
            "    reads += 1\n"
            "print(missing, reads)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    leaders = [first, LeaderLock(tmp_path, {"id": "b", "host": "here", "pid": 2})]
    turn = 0
    while reader.poll() is None:
        leaders[turn % 2].release()
        turn += 1
        assert leaders[turn % 2].try_acquire()
    missing, reads = map(int, reader.communicate()[0].split())
    assert reads > 100 and turn > 100
    assert missing == 0, f"{missing} of {reads} reads found no leader"
    leaders[turn % 2].release()
