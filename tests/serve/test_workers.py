"""`serve.workers` processes on one port with ``serve.socket_per_worker`` (``hopgraph.serve.workers``),
as real child processes of `hopgraph serve`: each listens on a socket of its own, so a burst of new
connections spreads over them; one that dies, or whose event loop stops, is replaced; one that
cannot start stops the server with its reason."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import psutil
import pytest

from hopgraph.llm.standin import free_port
from hopgraph.serve.workers import SILENT_SECONDS, claim_holder, spreads_connections
from tests.serve.support import ServeProcess, until

PER_WORKER = ("--serve.socket_per_worker", "true")
pytestmark = pytest.mark.skipif(not spreads_connections(), reason="SO_REUSEPORT spreads connections on Linux only")


def sockets_on(server: ServeProcess, status: str) -> dict[int, list[int]]:
    """Socket inodes of the server's child processes on its port, by pid, in one TCP state."""
    found: dict[int, list[int]] = {}
    for child in psutil.Process(server.pid).children():
        try:
            for c in child.net_connections(kind="tcp"):
                if c.status == status and c.laddr.port == server.port:
                    inode = os.readlink(f"/proc/{child.pid}/fd/{c.fd}").removeprefix("socket:[").rstrip("]")
                    found.setdefault(child.pid, []).append(int(inode))
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
    return found


def listening(server: ServeProcess, count: int) -> dict[int, list[int]]:
    """Waits until ``count`` child processes listen on the port, and returns their sockets."""
    until(lambda: len(sockets_on(server, psutil.CONN_LISTEN)) == count, 120)
    return sockets_on(server, psutil.CONN_LISTEN)


async def connect_together(port: int, count: int) -> list[asyncio.StreamWriter]:
    opened = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in range(count)))
    return [writer for _, writer in opened]


@pytest.mark.slow
def test_each_worker_listens_on_its_own_socket_and_a_burst_of_connections_is_shared(index_copy, tmp_path):
    server = ServeProcess(index_copy, tmp_path / "workers.log", "--serve.workers", "2", *PER_WORKER)
    try:
        server.wait_ready()
        sockets = listening(server, 2)
        assert len({inode for inodes in sockets.values() for inode in inodes}) == 2  # not one shared socket

        async def burst() -> list[int]:
            writers = await connect_together(server.port, 40)
            await asyncio.sleep(1.0)  # every connection accepted
            held = [len(inodes) for inodes in sockets_on(server, psutil.CONN_ESTABLISHED).values()]
            for writer in writers:
                writer.close()
            return held

        held = asyncio.run(burst())
        # A shared socket gave 40 and 0 (the first process woken accepts every waiting connection);
        # the kernel's hash over two sockets gives fewer than 5 of 40 to one about once in 10 million.
        assert sum(held) == 40 and len(held) == 2 and min(held) >= 5, held
        # With the supervisor killed, the workers stop too instead of holding the port unsupervised.
        workers = [psutil.Process(pid) for pid in sockets]
        os.kill(server.pid, signal.SIGKILL)
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive and len(gone) == 2
    finally:
        server.stop()


@pytest.mark.slow
def test_a_killed_or_frozen_worker_is_replaced_and_the_port_answers_again(index_copy, tmp_path):
    server = ServeProcess(index_copy, tmp_path / "workers.log", "--serve.workers", "2", *PER_WORKER)
    try:
        server.wait_ready()
        first = set(listening(server, 2))
        killed = min(first)
        os.kill(killed, signal.SIGKILL)
        # Its replacement killed too while it loads (by the OOM killer, say): another one is started.
        workers = {c.pid for c in psutil.Process(server.pid).children()}
        until(lambda: {c.pid for c in psutil.Process(server.pid).children()} - workers - {killed}, 60)
        loading = ({c.pid for c in psutil.Process(server.pid).children()} - workers).pop()
        os.kill(loading, signal.SIGKILL)
        until(lambda: len(set(sockets_on(server, psutil.CONN_LISTEN)) - first) == 1, 120)
        # A frozen process keeps its socket, and new connections the kernel hands it would wait: it is
        # killed once its event loop has been silent for SILENT_SECONDS, and another takes its place.
        second = set(listening(server, 2))
        frozen = min(second)
        os.kill(frozen, signal.SIGSTOP)
        waited = until(lambda: frozen not in sockets_on(server, psutil.CONN_LISTEN), SILENT_SECONDS + 30)
        assert waited >= SILENT_SECONDS - 1
        listening(server, 2)
        for _ in range(6):  # new connections, so both processes are asked
            with httpx.Client(base_url=server.url, timeout=30) as client:
                assert client.get("/healthz").status_code == 200
        log = server.log.read_text()
        assert f"worker process {killed} ended (exit status -9); starting another" in log
        assert f"worker process {loading} ended (exit status -9); starting another" in log
        assert f"worker process {frozen} has not answered for {SILENT_SECONDS:g} s; killing it" in log
    finally:
        server.stop()
    assert server.process.returncode == 0


