"""Log lines that a hostile or broken peer could repeat at will, at most once per interval.

Each key (a reason) logs its first occurrence at once, then at most once per ``interval_s``
with the number of occurrences it kept quiet about, so a flood of bad connections costs one
line every few seconds instead of one per connection."""

from __future__ import annotations

import logging
import threading
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self._log = logger
        self._interval = interval_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: object) -> bool:
        """Log ``msg`` under ``key`` unless that key logged within the interval; True if it
        logged."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._quiet[key] = self._quiet.get(key, 0) + 1
                return False
            self._last[key] = now
            quiet = self._quiet.pop(key, 0)
            if len(self._last) > 1024:  # keys are reasons, few; never let them grow unbounded
                self._last = {key: now}
        if quiet:
            msg += " (and %d more like it since the last such line)"
            args = (*args, quiet)
        self._log.warning(msg, *args)
        return True
