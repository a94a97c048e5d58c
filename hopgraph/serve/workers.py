"""``serve.workers`` processes of one `hopgraph serve` on one port.

By default uvicorn's supervisor runs them: it binds one socket that every process accepts from, and
a woken process accepts every connection waiting, so a burst of 50 connections mostly went to one
process of four (``scripts/bench_connection_spread.py``); with keep-alive that process serves them
while others idle. On 2 cores shared with the load generator neither way gave clearly more
requests/s. With ``serve.socket_per_worker`` (Linux) each process binds the port itself with
``SO_REUSEPORT``, so the kernel hands each new connection to one of them by a hash of its addresses:
for machines with cores to spread to.

Then the :class:`Supervisor` starts the processes, starts another in place of one that dies or
whose event loop stops, restarts them one at a time on SIGHUP (each new one serving before the old
one stops), stops them on SIGINT or SIGTERM, and gives up when one cannot start (its error is in
the log above).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import multiprocessing
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from tqdm import tqdm

from hopgraph.config import HopgraphConfig, validate_config
from hopgraph.errors import ConfigError
from hopgraph.serve import connections
from hopgraph.serve.app import bound_socket, create_app
from hopgraph.serve.auth import TokenBook
from hopgraph.serve.service import check_answer_backend

SPEC_ENV = "HOPGRAPH_SERVE_SPEC"  # what the worker processes of one `hopgraph serve` are handed
STARTUP_FAILURE = 3  # a worker's exit status when it never served (uvicorn's own code for this)
STOP_SECONDS = 90.0  # a stopping worker's graceful shutdown, with its update job's stop (up to 60 s)
SILENT_SECONDS = 20.0  # a serving worker's event loop silent this long is taken for stuck
READY_SECONDS = 600.0  # a worker loading a large index may take minutes before it serves


def app_from_environment() -> FastAPI:
    """The app factory each worker process calls: index, settings and token digests from its parent."""
    raw = os.environ.pop(SPEC_ENV, "")  # not inherited further (by the update worker)
    if not raw:
        raise RuntimeError(f"${SPEC_ENV} is not set: this factory is for the worker processes of `hopgraph serve`")
    spec = json.loads(raw)
    # tqdm makes a multiprocessing lock for its first bar (sentence-transformers makes a hidden one
    # per encode): in a spawned process, a named semaphore that the parent's resource tracker
    # reported as leaked at every shutdown. This process shows no bars: a thread lock will do.
    tqdm.set_lock(threading.RLock())
    config = validate_config(spec["config"], "serve settings (from the parent `hopgraph serve` process)")
    tokens = TokenBook.from_records(spec["tokens"], "tokens (from the parent `hopgraph serve` process)")
    given = spec["tokens_stamp"]
    stamp = (int(given[0]), int(given[1]), int(given[2])) if given else None
    tokens.following(config.serve.tokens_file, config.serve.tokens_env, stamp)
    return create_app(spec["root"], config, tokens)


def spreads_connections() -> bool:
    """Whether sockets bound to one port with SO_REUSEPORT share its connections (Linux 3.9 and later)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def run_workers(root: str | Path, config: HopgraphConfig, tokens: TokenBook, **options: Any) -> None:
    """Serve with ``serve.workers`` processes on one port until SIGINT or SIGTERM.

    The processes are spawned fresh, so each is handed the settings and the tokens in an environment
    variable (only this user may read it): token SHA-256 digests, never the tokens themselves, and
    never on a command line that `ps` shows to everyone."""
    import uvicorn  # noqa: PLC0415

    check_answer_backend(config)  # here, not once per worker process that would load the index first
    spec = {
        "root": str(root),
        "config": config.model_dump(mode="json"),
        "tokens": tokens.digest_records(),
        "tokens_stamp": tokens.stamp,  # each process reads the tokens file again once it changes
    }
    os.environ[SPEC_ENV] = json.dumps(spec)
    serve = config.serve
    settings = {
        "factory": True,
        "host": serve.host,
        "port": serve.port,
        **connections.uvicorn_options(serve),
        **options,
    }
    if serve.socket_per_worker and spreads_connections():
        claim = f"hopgraph-serve:{serve.host}:{serve.port}"
        Supervisor(serve.workers, functools.partial(serve_one, settings), claim=claim).run()
        return
    if serve.socket_per_worker:
        print(
            "note: serve.socket_per_worker needs Linux's SO_REUSEPORT; serving from one shared socket", file=sys.stderr
        )
    if "timeout_worker_healthcheck" in inspect.signature(uvicorn.run).parameters:
        settings.setdefault("timeout_worker_healthcheck", 30)  # a process loading a large index answers slowly
    uvicorn.run(f"{__name__}:app_from_environment", workers=serve.workers, **settings)


