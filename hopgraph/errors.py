"""User-facing errors.

Everything a user can cause (bad input, a broken index, a wrong option) raises a subclass of
:class:`HopgraphError` whose message says what is wrong and where; the CLI prints that message
instead of a traceback.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

# How much of what a caller sent an error message repeats: a field name or value can be megabytes,
# and a body can hold thousands of bad keys, so the message (and a server's reply) stays small.
SHOWN_CHARS = 80
SHOWN_PROBLEMS = 20


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` up to ``limit`` characters, with an ellipsis where it was longer, and lone
    surrogates (which JSON may spell) escaped, so the message can be printed and sent."""
    short = text if len(text) <= limit else text[:limit] + "…"
    return short.encode("utf-8", "backslashreplace").decode("utf-8")


def listed(problems: Sequence[str], limit: int = SHOWN_PROBLEMS, total: int | None = None) -> str:
    """The first ``limit`` problems joined by "; ", then how many more there were (of ``total``,
    where the caller kept only the first ones)."""
    shown = problems[:limit]
    more = (len(problems) if total is None else total) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def storage_state(exc: BaseException) -> str | None:
    """What an OS error says of the storage itself ("full", "read-only", "over its file-size limit",
    "failing"), or None for any other error: the machine's state, which an operator fixes, not a bug of
    hopgraph. (SQLite reports a file-size limit as an I/O error: "failing", see hopgraph.cache.)"""
    states = {
        errno.ENOSPC: "full",
        errno.EDQUOT: "full",
        errno.EROFS: "read-only",
        errno.EFBIG: "over its file-size limit",
        errno.EIO: "failing (an I/O error)",
    }
    return states.get(exc.errno) if isinstance(exc, OSError) and exc.errno is not None else None


def storage_message(exc: BaseException) -> str | None:
    """One line saying what the storage refused and where ("the storage is full (at FILE): No space
    left on device"), or None where ``exc`` says nothing of the storage (:func:`storage_state`)."""
    state = storage_state(exc)
    if state is None:
        return None
    assert isinstance(exc, OSError)  # (storage_state says so)
    where = f" (at {exc.filename})" if exc.filename else ""
    return f"the storage is {state}{where}: {exc.strerror or exc}"


class HopgraphError(Exception):
    """Base class for errors whose message is meant for the user."""


class InputError(HopgraphError):
    """A corpus file or record cannot be read (names the file and, where known, the line)."""


class UnknownDocumentError(InputError):
    """An update deletes a document id that is neither in the index nor added by a queued update."""


class ConfigError(HopgraphError):
    """A configuration file or override is invalid."""


class IndexFormatError(HopgraphError):
    """An index directory is missing, partial, corrupt or of a newer format."""


class OtherIndexError(IndexFormatError):
    """The directory holds a complete or partial index of another corpus or other build settings
    (``what`` says which); a build never overwrites it unasked."""

    def __init__(self, message: str, what: str):
        super().__init__(message)
        self.what = what


class DependencyError(HopgraphError):
    """An optional dependency (GPU, BGE weights, ...) is not available here."""


class ClusterError(HopgraphError):
    """The Ray cluster cannot do the work asked: no room for a worker, or a worker that cannot start there."""


class LLMUnavailableError(HopgraphError):
    """The LLM backend is down, too slow or refuses requests (the message names it; work done is cached)."""


class LLMRequestError(HopgraphError):
    """The LLM backend refused a request as malformed (a 4xx, e.g. a prompt over its context): retrying cannot help."""


class DeadlineExceeded(HopgraphError):
    """A request's work ran past its deadline and was stopped (cooperative checks inside the searches)."""


class QueueFullError(HopgraphError):
    """The update-job queue is at its bound; ``retry_after`` says when to try again (seconds)."""

    def __init__(self, message: str, retry_after: float = 30.0):
        super().__init__(message)
        self.retry_after = retry_after
