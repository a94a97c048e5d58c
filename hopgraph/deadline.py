"""A deadline for one unit of work (one retrieval), carried in a context variable; and a time
limit for work whose loops are in libraries (one build), kept by a timer signal.

The server (or a library caller) opens :func:`deadline_after` around a request; the long loops of
the searches, the reranker and the PageRank kernel call :func:`check_deadline`, which raises
:class:`~hopgraph.errors.DeadlineExceeded` once the time is up. A context variable reaches every
function on the request's thread without changing their signatures, and never leaks into other
requests (each runs in its own context).
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

from hopgraph.errors import DeadlineExceeded

# (monotonic end, the limit in seconds as given, what is being timed); None = no deadline.
_DEADLINE: contextvars.ContextVar[tuple[float, float, str] | None] = contextvars.ContextVar(
    "hopgraph_deadline", default=None
)


@contextlib.contextmanager
def deadline_after(seconds: float | None, what: str = "retrieval") -> Iterator[None]:
    """Work inside must finish within ``seconds`` (None = no limit).

    A nested, later deadline never extends an outer one.
    """
    if seconds is None:
        yield
        return
    end = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(outer if outer is not None and outer[0] <= end else (end, seconds, what))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_deadline() -> None:
    """Raise DeadlineExceeded if the current deadline has passed; costs a clock read otherwise."""
    current = _DEADLINE.get()
    if current is not None and time.monotonic() > current[0]:
        raise DeadlineExceeded(f"{current[2]} stopped after its deadline of {current[1]:g} s")


class _TimeUp(BaseException):  # noqa: N818 - not an error to catch: it only unwinds to time_limit
    """Raised by the timer signal. Not an Exception, so no ``except Exception`` on the way (a cache
    read's, a library's) swallows it and lets the work run on unlimited; time_limit turns it into
    DeadlineExceeded."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str, setting: str) -> Iterator[None]:
    """Stop the work inside after ``seconds`` (0 = no limit) by raising DeadlineExceeded from a timer
    signal: a build spends its time in libraries that never call :func:`check_deadline`. Only on the
    main thread (where Python delivers signals); elsewhere the work runs unlimited. The exception
    comes at the next Python instruction, so a long call inside a C extension finishes first."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TimeUp:
        raise DeadlineExceeded(f"{what} stopped after its time limit of {seconds:g} s ({setting})") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
