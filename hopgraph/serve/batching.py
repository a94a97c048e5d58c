"""Dynamic batching of query embeddings: questions that arrive together share one model call.

One embedding of a short question costs nearly as much as a batch of several (the model call's
fixed cost dominates), and the model takes one call at a time, so concurrent requests that each
embed alone queue behind each other. Here a request hands its question to one batching thread
and waits for its vector: the thread takes what is queued, waits at most ``wait_ms`` for more
(stopping early at ``max_batch``), and embeds them in one call. While a call runs, new arrivals
queue, so under load batches form without any wait; an idle server adds at most ``wait_ms``.

A failed call is made again one question at a time, so a question the model refuses fails its own
request, not the others of its batch; the next batch is tried anew.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import numpy as np

Encode = Callable[[Sequence[str]], np.ndarray]


class BatcherClosed(RuntimeError):
    """The batcher was closed before the vector was computed (the server is stopping)."""


@dataclass
class _Pending:
    text: str
    encode: Encode
    future: Future[np.ndarray] = field(default_factory=Future)
    abandoned: bool = False  # its caller stopped waiting (a timeout): not embedded again alone


class QueryBatcher:
    """Embeds questions in batches on one thread; :meth:`embed` blocks its caller until its vector is ready.

    Each question names the encode function to use (the live index's embedder); a batch only
    holds questions of one encode function, so a version switch to another model never mixes
    models in one call.
    """

    def __init__(self, wait_ms: float = 2.0, max_batch: int = 32, group: int = 8):
        if wait_ms < 0 or max_batch < 1 or group < 1:
            raise ValueError(f"wait_ms must be ≥ 0, max_batch and group ≥ 1, got {wait_ms}, {max_batch} and {group}")
        self.group = group
        self.wait = wait_ms / 1000.0
        self.max_batch = max_batch
        self._queue: deque[_Pending] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._closed = False
        self._thread: threading.Thread | None = None
        self.batches: list[int] = []  # sizes of the last batches run (bounded), for tests and benchmarks

    def embed(self, text: str, encode: Encode, timeout: float | None = None) -> np.ndarray:
        """The vector of ``text`` from ``encode`` (one row), computed in a shared batch.

        Raises what the batch's model call raised, TimeoutError after ``timeout`` seconds, or
        BatcherClosed once the batcher is closed.
        """
        item = _Pending(text, encode)
        with self._ready:
            if self._closed:
                raise BatcherClosed("the query batcher is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hopgraph-embed-batch", daemon=True)
                self._thread.start()
            self._queue.append(item)
            self._ready.notify()
        try:
            return item.future.result(timeout)
        except FutureTimeout:
            item.abandoned = True
            item.future.cancel()  # still queued: it is dropped from its batch
            raise TimeoutError(f"no query vector within {timeout:g} s (the embedding queue is busy)") from None

    def close(self) -> None:
        """Stop the thread; questions still queued fail with BatcherClosed."""
        with self._ready:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._ready.notify_all()
        for item in left:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(BatcherClosed("the query batcher closed before embedding this question"))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _take(self) -> list[_Pending] | None:
        """The next batch: the oldest question, then up to ``max_batch`` of the same encoder,
        waiting at most ``wait`` after the first for more. None once closed."""
        with self._ready:
            while not self._queue and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            deadline = time.monotonic() + self.wait
            while len(self._queue) < self.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(left)
            if self._closed:  # close() failed what was queued
                return None
            encode = self._queue[0].encode
            batch: list[_Pending] = []
            kept: deque[_Pending] = deque()
            while self._queue:
                item = self._queue.popleft()
                if item.encode == encode and len(batch) < self.max_batch:
                    batch.append(item)
                else:
                    kept.append(item)
            self._queue = kept
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            live = [item for item in batch if item.future.set_running_or_notify_cancel()]  # skips timed-out ones
            if not live:
                continue
            self.batches = [*self.batches[-99:], len(live)]
            for item, outcome in zip(live, self._encode(live)):
                if isinstance(outcome, BaseException):
                    item.future.set_exception(outcome)
                else:
                    item.future.set_result(outcome)

    def _encode(self, live: list[_Pending]) -> list[np.ndarray | BaseException]:
        """The vector of each of ``live`` in order, or the error that stopped it, embedded shortest
        first in groups of ``group``: a forward pass pads every question to its longest, so questions
        of like length in small groups pad least. A group that fails is embedded again one question at
        a time, so one question the model refuses fails its own request, not those it was batched with."""
        order = sorted(range(len(live)), key=lambda i: len(live[i].text))
        outcomes: list[np.ndarray | BaseException] = [np.empty(0)] * len(live)
        for start in range(0, len(order), self.group):
            chosen = order[start : start + self.group]
            outcomes_of: list[np.ndarray | BaseException]
            try:
                outcomes_of = list(self._rows(live, chosen))
            except BaseException as exc:  # noqa: BLE001 - the waiting requests get the failure, the thread goes on
                outcomes_of = [exc] if len(chosen) == 1 else self._one_by_one(live, chosen, exc)
            for i, outcome in zip(chosen, outcomes_of):
                outcomes[i] = outcome
        return outcomes

    def _one_by_one(
        self, live: list[_Pending], chosen: list[int], failure: BaseException
    ) -> list[np.ndarray | BaseException]:
        """The questions of a failed group embedded alone, but those whose callers gave up. Until one
        succeeds, two failures alone mean the model itself fails: the rest get ``failure`` at once,
        rather than a down model being called once per question."""
        outcomes: list[np.ndarray | BaseException] = []
        failed, succeeded = 0, False
        for i in chosen:
            if live[i].abandoned or (failed >= 2 and not succeeded):
                outcomes.append(failure)
                continue
            try:
                outcomes.append(self._rows(live, [i])[0])
                succeeded = True
            except BaseException as exc:  # noqa: BLE001 - this request's own failure
                outcomes.append(exc)
                failed += 1
        return outcomes

    @staticmethod
    def _rows(live: list[_Pending], chosen: list[int]) -> list[np.ndarray]:
        rows = live[chosen[0]].encode([live[i].text for i in chosen])
        if len(rows) != len(chosen):
            raise RuntimeError(f"the embedder returned {len(rows)} vectors for {len(chosen)} questions")
        return list(rows)
