"""Per-token request rate limits for the server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Token bucket per API token: ``rate`` requests per second sustained, ``burst`` at once.

    Keys include unknown tokens per client address, which anyone can mint: a bucket that has filled
    up again is dropped (a new bucket starts full, so nothing changes for its key), at most once per
    refill time, so memory follows the keys active lately, not every key ever seen.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst = rate, burst
        self._clock = clock  # seconds, monotonic; tests pass their own to step time exactly
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._refill = burst / rate if rate > 0 else 0.0  # seconds for an empty bucket to fill
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._buckets)

    def _sweep(self, now: float) -> None:
        """Drop the buckets that are full again (called with the lock held)."""
        full = [key for key, (tokens, last) in self._buckets.items() if tokens + (now - last) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
        self._swept = now

    def allow(self, key: str) -> float:
        """0 if the request may go ahead, else seconds until it may."""
        if self.rate <= 0:
            return 0.0
        with self._lock:  # the clock read inside: a caller that read it earlier must not go back in time
            now = self._clock()
            if now - self._swept >= self._refill:
                self._sweep(now)
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
