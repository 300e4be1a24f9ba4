"""Per-sender limits, so that one broken or hostile sender cannot starve the others.

Each sender (keyed by who it proves to be, see ``c4.security.identity``) gets a token
bucket of ingest requests; a request over it is answered with RESOURCE_EXHAUSTED (the sidecar
backs off and resends it later). The table of buckets is itself bounded: the least recently
seen senders are forgotten first (a forgotten sender starts again with a full bucket, so
eviction can only loosen a limit, never refuse anyone)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate: float    # tokens added per second
    burst: float   # most tokens held
    tokens: float
    stamp: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class RateLimiter:
    """``rate`` requests per second per key, bursts of up to ``burst``; rate 0: unlimited."""

    def __init__(self, rate: float, burst: float | None = None, *, max_keys: int = 65_536,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate < 0:
            raise ValueError(f"rate must be >= 0, got {rate}")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()
        self.refused = 0

    def allow(self, key: str) -> bool:
        if self.rate == 0:
            return True
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, self.burst, now)
                if len(self._buckets) > self._max_keys:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
            ok = bucket.take(now)
            if not ok:
                self.refused += 1
            return ok

    def describe(self) -> str:
        return f"{self.rate:g} requests/s per sender (bursts of {self.burst:g})"