def claim_holder(claim: str) -> int | None:
    """The user id of the process listening on the abstract socket ``claim``, None where none
    listens there (a name merely bound: no server of this version's)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect("\0" + claim)
        credentials = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    finally:
        probe.close()
    return int(struct.unpack("3i", credentials)[1])  # (pid, uid, gid)


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A socket of its own on ``host:port`` that shares the port's connections with the other workers'."""
    sock = bound_socket(host, port, share_port=True)
    sock.listen(backlog)
    sock.set_inheritable(False)  # not held open by the update worker this process may start
    return sock


def serve_one(settings: dict[str, Any], said: Connection) -> None:
    """One worker process: the app from its parent's spec, then a socket of its own once the app is
    loaded (so no connection waits on a process still loading the index); tells ``said`` "serving",
    then "alive" every second from its event loop, so a loop that stops is seen and replaced."""
    import uvicorn  # noqa: PLC0415

    settings = dict(settings)
    host, port = settings.pop("host"), settings.pop("port")

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                sock = listening_socket(host, port, settings["backlog"])
            except ConfigError as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
                sys.exit(STARTUP_FAILURE)
            await super().startup([sock])
            if self.started:
                said.send_bytes(b"serving")
                self.alive = asyncio.ensure_future(self.tell_alive())

        async def tell_alive(self) -> None:
            while not self.should_exit:
                await asyncio.sleep(1.0)
                try:
                    said.send_bytes(b"alive")
                except OSError:  # the supervisor is gone (killed): stop, rather than hold the port unsupervised
                    self.should_exit = True

    server = Server(uvicorn.Config(f"{__name__}:app_from_environment", **settings))
    server.run()
    sys.exit(0 if server.started else STARTUP_FAILURE)


class Worker:
    """One started process and whether it has said it serves."""

    def __init__(self, context: Any, target: Callable[[Connection], None]) -> None:
        self.said, told = context.Pipe(duplex=False)
        self.process: BaseProcess = context.Process(target=target, args=(told,), name="hopgraph-serve-worker")
        self.process.start()
        told.close()  # the child holds its end: once it ends, polling here sees the pipe closed
        self.ready = False
        self.started = self.heard = time.monotonic()

    def serving(self, wait: float = 0.0) -> bool:
        """Whether it has said it serves (waiting up to ``wait`` seconds for that); reads what it said since."""
        try:
            while self.said.poll(0.0 if self.ready else wait):
                self.ready |= self.said.recv_bytes() == b"serving"
                self.heard = time.monotonic()
        except (EOFError, OSError):  # it has ended
            pass
        return self.ready

    def stuck(self) -> str:
        """Why a live process counts as stuck ("" where it does not): a serving one whose event loop
        has been silent for SILENT_SECONDS, or one not serving READY_SECONDS after it started."""
        now = time.monotonic()
        if self.serving():
            return f"has not answered for {SILENT_SECONDS:g} s" if now - self.heard >= SILENT_SECONDS else ""
        return f"has not started serving in {READY_SECONDS:g} s" if now - self.started >= READY_SECONDS else ""


