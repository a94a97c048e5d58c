"""Files written and locked safely, wherever hopgraph writes: atomic replacement (readers see the old
file or the new one, even after a power cut), flocks the kernel drops when their holder dies, and
stamps that tell whether a file was written or replaced since it was last looked at."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` then move tmp over ``path``: readers see the old file or the new one. The
    file and then its folder are synced, so the rename itself survives a power cut (a published
    CURRENT or manifest could otherwise come back as the old one; ~0.1 ms a folder here)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            write(tmp)
        except OSError as exc:  # a full disk: say which file (a write through a handle names none)
            exc.filename = exc.filename or str(path)
            raise
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def exclusive_lock(path: Path, patience: float | None = None) -> Iterator[Any]:
    """An exclusive flock on ``path`` (created if missing), released on exit and by the kernel when
    its holder dies; yields the open file. ``patience`` None waits as long as it takes, else
    BlockingIOError once that many seconds have passed (0: at once). The file locked is the one at
    ``path`` still: a holder may remove the file as it lets go (:meth:`IndexStore.building`)."""
    deadline = None if patience is None else time.monotonic() + patience
    while True:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX if deadline is None else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            if deadline is not None and time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
            continue
        try:
            if os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    with handle:
        try:
            yield handle
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def held_elsewhere(path: Path) -> bool | None:
    """Whether a process holds an flock on ``path`` now (False where the file is missing, None where
    that cannot be told): a look that only reads, as a read-only index allows."""
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


Stamp = tuple[int, int, int]  # a file's (inode, size, mtime in ns): any write or replacement changes it


def file_stamp(path: Path) -> Stamp | None:
    """``path``'s :data:`Stamp`, or None where it cannot be looked at (gone)."""
    try:
        return stat_stamp(path.stat())
    except OSError:
        return None


def stat_stamp(found: os.stat_result) -> Stamp:
    return (found.st_ino, found.st_size, found.st_mtime_ns)
