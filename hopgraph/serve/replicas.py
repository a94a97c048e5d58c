"""Several server processes over one index directory (worker processes of one `hopgraph serve`, and
replicas on other machines over shared storage): any of them answers, exactly one runs update jobs,
and each follows the live version on its own.

- **The leader** holds an exclusive non-blocking ``flock`` on ``INDEX/jobs/.leader`` for its whole
  life (and names itself in ``INDEX/jobs/leader.json``) and is the only process that runs update jobs
  and collects old versions. The kernel (or the NFS lock manager) releases the lock when the leader
  dies; the others try to take it every ``serve.refresh_seconds``, so one of them takes over the job
  loop. ``serve.jobs`` = ``always`` / ``never`` replace the lock on storage whose locks do not work.
- **Following**: every process reads ``INDEX/CURRENT`` every ``serve.refresh_seconds`` and loads
  a new version completely before switching to it, so a published version is served everywhere
  within that interval plus one load.
- **Heartbeats**: every process rewrites ``INDEX/replicas/<id>.json`` with the versions it serves,
  loads or still has requests on; the leader's garbage collection spares all of them. A heartbeat
  that has not changed for ``serve.replica_timeout`` counts as a dead process; that is timed on the
  leader's own clock, so the machines' clocks need not agree.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from hopgraph.config import ServeConfig
from hopgraph.files import atomic_write
from hopgraph.index import versions
from hopgraph.serve.state import IndexHolder, JobRunner
from hopgraph.store import JOBS, REPLICAS

LEADER = ".leader"  # INDEX/jobs/.leader: locked by the process that runs update jobs
LEADER_RECORD = "leader.json"  # INDEX/jobs/leader.json: who took that lock last, replaced whole (never half-written)


def _log(message: str) -> None:
    print(f"hopgraph serve: {message}", file=sys.stderr, flush=True)


def read_leader(root: str | Path) -> dict[str, Any] | None:
    """Who holds (or last held) the leader lock: {id, host, pid, since}; None before anyone did."""
    try:
        text = (Path(root) / JOBS / LEADER_RECORD).read_text(encoding="utf-8")
        return dict(json.loads(text)) if text.strip() else None
    except (FileNotFoundError, ValueError):
        return None


class LeaderLock:
    """The non-blocking exclusive lock on INDEX/jobs/.leader, held until :meth:`release` or death."""

    def __init__(self, root: Path, identity: dict[str, Any]):
        self.path = root / JOBS / LEADER
        self.identity = identity
        self._handle: IO[str] | None = None
        self._warned = False

    @property
    def held(self) -> bool:
        return self._handle is not None

    def try_acquire(self) -> bool:
        if self._handle is not None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the process's life
        except OSError as exc:  # read-only storage: this process serves, never leads
            if not self._warned:
                _log(f"cannot open the leader lock {self.path} ({exc}); this process will not run update jobs")
                self._warned = True
            return False
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by another process
            handle.close()
            return False
        # The record lives in its own file, replaced by rename: rewriting the locked file in place let a
        # reader catch it empty between truncate and write (and take "no leader" for an answer).
        text = json.dumps({**self.identity, "since": time.time()})
        try:
            atomic_write(self.path.with_name(LEADER_RECORD), lambda tmp: tmp.write_text(text, encoding="utf-8"))
        except OSError as exc:
            _log(f"cannot write the leader record next to {self.path} ({exc}); leading all the same")
        self._handle = handle
        return True

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


class Heartbeats:
    """This process's heartbeat file, and (for the leader) which versions live processes still need."""

    def __init__(self, root: Path, identity: dict[str, Any]):
        self.folder = root / REPLICAS
        self.identity = identity
        self.path = self.folder / f"{identity['id']}.json"
        self._beats = 0
        self._seen: dict[str, tuple[str, float]] = {}  # file → (content, when it last changed: our monotonic clock)
        self._warned = False

    def beat(self, used: set[str], leader: bool) -> None:
        self._beats += 1
        record = {**self.identity, "versions": sorted(used), "leader": leader, "beat": self._beats, "time": time.time()}
        text = json.dumps(record)
        try:
            atomic_write(self.path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        except OSError as exc:
            if not self._warned:
                _log(f"cannot write the heartbeat {self.path} ({exc}); the leader may collect versions this serves")
                self._warned = True

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def protected(self, timeout: float) -> set[str]:
        """Versions named by heartbeats that changed within ``timeout`` seconds; removes dead ones' files."""
        now, needed = time.monotonic(), set()
        paths = sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []
        present = {path.name for path in paths}
        for name in [name for name in self._seen if name not in present]:  # removed (a process that ended)
            del self._seen[name]
        for path in paths:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            seen = self._seen.get(path.name)
            if seen is None or seen[0] != text:  # first seen, or changed: alive now
                seen = self._seen[path.name] = (text, now)
            if now - seen[1] > timeout:
                path.unlink(missing_ok=True)
                del self._seen[path.name]
                continue
            try:
                needed |= {str(v) for v in json.loads(text)["versions"]}
            except (ValueError, KeyError, TypeError):
                _log(f"{path}: unreadable heartbeat, ignored")
        return needed


class Replica:
    """This process's part among the processes serving one index directory: follow the live version,
    beat, and run the update jobs while it holds the leader lock (see the module's description)."""

    def __init__(self, root: Path, holder: IndexHolder, jobs: JobRunner, serve: ServeConfig):
        self.root, self.holder, self.jobs, self.serve = root, holder, jobs, serve
        host = socket.gethostname()
        self.identity = {"id": f"{host}-{os.getpid()}-{secrets.token_hex(3)}", "host": host, "pid": os.getpid()}
        self.lock = LeaderLock(root, self.identity)
        self.heartbeats = Heartbeats(root, self.identity)
        self.timeout = max(serve.replica_timeout, 3 * serve.refresh_seconds)
        jobs.protect = self._protect
        self._stop = threading.Event()
        self._beating = threading.Lock()
        self._threads = [
            threading.Thread(target=self._follow, name="hopgraph-follow", daemon=True),
            threading.Thread(target=self._beat_loop, name="hopgraph-beat", daemon=True),
        ]

    @property
    def leading(self) -> bool:
        return self.jobs.running

    def start(self) -> None:
        self._lead()
        self._beat()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.jobs.stop()  # first: a running build ends, so the following thread is not kept waiting
        for thread in self._threads:
            thread.join(timeout=10)
        self.lock.release()
        self.heartbeats.remove()

    def _protect(self) -> set[str]:
        """What garbage collection must spare: this process's versions and every live process's."""
        return self.holder.versions_in_use() | self.heartbeats.protected(self.timeout)

    def _lead(self) -> None:
        """Start the job loop once this process may run jobs (the lock is kept until it exits)."""
        if self.jobs.running or self.serve.jobs == "never":
            return
        if self.serve.jobs == "always" or self.lock.try_acquire():
            self.jobs.start()
            _log(f"process {os.getpid()} runs the update jobs of {self.root}")

    def _beat(self) -> None:
        # One at a time, from what is in use when the file is written: a heartbeat computed before a
        # load was announced must not be written after it and drop the version being loaded.
        with self._beating:
            self.heartbeats.beat(self.holder.versions_in_use(), self.leading)

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.serve.refresh_seconds):
            try:
                self._lead()
                self._beat()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                _log(f"heartbeat or leader lock failed (retrying): {exc}")

    def _follow(self) -> None:
        """Load a version published by anyone (on the leader too: its worker may take a while to exit
        after publishing), completely, before switching to it."""
        while not self._stop.wait(self.serve.refresh_seconds):
            try:
                live = versions.live_version(self.root)
                if self.holder.serves(live):
                    continue
                # In use from before its files are read, and named at once: the leader spares it meanwhile.
                self.holder.refresh(live, announce=self._beat)
            except Exception as exc:  # noqa: BLE001 - keep serving the old version; the holder retries later
                _log(f"cannot load the new index version (serving {self.holder.current.version or 'root'}): {exc}")