def worker_processes(server: ServeProcess) -> list[psutil.Process]:
    """The server's children but multiprocessing's resource tracker."""
    return [c for c in psutil.Process(server.pid).children() if "resource_tracker" not in " ".join(c.cmdline())]


def restarted(server: ServeProcess, times: int) -> bool:
    return server.log.read_text().count("restarted 2 worker processes") >= times


@pytest.mark.slow
def test_sighup_restarts_each_worker_with_the_port_always_served_and_one_that_dies_meanwhile_is_replaced(
    index_copy, tmp_path
):
    """The rolling restart: each new process serves before the old one stops, so the port is never
    seen with fewer listeners than workers. An old process killed while a new one loaded was left
    dead until the whole restart had ended (minutes, with a large index)."""
    server = ServeProcess(index_copy, tmp_path / "workers.log", "--serve.workers", "2", *PER_WORKER)
    try:
        server.wait_ready()
        first = set(listening(server, 2))
        os.kill(server.pid, signal.SIGHUP)
        fewest, deadline = 2, time.monotonic() + 180
        while not restarted(server, 1):
            fewest = min(fewest, len(sockets_on(server, psutil.CONN_LISTEN)))
            assert time.monotonic() < deadline and server.process.poll() is None, server.log.read_text()
        assert fewest == 2
        second = set(listening(server, 2))
        assert not second & first
        # Again, and an old process dies while the first new one loads: it is replaced at once.
        os.kill(server.pid, signal.SIGHUP)
        until(lambda: {c.pid for c in worker_processes(server)} - second, 60)
        killed = max(second)
        os.kill(killed, signal.SIGKILL)
        until(lambda: restarted(server, 2), 180)
        log = server.log.read_text()
        assert log.index(f"worker process {killed} ended (exit status -9); starting another") < log.rindex(
            "restarted 2 worker processes"
        )
        assert not set(listening(server, 2)) & (first | second)
        until(lambda: len(worker_processes(server)) == 2, 60)  # none left over
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/healthz").status_code == 200
    finally:
        server.stop()
    assert server.process.returncode == 0
    # Each worker's first embedding made a named semaphore (tqdm's lock), and every shutdown ended
    # with the resource tracker's warning of "leaked semaphore objects".
    assert "leaked" not in server.log.read_text()


@pytest.mark.slow
def test_a_worker_that_cannot_load_the_index_stops_the_server_with_its_reason(index_copy, tmp_path):
    for array in (index_copy / "arrays").glob("*.npy"):  # same sizes, so only loading them fails
        with array.open("r+b") as damaged:
            damaged.write(b"XXXXXX")  # over numpy's magic string
    server = ServeProcess(index_copy, tmp_path / "workers.log", "--serve.workers", "2", *PER_WORKER)
    try:
        assert server.process.wait(timeout=180) == 2  # hopgraph's exit status for an error
    finally:
        server.stop()
    log = server.log.read_text()
    assert "corrupt array" in log  # the worker's reason, then the server's
    assert "error: a worker process could not start (exit status 1): its error is above" in log


@pytest.mark.slow
def test_a_second_server_on_the_same_port_is_refused_not_mixed_in(index_copy, tmp_path):
    """Sockets with SO_REUSEPORT would share the port between two servers of the same user: each
    would answer a share of the other's clients, with its own index and tokens."""
    first = ServeProcess(index_copy, tmp_path / "first.log", "--serve.workers", "2", *PER_WORKER)
    second = ServeProcess(index_copy, tmp_path / "second.log", "--serve.workers", "2", *PER_WORKER, port=first.port)
    try:
        refused = until(lambda: first.process.poll() is not None or second.process.poll() is not None, 120)
        loser, winner = (first, second) if first.process.poll() is not None else (second, first)
        assert loser.process.returncode == 2 and refused >= 0
        assert f"127.0.0.1:{first.port}" in loser.log.read_text()  # the port taken, by a claim or by the probe
        winner.wait_ready()
        assert len(listening(winner, 2)) == 2
    finally:
        first.stop()
        second.stop()


@pytest.mark.slow
def test_a_name_bound_first_by_anyone_on_the_machine_does_not_keep_the_server_down(index_copy, tmp_path):
    """The one-server-per-port claim was an abstract Unix socket, which has no owner: any local
    user could bind its name first and every `hopgraph serve` on that port refused to start."""
    import socket

    port = free_port()
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(f"\0hopgraph-serve:127.0.0.1:{port}")
    server = ServeProcess(index_copy, tmp_path / "claimed.log", "--serve.workers", "2", *PER_WORKER, port=port)
    try:
        server.wait_ready()
        assert len(listening(server, 2)) == 2
        assert "is held by a process that is no `hopgraph serve` of this user" in server.log.read_text()
    finally:
        server.stop()
        squatter.close()
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # one listening as a server does: this user's
    squatter.bind(f"\0hopgraph-serve:127.0.0.1:{port}")
    squatter.listen(1)
    try:
        assert claim_holder(f"hopgraph-serve:127.0.0.1:{port}") == os.getuid()
    finally:
        squatter.close()