class Supervisor:
    """Keeps ``count`` processes running ``target(ready)`` until told to stop; ``claim`` names the
    port for this machine while it runs, so a second supervisor of the same port is refused (sockets
    with SO_REUSEPORT would otherwise share the port between two servers)."""

    def __init__(
        self,
        count: int,
        target: Callable[[Connection], None],
        claim: str = "",
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.count, self.target, self.claim = count, target, claim
        self.log = log or (lambda line: print(f"hopgraph serve: {line}", file=sys.stderr, flush=True))
        self.context = multiprocessing.get_context("spawn")  # no copy of this process's threads and locks
        self.workers: list[Worker] = []
        self.stop = threading.Event()
        self.restart = threading.Event()

    def start(self) -> Worker:
        return Worker(self.context, self.target)

    def run(self) -> None:
        """Start the processes and watch them; returns once they have stopped."""
        with self.claimed():
            handled = {signal.SIGINT: self.stop, signal.SIGTERM: self.stop, signal.SIGHUP: self.restart}
            previous = {
                sig: signal.signal(sig, lambda sig, _frame: handled[signal.Signals(sig)].set()) for sig in handled
            }
            try:
                for _ in range(self.count):
                    self.workers.append(self.start())
                while not self.stop.wait(0.5):
                    if self.restart.is_set():
                        self.restart.clear()
                        self.restart_all()
                    self.replace_dead()
            finally:
                self.halt(self.workers)
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    @contextlib.contextmanager
    def claimed(self) -> Iterator[None]:
        """Holds an abstract Unix socket named after ``claim`` (Linux), listening: one holder per
        machine. An abstract name has no owner, so any local user could bind it first and keep every
        server off the port; a holder that is not a server of this user (it does not listen, or
        another user's process does) is said, and the server starts without the check."""
        if not self.claim:
            yield
            return
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            holder.bind("\0" + self.claim)
            holder.listen(1)
        except OSError:
            holder.close()
            if claim_holder(self.claim) == os.getuid():
                raise ConfigError(f"another `hopgraph serve` on this machine serves {self.claim}") from None
            print(
                f"note: {self.claim} is held by a process that is no `hopgraph serve` of this user; serving "
                "without the check that no other server of this user shares the port",
                file=sys.stderr,
            )
            yield
            return
        try:
            yield
        finally:
            holder.close()

    def replace_dead(self) -> None:
        """Start another process in place of one that ended or is stuck (a stuck one is killed first:
        new connections the kernel hands its socket would wait for it). One that ended on its own
        before it served could not start: then the server stops, with its error in the log above."""
        for slot, worker in enumerate(self.workers):
            if self.stop.is_set():
                return
            process = worker.process
            if process.is_alive():
                why = worker.stuck()
                if not why:
                    continue
                self.log(f"worker process {process.pid} {why}; killing it")
                process.kill()
                process.join()
            elif not worker.serving() and (process.exitcode or 0) >= 0:
                self.stop.set()
                raise ConfigError(
                    f"a worker process could not start (exit status {process.exitcode}): its error is above"
                )
            else:
                self.log(f"worker process {process.pid} ended (exit status {process.exitcode}); starting another")
            worker.said.close()
            self.workers[slot] = self.start()

    def restart_all(self) -> None:
        """Each process in turn: a new one serves before the old one stops (SIGHUP). Connections
        waiting in an old process's accept queue when it stops are reset, unless the kernel moves
        them to another socket of the port (``net.ipv4.tcp_migrate_req = 1``, Linux 5.14)."""
        for slot in range(len(self.workers)):
            if self.stop.is_set():
                return
            new = self.start()
            try:
                while not new.serving(0.5) and new.process.is_alive() and not self.stop.is_set() and not new.stuck():
                    self.replace_dead()  # one of those serving that dies meanwhile is replaced now, not after
            except BaseException:  # a replacement that could not start stops the server: this one with it
                self.halt([new])
                raise
            if self.stop.is_set():
                self.halt([new])
                return
            if not new.serving():  # the old ones keep serving
                self.halt([new])
                self.log(f"a new worker process did not start (exit status {new.process.exitcode}); kept the old ones")
                return
            old, self.workers[slot] = self.workers[slot], new  # (the slot's process may have been replaced since)
            self.halt([old])
        self.log(f"restarted {len(self.workers)} worker processes")

    def halt(self, workers: list[Worker]) -> None:
        """SIGTERM (uvicorn's graceful shutdown, which waits for an update job to stop), then SIGKILL
        for any still running after STOP_SECONDS."""
        for worker in workers:
            if worker.process.is_alive():
                worker.process.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.said.close()
